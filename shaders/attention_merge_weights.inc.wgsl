// Shared by the decode kernels whose last workgroup merges (attention_fused.wgsl,
// attention_wide.inc.wgsl's wide_merge_last): not a kernel on its own. The including file
// provides `p`, part_ml and weight_set / total_set over its shared scratch.

// The merge weights of query i's g_n heads of kv head kvh over its n_live chunks (partials as
// attention.wgsl's split writes them): w = e^(m_c - M) per (head, chunk) through weight_set,
// L = sum_c l_c w per head through total_set (an empty chunk, m_c = -inf, weighs 0). Subgroups
// across heads, lanes across chunks.
fn merge_weights(i: u32, kvh: u32, g_n: u32, n_live: u32, sg_id: u32, sg_lane: u32,
                 sg_size: u32, n_sg: u32) {
    let neg_inf = bitcast<f32>(0xff800000u);
    let htrips = (g_n + n_sg - 1u) / n_sg;
    for (var t = 0u; t < htrips; t++) {
        let g = sg_id + t * n_sg;
        let gl = min(g, g_n - 1u);
        let base = (i * p.n_heads + kvh * g_n + gl) * p.n_chunks;
        var mx = neg_inf;
        for (var cc = sg_lane; cc < n_live; cc += sg_size) {
            mx = max(mx, part_ml[2u * (base + cc)]);
        }
        mx = subgroupMax(mx);
        var ls = 0.0;
        for (var cc = sg_lane; cc < n_live; cc += sg_size) {
            let mc = part_ml[2u * (base + cc)];
            var w = 0.0;
            if (mc != neg_inf) {
                w = exp(mc - mx);
                ls += part_ml[2u * (base + cc) + 1u] * w;
            }
            if (g < g_n) {
                weight_set(g, cc, n_live, w);
            }
        }
        ls = subgroupAdd(ls);
        if (sg_lane == 0u && g < g_n) {
            total_set(g, ls);
        }
    }
}
