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
// stages one weight per chunk in sg_sc (n_chunks <= 2048) and the head-dim partial sums in qg.
// Same shared memory as split_gqa (24.1 KiB).

override WG: u32 = 128;
override CHUNK: u32 = 16;
override KV_DTYPE: u32 = 0;

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
@coherent @group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@coherent @group(0) @binding(5) var<storage, read_write> part_o: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> counters: array<atomic<u32>>;

// #include attention_gqa.inc.wgsl

var<workgroup> wg_last: u32;

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
    gqa_chunk(i, kvh, j0, j1, lid, sg_id, sg_lane, sg_size, n_sg);
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

    // Merge the group's n_live chunks, one head at a time: chunk weights w_c = e^(m_c - M) in
    // sg_sc with L = sum_c l_c w_c, then invocations across (4-dim quad, chunk subset) sum
    // w_c o_c, added across subsets through qg.
    let neg_inf = bitcast<f32>(0xff800000u);
    let n_dq = (hd + 3u) / 4u;
    let kg_n = gqa_kg_n(hd);
    let kg = lid / n_dq;
    let d0 = 4u * (lid % n_dq);
    for (var g = 0u; g < g_n; g++) {
        let base = (i * p.n_heads + kvh * g_n + g) * p.n_chunks;
        var mx = neg_inf;
        for (var cc = lid; cc < n_live; cc += WG) {
            mx = max(mx, part_ml[2u * (base + cc)]);
        }
        let big_m = wg_max(mx, sg_id, sg_lane, n_sg);
        var ls = 0.0;
        for (var cc = lid; cc < n_live; cc += WG) {
            let mc = part_ml[2u * (base + cc)];
            var w = 0.0;
            if (mc != neg_inf) {
                w = exp(mc - big_m);
                ls += part_ml[2u * (base + cc) + 1u] * w;
            }
            sg_sc[cc] = w;
        }
        // wg_sum's barriers also publish sg_sc.
        let big_l = wg_sum(ls, sg_id, sg_lane, n_sg);
        if (kg < kg_n) {
            var o = vec4<f32>(0.0);
            for (var cc = kg; cc < n_live; cc += kg_n) {
                let w = sg_sc[cc];
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
                    qg[kg * hd + d0 + u] = o[u];
                }
            }
        }
        workgroupBarrier();
        for (var d = lid; d < hd; d += WG) {
            var t = 0.0;
            for (var k2 = 0u; k2 < kg_n; k2++) {
                t += qg[k2 * hd + d];
            }
            var r = 0.0;
            if (big_l > 0.0) {
                r = t / big_l;
            }
            out[obase + g * hd + d] = r;
        }
        // qg and sg_sc are rewritten for the next head.
        workgroupBarrier();
    }
}
