// matvec_q8a.wgsl's `main_qout` tail: after an accumulating one-column product (o_proj, down
// into the residual h), h quantized for the next product's norm prologue, in
// quantize_act_q8.wgsl's layout (one column), so that product runs on quantized x (XG) with no
// quantize launch of its own. Not a kernel: appended to matvec_q8a.wgsl.
//
// Each 32-row unit of h is finished by the workgroup whose rows complete it (a counter per unit
// adds the rows each workgroup wrote): its four lanes quantize v = h * (p.norm_offset + qo_nw)
// (act_q8_chunk) and store the unit's sum of squares of h; the workgroup that finishes the last
// unit of a 1024-row chunk (a counter per chunk) sums its units' squares in unit order. Rows and
// sums pass between workgroups through atomics (coherent) with storageBarrier releasing and
// acquiring them, as attention_wide_merge.inc.wgsl. Counters return to zero: `qo_ctl` must be
// zero before the first launch. Shapes (the caller checks): NC 1, EPI 1, one part at y offset 0,
// rows a multiple of 32, at most QO_UNITS - 1 units per workgroup's rows.

@group(0) @binding(6) var<storage, read> qo_nw: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> qo_q: array<u32>;
@group(0) @binding(8) var<storage, read_write> qo_m: array<u32>;
// [uc unit counters | nch chunk counters | uc unit sums of squares | rows values of h] (words).
@group(0) @binding(9) var<storage, read_write> qo_ctl: array<atomic<u32>>;

const QO_UNITS: u32 = 64u;
// Per unit the workgroup touches: 1 once this workgroup finished it (then: finished its chunk).
var<workgroup> qo_fin: array<u32, QO_UNITS>;

// The chunk of unit u (of uc) and that chunk's unit count.
fn qo_chunk(u: u32, uc: u32) -> vec2<u32> {
    let c = u / 32u;
    return vec2<u32>(c, min(32u, uc - 32u * c));
}

fn qout_tail(r0: u32, r1: u32, v: u32) {
    let rows = p.rows0;
    let uc = rows / 32u;
    let nch = (uc + 31u) / 32u;
    let usq = uc + nch;
    let hv = 2u * uc + nch;
    // This workgroup's own writes of y, then its rows published as atomics.
    storageBarrier();
    for (var r = r0 + v; r < r1; r += WG) {
        atomicStore(&qo_ctl[hv + r], bitcast<u32>(y[r]));
    }
    storageBarrier();
    let u0 = r0 / 32u;
    let nu = select(0u, (r1 + 31u) / 32u - u0, r1 > r0);
    for (var i = v; i < nu; i += WG) {
        let u = u0 + i;
        let n = min(r1, 32u * u + 32u) - max(r0, 32u * u);
        let before = atomicAdd(&qo_ctl[u], n);
        qo_fin[i] = select(0u, 1u, before + n == 32u);
    }
    // Acquire the other workgroups' rows of the units this one finishes.
    storageBarrier();
    workgroupBarrier();
    let j = v % 4u;
    for (var i0 = 0u; i0 < nu; i0 += WG / 4u) {
        let i = min(i0 + v / 4u, nu - 1u);
        let fin = i0 + v / 4u < nu && qo_fin[i] != 0u;
        let u = u0 + i;
        let e = 32u * u + 8u * j;
        var a = vec4<f32>(0.0);
        var b = vec4<f32>(0.0);
        if (fin) {
            for (var k = 0u; k < 4u; k++) {
                a[k] = bitcast<f32>(atomicLoad(&qo_ctl[hv + e + k]));
                b[k] = bitcast<f32>(atomicLoad(&qo_ctl[hv + e + 4u + k]));
            }
        }
        var sq = dot(a, a) + dot(b, b);
        sq += subgroupShuffleXor(sq, 1u);
        sq += subgroupShuffleXor(sq, 2u);
        a *= p.norm_offset + qo_nw[e / 4u];
        b *= p.norm_offset + qo_nw[e / 4u + 1u];
        let c8 = act_q8_chunk(a, b);
        if (fin) {
            qo_q[8u * u + 2u * j] = c8.qa;
            qo_q[8u * u + 2u * j + 1u] = c8.qb;
            if (j == 0u) {
                qo_m[2u * u] = bitcast<u32>(c8.d);
                qo_m[2u * u + 1u] = bitcast<u32>(c8.s);
                atomicStore(&qo_ctl[usq + u], bitcast<u32>(sq));
                atomicStore(&qo_ctl[u], 0u);
            }
        }
    }
    // Release the unit sums, then count the finished units into their chunks.
    storageBarrier();
    workgroupBarrier();
    for (var i = v; i < nu; i += WG) {
        if (qo_fin[i] != 0u) {
            let c = qo_chunk(u0 + i, uc);
            let before = atomicAdd(&qo_ctl[uc + c.x], 1u);
            qo_fin[i] = select(0u, 1u, before + 1u == c.y);
        }
    }
    storageBarrier();
    workgroupBarrier();
    for (var i = v; i < nu; i += WG) {
        if (qo_fin[i] != 0u) {
            let c = qo_chunk(u0 + i, uc);
            var total = 0.0;
            for (var k = 0u; k < c.y; k++) {
                total += bitcast<f32>(atomicLoad(&qo_ctl[usq + 32u * c.x + k]));
            }
            qo_m[2u * uc + c.x] = bitcast<u32>(total);
            atomicStore(&qo_ctl[uc + c.x], 0u);
        }
    }
}
