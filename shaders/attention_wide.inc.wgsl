// Shared by the wide decode splits (attention_wide.wgsl over f16 caches, attention_wide_quant.wgsl
// over q8_0 / q4_0 / tq4 ones, attention_wide_rope.wgsl): not a kernel on its own. The including
// file provides the overrides WG, CHUNK, GQ, HD, NS (HD / 8: V's 8-value slots per row), KB and
// VB (keys in flight per lane while scoring and per invocation while accumulating V), `p` (the
// decode Params' leading words), the bindings q (0), k (1) and v (2),
// and sc (the chunk's scores per head, GQ * CHUNK f32) declared after every override (naga 30
// panics resolving a named override that the front end lowers after an override-sized array),
// and includes attention_merge_weights.inc.wgsl too; this file the rest of the interface, the
// chunk bounds, the softmax over a chunk's scores, the partials' write and the merge of the
// `split_merge` entries.

@group(0) @binding(3) var<storage, read> q_pos: array<u32>;
// Coherent: the split_merge entries' last workgroup reads the other workgroups' partials.
@coherent @group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@coherent @group(0) @binding(5) var<storage, read_write> part_o: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
// split_merge only: one u32 per (query, kv head), zero between dispatches.
@group(0) @binding(8) var<storage, read_write> counters: array<atomic<u32>>;

// Array bounds of the per-lane registers: GQ <= 8; KB and VB <= WIDE_B_MAX.
const WIDE_GQ_MAX: u32 = 8u;
const WIDE_B_MAX: u32 = 8u;
const WIDE_PW: u32 = 4096u;

var<workgroup> wg_skip: u32;
var<workgroup> wg_last: u32;
var<workgroup> ml: array<f32, 16>;
var<workgroup> pw: array<f32, WIDE_PW>;

// Chunk c of query i: its keys [j0, j1) and the chunk size ck; sets wg_skip when the chunk lies
// past the visible keys (the merge reads only live chunks: the caller returns on
// workgroupUniformLoad(&wg_skip) != 0).
fn wide_chunk(i: u32, c: u32, lid: u32) -> vec3<u32> {
    let vis = visible_keys(i);
    let ck = chunk_keys(vis.x, vis.y);
    let j0 = vis.x + c * ck;
    let j1 = min(j0 + ck, vis.y + 1u);
    // By count, not by j0 > hi: an idle slot's lo (past hi) plus c * ck wraps around.
    if (lid == 0u) {
        wg_skip = select(0u, 1u, c >= live_chunks(vis.x, vis.y));
    }
    return vec3<u32>(j0, j1, ck);
}

// A cluster's partial dot d of key jj (chunk slot) with head g: summed over the 8 lanes, scaled,
// soft-capped and stored by lane 0 (-inf for a key past the chunk's live ones).
fn wide_score(d0: f32, g: u32, jj: u32, ck: u32, live: bool, cl_lane: u32) {
    var d = d0;
    d += subgroupShuffleXor(d, 4u);
    d += subgroupShuffleXor(d, 2u);
    d += subgroupShuffleXor(d, 1u);
    if (cl_lane == 0u && jj < ck) {
        var s = bitcast<f32>(0xff800000u);
        if (live) {
            s = d * p.scale;
            if (p.softcap > 0.0) {
                s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0));
            }
        }
        sc[g * CHUNK + jj] = s;
    }
}

// Softmax pieces per head over the chunk's ck scores: subgroup s takes heads s, s + n_sg, ...;
// lanes across keys. Leaves exp(s - m) in sc and (m, l) per head in ml.
fn wide_softmax(ck: u32, sg_id: u32, sg_lane: u32, sg_size: u32, n_sg: u32) {
    let neg_inf = bitcast<f32>(0xff800000u);
    let htrips = (GQ + n_sg - 1u) / n_sg;
    for (var t = 0u; t < htrips; t++) {
        let g = sg_id + t * n_sg;
        let gl = min(g, GQ - 1u);
        var m = neg_inf;
        for (var jj = sg_lane; jj < ck; jj += sg_size) {
            m = max(m, sc[gl * CHUNK + jj]);
        }
        m = subgroupMax(m);
        var l = 0.0;
        for (var jj = sg_lane; jj < ck; jj += sg_size) {
            var e = 0.0;
            if (m != neg_inf) {
                e = exp(sc[gl * CHUNK + jj] - m);
            }
            if (g < GQ) {
                sc[gl * CHUNK + jj] = e;
            }
            l += e;
        }
        l = subgroupAdd(l);
        if (sg_lane == 0u && g < GQ) {
            ml[2u * g] = m;
            ml[2u * g + 1u] = l;
        }
    }
}

// The key groups' output partials o (slot s of key group kg, 8 values per head as two vec4s)
// summed through pw, hp heads at a time (pw[((kg * hp + g - g0) * HD + d]), and the chunk's
// (m, l) per head: written to part_o and part_ml as attention.wgsl's split writes them.
fn wide_parts(o: array<vec4<f32>, 2u * WIDE_GQ_MAX>, i: u32, kvh: u32, c: u32, lid: u32,
              kg: u32, kg_n: u32, s: u32) {
    let hp = max(1u, WIDE_PW / (kg_n * HD));
    for (var g0 = 0u; g0 < GQ; g0 += hp) {
        workgroupBarrier();
        if (kg < kg_n) {
            for (var g = 0u; g < GQ; g++) {
                if (g >= g0 && g < g0 + hp) {
                    let e = (kg * hp + g - g0) * HD + 8u * s;
                    for (var x = 0u; x < 4u; x++) {
                        pw[e + x] = o[2u * g][x];
                        pw[e + 4u + x] = o[2u * g + 1u][x];
                    }
                }
            }
        }
        workgroupBarrier();
        for (var e = lid; e < hp * HD; e += WG) {
            let g = g0 + e / HD;
            if (g < GQ) {
                var t = 0.0;
                for (var kk = 0u; kk < kg_n; kk++) {
                    t += pw[(kk * hp) * HD + e];
                }
                let part = (i * p.n_heads + kvh * GQ + g) * p.n_chunks + c;
                part_o[part * HD + e % HD] = t;
            }
        }
    }
    if (lid < GQ) {
        let part = (i * p.n_heads + kvh * GQ + lid) * p.n_chunks + c;
        part_ml[2u * part] = ml[2u * lid];
        part_ml[2u * part + 1u] = ml[2u * lid + 1u];
    }
}

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
