// Writing Y for matmul_coop.wgsl (appended to it: its bindings, overrides and private state):
// the scratch path (`cm_out`), split-K partial sums (`cm_reduce`, `cm_reduce_direct`), the
// direct epilogue's cooperative loads and stores of Y, and the gated epilogue (GLU).

// Writes accumulator tile (i, j) of this subgroup (tokens m0 + 16 i.., rows r0 + 16 j..) to Y
// through the subgroup's scratch tile. Called in uniform control flow (it has barriers).
fn cm_out(c: coop_mat16x16<f32, C>, sg_id: u32, lane: u32, m0: u32, r0: u32) {
    let scratch = sg_id * 256u;
    coopStoreT(c, &cm_c[scratch], 16u);
    workgroupBarrier();
    for (var e = lane; e < 256u; e += SG) {
        let m = m0 + e / 16u;
        let r = r0 + e % 16u;
        if (m < p.n && r < cm_rows) {
            let o = m * cm_ys + cm_roff + r;
            var v = cm_c[scratch + e];
            if (p.accumulate != 0u) {
                v += cm_y(o);
            }
            cm_y_set(o, v);
        }
    }
    workgroupBarrier();
}

// Split-K: the first of this subgroup's WM * WN partial tiles of split s of `tile`, in cm_part.
fn cm_part_base(tile: u32, s: u32, sg_id: u32) -> u32 {
    return ((tile * SPLIT + s) * CM_SGM * CM_SGN + sg_id) * WM * WN * 256u;
}

// Split-K, last workgroup of a tile: accumulator tile t (= i * WN + j) of this subgroup
// (tokens m0.., rows r0..) is the sum of the SPLIT partials, in split order.
fn cm_reduce(tile: u32, sg_id: u32, lane: u32, t: u32, m0: u32, r0: u32) {
    for (var e = lane; e < 256u; e += SG) {
        let m = m0 + e / 16u;
        let r = r0 + e % 16u;
        if (m < p.n && r < cm_rows) {
            var v = 0.0;
            for (var s = 0u; s < SPLIT; s++) {
                v += cm_part[cm_part_base(tile, s, sg_id) + t * 256u + e];
            }
            let o = m * cm_ys + cm_roff + r;
            if (p.accumulate != 0u) {
                v += cm_y(o);
            }
            cm_y_set(o, v);
        }
    }
}

// cm_reduce with the direct epilogue: the SPLIT partials summed in split order with cooperative
// loads (and Y added when accumulating), stored straight into Y.
fn cm_reduce_direct(tile: u32, sg_id: u32, t: u32, m0: u32, r0: u32) {
    var v = coopLoadT<coop_mat16x16<f32, C>>(&cm_part[cm_part_base(tile, 0u, sg_id) + t * 256u], 16u);
    for (var s = 1u; s < SPLIT; s++) {
        v = v + coopLoadT<coop_mat16x16<f32, C>>(&cm_part[cm_part_base(tile, s, sg_id) + t * 256u],
                                                  16u);
    }
    if (p.accumulate != 0u) {
        v = v + cm_load_y(m0, r0);
    }
    cm_store_y(v, m0, r0);
}

// Whether the workgroup with tiles at token m0, row r0 writes Y directly (CM_DIRECT): its whole
// tile lies inside Y, whose rows are 16-byte aligned.
fn cm_direct(m0: u32, r0: u32) -> bool {
    return CM_DIRECT == 1u && m0 + CM_SGM * WM * 16u <= p.n
        && r0 + CM_SGN * WN * 16u <= cm_rows && cm_ys % 4u == 0u && cm_roff % 4u == 0u;
}

// The 16 x 16 tile of this workgroup's Y at token m, row r (direct epilogue).
fn cm_load_y(m: u32, r: u32) -> coop_mat16x16<f32, C> {
    // (The stride as a `let`: naga's SPIR-V writer needs it emitted before the operation.)
    let ys = cm_ys + 0u;
    let o = m * ys + cm_roff + r;
    if (SEGS == 1u || cm_seg == 0u) {
        return coopLoadT<coop_mat16x16<f32, C>>(&y[o], ys);
    }
    if (cm_seg == 1u) {
        return coopLoadT<coop_mat16x16<f32, C>>(&y1[o], ys);
    }
    return coopLoadT<coop_mat16x16<f32, C>>(&y2[o], ys);
}

// Stores accumulator tile c at token m, row r of this workgroup's Y (direct epilogue).
fn cm_store_y(c: coop_mat16x16<f32, C>, m: u32, r: u32) {
    let ys = cm_ys + 0u;
    let o = m * ys + cm_roff + r;
    if (SEGS == 1u || cm_seg == 0u) {
        coopStoreT(c, &y[o], ys);
    } else if (cm_seg == 1u) {
        coopStoreT(c, &y1[o], ys);
    } else {
        coopStoreT(c, &y2[o], ys);
    }
}

// The GLU activation of gate value g, as activation.wgsl computes it.
fn cm_act(g: f32) -> f32 {
    if (GLU == 2u) {
        let inner = 0.7978845608028654 * (g + 0.044715 * g * g * g);
        let t = tanh(clamp(inner, -15.0, 15.0));
        return 0.5 * g * (1.0 + t);
    }
    // exp(-g) overflows to inf for g < -88: g / inf = -0, the right limit.
    return g / (1.0 + exp(-g));
}

// GLU: gate tile g and up tile u of the same outputs (tokens m0.., gate rows r0..) through the
// subgroup's scratch: act(g) is kept in registers (each invocation owns the element pairs
// (2q, 2q + 1), q = lane + k SG), then u replaces g and the products are written (bounds-checked;
// GLU_HALF: also the f16 pair). Called in uniform control flow (it has barriers). SG >= 8.
fn cm_glu_out(g: coop_mat16x16<f32, C>, u: coop_mat16x16<f32, C>, sg_id: u32, lane: u32,
              m0: u32, r0: u32) {
    let scratch = sg_id * 256u;
    var a: array<f32, 32>;
    coopStoreT(g, &cm_c[scratch], 16u);
    workgroupBarrier();
    for (var k = 0u; k < 128u / SG; k++) {
        let e = scratch + 2u * (lane + k * SG);
        a[2u * k] = cm_act(cm_c[e]);
        a[2u * k + 1u] = cm_act(cm_c[e + 1u]);
    }
    workgroupBarrier();
    coopStoreT(u, &cm_c[scratch], 16u);
    workgroupBarrier();
    for (var k = 0u; k < 128u / SG; k++) {
        let e = 2u * (lane + k * SG);
        let m = m0 + e / 16u;
        let r = r0 + e % 16u;
        let v0 = a[2u * k] * cm_c[scratch + e];
        let v1 = a[2u * k + 1u] * cm_c[scratch + e + 1u];
        if (m < p.n && r < cm_rows) {
            let o = m * cm_ys + cm_roff + r;
            y[o] = v0;
            if (r + 1u < cm_rows) {
                y[o + 1u] = v1;
                if (GLU_HALF == 1u) {
                    yh[o / 2u] = pack2x16float(vec2<f32>(v0, v1));
                }
            }
        }
    }
    workgroupBarrier();
}

// GLU epilogue: this subgroup's tiles (i, 2j) and (i, 2j + 1) are the gate and up values of
// tokens mb + 16 i.., gate rows (rb + 32 j) / 2.. (the interleaved rows rb.. of `cm_wrow`).
fn cm_glu_finish(c00: coop_mat16x16<f32, C>, c01: coop_mat16x16<f32, C>,
                 c02: coop_mat16x16<f32, C>, c03: coop_mat16x16<f32, C>,
                 c10: coop_mat16x16<f32, C>, c11: coop_mat16x16<f32, C>,
                 c12: coop_mat16x16<f32, C>, c13: coop_mat16x16<f32, C>,
                 c20: coop_mat16x16<f32, C>, c21: coop_mat16x16<f32, C>,
                 c22: coop_mat16x16<f32, C>, c23: coop_mat16x16<f32, C>,
                 c30: coop_mat16x16<f32, C>, c31: coop_mat16x16<f32, C>,
                 c32: coop_mat16x16<f32, C>, c33: coop_mat16x16<f32, C>, sg_id: u32, lane: u32,
                 mb: u32, rb: u32) {
    let r = rb / 2u;
    cm_glu_out(c00, c01, sg_id, lane, mb, r);
    cm_glu_out(c10, c11, sg_id, lane, mb + 16u, r);
    if (WN > 2u) {
        cm_glu_out(c02, c03, sg_id, lane, mb, r + 16u);
        cm_glu_out(c12, c13, sg_id, lane, mb + 16u, r + 16u);
    }
    if (WM > 2u) {
        cm_glu_out(c20, c21, sg_id, lane, mb + 32u, r);
        cm_glu_out(c30, c31, sg_id, lane, mb + 48u, r);
        if (WN > 2u) {
            cm_glu_out(c22, c23, sg_id, lane, mb + 32u, r + 16u);
            cm_glu_out(c32, c33, sg_id, lane, mb + 48u, r + 16u);
        }
    }
}
