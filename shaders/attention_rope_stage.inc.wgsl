// Shared by the decode attention kernels with the attention input step folded in
// (attention_fused.wgsl with ROPE = 1, attention_wide_rope.wgsl): not a kernel on its own. The
// including file provides WG, `p` (attention_fused.wgsl's Params), the bindings q (the packed
// projection output, f32 words), q_pos, q_norm, k_norm and table, and stage_get / stage_set over
// its shared staging array.

// 1 / rms of the staged heads (the group's query heads, then the key head).
var<workgroup> rn: array<f32, 9>;
var<workgroup> wg_own: u32;

// Query i's g_n heads of kv head kvh (hd values each) staged at 0.. (NaN queries for a position
// >= max_pos or >= max_tok: an idle slot), normalised per head when p.norm != 0 and rotated; when
// the chunk [j0, j1) holds the query's position, its key head too, staged after them. Returns
// whether it did (the caller then appends the key and value rows); ends with a barrier.
fn rope_stage(i: u32, kvh: u32, g_n: u32, hd: u32, j0: u32, j1: u32, lid: u32, sg_id: u32,
              sg_lane: u32, sg_size: u32, n_sg: u32) -> bool {
    let ps = q_pos[i];
    let ok = ps < p.max_pos && ps < p.max_tok;
    // Through shared memory, so the branches and loop bounds that depend on it are uniform.
    if (lid == 0u) {
        wg_own = select(0u, 1u, ok && ps >= j0 && ps < j1);
    }
    let own = workgroupUniformLoad(&wg_own) == 1u;
    let tok = i * p.q_tok_stride;
    let nan = bitcast<f32>(0x7fc00000u);
    for (var e = lid; e < g_n * hd; e += WG) {
        stage_set(e, select(nan, q[tok + kvh * g_n * hd + e], ok));
    }
    var nh = g_n;
    if (own) {
        nh = g_n + 1u;
        for (var e = lid; e < hd; e += WG) {
            stage_set(g_n * hd + e, q[tok + p.k_off + kvh * hd + e]);
        }
    }
    workgroupBarrier();
    if (p.norm != 0u) {
        // Subgroup s takes heads s, s + n_sg, ... (the same trip count in every subgroup).
        let htrips = (nh + n_sg - 1u) / n_sg;
        for (var t = 0u; t < htrips; t++) {
            let h = sg_id + t * n_sg;
            let hl = min(h, nh - 1u);
            var ss = 0.0;
            for (var e = sg_lane; e < hd; e += sg_size) {
                let x = stage_get(hl * hd + e);
                ss += x * x;
            }
            ss = subgroupAdd(ss);
            if (sg_lane == 0u && h < nh) {
                rn[h] = 1.0 / sqrt(ss / f32(hd) + p.eps);
            }
        }
        workgroupBarrier();
        for (var e = lid; e < nh * hd; e += WG) {
            let h = e / hd;
            var w = 0.0;
            if (h < g_n) {
                w = q_norm[e % hd];
            } else {
                w = k_norm[e % hd];
            }
            stage_set(e, (stage_get(e) * rn[h]) * (p.norm_offset + w));
        }
        workgroupBarrier();
    }
    if (ok) {
        // RoPE, one (a, b) pair per invocation and round, in place.
        let half = p.rotary_dim / 2u;
        for (var t = lid; t < nh * half; t += WG) {
            let h = t / half;
            let r = t % half;
            var a = 2u * r;
            var b = a + 1u;
            if (p.style == 1u) {
                a = r;
                b = r + half;
            }
            let cs = table[ps * half + r];
            let x0 = stage_get(h * hd + a);
            let x1 = stage_get(h * hd + b);
            stage_set(h * hd + a, x0 * cs.x - x1 * cs.y);
            stage_set(h * hd + b, x1 * cs.x + x0 * cs.y);
        }
    }
    workgroupBarrier();
    return own;
}
