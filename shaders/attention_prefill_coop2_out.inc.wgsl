// Writing the output for attention_prefill_coop2.wgsl (appended to it: its bindings, overrides
// and shared memory): each subgroup's tiles divided by the row sums (`finish`, `emit`), a split
// part's unnormalised rows (`emit_part`) and the last part's merge (`merge_parts`).

// Writes the subgroup's output tile for columns 16 d.., divided by the row sums.
fn emit(o: coop_mat16x16<f32, C>, d: u32, sbase: u32, sb: u32, lane: u32, q0: u32, kvh: u32,
        g: u32, bq: u32) {
    // This workgroup's first value column.
    let d0 = cm_d0;
    coopStoreT(o, &sc[sbase], SLD);
    workgroupBarrier();
    if (HALF == 1u) {
        for (var e = lane; e < 128u; e += SG) {
            let r = e / 8u;
            let c = 2u * (e % 8u);
            let t = sb + r;
            let qi = q0 + t / g;
            if (t < bq * g && qi < p.n_q) {
                let l = row_l[t];
                var x = vec2<f32>(0.0);
                if (l > 0.0) {
                    x = vec2<f32>(sc[sbase + r * SLD + c] / l, sc[sbase + r * SLD + c + 1u] / l);
                }
                let o = (qi * p.n_heads + kvh * g + t % g) * HD + d0 + 16u * d + c;
                out[o] = x.x;
                out[o + 1u] = x.y;
                out16[o / 2u] = pack2x16float(x);
            }
        }
        workgroupBarrier();
        return;
    }
    for (var e = lane; e < 256u; e += SG) {
        let r = e / 16u;
        let c = e % 16u;
        let t = sb + r;
        let qi = q0 + t / g;
        if (t < bq * g && qi < p.n_q) {
            let l = row_l[t];
            var x = 0.0;
            if (l > 0.0) {
                x = sc[sbase + r * SLD + c] / l;
            }
            out[(qi * p.n_heads + kvh * g + t % g) * HD + d0 + 16u * d + c] = x;
        }
    }
    workgroupBarrier();
}

// Writes the subgroup's unnormalised output tile for columns 16 d.. to this part's rows of
// `kv_part` (rows pb + sb ..).
fn emit_part(o: coop_mat16x16<f32, C>, d: u32, sbase: u32, sb: u32, lane: u32, pb: u32) {
    coopStoreT(o, &sc[sbase], SLD);
    workgroupBarrier();
    for (var e = lane; e < 256u; e += SG) {
        let r = e / 16u;
        let c = e % 16u;
        kv_part[(pb + sb + r) * (HD + 2u) + cm_d0 + 16u * d + c] = sc[sbase + r * SLD + c];
    }
    workgroupBarrier();
}

// The last part of a split tile: `out` (and out16) from the SPLIT parts at rows pb.. of `kv_part`,
// merged in part order: m = max of the parts' maxima, then sum and output weighted by
// exp(m_s - m), divided by the sum (0 where it is 0, as unsplit).
fn merge_parts(pb: u32, q0: u32, kvh: u32, g: u32, bq: u32, lid: u32) {
    for (var e = lid; e < NSG * 16u * (VD / 2u); e += WG) {
        let t = e / (VD / 2u);
        let c = cm_d0 + 2u * (e % (VD / 2u));
        let qi = q0 + t / g;
        if (t < bq * g && qi < p.n_q) {
            var m = FLOOR;
            for (var s = 0u; s < p.split; s++) {
                m = max(m, kv_part[(pb + s * NSG * 16u + t) * (HD + 2u) + HD]);
            }
            var l = 0.0;
            var x = vec2<f32>(0.0);
            for (var s = 0u; s < p.split; s++) {
                let r = (pb + s * NSG * 16u + t) * (HD + 2u);
                let w = exp(kv_part[r + HD] - m);
                l += kv_part[r + HD + 1u] * w;
                x += vec2<f32>(kv_part[r + c], kv_part[r + c + 1u]) * w;
            }
            if (l > 0.0) {
                x = x / l;
            } else {
                x = vec2<f32>(0.0);
            }
            let o = (qi * p.n_heads + kvh * g + t % g) * HD + c;
            out[o] = x.x;
            out[o + 1u] = x.y;
            if (HALF == 1u) {
                out16[o / 2u] = pack2x16float(x);
            }
        }
    }
}

// The unsplit epilogue: each output tile divided by the row sums.
fn finish(o0: coop_mat16x16<f32, C>, o1: coop_mat16x16<f32, C>, o2: coop_mat16x16<f32, C>,
          o3: coop_mat16x16<f32, C>, o4: coop_mat16x16<f32, C>, o5: coop_mat16x16<f32, C>,
          o6: coop_mat16x16<f32, C>, o7: coop_mat16x16<f32, C>, t: u32, l_run: f32, part: u32,
          sbase: u32, sb: u32, lane: u32, q0: u32, kvh: u32, g: u32, bq: u32) {
    if (part == 0u) {
        row_l[t] = l_run;
    }
    emit(o0, 0u, sbase, sb, lane, q0, kvh, g, bq);
    emit(o1, 1u, sbase, sb, lane, q0, kvh, g, bq);
    if (VD > 32u) {
        emit(o2, 2u, sbase, sb, lane, q0, kvh, g, bq);
    }
    if (VD > 48u) {
        emit(o3, 3u, sbase, sb, lane, q0, kvh, g, bq);
    }
    if (VD > 64u) {
        emit(o4, 4u, sbase, sb, lane, q0, kvh, g, bq);
    }
    if (VD > 80u) {
        emit(o5, 5u, sbase, sb, lane, q0, kvh, g, bq);
    }
    if (VD > 96u) {
        emit(o6, 6u, sbase, sb, lane, q0, kvh, g, bq);
    }
    if (VD > 112u) {
        emit(o7, 7u, sbase, sb, lane, q0, kvh, g, bq);
    }
}
