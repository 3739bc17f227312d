// Attention for decode (and short query batches): split-K "flash decoding" with a merge pass.
//
//   split: one workgroup per (key chunk c, query head h, query i): scores of q_i against the keys
//          [lo + c * CHUNK, lo + (c + 1) * CHUNK) of its visible range [lo, hi] (causal: key
//          j <= q_pos[i]; sliding window: j > q_pos[i] - window when window > 0, so lo is the
//          window's first key and a windowed layer needs only ceil(window / CHUNK) chunks however
//          long the context) of kv head h / (n_heads / n_kv_heads) (GQA), scaled, soft-capped
//          (softcap > 0); writes the chunk's max m, sum l = sum exp(s - m) and unnormalised output
//          o = sum exp(s - m) v.
//   merge: one workgroup per (head, query, block of 32 dims): out = sum_c o_c e^(m_c - M) /
//          sum_c l_c e^(m_c - M) (n_chunks <= 2048).
//   split_gqa with CHUNK_MIN > 0: each query's chunks have chunk_keys(lo, hi) keys (a power of two
//          from CHUNK_MIN to CHUNK, so at most ADAPT_CHUNKS of them, or the grid's n_chunks of
//          CHUNK keys), chosen on the device from its position; the merge uses the same rule.
//
// Shapes: q [n_q, n_heads, head_dim] f32; k, v [n_kv, n_kv_heads, head_dim] as u32 words (KV_DTYPE
// 0: f32 bits, 1: f16 pairs, 2 q8_0 / 3 q4_0 units as kv_quant.inc.wgsl lays them out, read in
// place); q_pos [n_q] u32; part_ml [n_q, n_heads, n_chunks, 2] f32; part_o
// [n_q, n_heads, n_chunks, head_dim] f32; out [n_q, n_heads, head_dim] f32. head_dim <= 256.
// Slots: query i reads key j from row i * kv_stride + j % ring (kv_stride 0: all queries share one
// cache; kv_stride = the per-slot rows: query i is slot i of a slot-major cache). ring: rows a
// cache keeps (>= n_kv: row = position; a sliding-window layer keeps a ring of at least its
// window, so the keys a query sees are never overwritten, and the window may wrap around it).
// Workgroup: WG invocations (default 128). split: invocation t scores keys t, t + WG, ... of the
// chunk (the q row is staged in shared memory), max and sum are reduced with subgroup ops and
// shared memory (any subgroup size >= 4), then invocation t accumulates output dims t, t + WG, ...
// over the chunk's keys (V reads coalesced across invocations). Splitting the keys over chunks
// keeps the GPU busy when there are few heads and long contexts; the merge is cheap (n_chunks
// partials per head).
// Shared memory: q (256 f32) + scores (CHUNK f32, default 256) + 64 f32 = 2.3 KiB.
//
// #include attention_gqa.inc.wgsl

override WG: u32 = 128;
override CHUNK: u32 = 256;
// 0: every chunk has CHUNK keys; else split_gqa's chunks adapt to each query's visible keys
// (chunk_keys in attention_gqa.inc.wgsl; the merge follows).
override CHUNK_MIN: u32 = 0;
override KV_DTYPE: u32 = 0;
// V's type (the same values as KV_DTYPE; a cache may store V in another type than K).
override KV_DTYPE_V: u32 = 0;
// 1: the cache's K units are stored rotated (kv_quant.inc.wgsl): the query's 64-value segments
// are rotated alike when staged (head_dim a multiple of 64).
override KV_ROT_K: u32 = 0;
// 1: the key at position 0 is read as its stored value plus `sink` (the attention sink's offset,
// [kv_dim] in the stored space; centred quantized keys, docs/quantization.md).
override KV_SINK: u32 = 0;

struct Params {
    n_q: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    n_kv: u32,
    n_chunks: u32,
    scale: f32,
    softcap: f32,
    window: u32,
    kv_stride: u32,
    ring: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<u32>;
@group(0) @binding(2) var<storage, read> v: array<u32>;
@group(0) @binding(3) var<storage, read> q_pos: array<u32>;
@group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@group(0) @binding(5) var<storage, read_write> part_o: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
// Read only with KV_SINK 1 (the split passes; bound to any buffer otherwise).
@group(0) @binding(7) var<storage, read> sink: array<f32>;

// The offset of value e (kv head * head_dim + dim) of the key at position 0 (gqa_chunk's hook).
fn kv_sink(e: u32) -> f32 {
    return sink[e];
}

// The grouped split's queries: a plain copy of query i's group.
fn gqa_stage(i: u32, kvh: u32, j0: u32, j1: u32, lid: u32, sg_id: u32, sg_lane: u32,
             sg_size: u32, n_sg: u32) {
    let g_n = p.n_heads / p.n_kv_heads;
    let qbase = (i * p.n_heads + kvh * g_n) * p.head_dim;
    for (var e = lid; e < g_n * p.head_dim; e += WG) {
        qg[e] = q[qbase + e];
    }
    workgroupBarrier();
    if (KV_ROT_K == 1u) {
        rotate_qg(g_n * p.head_dim, lid);
    }
}

// Rotates the n staged query values in qg as their 64-value segments (kv_quant.inc.wgsl's
// rotation): each element (at most 2048, so 32 per invocation when WG >= 64) is read first,
// then written back. Its own function reading only qg: the plain split never declares qg, the
// grouped split never declares qs (a shared array an entry point references costs occupancy
// even when the branch is dead).
fn rotate_qg(n: u32, lid: u32) {
    var rq: array<f32, 32>;
    for (var t = 0u; t < 32u; t++) {
        let e = lid + t * WG;
        rq[t] = 0.0;
        if (e < n) {
            let s = e - e % 64u;
            var r = 0.0;
            for (var j = 0u; j < 64u; j++) {
                r += kvq_hadamard(e % 64u, j) * (qg[s + j] * kvq_sign(j));
            }
            rq[t] = r * 0.125;
        }
    }
    workgroupBarrier();
    for (var t = 0u; t < 32u; t++) {
        let e = lid + t * WG;
        if (e < n) {
            qg[e] = rq[t];
        }
    }
    workgroupBarrier();
}

// `rotate_qg` for the plain split's one query head in qs (hd values, at most 256).
fn rotate_qs(hd: u32, lid: u32) {
    var rq: array<f32, 4>;
    for (var t = 0u; t < 4u; t++) {
        let d = lid + t * WG;
        rq[t] = 0.0;
        if (d < hd) {
            let s = d - d % 64u;
            var r = 0.0;
            for (var j = 0u; j < 64u; j++) {
                r += kvq_hadamard(d % 64u, j) * (qs[s + j] * kvq_sign(j));
            }
            rq[t] = r * 0.125;
        }
    }
    workgroupBarrier();
    for (var t = 0u; t < 4u; t++) {
        let d = lid + t * WG;
        if (d < hd) {
            qs[d] = rq[t];
        }
    }
    workgroupBarrier();
}

var<workgroup> qs: array<f32, 256>;
var<workgroup> sc: array<f32, CHUNK>;

fn load_k(e: u32) -> f32 {
    if (KV_DTYPE >= 2u) {
        let t = KV_DTYPE;
        return kvq_value(t, k[kvq_code_word(t, e)], k[kvq_scale_word(t, e)], e);
    }
    if (KV_DTYPE == 0u) {
        return bitcast<f32>(k[e]);
    }
    let pair = unpack2x16float(k[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

fn load_v(e: u32) -> f32 {
    if (KV_DTYPE_V >= 2u) {
        let t = KV_DTYPE_V;
        return kvq_value(t, v[kvq_code_word(t, e)], v[kvq_scale_word(t, e)], e);
    }
    if (KV_DTYPE_V == 0u) {
        return bitcast<f32>(v[e]);
    }
    let pair = unpack2x16float(v[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

@compute @workgroup_size(WG)
fn split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
         @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
         @builtin(num_subgroups) n_sg: u32) {
    let c = wid.x;
    let h = wid.y;
    let i = wid.z;
    let hd = p.head_dim;
    let kvh = h / (p.n_heads / p.n_kv_heads);
    let kv_dim = p.n_kv_heads * hd;
    let row0 = i * p.kv_stride;
    let qp = q_pos[i];
    // Visible keys: [lo, hi] (inclusive), clipped to the cache.
    let hi = min(qp, p.n_kv - 1u);
    var lo = 0u;
    if (p.window > 0u && qp + 1u > p.window) {
        lo = qp + 1u - p.window;
    }
    let j0 = lo + c * CHUNK;
    let j1 = min(j0 + CHUNK, hi + 1u);
    // A chunk past the query's visible keys only reports an empty partial; the merge skips it.
    // Decided through shared memory so the early return is uniform across the workgroup.
    if (lid == 0u) {
        wg_skip = select(0u, 1u, j0 > hi);
    }
    if (workgroupUniformLoad(&wg_skip) != 0u) {
        if (lid == 0u) {
            let part0 = (i * p.n_heads + h) * p.n_chunks + c;
            part_ml[2u * part0] = bitcast<f32>(0xff800000u);
            part_ml[2u * part0 + 1u] = 0.0;
        }
        return;
    }
    for (var d = lid; d < hd; d += WG) {
        qs[d] = q[(i * p.n_heads + h) * hd + d];
    }
    workgroupBarrier();
    if (KV_ROT_K == 1u) {
        rotate_qs(hd, lid);
    }
    let neg_inf = bitcast<f32>(0xff800000u);
    var m_local = neg_inf;
    for (var j = j0 + lid; j < j1; j += WG) {
        let kb = (row0 + j % p.ring) * kv_dim + kvh * hd;
        var acc = 0.0;
        if (KV_SINK == 1u && j == 0u) {
            for (var d = 0u; d < hd; d++) {
                acc += qs[d] * (load_k(kb + d) + sink[kvh * hd + d]);
            }
        } else {
            for (var d = 0u; d < hd; d++) {
                acc += qs[d] * load_k(kb + d);
            }
        }
        var s = acc * p.scale;
        if (p.softcap > 0.0) {
            s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0));
        }
        sc[j - j0] = s;
        m_local = max(m_local, s);
    }
    let m = wg_max(m_local, sg_id, sg_lane, n_sg);
    var l_local = 0.0;
    for (var j = j0 + lid; j < j1; j += WG) {
        var e = 0.0;
        if (m != neg_inf) {
            e = exp(sc[j - j0] - m);
        }
        sc[j - j0] = e;
        l_local += e;
    }
    let l = wg_sum(l_local, sg_id, sg_lane, n_sg);
    let part = (i * p.n_heads + h) * p.n_chunks + c;
    for (var d = lid; d < hd; d += WG) {
        var o = 0.0;
        if (m != neg_inf) {
            // Row of key j, advanced with the key (a chunk spans at most one wrap of the ring).
            var r = j0 % p.ring;
            for (var j = j0; j < j1; j++) {
                let e = sc[j - j0];
                if (e > 0.0) {
                    o += e * load_v((row0 + r) * kv_dim + kvh * hd + d);
                }
                r += 1u;
                if (r == p.ring) {
                    r = 0u;
                }
            }
        }
        part_o[part * hd + d] = o;
    }
    if (lid == 0u) {
        part_ml[2u * part] = m;
        part_ml[2u * part + 1u] = l;
    }
}

// merge: one workgroup per (head, query, block of MERGE_D head dims). The chunk weights w_c =
// e^(m_c - M) are computed in parallel (invocations across chunks) into shared memory with M and
// L = sum_c l_c w_c reduced across the workgroup; then invocation t sums w_c o_c over the chunks
// c = t / MERGE_D, + WG / MERGE_D, ... for dim t % MERGE_D of the block (MERGE_B chunks' loads in
// flight), the chunk groups' sums meet in shared memory and are divided by L. An empty chunk
// (m_c = -inf) has w_c = 0 and its o_c is never used; chunks past the query's visible keys are
// not read at all. n_chunks <= MAX_CHUNKS.
const MAX_CHUNKS: u32 = 2048u;
const MERGE_B: u32 = 8u;
const MERGE_D: u32 = 32u;
var<workgroup> mw: array<f32, MAX_CHUNKS>;
var<workgroup> mo: array<f32, WG>;

@compute @workgroup_size(WG)
fn merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
         @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
         @builtin(num_subgroups) n_sg: u32) {
    let h = wid.x;
    let i = wid.y;
    let hd = p.head_dim;
    let neg_inf = bitcast<f32>(0xff800000u);
    let base = (i * p.n_heads + h) * p.n_chunks;
    // Only the chunks query i's visible keys reach: a recorded step's grid covers the whole
    // cache, and the chunks past the position (m_c = -inf, weight 0) would only cost reads.
    let vis = visible_keys(i);
    let n_live = live_chunks(vis.x, vis.y);
    var mx = neg_inf;
    for (var c = lid; c < n_live; c += WG) {
        mx = max(mx, part_ml[2u * (base + c)]);
    }
    let big_m = wg_max(mx, sg_id, sg_lane, n_sg);
    var ls = 0.0;
    for (var c = lid; c < n_live; c += WG) {
        let mc = part_ml[2u * (base + c)];
        var w = 0.0;
        if (mc != neg_inf) {
            w = exp(mc - big_m);
            ls += part_ml[2u * (base + c) + 1u] * w;
        }
        mw[c] = w;
    }
    // wg_sum's barriers also publish mw.
    let big_l = wg_sum(ls, sg_id, sg_lane, n_sg);
    let cg_n = WG / MERGE_D;
    let cg = lid / MERGE_D;
    let d = wid.z * MERGE_D + lid % MERGE_D;
    let dd = min(d, hd - 1u);
    var o = 0.0;
    // The group's chunks in batches of MERGE_B, all loaded before any is used (a stale
    // partial of an empty chunk is loaded but not used); sums in chunk order within the group.
    for (var c0 = cg; c0 < n_live; c0 += MERGE_B * cg_n) {
        var po: array<f32, MERGE_B>;
        for (var u = 0u; u < MERGE_B; u++) {
            let c = min(c0 + u * cg_n, n_live - 1u);
            po[u] = part_o[(base + c) * hd + dd];
        }
        for (var u = 0u; u < MERGE_B; u++) {
            let c = c0 + u * cg_n;
            if (c < n_live) {
                let w = mw[c];
                if (w > 0.0) {
                    o += po[u] * w;
                }
            }
        }
    }
    mo[lid] = o;
    workgroupBarrier();
    if (lid < MERGE_D && d < hd) {
        var t = 0.0;
        for (var g = 0u; g < cg_n; g++) {
            t += mo[g * MERGE_D + lid];
        }
        var r = 0.0;
        if (big_l > 0.0) {
            r = t / big_l;
        }
        out[(i * p.n_heads + h) * hd + d] = r;
    }
}

// split_gqa: the decode split pass organised for bandwidth (the `split` above is the reference).
// One workgroup per (key chunk c, kv head, query i) scores the chunk's keys for all G = n_heads /
// n_kv_heads query heads sharing that kv head (`gqa_chunk` in attention_gqa.inc.wgsl: each K row
// is read once for the group; 8-lane clusters across keys, invocations across head dims for V).
// The partials have the layout `split` writes, so `merge` is shared. G <= GQA_MAX, head_dim <=
// 256, CHUNK <= 256; subgroups of at least 8 lanes (the caller checks).
@compute @workgroup_size(WG)
fn split_gqa(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
             @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
             @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let c = wid.x;
    let kvh = wid.y;
    let i = wid.z;
    let hd = p.head_dim;
    let g_n = p.n_heads / p.n_kv_heads;
    let vis = visible_keys(i);
    // Chunks start at the first visible key (as in `split`); key j lives in row j % ring.
    let ck = chunk_keys(vis.x, vis.y);
    let j0 = vis.x + c * ck;
    let j1 = min(j0 + ck, vis.y + 1u);
    // A chunk past the visible keys has nothing to do: the merge reads only live chunks.
    if (lid == 0u) {
        wg_skip = select(0u, 1u, j0 > vis.y);
    }
    if (workgroupUniformLoad(&wg_skip) != 0u) {
        return;
    }
    gqa_chunk(i, kvh, j0, j1, ck, lid, sg_id, sg_lane, sg_size, n_sg);
    for (var e = lid; e < g_n * hd; e += WG) {
        let part = (i * p.n_heads + kvh * g_n + e / hd) * p.n_chunks + c;
        part_o[part * hd + e % hd] = gqa_out(e);
    }
    if (lid < g_n) {
        let part = (i * p.n_heads + kvh * g_n + lid) * p.n_chunks + c;
        part_ml[2u * part] = ml_g[2u * lid];
        part_ml[2u * part + 1u] = ml_g[2u * lid + 1u];
    }
}
