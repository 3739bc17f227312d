// Decode attention in one dispatch: attention.wgsl's grouped-query split (split_gqa) and its merge
// fused through a "last workgroup merges" counter.
//
// One workgroup per (key chunk c, kv head, query i), grid (n_chunks, n_kv_heads, n_q) as
// split_gqa. The chunks query i needs are the n_live = ceil((hi - lo + 1) / CHUNK) covering its
// visible keys [lo, hi] (visible_keys); the grid is sized for the longest context (a recorded
// decode step is replayed at every position), so workgroups with c >= n_live return at once.
// - n_live == 1 (the context fits one chunk): the chunk-0 workgroup normalises its own sums and
//   writes `out`; no partials, no counter.
// - n_live > 1: every live workgroup writes its partials (part_ml, part_o: split_gqa's layout),
//   then its invocation 0 increments the group's counter counters[i * n_kv_heads + kvh]; the
//   workgroup that sees n_live - 1 (the last to finish) resets the counter to 0 for the next
//   dispatch and merges the group's n_live partials into `out` (as `merge`).
// - n_live == 0 (a position past the cache with a window that starts beyond it): chunk 0 writes
//   zeros (what split + merge give).
//
// Ordering (the CUB "last block" pattern). Writers: partial stores; storageBarrier() (naga: an
// OpControlBarrier with Device memory scope and AcquireRelease | UniformMemory semantics, a
// release fence for every invocation's stores); then invocation 0's atomicAdd (Device scope).
// The last workgroup: atomicAdd (reads the release sequence of every earlier increment);
// storageBarrier() (the acquire fence); then the reads. part_ml and part_o are decorated
// Coherent, so under the GLSL450 memory model their accesses are non-private and the barriers'
// availability/visibility operations cover them (no stale per-SM cache lines). The counters must
// be zero before the first dispatch (the caller zeroes them once); a dispatch that completes
// leaves them zero.
//
// Shapes as attention.wgsl; counters [n_q * n_kv_heads] u32. Merge scratch: the last workgroup
// stages one weight per (head, chunk) in sg_sc (G * n_chunks <= 2048) and the head-dim partial
// sums in qg; it merges all G heads of the group at once (subgroups across heads for the
// weights, invocations across (head, 4-dim quad, chunk subset) for the sums).
// Shared memory: split_gqa's (24.3 KiB) + 9 f32.
//
// ROPE = 1: the attention input step is folded in (rope_kv_append.wgsl's arithmetic, operation
// for operation). `q` is then the packed projection output [n_q, q_tok_stride] (query heads at
// word 0, the key heads at k_off, the value heads at v_off of each token's row), and every
// workgroup stages its group's query heads itself: the optional per-head RMSNorm
// (r = 1 / sqrt(sum(x^2) / head_dim + eps), (x * r) * (norm_offset + q_norm)) and RoPE from
// `table` ([max_pos, rotary_dim / 2] (cos, sin); pairs (2i, 2i + 1) for style 0, (i, i +
// rotary_dim / 2) for style 1). The workgroup whose chunk holds the query's own position (the
// last visible key) also normalises and rotates kv head kvh's key, and writes it and the value to
// the cache row i * kv_stride + pos % ring (k and v are decorated Coherent: a storageBarrier
// makes the row visible to the workgroup's own reads that follow). No other workgroup reads that
// row (it holds the query's own key; in a ring, the key it replaces is outside every window).
// A position >= max_pos or >= max_tok (an idle slot) stages NaN queries and writes no cache row.

override WG: u32 = 128;
override CHUNK: u32 = 16;
// Fixed chunks (attention_gqa.inc.wgsl's adaptive chunking is split_gqa's).
override CHUNK_MIN: u32 = 0;
override KV_DTYPE: u32 = 0;
// Read by the shared grouped-query code for V (these kernels take f32 and f16 caches of one type).
override KV_DTYPE_V: u32 = 0;
override ROPE: u32 = 0;

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
    // ROPE = 1 only (zero otherwise).
    rotary_dim: u32,
    style: u32,
    max_pos: u32,
    norm: u32,
    eps: f32,
    norm_offset: f32,
    max_tok: u32,
    q_tok_stride: u32,
    k_off: u32,
    v_off: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@coherent @group(0) @binding(1) var<storage, read_write> k: array<u32>;
@coherent @group(0) @binding(2) var<storage, read_write> v: array<u32>;
@group(0) @binding(3) var<storage, read> q_pos: array<u32>;
@coherent @group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@coherent @group(0) @binding(5) var<storage, read_write> part_o: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> counters: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read> q_norm: array<f32>;
@group(0) @binding(9) var<storage, read> k_norm: array<f32>;
@group(0) @binding(10) var<storage, read> table: array<vec2<f32>>;

// #include attention_gqa.inc.wgsl
// #include attention_rope_stage.inc.wgsl
// #include attention_merge_weights.inc.wgsl

// Caches of f32 and f16 only: no attention-sink offsets (gqa_chunk's hooks).
const KV_SINK: u32 = 0u;
fn kv_sink(e: u32) -> f32 {
    return 0.0;
}

var<workgroup> wg_last: u32;

fn weight_set(g: u32, c: u32, n_live: u32, w: f32) {
    sg_sc[g * n_live + c] = w;
}

fn total_set(g: u32, l: f32) {
    ml_g[2u * g + 1u] = l;
}

fn stage_get(e: u32) -> f32 {
    return qg[e];
}

fn stage_set(e: u32, x: f32) {
    qg[e] = x;
}

// Query i's group into qg (and, ROPE = 1, its key head into qg[g_n * hd ..] and the cache).
fn gqa_stage(i: u32, kvh: u32, j0: u32, j1: u32, lid: u32, sg_id: u32, sg_lane: u32,
             sg_size: u32, n_sg: u32) {
    let hd = p.head_dim;
    let g_n = p.n_heads / p.n_kv_heads;
    if (ROPE == 0u) {
        let qbase = (i * p.n_heads + kvh * g_n) * hd;
        for (var e = lid; e < g_n * hd; e += WG) {
            qg[e] = q[qbase + e];
        }
        workgroupBarrier();
        return;
    }
    let own = rope_stage(i, kvh, g_n, hd, j0, j1, lid, sg_id, sg_lane, sg_size, n_sg);
    let ps = q_pos[i];
    let tok = i * p.q_tok_stride;
    if (own) {
        let kv_dim = p.n_kv_heads * hd;
        let c0 = (i * p.kv_stride + ps % p.ring) * kv_dim + kvh * hd;
        let vsrc = tok + p.v_off + kvh * hd;
        for (var j = lid; j < hd / 2u; j += WG) {
            let e = 2u * j;
            let k0 = qg[g_n * hd + e];
            let k1 = qg[g_n * hd + e + 1u];
            let v0 = q[vsrc + e];
            let v1 = q[vsrc + e + 1u];
            if (KV_DTYPE == 0u) {
                k[c0 + e] = bitcast<u32>(k0);
                k[c0 + e + 1u] = bitcast<u32>(k1);
                v[c0 + e] = bitcast<u32>(v0);
                v[c0 + e + 1u] = bitcast<u32>(v1);
            } else {
                k[(c0 + e) / 2u] = pack2x16float(vec2<f32>(k0, k1));
                v[(c0 + e) / 2u] = pack2x16float(vec2<f32>(v0, v1));
            }
        }
        // The row is read back below by this workgroup's scoring.
        storageBarrier();
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
        @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let c = wid.x;
    let kvh = wid.y;
    let i = wid.z;
    let hd = p.head_dim;
    let g_n = p.n_heads / p.n_kv_heads;
    let vis = visible_keys(i);
    // n_live goes through shared memory so the exits below are uniform across the workgroup
    // (q_pos is a storage read).
    if (lid == 0u) {
        wg_skip = live_chunks(vis.x, vis.y);
    }
    let n_live = workgroupUniformLoad(&wg_skip);
    if (c >= max(n_live, 1u)) {
        return;
    }
    if (n_live == 0u) {
        for (var e = lid; e < g_n * hd; e += WG) {
            out[(i * p.n_heads + kvh * g_n) * hd + e] = 0.0;
        }
        return;
    }
    let j0 = vis.x + c * CHUNK;
    let j1 = min(j0 + CHUNK, vis.y + 1u);
    gqa_chunk(i, kvh, j0, j1, CHUNK, lid, sg_id, sg_lane, sg_size, n_sg);
    let obase = (i * p.n_heads + kvh * g_n) * hd;
    if (n_live == 1u) {
        // Single pass: this chunk is the whole context.
        for (var e = lid; e < g_n * hd; e += WG) {
            let l = ml_g[2u * (e / hd) + 1u];
            var r = 0.0;
            if (l > 0.0) {
                r = gqa_out(e) / l;
            }
            out[obase + e] = r;
        }
        return;
    }
    for (var e = lid; e < g_n * hd; e += WG) {
        let part = (i * p.n_heads + kvh * g_n + e / hd) * p.n_chunks + c;
        part_o[part * hd + e % hd] = gqa_out(e);
    }
    if (lid < g_n) {
        let part = (i * p.n_heads + kvh * g_n + lid) * p.n_chunks + c;
        part_ml[2u * part] = ml_g[2u * lid];
        part_ml[2u * part + 1u] = ml_g[2u * lid + 1u];
    }
    // Release this workgroup's partials, then count it in.
    storageBarrier();
    let ctr = i * p.n_kv_heads + kvh;
    if (lid == 0u) {
        let before = atomicAdd(&counters[ctr], 1u);
        wg_last = select(0u, 1u, before == n_live - 1u);
    }
    // Acquire: every other live workgroup's partials are visible after this barrier.
    storageBarrier();
    if (workgroupUniformLoad(&wg_last) == 0u) {
        return;
    }
    if (lid == 0u) {
        atomicStore(&counters[ctr], 0u);
    }
    storageBarrier();

    // Merge the group's n_live chunks for all G heads at once: weights w[g, c] in
    // sg_sc[g * n_live + c], L_g in ml_g[2g + 1].
    merge_weights(i, kvh, g_n, n_live, sg_id, sg_lane, sg_size, n_sg);
    workgroupBarrier();
    // Sums: invocation lid takes quad lid % nq of the group's (head, 4-dim quad)s over chunks
    // kg, kg + kg_n, ... (kg = lid / nq); with more quads than invocations, quads lid, lid + WG,
    // ... over every chunk. Partial sums in qg as gqa_chunk leaves them, so gqa_out adds them.
    let n_dq = (hd + 3u) / 4u;
    let nq = g_n * n_dq;
    let kg_n = max(1u, WG / nq);
    let kg = lid / nq;
    if (kg < kg_n) {
        for (var qi = lid % nq; qi < nq; qi += WG) {
            let g = qi / n_dq;
            let d0 = 4u * (qi % n_dq);
            let base = (i * p.n_heads + kvh * g_n + g) * p.n_chunks;
            var o = vec4<f32>(0.0);
            for (var cc = kg; cc < n_live; cc += kg_n) {
                let w = sg_sc[g * n_live + cc];
                if (w > 0.0) {
                    let ob = (base + cc) * hd + d0;
                    for (var u = 0u; u < 4u; u++) {
                        if (d0 + u < hd) {
                            o[u] += w * part_o[ob + u];
                        }
                    }
                }
            }
            for (var u = 0u; u < 4u; u++) {
                if (d0 + u < hd) {
                    qg[(kg * g_n + g) * hd + d0 + u] = o[u];
                }
            }
        }
    }
    workgroupBarrier();
    for (var e = lid; e < g_n * hd; e += WG) {
        var t = 0.0;
        for (var k2 = 0u; k2 < kg_n; k2++) {
            t += qg[(k2 * g_n + e / hd) * hd + e % hd];
        }
        let big_l = ml_g[2u * (e / hd) + 1u];
        var r = 0.0;
        if (big_l > 0.0) {
            r = t / big_l;
        }
        out[obase + e] = r;
    }
}
