enable f16;
enable wgpu_cooperative_matrix;

// Prefill matrix-matrix product on cooperative matrices (VK_KHR_cooperative_matrix, subgroup
// scope, f16 x f16 -> f32 in 16 x 16 x 16 steps): Y[n, rows] (+)= X[n, cols] W^T, the same
// contract as `matmul.wgsl` and `mat_quant.wgsl`'s `matmul` (push constants n, rows, cols,
// row_offset, y_stride, accumulate; this dispatch writes Y columns [row_offset, row_offset +
// rows) of rows y_stride long).
//
// #append mat_quant.wgsl
// This file is compiled with `mat_quant.wgsl` appended (see `sources.rs`; build.rs honours the
// line above): it reuses that file's bindings (`w`, `x`, `y`), push constants (`p`) and
// block decoding (`dequant16`, `unit_block`, QTYPE/BLOCK/TS), so every llama.cpp format
// `mat_quant` reads is read here too, by the same code. Names below are prefixed `cm_`/`CM_`
// to stay clear of that file's.
//
// Tiling: a workgroup of CM_SGM x CM_SGN subgroups (SG invocations each: SG is the device's
// subgroup size, set from Rust) computes a BM x BN tile of Y (BM = CM_SGM * WM * 16 tokens,
// BN = CM_SGN * WN * 16 rows); each subgroup owns WM x WN accumulator tiles (f32). K is walked
// in steps of 32: the workgroup stages X[BM, 32] (f32 -> f16) and W[BN, 32] (any weight type ->
// f16: f16 copied, bf16/f32 rounded, quantized blocks dequantized by `dequant16`) in shared
// memory, zero-filled past n, rows and cols, then each subgroup multiplies 2 x WM A tiles by
// 2 x WN B tiles. Rows of the staged slices are padded to 40 halves (80 bytes: 16-byte aligned
// for the cooperative loads, and consecutive rows start in different banks).
// Epilogue: each accumulator tile goes through a per-subgroup 16 x 16 f32 scratch in shared
// memory and is written (bounds-checked, added to Y when accumulating) by the subgroup's
// invocations, so no alignment of y_stride or row_offset is needed.
//
// Shared memory: (BM + BN) * 40 * 2 bytes + CM_SGM * CM_SGN * 1 KiB (128 x 128 tile with
// 8 subgroups: 28 KiB; 64 x 64 with 4: 14 KiB).
// Precision: inputs are rounded to f16 (products exact in f32, sums in f32): X and W must be
// within f16 range (|v| < 65504); the Rust side documents the tolerance.
// DTYPE: 0 f32 weights, 1 f16, 2 bf16, 3 quantized (QTYPE/BLOCK/TS of mat_quant.wgsl).
// XVEC: 1 when cols % 4 == 0 (X staged 4 elements at a time), WVEC: 1 when weight rows are whole
// 16-byte words (f32: cols % 4 == 0; f16/bf16: cols % 8 == 0), staged 4 words at a time. (One
// entry point may not use two views of one binding, so these are 4 word loads, not a vec4 view.)

override SG: u32 = 32;
override CM_SGM: u32 = 2;
override CM_SGN: u32 = 4;
override WM: u32 = 2;
override WN: u32 = 2;
override DTYPE: u32 = 1;
override XVEC: u32 = 1;
override WVEC: u32 = 1;
override CM_WG: u32 = 256;

const CM_BK: u32 = 32u;
const CM_LD: u32 = 40u;

var<workgroup> cm_a: array<f16, 5120>; // [BM][CM_LD], BM <= 128
var<workgroup> cm_b: array<f16, 5120>; // [BN][CM_LD], BN <= 128
var<workgroup> cm_c: array<f32, 2048>; // [subgroup][16 x 16]

fn cm_bf16(word: u32, hi: bool) -> f32 {
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, hi));
}

// Stages X[m0 .. m0 + BM, k0 .. k0 + 32] as f16 (zero past n and cols).
fn cm_stage_x(lid: u32, m0: u32, k0: u32, bm: u32) {
    if (XVEC == 1u) {
        for (var i = lid; i < bm * 8u; i += CM_WG) {
            let mm = i / 8u;
            let kk = 4u * (i % 8u);
            var v = vec4<f32>(0.0);
            if (m0 + mm < p.n && k0 + kk < p.cols) {
                let e = (m0 + mm) * p.cols + k0 + kk;
                v = vec4<f32>(x[e], x[e + 1u], x[e + 2u], x[e + 3u]);
            }
            let o = mm * CM_LD + kk;
            let h = vec4<f16>(v);
            cm_a[o] = h.x;
            cm_a[o + 1u] = h.y;
            cm_a[o + 2u] = h.z;
            cm_a[o + 3u] = h.w;
        }
    } else {
        for (var i = lid; i < bm * CM_BK; i += CM_WG) {
            let mm = i / CM_BK;
            let kk = i % CM_BK;
            var v = 0.0;
            if (m0 + mm < p.n && k0 + kk < p.cols) {
                v = x[(m0 + mm) * p.cols + k0 + kk];
            }
            cm_a[mm * CM_LD + kk] = f16(v);
        }
    }
}

// One weight element (float types), as f32.
fn cm_w_elem(e: u32) -> f32 {
    if (DTYPE == 0u) {
        return bitcast<f32>(w[e]);
    }
    let word = w[e >> 1u];
    let odd = (e & 1u) == 1u;
    if (DTYPE == 1u) {
        let pair = unpack2x16float(word);
        return select(pair.x, pair.y, odd);
    }
    return cm_bf16(word, odd);
}

// Stages W[r0 .. r0 + BN, k0 .. k0 + 32] as f16 (zero past rows and cols).
fn cm_stage_w(lid: u32, r0: u32, k0: u32, bn: u32) {
    if (DTYPE == 3u) {
        // Quantized: one 16-element unit (same row, k0 / 16 + half) per invocation.
        let rb = (p.cols / BLOCK) * TS;
        for (var i = lid; i < bn * 2u; i += CM_WG) {
            let rr = i / 2u;
            let hf = i % 2u;
            let r = r0 + rr;
            let u = k0 / 16u + hf;
            var v: array<f32, 16>;
            if (r < p.rows && 16u * u < p.cols) {
                v = dequant16(unit_block(r * rb, u), u % (BLOCK / 16u));
            }
            let o = rr * CM_LD + 16u * hf;
            for (var j = 0u; j < 16u; j++) {
                cm_b[o + j] = f16(v[j]);
            }
        }
    } else if (WVEC == 1u && DTYPE == 0u) {
        // f32: 8 x 16 bytes per row.
        for (var i = lid; i < bn * 8u; i += CM_WG) {
            let rr = i / 8u;
            let kk = 4u * (i % 8u);
            var v = vec4<u32>(0u);
            if (r0 + rr < p.rows && k0 + kk < p.cols) {
                let e = (r0 + rr) * p.cols + k0 + kk;
                v = vec4<u32>(w[e], w[e + 1u], w[e + 2u], w[e + 3u]);
            }
            let o = rr * CM_LD + kk;
            let h = vec4<f16>(bitcast<vec4<f32>>(v));
            cm_b[o] = h.x;
            cm_b[o + 1u] = h.y;
            cm_b[o + 2u] = h.z;
            cm_b[o + 3u] = h.w;
        }
    } else if (WVEC == 1u) {
        // f16 / bf16: 4 x 16 bytes (8 elements each) per row.
        for (var i = lid; i < bn * 4u; i += CM_WG) {
            let rr = i / 4u;
            let kk = 8u * (i % 4u);
            var v = vec4<u32>(0u);
            if (r0 + rr < p.rows && k0 + kk < p.cols) {
                let e = ((r0 + rr) * p.cols + k0 + kk) / 2u;
                v = vec4<u32>(w[e], w[e + 1u], w[e + 2u], w[e + 3u]);
            }
            let o = rr * CM_LD + kk;
            for (var j = 0u; j < 4u; j++) {
                var lo: f16;
                var hi: f16;
                if (DTYPE == 1u) {
                    let pair = vec2<f16>(unpack2x16float(v[j]));
                    lo = pair.x;
                    hi = pair.y;
                } else {
                    lo = f16(cm_bf16(v[j], false));
                    hi = f16(cm_bf16(v[j], true));
                }
                cm_b[o + 2u * j] = lo;
                cm_b[o + 2u * j + 1u] = hi;
            }
        }
    } else {
        for (var i = lid; i < bn * CM_BK; i += CM_WG) {
            let rr = i / CM_BK;
            let kk = i % CM_BK;
            var v = 0.0;
            if (r0 + rr < p.rows && k0 + kk < p.cols) {
                v = cm_w_elem((r0 + rr) * p.cols + k0 + kk);
            }
            cm_b[rr * CM_LD + kk] = f16(v);
        }
    }
}

// Writes accumulator tile (i, j) of this subgroup (tokens m0 + 16 i.., rows r0 + 16 j..) to Y
// through the subgroup's scratch tile. Called in uniform control flow (it has barriers).
fn cm_out(c: coop_mat16x16<f32, C>, sg_id: u32, lane: u32, m0: u32, r0: u32) {
    let scratch = sg_id * 256u;
    coopStoreT(c, &cm_c[scratch], 16u);
    workgroupBarrier();
    for (var e = lane; e < 256u; e += SG) {
        let m = m0 + e / 16u;
        let r = r0 + e % 16u;
        if (m < p.n && r < p.rows) {
            let o = m * p.y_stride + p.row_offset + r;
            var v = cm_c[scratch + e];
            if (p.accumulate != 0u) {
                v += y[o];
            }
            y[o] = v;
        }
    }
    workgroupBarrier();
}

// The accumulators are named variables, not an array (an array indexed in loops may be kept in
// memory by a driver): up to 4 x 4 per subgroup, the unused ones (WM or WN = 2) dead code after
// specialisation.
@compute @workgroup_size(CM_WG)
fn matmul_coop(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(local_invocation_index) lid: u32,
               @builtin(subgroup_id) sg_id: u32,
               @builtin(subgroup_invocation_id) lane: u32) {
    let bm = CM_SGM * WM * 16u;
    let bn = CM_SGN * WN * 16u;
    let r0 = wid.x * bn;
    let m0 = wid.y * bm;
    // This subgroup's tiles: tokens [sm, sm + 16 WM), rows [sn, sn + 16 WN) of the block.
    let sm = (sg_id / CM_SGN) * WM * 16u;
    let sn = (sg_id % CM_SGN) * WN * 16u;
    var c00: coop_mat16x16<f32, C>;
    var c01: coop_mat16x16<f32, C>;
    var c02: coop_mat16x16<f32, C>;
    var c03: coop_mat16x16<f32, C>;
    var c10: coop_mat16x16<f32, C>;
    var c11: coop_mat16x16<f32, C>;
    var c12: coop_mat16x16<f32, C>;
    var c13: coop_mat16x16<f32, C>;
    var c20: coop_mat16x16<f32, C>;
    var c21: coop_mat16x16<f32, C>;
    var c22: coop_mat16x16<f32, C>;
    var c23: coop_mat16x16<f32, C>;
    var c30: coop_mat16x16<f32, C>;
    var c31: coop_mat16x16<f32, C>;
    var c32: coop_mat16x16<f32, C>;
    var c33: coop_mat16x16<f32, C>;
    for (var k0 = 0u; k0 < p.cols; k0 += CM_BK) {
        cm_stage_x(lid, m0, k0, bm);
        cm_stage_w(lid, r0, k0, bn);
        workgroupBarrier();
        for (var kk = 0u; kk < CM_BK; kk += 16u) {
            let pa = sm * CM_LD + kk;
            let pb = sn * CM_LD + kk;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&cm_a[pa], CM_LD);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&cm_a[pa + 16u * CM_LD], CM_LD);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&cm_b[pb], CM_LD);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&cm_b[pb + 16u * CM_LD], CM_LD);
            var a2: coop_mat16x16<f16, A>;
            var a3: coop_mat16x16<f16, A>;
            var b2: coop_mat16x16<f16, B>;
            var b3: coop_mat16x16<f16, B>;
            if (WM > 2u) {
                a2 = coopLoadT<coop_mat16x16<f16, A>>(&cm_a[pa + 32u * CM_LD], CM_LD);
                a3 = coopLoadT<coop_mat16x16<f16, A>>(&cm_a[pa + 48u * CM_LD], CM_LD);
            }
            if (WN > 2u) {
                b2 = coopLoad<coop_mat16x16<f16, B>>(&cm_b[pb + 32u * CM_LD], CM_LD);
                b3 = coopLoad<coop_mat16x16<f16, B>>(&cm_b[pb + 48u * CM_LD], CM_LD);
            }
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            if (WN > 2u) {
                c02 = coopMultiplyAdd(a0, b2, c02);
                c03 = coopMultiplyAdd(a0, b3, c03);
                c12 = coopMultiplyAdd(a1, b2, c12);
                c13 = coopMultiplyAdd(a1, b3, c13);
            }
            if (WM > 2u) {
                c20 = coopMultiplyAdd(a2, b0, c20);
                c21 = coopMultiplyAdd(a2, b1, c21);
                c30 = coopMultiplyAdd(a3, b0, c30);
                c31 = coopMultiplyAdd(a3, b1, c31);
                if (WN > 2u) {
                    c22 = coopMultiplyAdd(a2, b2, c22);
                    c23 = coopMultiplyAdd(a2, b3, c23);
                    c32 = coopMultiplyAdd(a3, b2, c32);
                    c33 = coopMultiplyAdd(a3, b3, c33);
                }
            }
        }
        workgroupBarrier();
    }
    let mb = m0 + sm;
    let rb = r0 + sn;
    cm_out(c00, sg_id, lane, mb, rb);
    cm_out(c01, sg_id, lane, mb, rb + 16u);
    cm_out(c10, sg_id, lane, mb + 16u, rb);
    cm_out(c11, sg_id, lane, mb + 16u, rb + 16u);
    if (WN > 2u) {
        cm_out(c02, sg_id, lane, mb, rb + 32u);
        cm_out(c03, sg_id, lane, mb, rb + 48u);
        cm_out(c12, sg_id, lane, mb + 16u, rb + 32u);
        cm_out(c13, sg_id, lane, mb + 16u, rb + 48u);
    }
    if (WM > 2u) {
        cm_out(c20, sg_id, lane, mb + 32u, rb);
        cm_out(c21, sg_id, lane, mb + 32u, rb + 16u);
        cm_out(c30, sg_id, lane, mb + 48u, rb);
        cm_out(c31, sg_id, lane, mb + 48u, rb + 16u);
        if (WN > 2u) {
            cm_out(c22, sg_id, lane, mb + 32u, rb + 32u);
            cm_out(c23, sg_id, lane, mb + 32u, rb + 48u);
            cm_out(c32, sg_id, lane, mb + 48u, rb + 32u);
            cm_out(c33, sg_id, lane, mb + 48u, rb + 48u);
        }
    }
}
