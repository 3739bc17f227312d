// Decode attention's split pass over quantized caches (K and V each q8_0, q4_0 or tq4, read in
// place as kv_quant.inc.wgsl lays them out) organised as the f16 wide split (attention_wide.wgsl:
// the group's queries in registers, several keys in flight per lane); attention.wgsl's split_gqa
// is its reference and `merge` there combines its partials (same layout).
//
// One workgroup per (key chunk c, kv head, query i), for the GQ query heads sharing the kv head.
//   K: clusters of CL = 8 lanes, one key each. A head is HD / 64 whole units; lane l of a cluster
//      takes the head's code words l, l + 8, ... (8 consecutive words per load across the
//      cluster) and every unit's scale word, and holds the group's queries for its values in
//      registers (staged in shared memory first, rotated like the keys when KV_ROT_K = 1 by a
//      fast Walsh-Hadamard transform: 6 butterfly passes, not 64 multiply-adds per value; tq4
//      levels come from a 16-entry table, not a branch per code); KB keys per lane are loaded before any is used; a cluster's partial dots are summed with
//      subgroupShuffleXor 4, 2, 1.
//   softmax and the partials: attention_wide.inc.wgsl.
//   V: HD / 8 invocations per key, each one 8-value slot (q8_0 two code words, q4_0 and tq4 one)
//      and its unit's scale word, 8 dims x GQ heads of accumulators, VB keys in flight; tq4
//      values come out rotated (kv_unrotate.wgsl turns the merged output back, as for the
//      grouped split).
// Shapes: as attention.wgsl, with head_dim = HD a multiple of 64 (whole units), <= 256; GQ <= 8,
// CHUNK <= 256, subgroups of at least 8 lanes (the caller checks). The bindings are plain words:
// no alignment beyond 4 bytes. Shared memory: scores GQ * CHUNK f32 + 4096 f32 (pw, which also
// stages the queries) + 32 f32: at most 24.1 KiB.
//
// #include attention_wide.inc.wgsl
// #include kv_quant.inc.wgsl
// #include attention_keys.inc.wgsl

override WG: u32 = 128;
override CHUNK: u32 = 256;
override CHUNK_MIN: u32 = 0;
// Query heads per kv head and head_dim: constants so that the per-lane loops unroll and the
// queries and accumulators live in registers.
override GQ: u32 = 4;
override HD: u32 = 128;
// V: 8-value slots per row, one per invocation of a key group.
override NS: u32 = HD / 8u;
// Keys per lane in flight while scoring (KB), and per invocation while accumulating V (VB; the
// next batch's loads are issued before the current one is used).
override KB: u32 = 2;
override VB: u32 = 8;
// K's and V's types (kv_quant.inc.wgsl's codes: 2 q8_0, 3 q4_0, 4 tq4), and 1 when the K units
// are stored rotated.
override KV_DTYPE: u32 = 2;
override KV_DTYPE_V: u32 = 2;
override KV_ROT_K: u32 = 0;
// 1: the key at position 0 is read as its blocks plus `sink` (attention.wgsl's KV_SINK).
override KV_SINK: u32 = 0;
// The chunk's scores, then their exponentials, per head.
var<workgroup> sc: array<f32, GQ * CHUNK>;
// Lanes per key while scoring.
const CL: u32 = 8u;

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

@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@group(0) @binding(5) var<storage, read_write> part_o: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<u32>;
@group(0) @binding(2) var<storage, read> v: array<u32>;
// [kv_dim] f32 in the stored space, read only with KV_SINK 1.
@group(0) @binding(7) var<storage, read> sink: array<f32>;

// Array bounds of the per-lane registers (HD <= 256): K code words per lane (q8_0: HD / 32),
// query vec4s per lane and head (HD / 32), units per head (HD / 64).
const WQ_KW_MAX: u32 = 8u;
const WQ_QV_MAX: u32 = 8u;
const WQ_U_MAX: u32 = 4u;
// tq4's 16 levels (kvq_tq4_level), looked up instead of branching per code.
var<workgroup> wq_lv: array<f32, 16>;

// Rotates the n staged query values in pw, already multiplied by the signs D (staging), by H as
// butterflies over each 64-value segment (the fast Walsh-Hadamard transform: y_i = sum_j
// (-1)^popcount(i & j) x_j, attention.wgsl's rotate_qg up to f32 rounding; the 1/8 is applied
// when the registers are loaded). Six passes of n / 2 pairs, a barrier before each and after.
fn wide_rotate_q(n: u32, lid: u32) {
    for (var h = 1u; h < 64u; h *= 2u) {
        workgroupBarrier();
        for (var t = lid; t < n / 2u; t += WG) {
            let k = t % 32u;
            let i0 = (t / 32u) * 64u + (k / h) * 2u * h + k % h;
            let x = pw[i0];
            let y = pw[i0 + h];
            pw[i0] = x + y;
            pw[i0 + h] = x - y;
        }
    }
    workgroupBarrier();
}

// Four codes of a code word from code i0, in units of the scale.
fn wq_codes(t: u32, w: u32, i0: u32) -> vec4<f32> {
    if (t == 4u) {
        return vec4<f32>(wq_lv[extractBits(w, 4u * i0, 4u)], wq_lv[extractBits(w, 4u * i0 + 4u, 4u)],
                         wq_lv[extractBits(w, 4u * i0 + 8u, 4u)],
                         wq_lv[extractBits(w, 4u * i0 + 12u, 4u)]);
    }
    return vec4<f32>(kvq_code(t, w, i0), kvq_code(t, w, i0 + 1u), kvq_code(t, w, i0 + 2u),
                     kvq_code(t, w, i0 + 3u));
}

// V slot s (head values 8s .. 8s + 7) of the head whose first unit is u0: its code words (the
// second 0 for q4_0 and tq4) and its unit's scale word.
fn wq_v_load(u0: u32, s: u32) -> vec3<u32> {
    let uw = kvq_unit_words(KV_DTYPE_V);
    let base = (u0 + s / 8u) * uw;
    let cw = ((8u * s) % 64u) / kvq_per_word(KV_DTYPE_V);
    var x = vec3<u32>(v[base + cw], 0u, v[base + kvq_code_words(KV_DTYPE_V)]);
    if (KV_DTYPE_V == 2u) {
        x.y = v[base + cw + 1u];
    }
    return x;
}

// The 8 values of V slot s from wq_v_load's words.
fn wq_v_values(x: vec3<u32>, s: u32) -> array<vec4<f32>, 2> {
    let d = kvq_scale(x.z, 8u * s);
    if (KV_DTYPE_V == 2u) {
        return array<vec4<f32>, 2>(d * wq_codes(2u, x.x, 0u), d * wq_codes(2u, x.y, 0u));
    }
    return array<vec4<f32>, 2>(d * wq_codes(KV_DTYPE_V, x.x, 0u),
                               d * wq_codes(KV_DTYPE_V, x.x, 4u));
}

fn split_body(wid: vec3<u32>, lid: u32, sg_id: u32, sg_lane: u32, sg_size: u32, n_sg: u32) {
    let c = wid.x;
    let kvh = wid.y;
    let i = wid.z;
    let bounds = wide_chunk(i, c, lid);
    let j0 = bounds.x;
    let j1 = bounds.y;
    let ck = bounds.z;
    if (workgroupUniformLoad(&wg_skip) != 0u) {
        return;
    }
    let row0 = i * p.kv_stride;
    // K: values per code word, code words per unit and per lane, words per unit; units per head.
    let kpw = kvq_per_word(KV_DTYPE);
    let kcw = kvq_code_words(KV_DTYPE);
    let kpl = HD / (CL * kpw);
    let kuw = kvq_unit_words(KV_DTYPE);
    let hu = HD / 64u;
    // Query vec4s per code word.
    let qv = kpw / 4u;

    // The group's queries (GQ heads of HD values, contiguous) staged in pw, rotated with the keys
    // (times the signs here, H below, 1/8 as the registers are loaded).
    let qb = (i * p.n_heads + kvh * GQ) * (HD / 4u);
    for (var e = lid; e < GQ * HD / 4u; e += WG) {
        var x = q[qb + e];
        if (KV_ROT_K == 1u) {
            let j = (4u * e) % 64u;
            x *= vec4<f32>(kvq_sign(j), kvq_sign(j + 1u), kvq_sign(j + 2u), kvq_sign(j + 3u));
        }
        pw[4u * e] = x.x;
        pw[4u * e + 1u] = x.y;
        pw[4u * e + 2u] = x.z;
        pw[4u * e + 3u] = x.w;
    }
    if (lid < 16u) {
        wq_lv[lid] = kvq_tq4_level(lid);
    }
    if (KV_ROT_K == 1u) {
        wide_rotate_q(GQ * HD, lid);
    }
    workgroupBarrier();
    let rs = select(1.0, 0.125, KV_ROT_K == 1u);

    // The lane's query values, all GQ heads: qr[(w * qv + h) * GQ + g] holds head g's values
    // 4h .. 4h + 3 of code word l + 8w.
    let flat = sg_id * sg_size + sg_lane;
    let cl = flat / CL;
    let cl_lane = flat % CL;
    let n_cl = (n_sg * sg_size) / CL;
    var qr: array<vec4<f32>, WQ_QV_MAX * WIDE_GQ_MAX>;
    for (var w = 0u; w < kpl; w++) {
        for (var h = 0u; h < qv; h++) {
            let d = (cl_lane + CL * w) * kpw + 4u * h;
            for (var g = 0u; g < GQ; g++) {
                let e = g * HD + d;
                qr[(w * qv + h) * GQ + g] =
                    rs * vec4<f32>(pw[e], pw[e + 1u], pw[e + 2u], pw[e + 3u]);
            }
        }
    }

    // Scores: cluster cl takes keys jj = cl + n_cl * (t * KB + b).
    let trips = (ck + n_cl * KB - 1u) / (n_cl * KB);
    for (var t = 0u; t < trips; t++) {
        var kr: array<u32, WIDE_B_MAX * WQ_KW_MAX>;
        var ks: array<u32, WIDE_B_MAX * WQ_U_MAX>;
        for (var b = 0u; b < KB; b++) {
            let jj = cl + n_cl * (t * KB + b);
            let j = j0 + jj;
            let live = jj < ck && j < j1;
            // The head's first unit.
            let u0 = ((row0 + j % p.ring) * p.n_kv_heads + kvh) * hu;
            for (var w = 0u; w < kpl; w++) {
                let cw = cl_lane + CL * w;
                var x = 0u;
                if (live) {
                    x = k[(u0 + cw / kcw) * kuw + cw % kcw];
                }
                kr[b * WQ_KW_MAX + w] = x;
            }
            for (var u = 0u; u < hu; u++) {
                var x = 0u;
                if (live) {
                    x = k[(u0 + u) * kuw + kcw];
                }
                ks[b * WQ_U_MAX + u] = x;
            }
        }
        var acc: array<f32, WIDE_B_MAX * WIDE_GQ_MAX>;
        for (var b = 0u; b < KB; b++) {
            for (var g = 0u; g < GQ; g++) {
                acc[b * GQ + g] = 0.0;
            }
            for (var w = 0u; w < kpl; w++) {
                // Code word l + 8w lies in unit 8w / kcw (l < 8, kcw a multiple of 8).
                let e = (cl_lane + CL * w) * kpw;
                let d = kvq_scale(ks[b * WQ_U_MAX + (CL * w) / kcw], e);
                let word = kr[b * WQ_KW_MAX + w];
                for (var h = 0u; h < qv; h++) {
                    let kx = d * wq_codes(KV_DTYPE, word, 4u * h);
                    for (var g = 0u; g < GQ; g++) {
                        acc[b * GQ + g] += dot(qr[(w * qv + h) * GQ + g], kx);
                    }
                }
            }
        }
        // Position 0 (cluster 0's first key of the first trip of the split starting there):
        // its score takes q . sink, added here rather than tested per key in the loop above
        // (which slowed every key).
        if (KV_SINK == 1u && j0 == 0u && t == 0u && cl == 0u) {
            for (var w = 0u; w < kpl; w++) {
                let e = (cl_lane + CL * w) * kpw;
                for (var h = 0u; h < qv; h++) {
                    let s0 = kvh * HD + e + 4u * h;
                    let sx = vec4<f32>(sink[s0], sink[s0 + 1u], sink[s0 + 2u], sink[s0 + 3u]);
                    for (var g = 0u; g < GQ; g++) {
                        acc[g] += dot(qr[(w * qv + h) * GQ + g], sx);
                    }
                }
            }
        }
        for (var b = 0u; b < KB; b++) {
            let jj = cl + n_cl * (t * KB + b);
            for (var g = 0u; g < GQ; g++) {
                wide_score(acc[b * GQ + g], g, jj, ck, jj < ck && j0 + jj < j1, cl_lane);
            }
        }
    }
    workgroupBarrier();

    // V: invocation lid takes slot s = lid % NS of keys jj = kg, kg + kg_n, ... (kg = lid / NS)
    // for every head; sums in the order jj ascending within each key group. V does not depend
    // on the scores: the first batch's loads are issued before the softmax.
    let n = j1 - j0;
    let kg_n = WG / NS;
    let kg = lid / NS;
    let s = lid % NS;
    var vr: array<vec3<u32>, WIDE_B_MAX>;
    for (var b = 0u; b < VB; b++) {
        let jj = kg + b * kg_n;
        var x = vec3<u32>(0u);
        if (kg < kg_n && jj < n) {
            x = wq_v_load(((row0 + (j0 + jj) % p.ring) * p.n_kv_heads + kvh) * hu, s);
        }
        vr[b] = x;
    }
    wide_softmax(ck, sg_id, sg_lane, sg_size, n_sg);
    workgroupBarrier();

    var o: array<vec4<f32>, 2u * WIDE_GQ_MAX>;
    for (var g = 0u; g < GQ; g++) {
        o[2u * g] = vec4<f32>(0.0);
        o[2u * g + 1u] = vec4<f32>(0.0);
    }
    if (kg < kg_n) {
        for (var jb = kg; jb < n; jb += VB * kg_n) {
            // The next batch's loads, then this batch's sums.
            var vn: array<vec3<u32>, WIDE_B_MAX>;
            for (var b = 0u; b < VB; b++) {
                let jj = jb + (VB + b) * kg_n;
                var x = vec3<u32>(0u);
                if (jj < n) {
                    x = wq_v_load(((row0 + (j0 + jj) % p.ring) * p.n_kv_heads + kvh) * hu, s);
                }
                vn[b] = x;
            }
            for (var b = 0u; b < VB; b++) {
                let jj = jb + b * kg_n;
                if (jj < n) {
                    let vx = wq_v_values(vr[b], s);
                    for (var g = 0u; g < GQ; g++) {
                        let e = sc[g * CHUNK + jj];
                        o[2u * g] += e * vx[0];
                        o[2u * g + 1u] += e * vx[1];
                    }
                }
            }
            vr = vn;
        }
    }
    wide_parts(o, i, kvh, c, lid, kg, kg_n, s);
}

@compute @workgroup_size(WG)
fn split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
         @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
         @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    split_body(wid, lid, sg_id, sg_lane, sg_size, n_sg);
}
