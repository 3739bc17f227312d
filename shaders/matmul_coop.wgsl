enable f16;
enable wgpu_cooperative_matrix;
// The direct epilogue (CM_DIRECT) loads and stores Y tiles with cooperative operations under a
// condition on the segment's rows and strides: uniform over the workgroup (it follows from the
// workgroup id and push constants), but held in private variables, which naga takes as
// non-uniform; its uniformity check is off for this file.
diagnostic(off, derivative_uniformity);

// Prefill matrix-matrix product on cooperative matrices (VK_KHR_cooperative_matrix, subgroup
// scope, f16 x f16 -> f32 in 16 x 16 x 16 steps): Y[n, rows] (+)= X[n, cols] W^T, the same
// contract as `matmul.wgsl` and `mat_quant.wgsl`'s `matmul` (push constants n, rows, cols,
// row_offset, y_stride, accumulate; this dispatch writes Y columns [row_offset, row_offset +
// rows) of rows y_stride long).
//
// #include quant_blocks.inc.wgsl
// #include quant_words.inc.wgsl
// #include matmul_coop_out.inc.wgsl
// Quantized blocks are decoded by `dequant16` of quant_blocks.inc.wgsl (the code every
// quantized kernel shares; QTYPE/BLOCK/TS), through this file's `wd` (quant_words.inc.wgsl's
// `load16` and `unit_block`).
// Segments (SEGS = 2 or 3): one launch multiplies the same X by up to three weights of one type
// and width (q/k/v of a layer): W segment s is binding `w` / `w1` / `w2` with its own rows, Y
// (`y` / `y1` / `y2`), row_offset and y_stride (push constants); the grid's x runs over the
// segments' workgroup columns one after the other (ceil(rows_s / BN) each), so every workgroup
// reads one weight (a uniform branch per load). SEGS = 1: `w` and `y` only (the others are
// bound but never read). (Loads are 4 word loads at 16-byte aligned indices, written so a
// driver can merge them.)
//
// Tiling: a workgroup of CM_SGM x CM_SGN subgroups (SG invocations each: SG is the device's
// subgroup size, set from Rust) computes a BM x BN tile of Y (BM = CM_SGM * WM * 16 tokens,
// BN = CM_SGN * WN * 16 rows, each <= 128); each subgroup owns WM x WN (2 or 4 each)
// accumulator tiles (f32). K is walked in steps of CM_BK (32 or 64) through two shared-memory
// stages: while the subgroups multiply the slices of one stage (CM_BK / 16 x WM A tiles by
// CM_BK / 16 x WN B tiles), the next X[BM, CM_BK] (f32 -> f16) and W[BN, CM_BK] (any weight
// type -> f16: f16 copied, bf16/f32 rounded, quantized blocks dequantized by `dequant16`) go
// into the other, zero-filled past n, rows and cols; one barrier per step. Float data for the
// next step is loaded into registers before the multiplications and stored after them, so the
// loads' latency overlaps the math (at most 8 16-byte slots per invocation each for X and W:
// Rust checks the tiling against the workgroup; quantized data too, dequantized, with
// QPRE > 0). Staged rows are CM_LDV = CM_BK / 4 + 2 vec4<f16> (CM_BK + 8 halves): 16-byte
// aligned for the cooperative loads, and 8 consecutive rows start in different banks.
// Split-K (SPLIT > 1): workgroup z of the grid walks only its share of K (whole CM_BK steps,
// ceil(steps / SPLIT) each; a share past cols is empty and contributes zeros), stores its f32
// partial tile to `cm_part` and counts itself in on the tile's counter; the last of the SPLIT
// workgroups of a tile resets the counter to 0 and writes Y from the SPLIT partials summed in
// split order (deterministic whatever order the workgroups ran in). Ordering as
// attention_fused.wgsl (the CUB "last block" pattern): partial stores; storageBarrier() (release
// for every invocation's stores); invocation 0's atomicAdd; storageBarrier() (acquire) in the
// last workgroup, then its reads; `cm_part` is Coherent. The counters must be zero before the
// first dispatch (the caller zeroes them once); a dispatch that completes leaves them zero.
// cm_part: [tile][split][subgroup][WM * WN][256] f32 (tile = wid.y * groups_x + wid.x);
// cm_ctr: one u32 per tile. With SPLIT = 1 both are bound but never touched.
// Epilogue (unless direct: CM_DIRECT): each accumulator tile goes through a per-subgroup 16 x 16
// f32 scratch in shared memory and is written (bounds-checked, added to Y when accumulating) by
// the subgroup's invocations, so no alignment of y_stride or row_offset is needed.
//
// Shared memory: 2 stages x 2 x 128 x 80 bytes + 8 x 1 KiB scratch = 48 KiB, whatever the
// tiling; K step 64 (rows of 144 bytes) fits tilings of up to 64 x 64 in the same arrays with
// two stages, up to 128 x 128 with one (CM_STAGES; `CoopConfig::fits`).
// Precision: inputs are rounded to f16 (products exact in f32, sums in f32): X and W must be
// within f16 range (|v| < 65504); the Rust side documents the tolerance.
// DTYPE: 0 f32 weights, 1 f16, 2 bf16, 3 quantized (QTYPE/BLOCK/TS of quant_blocks.inc.wgsl).
// XVEC: 1 when cols % 4 == 0 (X rows are whole 16-byte words); WVEC: 1 when weight rows are
// (f32: cols % 4 == 0; f16/bf16: cols % 8 == 0). Otherwise every element is bounds-checked.
// XH: 1 when X holds f16, two per word (`to_f16.wgsl`; Rust requires cols % 8 == 0, so rows are
// whole 16-byte slots of 8 halves): half the bytes per slice and half the prefetch registers
// (fewer registers, faster; docs/benchmarks-history.md). The slots then carry raw words
// (bitcast into the vec4<f32> registers) and are unpacked when staged.

override SG: u32 = 32;
override CM_SGM: u32 = 2;
override CM_SGN: u32 = 4;
override WM: u32 = 4;
override WN: u32 = 2;
override DTYPE: u32 = 1;
override XVEC: u32 = 1;
override WVEC: u32 = 1;
override CM_WG: u32 = 256;
override CM_BK: u32 = 32;
override SPLIT: u32 = 1;
// Shared-memory stages: 2 (double buffering, one barrier per step) or 1 (the next slice is
// stored after a second barrier: half the shared memory, so K step 64 fits 128-row tiles).
override CM_STAGES: u32 = 2;
// Quantized W: units per invocation and slice dequantized into registers before the
// multiplications and stored after them, like the float slots (1 or 2: Rust sets it when the
// slice's units divide evenly), or 0: dequantized and stored after the multiplications.
override QPRE: u32 = 0;
// vec4<f16> per staged row (CM_BK / 4 + 2) and per stage of A and of B (Rust: 128 x CM_LDV
// at K step 32, the layout of the original kernel; BM x CM_LDV and BN x CM_LDV otherwise).
override CM_LDV: u32 = 10;
override CM_SA: u32 = 1280;
override CM_SB: u32 = 1280;
override XH: u32 = 0;

override SEGS: u32 = 1;
// Direct epilogue (1): a workgroup whose whole BM x BN tile lies inside Y with y_stride and
// row_offset multiples of 4 (16-byte aligned rows) stores its accumulators with cooperative
// stores straight into Y, and when accumulating starts them from a cooperative load of Y instead
// of zero; with split-K the last workgroup of such a tile sums the partials with cooperative
// loads (in split order, then Y) and stores them the same way. Other workgroups take the scratch
// path (`cm_out`, `cm_reduce`). 0: scratch path only.
override CM_DIRECT: u32 = 0;
// Gated epilogue (GLU: 1 SiLU, 2 GELU with the tanh approximation; SEGS = 2, SPLIT = 1, float
// weights): y = act(X W^T) * (X W1^T) for the gate `w` and up `w1`, p.rows rows each. A
// workgroup's BN staged rows interleave them in groups of 16 (gate rows g..g + 16, the same up
// rows, the next 16 gate rows, ..), so each subgroup's accumulator tiles (i, 2j) and (i, 2j + 1)
// hold the gate and up values of the same outputs (`cm_glu_out`). GLU_HALF = 1 also writes the
// output as f16 pairs to `yh` (to_f16.wgsl's layout; y_stride = rows, even, row_offset 0).
override GLU: u32 = 0;
override GLU_HALF: u32 = 0;

struct Params {
    n: u32,
    rows: u32,
    cols: u32,
    row_offset: u32,
    y_stride: u32,
    accumulate: u32,
    // Segments 1 and 2 (SEGS > 1): rows, row_offset and y_stride of each.
    rows1: u32,
    row_offset1: u32,
    y_stride1: u32,
    rows2: u32,
    row_offset2: u32,
    y_stride2: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@coherent @group(0) @binding(3) var<storage, read_write> cm_part: array<f32>;
@group(0) @binding(4) var<storage, read_write> cm_ctr: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read> w1: array<u32>;
@group(0) @binding(6) var<storage, read> w2: array<u32>;
@group(0) @binding(7) var<storage, read_write> y1: array<f32>;
@group(0) @binding(8) var<storage, read_write> y2: array<f32>;
@group(0) @binding(9) var<storage, read_write> yh: array<u32>;

// This workgroup's segment (uniform: set once from the workgroup id) and its rows, row_offset
// and y_stride.
var<private> cm_seg: u32;
var<private> cm_rows: u32;
var<private> cm_roff: u32;
var<private> cm_ys: u32;

// Word i of this workgroup's weight: the interface of quant_blocks.inc.wgsl.
fn wd(i: u32) -> u32 {
    if (SEGS == 1u || cm_seg == 0u) {
        return w[i];
    }
    if (cm_seg == 1u) {
        return w1[i];
    }
    return w2[i];
}

// Element o of this workgroup's Y.
fn cm_y(o: u32) -> f32 {
    if (SEGS == 1u || cm_seg == 0u) {
        return y[o];
    }
    if (cm_seg == 1u) {
        return y1[o];
    }
    return y2[o];
}

fn cm_y_set(o: u32, v: f32) {
    if (SEGS == 1u || cm_seg == 0u) {
        y[o] = v;
    } else if (cm_seg == 1u) {
        y1[o] = v;
    } else {
        y2[o] = v;
    }
}

// (Fixed lengths: naga 30's process_overrides fails on override-sized arrays in this module.)
var<workgroup> cm_a: array<vec4<f16>, 2560>; // [stage][BM][CM_LDV]
var<workgroup> cm_b: array<vec4<f16>, 2560>; // [stage][BN][CM_LDV]
var<workgroup> cm_c: array<f32, 2048>; // [subgroup][16 x 16]

fn cm_bf16(word: u32, hi: bool) -> f32 {
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, hi));
}

// 16-byte slots per staged row of X (and of f32 W).
fn cm_xs() -> u32 {
    return CM_BK / 4u;
}

// 16-byte slots per staged row of X as read: cm_xs(), or half as many of f16 X (XH).
fn cm_xr() -> u32 {
    return select(CM_BK / 4u, CM_BK / 8u, XH == 1u);
}

// Slot i of the X slice at k0: row i / cm_xr(), elements 4 (i % cm_xr()) .. + 4 (zero past n
// and cols); with XH, elements 8 (i % cm_xr()) .. + 8 as four raw words.
fn cm_load_x(i: u32, m0: u32, k0: u32) -> vec4<f32> {
    let m = m0 + i / cm_xr();
    var v = vec4<f32>(0.0);
    if (XH == 1u) {
        let kh = k0 + 8u * (i % cm_xr());
        if (m < p.n && kh < p.cols) {
            let e = (m * p.cols + kh) / 2u;
            v = vec4<f32>(x[e], x[e + 1u], x[e + 2u], x[e + 3u]);
        }
        return v;
    }
    let k = k0 + 4u * (i % cm_xs());
    if (m < p.n) {
        if (XVEC == 1u) {
            if (k < p.cols) {
                let e = 4u * (m * (p.cols / 4u) + k / 4u);
                v = vec4<f32>(x[e], x[e + 1u], x[e + 2u], x[e + 3u]);
            }
        } else {
            let e = m * p.cols + k;
            for (var j = 0u; j < 4u; j++) {
                if (k + j < p.cols) {
                    v[j] = x[e + j];
                }
            }
        }
    }
    return v;
}

fn cm_put_x(stage: u32, i: u32, v: vec4<f32>) {
    if (XH == 1u) {
        let u = bitcast<vec4<u32>>(v);
        let o = stage * CM_SA + (i / cm_xr()) * CM_LDV + 2u * (i % cm_xr());
        cm_a[o] = vec4<f16>(vec4<f32>(unpack2x16float(u.x), unpack2x16float(u.y)));
        cm_a[o + 1u] = vec4<f16>(vec4<f32>(unpack2x16float(u.z), unpack2x16float(u.w)));
        return;
    }
    cm_a[stage * CM_SA + (i / cm_xs()) * CM_LDV + i % cm_xs()] = vec4<f16>(v);
}

// Staged row lr of the W slice of a workgroup whose rows start at r0: its weight row and which
// weight it is in (GLU: gate 0 or up 1, in alternating groups of 16; else this segment's).
fn cm_wrow(r0: u32, lr: u32) -> vec2<u32> {
    if (GLU != 0u) {
        return vec2<u32>(r0 / 2u + (lr / 32u) * 16u + lr % 16u, (lr / 16u) % 2u);
    }
    return vec2<u32>(r0 + lr, cm_seg);
}

// Word i of float weight `seg` (GLU) or of this workgroup's weight (`wd`).
fn cm_wd(seg: u32, i: u32) -> u32 {
    if (GLU != 0u) {
        if (seg == 0u) {
            return w[i];
        }
        return w1[i];
    }
    return wd(i);
}

// Elements per 16-byte slot of W (float types).
fn cm_w_per_slot() -> u32 {
    return select(8u, 4u, DTYPE == 0u);
}

// Slot i of the W slice at k0 (float types) as raw words: f32 rows i / (CM_BK / 4), elements
// 4 (i % (CM_BK / 4)) .. + 4; 16-bit rows i / (CM_BK / 8), elements 8 (i % (CM_BK / 8)) .. + 8
// (zero past rows and cols).
fn cm_load_w(i: u32, r0: u32, k0: u32) -> vec4<u32> {
    let per = cm_w_per_slot();
    let spr = CM_BK / per;
    let wr = cm_wrow(r0, i / spr);
    let r = wr.x;
    let k = k0 + per * (i % spr);
    var v = vec4<u32>(0u);
    if (r < cm_rows) {
        if (WVEC == 1u) {
            if (k < p.cols) {
                let e = 4u * (r * (p.cols / per) + k / per);
                v = vec4<u32>(cm_wd(wr.y, e), cm_wd(wr.y, e + 1u), cm_wd(wr.y, e + 2u),
                              cm_wd(wr.y, e + 3u));
            }
        } else {
            // f32: one element per word; 16-bit: two (cols is even, so a pair is all in or out).
            let epw = select(2u, 1u, DTYPE == 0u);
            let e = (r * p.cols + k) / epw;
            for (var j = 0u; j < 4u; j++) {
                if (k + epw * j < p.cols) {
                    v[j] = cm_wd(wr.y, e + j);
                }
            }
        }
    }
    return v;
}

fn cm_put_w(stage: u32, i: u32, v: vec4<u32>) {
    let base = stage * CM_SB;
    if (DTYPE == 0u) {
        cm_b[base + (i / cm_xs()) * CM_LDV + i % cm_xs()] = vec4<f16>(bitcast<vec4<f32>>(v));
        return;
    }
    var lo: vec4<f32>;
    var hi: vec4<f32>;
    if (DTYPE == 1u) {
        lo = vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y));
        hi = vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w));
    } else {
        lo = vec4<f32>(cm_bf16(v.x, false), cm_bf16(v.x, true), cm_bf16(v.y, false),
                       cm_bf16(v.y, true));
        hi = vec4<f32>(cm_bf16(v.z, false), cm_bf16(v.z, true), cm_bf16(v.w, false),
                       cm_bf16(v.w, true));
    }
    let spr = CM_BK / 8u;
    let o = base + (i / spr) * CM_LDV + 2u * (i % spr);
    cm_b[o] = vec4<f16>(lo);
    cm_b[o + 1u] = vec4<f16>(hi);
}

// Quantized W slice at k0 into `stage`: one 16-element unit (row u / (CM_BK / 16), unit
// u % (CM_BK / 16) of the slice) per invocation and round; units past rows or cols are zero.
fn cm_put_wq(stage: u32, lid: u32, r0: u32, k0: u32, bn: u32) {
    let rb = (p.cols / BLOCK) * TS;
    let upr = CM_BK / 16u;
    for (var i = lid; i < bn * upr; i += CM_WG) {
        let r = r0 + i / upr;
        let u = k0 / 16u + i % upr;
        var v: array<f32, 16>;
        if (r < cm_rows && 16u * u < p.cols) {
            v = dequant16(unit_block(r * rb, u), u % (BLOCK / 16u));
        }
        let o = stage * CM_SB + (i / upr) * CM_LDV + 4u * (i % upr);
        for (var q = 0u; q < 4u; q++) {
            cm_b[o + q] = vec4<f16>(vec4<f32>(v[4u * q], v[4u * q + 1u], v[4u * q + 2u],
                                              v[4u * q + 3u]));
        }
    }
}

// Unit j of the quantized W slice at k0 (row j / (CM_BK / 16), unit j % (CM_BK / 16) of the
// slice) dequantized to f16 (zero past rows or cols), for `cm_put_wqh`.
fn cm_load_wq(j: u32, r0: u32, k0: u32) -> array<vec4<f16>, 4> {
    let rb = (p.cols / BLOCK) * TS;
    let upr = CM_BK / 16u;
    let r = r0 + j / upr;
    let u = k0 / 16u + j % upr;
    var v: array<f32, 16>;
    if (r < cm_rows && 16u * u < p.cols) {
        v = dequant16(unit_block(r * rb, u), u % (BLOCK / 16u));
    }
    var h: array<vec4<f16>, 4>;
    for (var q = 0u; q < 4u; q++) {
        h[q] = vec4<f16>(vec4<f32>(v[4u * q], v[4u * q + 1u], v[4u * q + 2u], v[4u * q + 3u]));
    }
    return h;
}

fn cm_put_wqh(stage: u32, j: u32, h: array<vec4<f16>, 4>) {
    let upr = CM_BK / 16u;
    let o = stage * CM_SB + (j / upr) * CM_LDV + 4u * (j % upr);
    for (var q = 0u; q < 4u; q++) {
        cm_b[o + q] = h[q];
    }
}

// Selects the segment of workgroup column `wx` (tiles `bn` rows wide): sets cm_seg, cm_rows,
// cm_roff and cm_ys, and returns the column within the segment (its rows start at gx * bn).
fn cm_segment(wx: u32, bn: u32) -> u32 {
    cm_seg = 0u;
    cm_rows = p.rows;
    cm_roff = p.row_offset;
    cm_ys = p.y_stride;
    var gx = wx;
    let g0 = (p.rows + bn - 1u) / bn;
    if (SEGS > 1u && GLU == 0u && gx >= g0) {
        gx -= g0;
        cm_seg = 1u;
        cm_rows = p.rows1;
        cm_roff = p.row_offset1;
        cm_ys = p.y_stride1;
        let g1 = (p.rows1 + bn - 1u) / bn;
        if (SEGS > 2u && gx >= g1) {
            gx -= g1;
            cm_seg = 2u;
            cm_rows = p.rows2;
            cm_roff = p.row_offset2;
            cm_ys = p.y_stride2;
        }
    }
    return gx;
}

// The epilogue, in uniform control flow: this subgroup's accumulators (its tiles start at token
// mb, row rb) go to Y, or with split-K to its partials, and the last workgroup of a tile sums
// them.
fn cm_finish(c00: coop_mat16x16<f32, C>, c01: coop_mat16x16<f32, C>, c02: coop_mat16x16<f32, C>,
             c03: coop_mat16x16<f32, C>, c10: coop_mat16x16<f32, C>, c11: coop_mat16x16<f32, C>,
             c12: coop_mat16x16<f32, C>, c13: coop_mat16x16<f32, C>, c20: coop_mat16x16<f32, C>,
             c21: coop_mat16x16<f32, C>, c22: coop_mat16x16<f32, C>, c23: coop_mat16x16<f32, C>,
             c30: coop_mat16x16<f32, C>, c31: coop_mat16x16<f32, C>, c32: coop_mat16x16<f32, C>,
             c33: coop_mat16x16<f32, C>, wid: vec3<u32>, nwg: vec3<u32>, lid: u32, sg_id: u32,
             lane: u32, mb: u32, rb: u32) {
    if (GLU != 0u) {
        cm_glu_finish(c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32,
                      c33, sg_id, lane, mb, rb);
        return;
    }
    if (SPLIT > 1u) {
        // Store this split's partials, release them, count in; the last workgroup sums.
        let tile = wid.y * nwg.x + wid.x;
        let pb = cm_part_base(tile, wid.z, sg_id);
        coopStoreT(c00, &cm_part[pb], 16u);
        coopStoreT(c01, &cm_part[pb + 256u], 16u);
        coopStoreT(c10, &cm_part[pb + WN * 256u], 16u);
        coopStoreT(c11, &cm_part[pb + (WN + 1u) * 256u], 16u);
        if (WN > 2u) {
            coopStoreT(c02, &cm_part[pb + 2u * 256u], 16u);
            coopStoreT(c03, &cm_part[pb + 3u * 256u], 16u);
            coopStoreT(c12, &cm_part[pb + (WN + 2u) * 256u], 16u);
            coopStoreT(c13, &cm_part[pb + (WN + 3u) * 256u], 16u);
        }
        if (WM > 2u) {
            coopStoreT(c20, &cm_part[pb + 2u * WN * 256u], 16u);
            coopStoreT(c21, &cm_part[pb + (2u * WN + 1u) * 256u], 16u);
            coopStoreT(c30, &cm_part[pb + 3u * WN * 256u], 16u);
            coopStoreT(c31, &cm_part[pb + (3u * WN + 1u) * 256u], 16u);
            if (WN > 2u) {
                coopStoreT(c22, &cm_part[pb + (2u * WN + 2u) * 256u], 16u);
                coopStoreT(c23, &cm_part[pb + (2u * WN + 3u) * 256u], 16u);
                coopStoreT(c32, &cm_part[pb + (3u * WN + 2u) * 256u], 16u);
                coopStoreT(c33, &cm_part[pb + (3u * WN + 3u) * 256u], 16u);
            }
        }
        storageBarrier();
        if (lid == 0u) {
            let before = atomicAdd(&cm_ctr[tile], 1u);
            // cm_c is free here (the split epilogue does not use it): its first word flags
            // the last workgroup.
            cm_c[0] = select(0.0, 1.0, before == SPLIT - 1u);
        }
        storageBarrier();
        if (workgroupUniformLoad(&cm_c[0]) == 0.0) {
            return;
        }
        if (lid == 0u) {
            atomicStore(&cm_ctr[tile], 0u);
        }
        if (cm_direct(mb - mb % (CM_SGM * WM * 16u), rb - rb % (CM_SGN * WN * 16u))) {
            for (var t = 0u; t < WM * WN; t++) {
                cm_reduce_direct(tile, sg_id, t, mb + 16u * (t / WN), rb + 16u * (t % WN));
            }
            return;
        }
        for (var t = 0u; t < WM * WN; t++) {
            cm_reduce(tile, sg_id, lane, t, mb + 16u * (t / WN), rb + 16u * (t % WN));
        }
        return;
    }
    if (SPLIT == 1u && cm_direct(mb - mb % (CM_SGM * WM * 16u), rb - rb % (CM_SGN * WN * 16u))) {
        cm_store_y(c00, mb, rb);
        cm_store_y(c01, mb, rb + 16u);
        cm_store_y(c10, mb + 16u, rb);
        cm_store_y(c11, mb + 16u, rb + 16u);
        if (WN > 2u) {
            cm_store_y(c02, mb, rb + 32u);
            cm_store_y(c03, mb, rb + 48u);
            cm_store_y(c12, mb + 16u, rb + 32u);
            cm_store_y(c13, mb + 16u, rb + 48u);
        }
        if (WM > 2u) {
            cm_store_y(c20, mb + 32u, rb);
            cm_store_y(c21, mb + 32u, rb + 16u);
            cm_store_y(c30, mb + 48u, rb);
            cm_store_y(c31, mb + 48u, rb + 16u);
            if (WN > 2u) {
                cm_store_y(c22, mb + 32u, rb + 32u);
                cm_store_y(c23, mb + 32u, rb + 48u);
                cm_store_y(c32, mb + 48u, rb + 32u);
                cm_store_y(c33, mb + 48u, rb + 48u);
            }
        }
        return;
    }
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

// The prefetch registers of an invocation (named, not an array: an array indexed in loops
// may be kept in memory by a driver): up to 8 slots each of X and float W, or 2 dequantized units
// of quantized W (QPRE).
var<private> cm_x0: vec4<f32>;
var<private> cm_x1: vec4<f32>;
var<private> cm_x2: vec4<f32>;
var<private> cm_x3: vec4<f32>;
var<private> cm_x4: vec4<f32>;
var<private> cm_x5: vec4<f32>;
var<private> cm_x6: vec4<f32>;
var<private> cm_x7: vec4<f32>;
var<private> cm_w0: vec4<u32>;
var<private> cm_w1: vec4<u32>;
var<private> cm_w2: vec4<u32>;
var<private> cm_w3: vec4<u32>;
var<private> cm_w4: vec4<u32>;
var<private> cm_w5: vec4<u32>;
var<private> cm_w6: vec4<u32>;
var<private> cm_w7: vec4<u32>;
var<private> cm_q0: array<vec4<f16>, 4>;
var<private> cm_q1: array<vec4<f16>, 4>;

// Slots per invocation of the X slice: 1..8 (Rust checks the tiling against the workgroup).
fn cm_nx() -> u32 {
    return CM_SGM * WM * 16u * cm_xr() / CM_WG;
}

// Slots per invocation of a float W slice: 1..8.
fn cm_nw() -> u32 {
    return CM_SGN * WN * 16u * (CM_BK / cm_w_per_slot()) / CM_WG;
}

// Loads invocation sl's slots (sl, sl + CM_WG, ..) of the slices at k0 into the prefetch
// registers (quantized W: its QPRE units, dequantized).
fn cm_fetch(sl: u32, m0: u32, r0: u32, k0: u32) {
    let g = CM_WG;
    let nx = cm_nx();
    let nw = cm_nw();
    cm_x0 = cm_load_x(sl, m0, k0);
    if (nx > 1u) { cm_x1 = cm_load_x(sl + g, m0, k0); }
    if (nx > 2u) { cm_x2 = cm_load_x(sl + 2u * g, m0, k0); }
    if (nx > 3u) { cm_x3 = cm_load_x(sl + 3u * g, m0, k0); }
    if (nx > 4u) { cm_x4 = cm_load_x(sl + 4u * g, m0, k0); }
    if (nx > 5u) { cm_x5 = cm_load_x(sl + 5u * g, m0, k0); }
    if (nx > 6u) { cm_x6 = cm_load_x(sl + 6u * g, m0, k0); }
    if (nx > 7u) { cm_x7 = cm_load_x(sl + 7u * g, m0, k0); }
    if (DTYPE != 3u) {
        cm_w0 = cm_load_w(sl, r0, k0);
        if (nw > 1u) { cm_w1 = cm_load_w(sl + g, r0, k0); }
        if (nw > 2u) { cm_w2 = cm_load_w(sl + 2u * g, r0, k0); }
        if (nw > 3u) { cm_w3 = cm_load_w(sl + 3u * g, r0, k0); }
        if (nw > 4u) { cm_w4 = cm_load_w(sl + 4u * g, r0, k0); }
        if (nw > 5u) { cm_w5 = cm_load_w(sl + 5u * g, r0, k0); }
        if (nw > 6u) { cm_w6 = cm_load_w(sl + 6u * g, r0, k0); }
        if (nw > 7u) { cm_w7 = cm_load_w(sl + 7u * g, r0, k0); }
    } else if (QPRE > 0u) {
        cm_q0 = cm_load_wq(sl, r0, k0);
        if (QPRE > 1u) { cm_q1 = cm_load_wq(sl + g, r0, k0); }
    }
}

// Stores invocation sl's prefetch registers (the slices at k0) into `stage`; quantized W
// without QPRE is dequantized and stored here.
fn cm_stash(stage: u32, sl: u32, r0: u32, k0: u32) {
    let g = CM_WG;
    let nx = cm_nx();
    let nw = cm_nw();
    cm_put_x(stage, sl, cm_x0);
    if (nx > 1u) { cm_put_x(stage, sl + g, cm_x1); }
    if (nx > 2u) { cm_put_x(stage, sl + 2u * g, cm_x2); }
    if (nx > 3u) { cm_put_x(stage, sl + 3u * g, cm_x3); }
    if (nx > 4u) { cm_put_x(stage, sl + 4u * g, cm_x4); }
    if (nx > 5u) { cm_put_x(stage, sl + 5u * g, cm_x5); }
    if (nx > 6u) { cm_put_x(stage, sl + 6u * g, cm_x6); }
    if (nx > 7u) { cm_put_x(stage, sl + 7u * g, cm_x7); }
    if (DTYPE != 3u) {
        cm_put_w(stage, sl, cm_w0);
        if (nw > 1u) { cm_put_w(stage, sl + g, cm_w1); }
        if (nw > 2u) { cm_put_w(stage, sl + 2u * g, cm_w2); }
        if (nw > 3u) { cm_put_w(stage, sl + 3u * g, cm_w3); }
        if (nw > 4u) { cm_put_w(stage, sl + 4u * g, cm_w4); }
        if (nw > 5u) { cm_put_w(stage, sl + 5u * g, cm_w5); }
        if (nw > 6u) { cm_put_w(stage, sl + 6u * g, cm_w6); }
        if (nw > 7u) { cm_put_w(stage, sl + 7u * g, cm_w7); }
    } else if (QPRE > 0u) {
        cm_put_wqh(stage, sl, cm_q0);
        if (QPRE > 1u) { cm_put_wqh(stage, sl + g, cm_q1); }
    } else {
        cm_put_wq(stage, sl, r0, k0, CM_SGN * WN * 16u);
    }
}

// The accumulators are named variables, not an array (an array indexed in loops may be kept in
// memory by a driver): up to 4 x 4 per subgroup, the unused ones (WM or WN = 2) dead code after
// specialisation.
@compute @workgroup_size(CM_WG)
fn matmul_coop(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32,
               @builtin(subgroup_id) sg_id: u32,
               @builtin(subgroup_invocation_id) lane: u32) {
    let bm = CM_SGM * WM * 16u;
    let bn = CM_SGN * WN * 16u;
    let gx = cm_segment(wid.x, bn);
    let r0 = gx * bn;
    let m0 = wid.y * bm;
    // This subgroup's tiles: tokens [sm, sm + 16 WM), rows [sn, sn + 16 WN) of the block.
    let sm = (sg_id / CM_SGN) * WM * 16u;
    let sn = (sg_id % CM_SGN) * WN * 16u;
    // This workgroup's share of K: [kb, ke), whole CM_BK steps (all of K without split-K).
    let steps = (p.cols + CM_BK - 1u) / CM_BK;
    let share = (steps + SPLIT - 1u) / SPLIT;
    let kb = min(wid.z * share, steps) * CM_BK;
    let ke = min(kb + share * CM_BK, p.cols);
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
    if (SPLIT == 1u && p.accumulate != 0u && cm_direct(m0, r0)) {
        // Y += X W^T: the accumulators start from Y (the direct epilogue stores them whole).
        let mb = m0 + sm;
        let rb = r0 + sn;
        c00 = cm_load_y(mb, rb);
        c01 = cm_load_y(mb, rb + 16u);
        c10 = cm_load_y(mb + 16u, rb);
        c11 = cm_load_y(mb + 16u, rb + 16u);
        if (WN > 2u) {
            c02 = cm_load_y(mb, rb + 32u);
            c03 = cm_load_y(mb, rb + 48u);
            c12 = cm_load_y(mb + 16u, rb + 32u);
            c13 = cm_load_y(mb + 16u, rb + 48u);
        }
        if (WM > 2u) {
            c20 = cm_load_y(mb + 32u, rb);
            c21 = cm_load_y(mb + 32u, rb + 16u);
            c30 = cm_load_y(mb + 48u, rb);
            c31 = cm_load_y(mb + 48u, rb + 16u);
            if (WN > 2u) {
                c22 = cm_load_y(mb + 32u, rb + 32u);
                c23 = cm_load_y(mb + 32u, rb + 48u);
                c32 = cm_load_y(mb + 48u, rb + 32u);
                c33 = cm_load_y(mb + 48u, rb + 48u);
            }
        }
    }
    // Slice kb into stage 0 (an empty share stages zeros, never multiplied).
    cm_fetch(lid, m0, r0, kb);
    cm_stash(0u, lid, r0, kb);
    workgroupBarrier();
    // Step i (k0 = kb + i CM_BK) multiplies stage i % 2 and stages slice k0 + CM_BK in the
    // other: the loads are issued before the multiplications, the stores after them. (The
    // cooperative operations stay outside any branch: naga requires them in uniform control
    // flow and takes every `var` as non-uniform.)
    var it = 0u;
    for (var k0 = kb; k0 < ke; k0 += CM_BK) {
        let kn = k0 + CM_BK;
        let next = kn < ke;
        if (next) {
            cm_fetch(lid, m0, r0, kn);
        }
        {
            let cur = it & (CM_STAGES - 1u);
            for (var kk = 0u; kk < CM_BK / 4u; kk += 4u) {
                let pa = cur * CM_SA + sm * CM_LDV + kk;
                let pb = cur * CM_SB + sn * CM_LDV + kk;
                let a0 = coopLoadT<coop_mat16x16<f16, A>>(&cm_a[pa], CM_LDV);
                let a1 = coopLoadT<coop_mat16x16<f16, A>>(&cm_a[pa + 16u * CM_LDV], CM_LDV);
                let b0 = coopLoad<coop_mat16x16<f16, B>>(&cm_b[pb], CM_LDV);
                let b1 = coopLoad<coop_mat16x16<f16, B>>(&cm_b[pb + 16u * CM_LDV], CM_LDV);
                var a2: coop_mat16x16<f16, A>;
                var a3: coop_mat16x16<f16, A>;
                var b2: coop_mat16x16<f16, B>;
                var b3: coop_mat16x16<f16, B>;
                if (WM > 2u) {
                    a2 = coopLoadT<coop_mat16x16<f16, A>>(&cm_a[pa + 32u * CM_LDV], CM_LDV);
                    a3 = coopLoadT<coop_mat16x16<f16, A>>(&cm_a[pa + 48u * CM_LDV], CM_LDV);
                }
                if (WN > 2u) {
                    b2 = coopLoad<coop_mat16x16<f16, B>>(&cm_b[pb + 32u * CM_LDV], CM_LDV);
                    b3 = coopLoad<coop_mat16x16<f16, B>>(&cm_b[pb + 48u * CM_LDV], CM_LDV);
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
        }
        if (CM_STAGES == 1u) {
            // One stage: every subgroup is done with it before it is overwritten.
            workgroupBarrier();
        }
        if (next) {
            // Slice kn goes to the stage step i - 1 multiplied from: every subgroup passed
            // the barrier that ended that step (one stage: the barrier above).
            cm_stash((it + 1u) & (CM_STAGES - 1u), lid, r0, kn);
        }
        it += 1u;
        workgroupBarrier();
    }
    cm_finish(c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32,
              c33, wid, nwg, lid, sg_id, lane, m0 + sm, r0 + sn);
}
