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
// #include attention_keys.inc.wgsl

override WG: u32 = 128;
override CHUNK: u32 = 256;
override CHUNK_MIN: u32 = 0;
// Query heads per kv head and head_dim: constants so that the per-lane loops unroll and the
// queries and accumulators live in registers.
override GQ: u32 = 4;
override HD: u32 = 128;
// Lanes per key while scoring.
const CL: u32 = 8u;
// 16-byte slots per row, and per lane of a K cluster.
override NS: u32 = HD / 8u;
override SPL: u32 = (NS + CL - 1u) / CL;

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
@group(0) @binding(1) var<storage, read> k: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> q_pos: array<u32>;
@group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@group(0) @binding(5) var<storage, read_write> part_o: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

// Array bounds of the per-lane registers: GQ <= 8, SPL <= 4 (HD <= 256).
const WIDE_GQ_MAX: u32 = 8u;
const WIDE_SPL_MAX: u32 = 4u;
// Keys per lane in flight while scoring (KB), and per invocation while accumulating V (VB; the
// next batch's loads are issued before the current one is used), at most WIDE_B_MAX.
override KB: u32 = 2;
override VB: u32 = 8;
const WIDE_B_MAX: u32 = 8u;
const WIDE_PW: u32 = 4096u;

var<workgroup> wg_skip: u32;
var<workgroup> sc: array<f32, GQ * CHUNK>;
var<workgroup> ml: array<f32, 16>;
var<workgroup> pw: array<f32, WIDE_PW>;

// 8 f16 values of a slot as two vec4s.
fn wide_unpack(w: vec4<u32>) -> array<vec4<f32>, 2> {
    let a = unpack2x16float(w.x);
    let b = unpack2x16float(w.y);
    let c = unpack2x16float(w.z);
    let d = unpack2x16float(w.w);
    return array<vec4<f32>, 2>(vec4<f32>(a, b), vec4<f32>(c, d));
}

@compute @workgroup_size(WG)
fn split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
         @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
         @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let c = wid.x;
    let kvh = wid.y;
    let i = wid.z;
    let neg_inf = bitcast<f32>(0xff800000u);
    let vis = visible_keys(i);
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
            let live = jj < ck && j0 + jj < j1;
            for (var g = 0u; g < GQ; g++) {
                var d = acc[b * GQ + g];
                d += subgroupShuffleXor(d, 4u);
                d += subgroupShuffleXor(d, 2u);
                d += subgroupShuffleXor(d, 1u);
                if (cl_lane == 0u && jj < ck) {
                    var s = neg_inf;
                    if (live) {
                        s = d * p.scale;
                        if (p.softcap > 0.0) {
                            s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0));
                        }
                    }
                    sc[g * CHUNK + jj] = s;
                }
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

    // Softmax pieces per head: subgroup s takes heads s, s + n_sg, ...; lanes across keys.
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

    // The key groups' partials, hp heads at a time: pw[((kg * hp + g - g0) * HD + d].
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
