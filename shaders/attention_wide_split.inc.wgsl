// The f16 wide split's body, shared by attention_wide.wgsl and attention_wide_rope.wgsl: not a
// kernel on its own. The including file provides what attention_wide.inc.wgsl asks for, plus
// CL, SPL, the bindings q (0), k and v (1, 2: f16 rows as 16-byte slots) and
// wide_query(i, kvh, e): vec4 e of query i's GQ heads of kv head kvh (HD / 4 per head).

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

// Chunk c ([j0, j1), ck keys; live: the caller returned on wg_skip) of query i, kv head kvh:
// scores, softmax and V as attention_wide.wgsl describes, then the partials.
fn wide_split(i: u32, kvh: u32, c: u32, j0: u32, j1: u32, ck: u32, lid: u32, sg_id: u32,
              sg_lane: u32, sg_size: u32, n_sg: u32) {
    // Key j of this kv head is slot row(j) * NS of k and v (rows of n_kv_heads heads).
    let row0 = i * p.kv_stride;

    // The lane's query slots, all GQ heads: qr[(u * GQ + g) * 2 + half].
    let flat = sg_id * sg_size + sg_lane;
    let cl = flat / CL;
    let cl_lane = flat % CL;
    let n_cl = (n_sg * sg_size) / CL;
    var qr: array<vec4<f32>, 2u * WIDE_SPL_MAX * WIDE_GQ_MAX>;
    for (var u = 0u; u < SPL; u++) {
        let s = cl_lane + CL * u;
        for (var g = 0u; g < GQ; g++) {
            var a = vec4<f32>(0.0);
            var b = vec4<f32>(0.0);
            if (s < NS) {
                a = wide_query(i, kvh, g * (HD / 4u) + 2u * s);
                b = wide_query(i, kvh, g * (HD / 4u) + 2u * s + 1u);
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
