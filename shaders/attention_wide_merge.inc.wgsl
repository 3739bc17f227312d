// Shared by the merging wide splits (attention_wide_merge.wgsl, attention_wide_rope.wgsl): the
// last live workgroup per (query, kv head) merges. Not a kernel on its own. The including file
// provides what attention_wide.inc.wgsl asks for, with part_ml and part_o decorated Coherent,
// and includes attention_merge_weights.inc.wgsl.

// One u32 per (query, kv head), zero between dispatches.
@group(0) @binding(8) var<storage, read_write> counters: array<atomic<u32>>;
var<workgroup> wg_last: u32;

// The merge's weights in pw[g * n_live + c], each head's total in ml[2g + 1].
fn weight_set(g: u32, c: u32, n_live: u32, w: f32) {
    pw[g * n_live + c] = w;
}

fn total_set(g: u32, l: f32) {
    ml[2u * g + 1u] = l;
}

// The split_merge entries' tail, after the split (attention_fused.wgsl's "last workgroup merges"
// pattern and ordering): each live workgroup releases its partials (storageBarrier) and counts
// itself in; the one that completes the count of live chunks resets the counter and merges the
// group's partials into `out` as attention.wgsl's `merge` does (weights w_c = e^(m_c - M) per
// head staged in pw, GQ * n_chunks <= WIDE_PW: the caller checks). With no visible key (no live
// chunk) chunk 0 writes the zeros the merge gives.
fn wide_merge_last(i: u32, kvh: u32, c: u32, lid: u32, sg_id: u32, sg_lane: u32, sg_size: u32,
                   n_sg: u32) {
    let obase = (i * p.n_heads + kvh * GQ) * HD;
    if (workgroupUniformLoad(&wg_skip) != 0u) {
        if (c == 0u) {
            for (var e = lid; e < GQ * HD; e += WG) {
                out[obase + e] = 0.0;
            }
        }
        return;
    }
    storageBarrier();
    let ctr = i * p.n_kv_heads + kvh;
    if (lid == 0u) {
        let vis = visible_keys(i);
        let n_live = live_chunks(vis.x, vis.y);
        let before = atomicAdd(&counters[ctr], 1u);
        wg_last = select(0u, n_live, before + 1u == n_live);
    }
    // Acquire: every other live workgroup's partials are visible after this barrier.
    storageBarrier();
    let n_live = workgroupUniformLoad(&wg_last);
    if (n_live == 0u) {
        return;
    }
    if (lid == 0u) {
        atomicStore(&counters[ctr], 0u);
    }
    merge_weights(i, kvh, GQ, n_live, sg_id, sg_lane, sg_size, n_sg);
    workgroupBarrier();
    // Invocations across the group's (head, dim)s, chunks in order, four loads in flight.
    for (var e = lid; e < GQ * HD; e += WG) {
        let g = e / HD;
        let base = (i * p.n_heads + kvh * GQ + g) * p.n_chunks * HD + e % HD;
        let wb = g * n_live;
        var t = vec4<f32>(0.0);
        var cc = 0u;
        while (cc + 4u <= n_live) {
            let o = vec4<f32>(part_o[base + cc * HD], part_o[base + (cc + 1u) * HD],
                              part_o[base + (cc + 2u) * HD], part_o[base + (cc + 3u) * HD]);
            t += o * vec4<f32>(pw[wb + cc], pw[wb + cc + 1u], pw[wb + cc + 2u], pw[wb + cc + 3u]);
            cc += 4u;
        }
        while (cc < n_live) {
            t.x += part_o[base + cc * HD] * pw[wb + cc];
            cc += 1u;
        }
        let big_l = ml[2u * g + 1u];
        var r = 0.0;
        if (big_l > 0.0) {
            r = (t.x + t.y + t.z + t.w) / big_l;
        }
        out[obase + e] = r;
    }
}
