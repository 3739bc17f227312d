enable f16;
enable wgpu_cooperative_matrix;
// Loop bounds and branches below follow from push constants and the workgroup id (uniform), but
// naga takes every `var` as non-uniform; its uniformity check is off for this file.
diagnostic(off, derivative_uniformity);

// Few-token product of quantized weights on cooperative matrices (VK_KHR_cooperative_matrix,
// f16 x f16 -> f32, 16 x 16 x 16, subgroup scope): Y[n, rows] (+)= X[n, cols] W^T for n <= 64
// tokens (decode batches, short prompts), the contract of `matmul_coop.wgsl` (push constants
// n, rows, cols, row_offset, y_stride, accumulate).
//
// #include quant_blocks.inc.wgsl
// #include quant_words.inc.wgsl
// #include matmul_narrow_q6k.inc.wgsl
// Why its own kernel: with few tokens the product is a read of the weights, and what limits it
// is how many weight bytes are in flight per multiprocessor. A workgroup owns 64 weight rows
// (4 subgroups of 16) and all MT * 16 tokens (one to four accumulator tiles per subgroup). It
// walks K in raw steps of RK = 256 elements: the 64 rows' blocks of the next step are loaded
// with coalesced word loads (consecutive invocations, consecutive words; 16-byte groups where
// rows and steps are 16-byte aligned, RV = 1) into registers (NSLOT slots of 4 words) before the
// current step's work and stored to shared memory (`nm_raw`, RW words per row) after it. Each
// step is dequantized from shared memory in sub-chunks of KC = 64 elements (by the shared
// `dequant16` through this file's `wd`; Q6_K by a 32-element decoder of its own) into
// an f16 tile `nm_b` [64 rows][KC + 8], X's sub-chunk is staged beside it as f16 (`nm_x`
// [MT * 16 tokens][KC + 8]), and every subgroup multiplies its rows by all token tiles. Q4_K
// with 128 invocations (entry point `main_q4k`) skips the raw staging: each invocation loads its
// row's block header and quant bytes with 16-byte loads (`w4`) a step ahead and decodes them
// from registers; Q6_K likewise in `main_q6k` (matmul_narrow_q6k.inc.wgsl). f16 X (XH = 1) is loaded into registers a sub-chunk ahead. Split-K (SPLIT > 1,
// grid z): workgroup z walks only its share of the raw steps.
// Epilogue: each subgroup stores its accumulator tiles to `part` [tile][split][subgroup][MT]
// [16 x 16] (Coherent); with SPLIT = 1 it reads them back and writes Y (bounds-checked, added to
// Y when accumulating); with SPLIT > 1 the last workgroup of a tile (counted in `ctr`, the CUB
// "last block" pattern of matmul_coop.wgsl; it resets the counter) sums the partials in split
// order, so the result does not depend on which workgroup ran first.
// Shared memory: 4416 words of raw blocks (64 rows x up to 69 words: Q8_0's 272 bytes per step)
// + 2 x 64 x 18 vec4<f16> tiles = 36 KiB (`main_q4k`: the tiles alone, 18 KiB).
// Precision: as matmul_coop: X and the dequantized W rounded to f16, f32 accumulation.

override SG: u32 = 32;
// Invocations: 4 subgroups.
override NWG: u32 = 128;
// Token tiles of 16 (1..4).
override MT: u32 = 1;
// Raw words per staged row; 1: rows and steps are 16-byte aligned (slots are 4 consecutive
// words), 0: any even byte offset (slot words NWG apart).
override RW: u32 = 36;
override RV: u32 = 1;
// Register slots (4 words each) per invocation of a raw step: ceil(64 RW / (4 NWG)), 1..9.
override NSLOT: u32 = 5;
override SPLIT: u32 = 1;
// X as f16 pairs (XH = 1, `to_f16.wgsl`'s layout) or f32.
override XH: u32 = 0;

const BN: u32 = 64u;
const RK: u32 = 256u;
const KC: u32 = 64u;
// vec4<f16> per staged row of nm_b / nm_x (KC + 8 halves: 16-byte aligned rows whose
// consecutive starts fall in different banks).
const LDV: u32 = 18u;

struct Params {
    n: u32,
    rows: u32,
    cols: u32,
    row_offset: u32,
    y_stride: u32,
    accumulate: u32,
    // 32-bit words of the weight (reads past them return 0).
    wwords: u32,
    _pad: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@coherent @group(0) @binding(3) var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> ctr: array<atomic<u32>>;
// The weight again as 16-byte words (Q4_K's direct loads: its 144-byte blocks and rows are whole
// 16-byte words).
@group(0) @binding(5) var<storage, read> w4: array<vec4<u32>>;

var<workgroup> nm_raw: array<u32, 4416>;
var<workgroup> nm_b: array<vec4<f16>, 1152>;
var<workgroup> nm_x: array<vec4<f16>, 1152>;
// Flags the last workgroup of a split tile (padded to 16 bytes, as the build checks ask).
var<workgroup> nm_last: vec4<u32>;

// `wd` maps a word index of the weight to the staged copy of the row being dequantized:
// nm_raw[i + nm_sh] (u32 arithmetic wraps, so nm_sh may be "negative").
var<private> nm_sh: u32;

fn wd(i: u32) -> u32 {
    return nm_raw[i + nm_sh];
}

// Bytes per weight row, and the first staged word of row r at raw step k0.
fn nm_rb() -> u32 {
    return (p.cols / BLOCK) * TS;
}

fn nm_g0(r: u32, k0: u32) -> u32 {
    return (r * nm_rb() + (k0 / BLOCK) * TS) >> 2u;
}

// Staged word index of slot j, component c of invocation lid.
fn nm_sw(lid: u32, j: u32, c: u32) -> u32 {
    if (RV == 1u) {
        return 4u * (lid + j * NWG) + c;
    }
    return lid + (4u * j + c) * NWG;
}

// Slot j of invocation lid for the raw step at k0 of rows r0..: 4 staged words (0 past the
// staged rows, the weight's rows or its words).
fn nm_load(lid: u32, j: u32, r0: u32, k0: u32) -> vec4<u32> {
    var v = vec4<u32>(0u);
    for (var c = 0u; c < 4u; c++) {
        let sw = nm_sw(lid, j, c);
        let lr = sw / RW;
        let r = r0 + lr;
        if (lr < BN && r < p.rows) {
            let g = nm_g0(r, k0) + sw % RW;
            if (g < p.wwords) {
                v[c] = w[g];
            }
        }
    }
    return v;
}

fn nm_store(lid: u32, j: u32, v: vec4<u32>) {
    for (var c = 0u; c < 4u; c++) {
        let sw = nm_sw(lid, j, c);
        if (sw < BN * RW) {
            nm_raw[sw] = v[c];
        }
    }
}

var<private> nm_s0: vec4<u32>;
var<private> nm_s1: vec4<u32>;
var<private> nm_s2: vec4<u32>;
var<private> nm_s3: vec4<u32>;
var<private> nm_s4: vec4<u32>;
var<private> nm_s5: vec4<u32>;
var<private> nm_s6: vec4<u32>;
var<private> nm_s7: vec4<u32>;
var<private> nm_s8: vec4<u32>;

// The raw step at k0 into the registers (loads issued before the current step's work).
fn nm_fetch(lid: u32, r0: u32, k0: u32) {
    nm_s0 = nm_load(lid, 0u, r0, k0);
    if (NSLOT > 1u) { nm_s1 = nm_load(lid, 1u, r0, k0); }
    if (NSLOT > 2u) { nm_s2 = nm_load(lid, 2u, r0, k0); }
    if (NSLOT > 3u) { nm_s3 = nm_load(lid, 3u, r0, k0); }
    if (NSLOT > 4u) { nm_s4 = nm_load(lid, 4u, r0, k0); }
    if (NSLOT > 5u) { nm_s5 = nm_load(lid, 5u, r0, k0); }
    if (NSLOT > 6u) { nm_s6 = nm_load(lid, 6u, r0, k0); }
    if (NSLOT > 7u) { nm_s7 = nm_load(lid, 7u, r0, k0); }
    if (NSLOT > 8u) { nm_s8 = nm_load(lid, 8u, r0, k0); }
}

// The registers into nm_raw (after every read of the previous step).
fn nm_stash(lid: u32) {
    nm_store(lid, 0u, nm_s0);
    if (NSLOT > 1u) { nm_store(lid, 1u, nm_s1); }
    if (NSLOT > 2u) { nm_store(lid, 2u, nm_s2); }
    if (NSLOT > 3u) { nm_store(lid, 3u, nm_s3); }
    if (NSLOT > 4u) { nm_store(lid, 4u, nm_s4); }
    if (NSLOT > 5u) { nm_store(lid, 5u, nm_s5); }
    if (NSLOT > 6u) { nm_store(lid, 6u, nm_s6); }
    if (NSLOT > 7u) { nm_store(lid, 7u, nm_s7); }
    if (NSLOT > 8u) { nm_store(lid, 8u, nm_s8); }
}

// Sub-chunk ks of the raw step at k0 (staged in nm_raw) dequantized into nm_b: 64 rows x 4
// units of 16, two per invocation (4 consecutive invocations per row); zero past rows, cols or
// this workgroup's share end ke.
fn nm_dequant(lid: u32, r0: u32, k0: u32, ks: u32, ke: u32) {
    let rb = nm_rb();
    for (var u = lid; u < BN * (KC / 16u); u += NWG) {
        let lr = u / (KC / 16u);
        let uu = u % (KC / 16u);
        let r = r0 + lr;
        let k = ks + 16u * uu;
        var v: array<f32, 16>;
        if (r < p.rows && k < ke) {
            nm_sh = lr * RW - nm_g0(r, k0);
            v = dequant16(unit_block(r * rb, k / 16u), (k / 16u) % (BLOCK / 16u));
        }
        let o = lr * LDV + 4u * uu;
        for (var q = 0u; q < 4u; q++) {
            nm_b[o + q] = vec4<f16>(vec4<f32>(v[4u * q], v[4u * q + 1u], v[4u * q + 2u],
                                              v[4u * q + 3u]));
        }
    }
}

// Q6_K (QTYPE 14) form of `nm_dequant`: 128 tasks of 32 elements, row lr and half t: elements
// l = 16 t .. 16 t + 16 of both 32-element groups k0 = 2 (j % 2) and k0 + 1 of half h = j / 2 of
// the block (quant bytes ql at 64 h + 16 t and 64 h + 32 + 16 t, nibble j % 2; high bits qh at
// 128 + 32 h + 16 t, bits 2 k0 and 2 k0 + 2; scales 8 h + 2 k0 + t and + 2). Same values as
// `dequant16`.
fn nm_dequant_q6k(lid: u32, r0: u32, k0: u32, ks: u32, ke: u32) {
    let rb = nm_rb();
    for (var u = lid; u < BN * 2u; u += NWG) {
        let lr = u / 2u;
        let t = u % 2u;
        let r = r0 + lr;
        let o = lr * LDV + 4u * t;
        if (r < p.rows && ks < ke) {
            nm_sh = lr * RW - nm_g0(r, k0);
            let blk = r * rb + (ks / 256u) * 210u;
            let j = (ks % 256u) / 64u;
            let h = j / 2u;
            let nib = 4u * (j % 2u);
            let kb = 2u * (j % 2u);
            let ql0 = load16(blk + 64u * h + 16u * t);
            let ql1 = load16(blk + 64u * h + 32u + 16u * t);
            let qh = load16(blk + 128u + 32u * h + 16u * t);
            let d = f16_at(blk + 208u);
            let sc = blk + 192u + 8u * h + 2u * kb + t;
            let ds0 = d * f32(extractBits(i32(byte_at(sc)), 0u, 8u));
            let ds1 = d * f32(extractBits(i32(byte_at(sc + 2u)), 0u, 8u));
            for (var w = 0u; w < 4u; w++) {
                let a = ((ql0[w] >> nib) & 0x0f0f0f0fu) | (((qh[w] >> (2u * kb)) & 0x03030303u) << 4u);
                let b = ((ql1[w] >> nib) & 0x0f0f0f0fu)
                    | (((qh[w] >> (2u * kb + 2u)) & 0x03030303u) << 4u);
                let fa = vec4<f32>(u2f(a & 0xffu), u2f((a >> 8u) & 0xffu), u2f((a >> 16u) & 0xffu),
                                   u2f(a >> 24u));
                let fb = vec4<f32>(u2f(b & 0xffu), u2f((b >> 8u) & 0xffu), u2f((b >> 16u) & 0xffu),
                                   u2f(b >> 24u));
                nm_b[o + w] = vec4<f16>(ds0 * (fa - 32.0));
                nm_b[o + 8u + w] = vec4<f16>(ds1 * (fb - 32.0));
            }
        } else {
            for (var w = 0u; w < 4u; w++) {
                nm_b[o + w] = vec4<f16>(0.0);
                nm_b[o + 8u + w] = vec4<f16>(0.0);
            }
        }
    }
}

// Q4_K direct (no raw staging): invocation lid owns row lid / 2, half lid % 2 of every
// sub-chunk: per step the block's 16-byte header (d, dmin, scales) and one 16-byte group of
// quant bytes per sub-chunk, loaded a step ahead with 16-byte loads (pairs of invocations read a
// row's 32 bytes of a sub-chunk). Needs NWG = 2 BN (subgroups of 32).
var<private> nm_h: vec4<u32>;
var<private> nm_q0: vec4<u32>;
var<private> nm_q1: vec4<u32>;
var<private> nm_q2: vec4<u32>;
var<private> nm_q3: vec4<u32>;
var<private> nm_hn: vec4<u32>;
var<private> nm_qn0: vec4<u32>;
var<private> nm_qn1: vec4<u32>;
var<private> nm_qn2: vec4<u32>;
var<private> nm_qn3: vec4<u32>;

// The next step's registers (zero past rows).
fn nm_q4k_fetch(lid: u32, r0: u32, k0: u32) {
    let r = r0 + lid / 2u;
    let t = lid % 2u;
    nm_hn = vec4<u32>(0u);
    nm_qn0 = vec4<u32>(0u);
    nm_qn1 = vec4<u32>(0u);
    nm_qn2 = vec4<u32>(0u);
    nm_qn3 = vec4<u32>(0u);
    if (r < p.rows) {
        let b = r * (nm_rb() / 16u) + (k0 / 256u) * 9u;
        nm_hn = w4[b];
        nm_qn0 = w4[b + 1u + t];
        nm_qn1 = w4[b + 3u + t];
        nm_qn2 = w4[b + 5u + t];
        nm_qn3 = w4[b + 7u + t];
    }
}

fn nm_q4k_advance() {
    nm_h = nm_hn;
    nm_q0 = nm_qn0;
    nm_q1 = nm_qn1;
    nm_q2 = nm_qn2;
    nm_q3 = nm_qn3;
}

// The 6-bit (scale, min) of sub-block s of the header h (`scale_min_k4` on registers).
fn nm_sm4(h: vec4<u32>, s: u32) -> vec2<u32> {
    if (s < 4u) {
        return vec2<u32>(byte_of(h, 4u + s) & 63u, byte_of(h, 8u + s) & 63u);
    }
    let a = byte_of(h, 8u + s);
    return vec2<u32>((a & 15u) | ((byte_of(h, s) >> 6u) << 4u),
                     (a >> 4u) | ((byte_of(h, 4u + s) >> 6u) << 4u));
}

// Sub-chunk j's 32 elements of this invocation (quant bytes qs, header nm_h) into nm_b, as
// `dequant16` computes them; zeros past rows or this workgroup's share (`live` false).
fn nm_q4k_put(lid: u32, r0: u32, j: u32, qs: vec4<u32>, live: bool) {
    let lr = lid / 2u;
    let t = lid % 2u;
    let o = lr * LDV + 4u * t;
    if (!live || r0 + lr >= p.rows) {
        for (var w = 0u; w < 4u; w++) {
            nm_b[o + w] = vec4<f16>(0.0);
            nm_b[o + 8u + w] = vec4<f16>(0.0);
        }
        return;
    }
    let h = nm_h;
    let sm0 = nm_sm4(h, 2u * j);
    let sm1 = nm_sm4(h, 2u * j + 1u);
    let d = f16_bits(h.x & 0xffffu);
    let dm = f16_bits(h.x >> 16u);
    // Each code q becomes the float 1 + q / 16 (q in the top 4 mantissa bits: a shift and a
    // mask), so a single fma gives d sc q - dmin m: 16 d sc (1 + q / 16) - (16 d sc + dmin m).
    let sl = 16.0 * d * f32(sm0.x);
    let bl = -(sl + dm * f32(sm0.y));
    let sh = 16.0 * d * f32(sm1.x);
    let bh = -(sh + dm * f32(sm1.y));
    let m = 0x00780000u;
    let one = 0x3f800000u;
    for (var w = 0u; w < 4u; w++) {
        let q = qs[w];
        let fl = vec4<f32>(bitcast<f32>(((q << 19u) & m) | one), bitcast<f32>(((q << 11u) & m) | one),
                           bitcast<f32>(((q << 3u) & m) | one), bitcast<f32>(((q >> 5u) & m) | one));
        let fh = vec4<f32>(bitcast<f32>(((q << 15u) & m) | one), bitcast<f32>(((q << 7u) & m) | one),
                           bitcast<f32>(((q >> 1u) & m) | one), bitcast<f32>(((q >> 9u) & m) | one));
        nm_b[o + w] = vec4<f16>(fma(fl, vec4<f32>(sl), vec4<f32>(bl)));
        nm_b[o + 8u + w] = vec4<f16>(fma(fh, vec4<f32>(sh), vec4<f32>(bh)));
    }
}

// f16 X (XH = 1): slot c of invocation lid for the sub-chunk at ks, 8 halves (token i / 8,
// halves 8 (i % 8) ..) as 4 raw words, loaded a sub-chunk ahead (zero past n or ke).
fn nm_xload(lid: u32, c: u32, ks: u32, ke: u32) -> vec4<u32> {
    let i = lid + c * NWG;
    let m = i / 8u;
    let k = ks + 8u * (i % 8u);
    var v = vec4<u32>(0u);
    if (i < MT * 128u && m < p.n && k < ke) {
        let e = (m * p.cols + k) / 2u;
        v = vec4<u32>(bitcast<u32>(x[e]), bitcast<u32>(x[e + 1u]), bitcast<u32>(x[e + 2u]),
                      bitcast<u32>(x[e + 3u]));
    }
    return v;
}

fn nm_xput(lid: u32, c: u32, v: vec4<u32>) {
    let i = lid + c * NWG;
    if (i < MT * 128u) {
        let o = (i / 8u) * LDV + 2u * (i % 8u);
        nm_x[o] = vec4<f16>(vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)));
        nm_x[o + 1u] = vec4<f16>(vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w)));
    }
}

var<private> nm_x0: vec4<u32>;
var<private> nm_x1: vec4<u32>;
var<private> nm_x2: vec4<u32>;
var<private> nm_x3: vec4<u32>;

// Slots of f16 X per invocation: ceil(MT 128 / NWG) (1..4).
fn nm_nxs() -> u32 {
    return (MT * 128u + NWG - 1u) / NWG;
}

fn nm_xfetch(lid: u32, ks: u32, ke: u32) {
    nm_x0 = nm_xload(lid, 0u, ks, ke);
    if (nm_nxs() > 1u) { nm_x1 = nm_xload(lid, 1u, ks, ke); }
    if (nm_nxs() > 2u) { nm_x2 = nm_xload(lid, 2u, ks, ke); }
    if (nm_nxs() > 3u) { nm_x3 = nm_xload(lid, 3u, ks, ke); }
}

fn nm_xstash(lid: u32) {
    nm_xput(lid, 0u, nm_x0);
    if (nm_nxs() > 1u) { nm_xput(lid, 1u, nm_x1); }
    if (nm_nxs() > 2u) { nm_xput(lid, 2u, nm_x2); }
    if (nm_nxs() > 3u) { nm_xput(lid, 3u, nm_x3); }
}

// X's sub-chunk at ks into nm_x as f16: MT * 16 tokens x KC (16 vec4 per token), zero past n
// or ke (cols is a multiple of 32: whole vec4s).
fn nm_stage_x(lid: u32, ks: u32, ke: u32) {
    for (var i = lid; i < MT * 16u * (KC / 4u); i += NWG) {
        let m = i / (KC / 4u);
        let kq = i % (KC / 4u);
        let k = ks + 4u * kq;
        var v = vec4<f32>(0.0);
        if (m < p.n && k < ke) {
            let e = m * p.cols + k;
            if (XH == 1u) {
                let h = e / 2u;
                let a = bitcast<u32>(x[h]);
                let b = bitcast<u32>(x[h + 1u]);
                v = vec4<f32>(unpack2x16float(a), unpack2x16float(b));
            } else {
                v = vec4<f32>(x[e], x[e + 1u], x[e + 2u], x[e + 3u]);
            }
        }
        nm_x[m * LDV + kq] = vec4<f16>(v);
    }
}

fn nm_part_base(tile: u32, s: u32, sg: u32) -> u32 {
    return ((tile * SPLIT + s) * 4u + sg) * MT * 256u;
}

// Y for this subgroup's tiles (rows rs.., all tokens) from the SPLIT partials of `tile`.
fn nm_write(tile: u32, sg: u32, lane: u32, rs: u32) {
    for (var t = 0u; t < MT; t++) {
        for (var e = lane; e < 256u; e += SG) {
            let m = 16u * t + e / 16u;
            let r = rs + e % 16u;
            if (m < p.n && r < p.rows) {
                var v = 0.0;
                for (var s = 0u; s < SPLIT; s++) {
                    v += part[nm_part_base(tile, s, sg) + t * 256u + e];
                }
                let o = m * p.y_stride + p.row_offset + r;
                if (p.accumulate != 0u) {
                    v += y[o];
                }
                y[o] = v;
            }
        }
    }
}

// This workgroup's share of K: [x, y) of whole raw steps (all of K without split-K).
fn nm_share(z: u32) -> vec2<u32> {
    let steps = (p.cols + RK - 1u) / RK;
    let share = (steps + SPLIT - 1u) / SPLIT;
    let kb = min(z * share, steps) * RK;
    return vec2<u32>(kb, min(kb + share * RK, p.cols));
}

// X's sub-chunk at ks into nm_x (f16 X: from the registers loaded a sub-chunk ahead, whose
// loads for the next sub-chunk then go out).
fn nm_x_phase(lid: u32, ks: u32, ke: u32) {
    if (XH == 1u) {
        nm_xstash(lid);
        nm_xfetch(lid, ks + KC, ke);
    } else {
        nm_stage_x(lid, ks, ke);
    }
}

// Epilogue: partials out, then Y from them (SPLIT = 1: this workgroup's own).
fn nm_epilogue(c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>, c2: coop_mat16x16<f32, C>,
               c3: coop_mat16x16<f32, C>, wid: vec3<u32>, lid: u32, sg: u32, lane: u32) {
    let tile = wid.x;
    let pb = nm_part_base(tile, wid.z, sg);
    coopStoreT(c0, &part[pb], 16u);
    if (MT > 1u) { coopStoreT(c1, &part[pb + 256u], 16u); }
    if (MT > 2u) { coopStoreT(c2, &part[pb + 512u], 16u); }
    if (MT > 3u) { coopStoreT(c3, &part[pb + 768u], 16u); }
    storageBarrier();
    if (SPLIT > 1u) {
        if (lid == 0u) {
            let before = atomicAdd(&ctr[tile], 1u);
            nm_last = vec4<u32>(select(0u, 1u, before == SPLIT - 1u));
        }
        storageBarrier();
        if (workgroupUniformLoad(&nm_last).x == 0u) {
            return;
        }
        if (lid == 0u) {
            atomicStore(&ctr[tile], 0u);
        }
    }
    nm_write(tile, sg, lane, wid.x * BN + 16u * sg);
}

// Every type through the raw staging (entry point `main`).
@compute @workgroup_size(NWG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = wid.x * BN;
    let kr = nm_share(wid.z);
    let kb = kr.x;
    let ke = kr.y;
    var c0: coop_mat16x16<f32, C>;
    var c1: coop_mat16x16<f32, C>;
    var c2: coop_mat16x16<f32, C>;
    var c3: coop_mat16x16<f32, C>;
    if (kb < ke) {
        nm_fetch(lid, r0, kb);
        nm_stash(lid);
        if (XH == 1u) {
            nm_xfetch(lid, kb, ke);
        }
    }
    workgroupBarrier();
    for (var k0 = kb; k0 < ke; k0 += RK) {
        let kn = k0 + RK;
        if (kn < ke) {
            nm_fetch(lid, r0, kn);
        }
        for (var ks = k0; ks < k0 + RK; ks += KC) {
            if (QTYPE == 14u) {
                nm_dequant_q6k(lid, r0, k0, ks, ke);
            } else {
                nm_dequant(lid, r0, k0, ks, ke);
            }
            nm_x_phase(lid, ks, ke);
            workgroupBarrier();
            for (var kk = 0u; kk < KC / 4u; kk += 4u) {
                let b = coopLoad<coop_mat16x16<f16, B>>(&nm_b[16u * sg * LDV + kk], LDV);
                let a0 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[kk], LDV);
                c0 = coopMultiplyAdd(a0, b, c0);
                if (MT > 1u) {
                    let a1 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[16u * LDV + kk], LDV);
                    c1 = coopMultiplyAdd(a1, b, c1);
                }
                if (MT > 2u) {
                    let a2 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[32u * LDV + kk], LDV);
                    c2 = coopMultiplyAdd(a2, b, c2);
                }
                if (MT > 3u) {
                    let a3 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[48u * LDV + kk], LDV);
                    c3 = coopMultiplyAdd(a3, b, c3);
                }
            }
            workgroupBarrier();
        }
        if (kn < ke) {
            nm_stash(lid);
        }
        workgroupBarrier();
    }
    nm_epilogue(c0, c1, c2, c3, wid, lid, sg, lane);
}

// Q4_K straight into registers (entry point `main_q4k`: no raw staging, so its shared memory is
// the two f16 tiles alone and more workgroups fit on a multiprocessor).
@compute @workgroup_size(NWG)
fn main_q4k(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(local_invocation_index) lid: u32,
            @builtin(subgroup_id) sg: u32,
            @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = wid.x * BN;
    let kr = nm_share(wid.z);
    let kb = kr.x;
    let ke = kr.y;
    var c0: coop_mat16x16<f32, C>;
    var c1: coop_mat16x16<f32, C>;
    var c2: coop_mat16x16<f32, C>;
    var c3: coop_mat16x16<f32, C>;
    if (kb < ke) {
        nm_q4k_fetch(lid, r0, kb);
        if (XH == 1u) {
            nm_xfetch(lid, kb, ke);
        }
    }
    for (var k0 = kb; k0 < ke; k0 += RK) {
        nm_q4k_advance();
        if (k0 + RK < ke) {
            nm_q4k_fetch(lid, r0, k0 + RK);
        }
        for (var j = 0u; j < RK / KC; j++) {
            let ks = k0 + j * KC;
            let live = ks < ke;
            if (j == 0u) {
                nm_q4k_put(lid, r0, 0u, nm_q0, live);
            } else if (j == 1u) {
                nm_q4k_put(lid, r0, 1u, nm_q1, live);
            } else if (j == 2u) {
                nm_q4k_put(lid, r0, 2u, nm_q2, live);
            } else {
                nm_q4k_put(lid, r0, 3u, nm_q3, live);
            }
            nm_x_phase(lid, ks, ke);
            workgroupBarrier();
            for (var kk = 0u; kk < KC / 4u; kk += 4u) {
                let b = coopLoad<coop_mat16x16<f16, B>>(&nm_b[16u * sg * LDV + kk], LDV);
                let a0 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[kk], LDV);
                c0 = coopMultiplyAdd(a0, b, c0);
                if (MT > 1u) {
                    let a1 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[16u * LDV + kk], LDV);
                    c1 = coopMultiplyAdd(a1, b, c1);
                }
                if (MT > 2u) {
                    let a2 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[32u * LDV + kk], LDV);
                    c2 = coopMultiplyAdd(a2, b, c2);
                }
                if (MT > 3u) {
                    let a3 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[48u * LDV + kk], LDV);
                    c3 = coopMultiplyAdd(a3, b, c3);
                }
            }
            workgroupBarrier();
        }
    }
    nm_epilogue(c0, c1, c2, c3, wid, lid, sg, lane);
}
