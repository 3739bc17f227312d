// Decode attention's split pass over f16 caches with 16-byte loads ("wide"); attention.wgsl's
// split_gqa is its reference and `merge` there combines its partials (same layout).
//
// One workgroup per (key chunk c, kv head, query i) scores the chunk's keys for the GQ query
// heads sharing the kv head and writes each head's max m, sum l = sum exp(s - m) and unnormalised
// output o = sum exp(s - m) v (chunks as attention_keys.inc.wgsl cuts them).
//   K: clusters of CL = 8 lanes, one key each; a row of HD f16 values is HD / 8 16-byte slots,
//      lane l of the cluster takes slots l, l + 8, ... and holds the group's queries for those
//      slots in registers (loaded once); KB keys per lane are loaded before any is used; a
//      cluster's partial dots are summed with subgroupShuffleXor 4, 2, 1.
//   softmax: subgroups across heads, lanes across the chunk's keys.
//   V: HD / 8 invocations per key (one slot each, 8 dims x GQ heads of accumulators),
//      WG / (HD / 8) key groups, 2 VB keys per invocation in flight; the key groups' partials
//      meet in shared memory (pw; at most 4096 floats per pass over the heads).
// Shapes: as attention.wgsl, with k and v f16 (head_dim = HD, a multiple of 8, <= 256) and every
// binding 16-byte aligned. GQ <= 8, CHUNK <= 256, subgroups of at least 8 lanes (the caller
// checks). Shared memory: scores GQ * CHUNK f32 + 4096 f32 (pw) + 16 f32: at most 24.1 KiB.
// KB, VB and CL are measured (docs/benchmarks.md): more keys in flight per lane cost registers
// and occupancy; 16-lane clusters (half the query registers) were slower.
//
// #include attention_wide.inc.wgsl
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
// Lanes per key while scoring.
const CL: u32 = 8u;
// 16-byte slots per lane of a K cluster.
override SPL: u32 = (NS + CL - 1u) / CL;

// Keys per lane in flight while scoring (KB), and per invocation while accumulating V (VB; the
// next batch's loads are issued before the current one is used).
override KB: u32 = 2;
override VB: u32 = 8;
// The chunk's scores, then their exponentials, per head.
var<workgroup> sc: array<f32, GQ * CHUNK>;

@group(0) @binding(1) var<storage, read> k: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<u32>>;

// Array bound of the per-lane query registers: SPL <= 4 (HD <= 256).
const WIDE_SPL_MAX: u32 = 4u;

// 8 f16 values of a slot as two vec4s.
fn wide_unpack(w: vec4<u32>) -> array<vec4<f32>, 2> {
    let a = unpack2x16float(w.x);
    let b = unpack2x16float(w.y);
    let c = unpack2x16float(w.z);
    let d = unpack2x16float(w.w);
    return array<vec4<f32>, 2>(vec4<f32>(a, b), vec4<f32>(c, d));
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
    // Key j of this kv head is slot row(j) * NS of k and v (rows of n_kv_heads heads).
    let row0 = i * p.kv_stride;

    // The lane's query slots, all GQ heads: qr[(u * GQ + g) * 2 + half].
    let flat = sg_id * sg_size + sg_lane;
    let cl = flat / CL;
    let cl_lane = flat % CL;
    let n_cl = (n_sg * sg_size) / CL;
    let qb = (i * p.n_heads + kvh * GQ) * (HD / 4u);
    var qr: array<vec4<f32>, 2u * WIDE_SPL_MAX * WIDE_GQ_MAX>;
    for (var u = 0u; u < SPL; u++) {
        let s = cl_lane + CL * u;
        for (var g = 0u; g < GQ; g++) {
            var a = vec4<f32>(0.0);
            var b = vec4<f32>(0.0);
            if (s < NS) {
                a = q[qb + g * (HD / 4u) + 2u * s];
                b = q[qb + g * (HD / 4u) + 2u * s + 1u];
            }
            qr[(u * GQ + g) * 2u] = a;
            qr[(u * GQ + g) * 2u + 1u] = b;
        }
    }

    // Scores: cluster cl takes keys jj = cl + n_cl * (t * KB + b).
    let trips = (ck + n_cl * KB - 1u) / (n_cl * KB);
    for (var t = 0u; t < trips; t++) {
        var kr: array<vec4<u32>, WIDE_B_MAX * WIDE_SPL_MAX>;
        for (var b = 0u; b < KB; b++) {
            let jj = cl + n_cl * (t * KB + b);
            let j = j0 + jj;
            let base = ((row0 + j % p.ring) * p.n_kv_heads + kvh) * NS;
            for (var u = 0u; u < SPL; u++) {
                let s = cl_lane + CL * u;
                var w = vec4<u32>(0u);
                if (jj < ck && j < j1 && s < NS) {
                    w = k[base + s];
                }
                kr[b * WIDE_SPL_MAX + u] = w;
            }
        }
        var acc: array<f32, WIDE_B_MAX * WIDE_GQ_MAX>;
        for (var b = 0u; b < KB; b++) {
            for (var g = 0u; g < GQ; g++) {
                acc[b * GQ + g] = 0.0;
            }
            for (var u = 0u; u < SPL; u++) {
                let kx = wide_unpack(kr[b * WIDE_SPL_MAX + u]);
                for (var g = 0u; g < GQ; g++) {
                    acc[b * GQ + g] += dot(qr[(u * GQ + g) * 2u], kx[0])
                        + dot(qr[(u * GQ + g) * 2u + 1u], kx[1]);
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
    let vrow = row0 * p.n_kv_heads + kvh;
    var vr: array<vec4<u32>, WIDE_B_MAX>;
    for (var b = 0u; b < VB; b++) {
        let jj = kg + b * kg_n;
        var w = vec4<u32>(0u);
        if (kg < kg_n && jj < n) {
            w = v[(((j0 + jj) % p.ring) * p.n_kv_heads + vrow) * NS + s];
        }
        vr[b] = w;
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
            var vn: array<vec4<u32>, WIDE_B_MAX>;
            for (var b = 0u; b < VB; b++) {
                let jj = jb + (VB + b) * kg_n;
                var w = vec4<u32>(0u);
                if (jj < n) {
                    w = v[(((j0 + jj) % p.ring) * p.n_kv_heads + vrow) * NS + s];
                }
                vn[b] = w;
            }
            for (var b = 0u; b < VB; b++) {
                let jj = jb + b * kg_n;
                if (jj < n) {
                    let vx = wide_unpack(vr[b]);
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

// The split whose last live workgroup per (query, kv head) merges (wide_merge_last): one dispatch
// instead of split + merge.
@compute @workgroup_size(WG)
fn split_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
               @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
               @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    split_body(wid, lid, sg_id, sg_lane, sg_size, n_sg);
    wide_merge_last(wid.z, wid.y, wid.x, lid, sg_id, sg_lane, sg_size, n_sg);
}
