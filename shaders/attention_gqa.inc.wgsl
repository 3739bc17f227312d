// Shared by the decode attention kernels (attention.wgsl's split_gqa, attention_fused.wgsl): the
// grouped-query scoring of one key chunk (workgroup reductions from reduce.inc.wgsl). Not a
// kernel on its own: build.rs and sources.rs append it to each file that names it in a
// `// #include attention_gqa.inc.wgsl` line.
//
// The including file provides `p` (its Params: n_heads, n_kv_heads, head_dim, n_kv, scale,
// softcap, window, kv_stride, ring), the bindings `q` (f32), `k`, `v` (u32 words), `q_pos`, the
// override constants WG, CHUNK, KV_DTYPE (K: 0 f32 words, 1 f16 pairs, 2 q8_0 / 3 q4_0 units),
// KV_DTYPE_V (V, the same codes) and KV_SINK (1: quantized keys at position 0 read plus
// `kv_sink(e)`, the including file's function of the value e of the row), and
// `gqa_stage(i, kvh, j0, j1, lid, sg_id, sg_lane, sg_size, n_sg)`, which leaves query i's heads
// kvh * G .. (kvh + 1) * G in qg[0 .. G * head_dim] and ends with a workgroup barrier (called in
// uniform control flow by every invocation, before keys [j0, j1) are scored).

// #include reduce.inc.wgsl
// #include kv_quant.inc.wgsl
// #include attention_keys.inc.wgsl

var<workgroup> wg_skip: u32;

// Grouped-query chunk scoring. One workgroup scores keys [j0, j1) of kv head kvh for all G =
// n_heads / n_kv_heads query heads sharing it (each K row is read once for the group), with
// 8-lane clusters across keys and lanes across the row (shuffle-xor dot products), then
// accumulates V with invocations across head dims (coalesced). G <= GQA_MAX, head_dim <= 256,
// CHUNK <= 256; subgroups of at least 8 lanes (power-of-two sizes) with shuffle support (the caller
// checks). Loops that contain subgroup operations run the same trip count in every subgroup;
// loops over the group's heads have the constant bound GQA_MAX (guarded by g < G) so the per-head
// accumulators stay in registers (a dynamically indexed private array would live in memory).
// Shared memory: 4096 (queries, then output partials) + 2048 (scores) + 64 f32: 24.3 KiB.
const GQA_MAX: u32 = 8u;
// Words of a K row each lane loads before using them, and keys whose V words each invocation
// loads before using them (constant batches, so the loads are in flight together).
const GQA_LB: u32 = 8u;
const GQA_VB: u32 = 4u;
// The group's queries while scoring, then the output partials once scores are done.
var<workgroup> qg: array<f32, 4096>;
var<workgroup> sg_sc: array<f32, 2048>;
// Per head g of the group: the chunk's max score (2g) and sum of exp(s - max) (2g + 1).
var<workgroup> ml_g: array<f32, 16>;

// Key groups the V accumulation splits the chunk's keys over (see gqa_chunk).
fn gqa_kg_n(hd: u32) -> u32 {
    return max(1u, WG / ((hd + 3u) / 4u));
}

// Scores query i's group against keys [j0, j1) (a non-empty range within one chunk of ck <= CHUNK
// keys; score rows keep the stride CHUNK) and leaves in
// shared memory: ml_g (per head max m and sum l) and, for head g and dim d, the unnormalised
// output sum_j exp(s_j - m) v_j[d] as gqa_kg_n(hd) partial sums qg[(kg * G + g) * hd + d]
// (gqa_out adds them). Ends with a workgroup barrier.
fn gqa_chunk(i: u32, kvh: u32, j0: u32, j1: u32, ck: u32, lid: u32, sg_id: u32, sg_lane: u32,
             sg_size: u32, n_sg: u32) {
    let hd = p.head_dim;
    let g_n = p.n_heads / p.n_kv_heads;
    let kv_dim = p.n_kv_heads * hd;
    let row0 = i * p.kv_stride;
    let neg_inf = bitcast<f32>(0xff800000u);
    // The group's queries into qg[0 .. g_n * hd] (the including file's hook; it may also append
    // the current token's key and value to the cache). Ends with a workgroup barrier.
    gqa_stage(i, kvh, j0, j1, lid, sg_id, sg_lane, sg_size, n_sg);

    // Scores: clusters of 8 lanes, one key each (flat invocation f = sg_id * sg_size + lane;
    // cluster f / 8 takes keys jj = f / 8, f / 8 + n_cl, ...; lane f % 8 the row words f % 8,
    // f % 8 + 8, ...), so a 128-invocation workgroup scores 16 keys at once; a cluster's partial
    // dots are summed with subgroupShuffleXor 4, 2, 1 (subgroup sizes are multiples of 8, so a
    // cluster never straddles subgroups).
    var words = hd;
    if (KV_DTYPE == 1u) {
        words = hd / 2u;
    } else if (KV_DTYPE >= 2u) {
        // Code words; each comes with its block's scale word.
        words = hd / kvq_per_word(KV_DTYPE);
    }
    let flat = sg_id * sg_size + sg_lane;
    let cl = flat / 8u;
    let cl_lane = flat % 8u;
    let n_cl = (n_sg * sg_size) / 8u;
    let trips = (ck + n_cl - 1u) / n_cl;
    for (var t = 0u; t < trips; t++) {
        let jj = cl + t * n_cl;
        let j = j0 + jj;
        let live = jj < ck && j < j1;
        var acc: array<f32, 8>;
        for (var g = 0u; g < GQA_MAX; g++) {
            acc[g] = 0.0;
        }
        if (live) {
            let kb = (row0 + j % p.ring) * kv_dim + kvh * hd;
            var kw0 = kb;
            if (KV_DTYPE == 1u) {
                kw0 = kb >> 1u;
            }
            // The lane's words w = cl_lane, cl_lane + 8, ... in batches of GQA_LB, all loaded
            // before any is used (constant trip counts: the loads are issued back to back
            // instead of one memory latency each); the sums keep the order w ascending.
            for (var wb = cl_lane; wb < words; wb += 8u * GQA_LB) {
                var kr: array<u32, GQA_LB>;
                var ksw: array<u32, GQA_LB>;
                for (var u = 0u; u < GQA_LB; u++) {
                    let w = wb + 8u * u;
                    kr[u] = 0u;
                    ksw[u] = 0u;
                    if (w < words) {
                        if (KV_DTYPE >= 2u) {
                            let e = kb + kvq_per_word(KV_DTYPE) * w;
                            kr[u] = k[kvq_code_word(KV_DTYPE, e)];
                            ksw[u] = k[kvq_scale_word(KV_DTYPE, e)];
                        } else {
                            kr[u] = k[kw0 + w];
                        }
                    }
                }
                for (var u = 0u; u < GQA_LB; u++) {
                    let w = wb + 8u * u;
                    if (w < words) {
                        if (KV_DTYPE >= 2u) {
                            // The block's scale times the dot with its integer codes.
                            let per = kvq_per_word(KV_DTYPE);
                            let sc = kvq_scale(ksw[u], kb + per * w);
                            for (var g = 0u; g < GQA_MAX; g++) {
                                if (g < g_n) {
                                    var dq = 0.0;
                                    for (var c = 0u; c < per; c++) {
                                        dq += qg[g * hd + per * w + c] * kvq_code(KV_DTYPE, kr[u], c);
                                    }
                                    acc[g] += sc * dq;
                                    if (KV_SINK == 1u && j == 0u) {
                                        var ds = 0.0;
                                        for (var c = 0u; c < per; c++) {
                                            ds += qg[g * hd + per * w + c] * kv_sink(kvh * hd + per * w + c);
                                        }
                                        acc[g] += ds;
                                    }
                                }
                            }
                        } else if (KV_DTYPE == 0u) {
                            let kx = bitcast<f32>(kr[u]);
                            for (var g = 0u; g < GQA_MAX; g++) {
                                if (g < g_n) {
                                    acc[g] += qg[g * hd + w] * kx;
                                }
                            }
                        } else {
                            let kx = unpack2x16float(kr[u]);
                            for (var g = 0u; g < GQA_MAX; g++) {
                                if (g < g_n) {
                                    acc[g] += qg[g * hd + 2u * w] * kx.x
                                        + qg[g * hd + 2u * w + 1u] * kx.y;
                                }
                            }
                        }
                    }
                }
            }
        }
        for (var g = 0u; g < GQA_MAX; g++) {
            if (g < g_n) {
                var dot_g = acc[g];
                dot_g += subgroupShuffleXor(dot_g, 4u);
                dot_g += subgroupShuffleXor(dot_g, 2u);
                dot_g += subgroupShuffleXor(dot_g, 1u);
                if (cl_lane == 0u && jj < ck) {
                    var s = neg_inf;
                    if (live) {
                        s = dot_g * p.scale;
                        if (p.softcap > 0.0) {
                            s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0));
                        }
                    }
                    sg_sc[g * CHUNK + jj] = s;
                }
            }
        }
    }
    workgroupBarrier();

    // Softmax pieces per head: subgroup s takes heads s, s + n_sg, ...; lanes across keys.
    let htrips = (g_n + n_sg - 1u) / n_sg;
    for (var t = 0u; t < htrips; t++) {
        let g = sg_id + t * n_sg;
        let gl = min(g, g_n - 1u);
        var m = neg_inf;
        for (var jj = sg_lane; jj < ck; jj += sg_size) {
            m = max(m, sg_sc[gl * CHUNK + jj]);
        }
        m = subgroupMax(m);
        var l = 0.0;
        for (var jj = sg_lane; jj < ck; jj += sg_size) {
            var e = 0.0;
            if (m != neg_inf) {
                e = exp(sg_sc[gl * CHUNK + jj] - m);
            }
            if (g < g_n) {
                sg_sc[gl * CHUNK + jj] = e;
            }
            l += e;
        }
        l = subgroupAdd(l);
        if (sg_lane == 0u && g < g_n) {
            ml_g[2u * g] = m;
            ml_g[2u * g + 1u] = l;
        }
    }
    workgroupBarrier();

    // Output partials: invocation t takes 4 consecutive head dims (quad t % n_dq) of the keys
    // jj = kg, kg + kg_n, ... (kg = t / n_dq), for all heads of the group; the kg_n partial sums
    // per (head, dim) land in qg (free after scoring; kg_n * g_n * hd <= 4096).
    let n = j1 - j0;
    let n_dq = (hd + 3u) / 4u;
    let kg_n = gqa_kg_n(hd);
    let kg = lid / n_dq;
    let d0 = 4u * (lid % n_dq);
    var o: array<f32, 32>;
    for (var u = 0u; u < 32u; u++) {
        o[u] = 0.0;
    }
    if (kg < kg_n) {
        // Keys jj = kg, kg + kg_n, ... in batches of GQA_VB: the batch's V words are all loaded
        // before any is used (as the K words above); sums in the order jj ascending.
        for (var jb = kg; jb < n; jb += GQA_VB * kg_n) {
            var vr: array<vec4<u32>, GQA_VB>;
            for (var b = 0u; b < GQA_VB; b++) {
                let jj = jb + b * kg_n;
                vr[b] = vec4<u32>(0u);
                if (jj < n) {
                    let vb = (row0 + (j0 + jj) % p.ring) * kv_dim + kvh * hd + d0;
                    if (KV_DTYPE_V >= 2u) {
                        // The 4 dims' code word and scale word (one block: d0 % 4 == 0).
                        vr[b][0] = v[kvq_code_word(KV_DTYPE_V, vb)];
                        vr[b][1] = v[kvq_scale_word(KV_DTYPE_V, vb)];
                    }
                    for (var u = 0u; u < 4u; u++) {
                        if (d0 + u < hd && KV_DTYPE_V < 2u) {
                            if (KV_DTYPE_V == 0u) {
                                vr[b][u] = v[vb + u];
                            } else {
                                vr[b][u] = v[(vb + u) >> 1u];
                            }
                        }
                    }
                }
            }
            for (var b = 0u; b < GQA_VB; b++) {
                let jj = jb + b * kg_n;
                if (jj < n) {
                    let vb = (row0 + (j0 + jj) % p.ring) * kv_dim + kvh * hd + d0;
                    var vx: array<f32, 4>;
                    for (var u = 0u; u < 4u; u++) {
                        vx[u] = 0.0;
                        if (d0 + u < hd) {
                            if (KV_DTYPE_V >= 2u) {
                                vx[u] = kvq_value(KV_DTYPE_V, vr[b][0], vr[b][1], vb + u);
                            } else if (KV_DTYPE_V == 0u) {
                                vx[u] = bitcast<f32>(vr[b][u]);
                            } else {
                                let pair = unpack2x16float(vr[b][u]);
                                vx[u] = select(pair.x, pair.y, ((vb + u) & 1u) == 1u);
                            }
                        }
                    }
                    for (var g = 0u; g < GQA_MAX; g++) {
                        if (g < g_n) {
                            let e = sg_sc[g * CHUNK + jj];
                            for (var u = 0u; u < 4u; u++) {
                                o[4u * g + u] += e * vx[u];
                            }
                        }
                    }
                }
            }
        }
        for (var g = 0u; g < GQA_MAX; g++) {
            for (var u = 0u; u < 4u; u++) {
                if (g < g_n && d0 + u < hd) {
                    qg[(kg * g_n + g) * hd + d0 + u] = o[4u * g + u];
                }
            }
        }
    }
    workgroupBarrier();
}

// Element e = g * hd + d of the group's unnormalised chunk output, after gqa_chunk.
fn gqa_out(e: u32) -> f32 {
    let hd = p.head_dim;
    let g_n = p.n_heads / p.n_kv_heads;
    let g = e / hd;
    let d = e % hd;
    var t = 0.0;
    for (var k2 = 0u; k2 < gqa_kg_n(hd); k2++) {
        t += qg[(k2 * g_n + g) * hd + d];
    }
    return t;
}
