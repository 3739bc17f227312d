// Products with llama.cpp-quantized weights, read block by block from the raw GGUF bytes and
// dequantized in registers: `matvec` (decode, y = W x), `matmul` (prefill, Y = X W^T) and
// `embedding` (row gather of a quantized table). Activations and outputs are f32.
//
// Weights: W [rows, cols] as the file stores it: each row is cols / BLOCK blocks of TS bytes
// (ggml's layout, little-endian), rows packed back to back, seen here as a u32 array (the tail
// padded to a whole word). A block may start at any even byte offset (Q8_0 is 34 bytes, Q4_1 20,
// Q5_0 22, Q6_K 210): every read goes through `byte_at`, `u16_at`, `u32_at` or `load16`, which
// assemble unaligned fields from the two words they straddle. QTYPE is ggml's type id, BLOCK the
// elements per block (32 or 256), TS the bytes per block (set from Rust's `WeightType`).
//
// The unit of work is 16 consecutive elements of a row (`dequant16`): half a 32-element block,
// or one of the 16 scale groups of a 256-element K-quant super-block. Each unit reads its scale
// fields and 16 (or 32) quant bytes, and returns the 16 values exactly as vkllm-cpu's
// `dequantize_row` computes them (same f32 operations in the same order; every scale product is
// exact in f32, so FMA contraction cannot change them).
//
// matvec: WG invocations compute R rows (R <= 4; WG 256 and R 2 for long rows, down to WG 64
// and R 4 for rows of <= 64 units: `matvec_config` in Rust); invocation i takes units
// i, i + WG, ... of the row (consecutive invocations read consecutive bytes), keeps R partial
// sums and reuses each x unit (4 vec4 loads) R times; sums are reduced with subgroupAdd, then
// across subgroups through shared memory (any subgroup size >= 4). Memory bound: each weight
// byte is read once. Shared memory: R * 64 f32 (<= 1 KiB). Grid: ceil(rows / R) folded into 2-D.
// matmul: 256 invocations as 16 x 16 compute a 64 (tokens) x 64 (rows) tile of Y, each a 4 x 4
// block, walking K in steps of 16 (one unit): invocations 0..63 dequantize one unit of one weight
// row each into shared memory while 64..255 stage 64 x 16 of X; each staged value is then used
// 64 times. Shared memory: 2 x 16 x 64 f32 = 8 KiB. Rows and tokens need not be tile multiples.
// embedding: one invocation per unit of a gathered row: grid (ceil(units / WG), n tokens).
//
// Push constants (one block for the three entries): matvec/matmul use (n, rows, cols,
// row_offset, y_stride, accumulate) with row_offset/y_stride placing a row-split part's output;
// embedding uses n = tokens, rows = part_rows, cols = dim, row_offset = row_start,
// y_stride = vocab.

override WG: u32 = 256;
override R: u32 = 2;
override QTYPE: u32 = 8;
override BLOCK: u32 = 32;
override TS: u32 = 34;

struct Params {
    n: u32,
    rows: u32,
    cols: u32,
    row_offset: u32,
    y_stride: u32,
    accumulate: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
// The activations as 16-byte words (matvec; cols is a multiple of 16).
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;

// ggml's kvalues_iq4nl (IQ4_NL, IQ4_XS).
var<private> KV: array<f32, 16> = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0,
    -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn byte_at(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu;
}

// A little-endian u16 at an even byte offset (never straddles a word).
fn u16_at(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 2u) * 8u)) & 0xffffu;
}

// An f16 at an even byte offset, widened with integer operations rather than unpack2x16float:
// block scales are often f16 subnormals (Q4_K/Q6_K super-block scales of small weights fall
// below 2^-14), and Vulkan lets implementations flush 16-bit denormals. Exact for every input.
fn f16_at(off: u32) -> f32 {
    let h = u16_at(off);
    let e = (h >> 10u) & 31u;
    let m = h & 1023u;
    if (e == 0u) {
        // m * 2^-24: exact in f32, and a normal f32 for every m != 0.
        let v = f32(m) * 5.9604644775390625e-8;
        return select(v, -v, (h & 0x8000u) != 0u);
    }
    let eb = select(e + 112u, 255u, e == 31u);
    return bitcast<f32>(((h & 0x8000u) << 16u) | (eb << 23u) | (m << 13u));
}

// A little-endian u32 at any byte offset.
fn u32_at(off: u32) -> u32 {
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    if (sh == 0u) {
        return w[i];
    }
    return (w[i] >> sh) | (w[i + 1u] << (32u - sh));
}

// 16 bytes from any byte offset, as 4 little-endian words (reads a fifth word only when the
// bytes straddle it, so never past the data).
fn load16(off: u32) -> vec4<u32> {
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    let a = vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
    if (sh == 0u) {
        return a;
    }
    let b = vec4<u32>(a.y, a.z, a.w, w[i + 4u]);
    return (a >> vec4<u32>(sh)) | (b << vec4<u32>(32u - sh));
}

fn byte_of(v: vec4<u32>, i: u32) -> u32 {
    return (v[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

fn sbyte_of(v: vec4<u32>, i: u32) -> i32 {
    return extractBits(bitcast<i32>(v[i >> 2u]), (i & 3u) * 8u, 8u);
}

// The 6-bit (scale, min) of sub-block s (0..8) of a Q4_K/Q5_K block's 12 scale bytes at `sc`.
fn scale_min_k4(sc: u32, s: u32) -> vec2<u32> {
    if (s < 4u) {
        return vec2<u32>(byte_at(sc + s) & 63u, byte_at(sc + s + 4u) & 63u);
    }
    let a = byte_at(sc + s + 4u);
    return vec2<u32>((a & 15u) | ((byte_at(sc + s - 4u) >> 6u) << 4u),
                     (a >> 4u) | ((byte_at(sc + s) >> 6u) << 4u));
}

// Elements 16 q .. 16 q + 16 of the block starting at byte `blk`.
fn dequant16(blk: u32, q: u32) -> array<f32, 16> {
    var o: array<f32, 16>;
    if (QTYPE == 2u || QTYPE == 3u || QTYPE == 20u) {
        // Q4_0, Q4_1, IQ4_NL: element j in the low nibble of qs[j], j + 16 in the high nibble.
        let d = f16_at(blk);
        var m = 0.0;
        var qoff = blk + 2u;
        if (QTYPE == 3u) {
            m = f16_at(blk + 2u);
            qoff = blk + 4u;
        }
        let qs = load16(qoff);
        for (var i = 0u; i < 16u; i++) {
            let nib = (byte_of(qs, i) >> (4u * q)) & 15u;
            if (QTYPE == 2u) {
                o[i] = d * f32(i32(nib) - 8);
            } else if (QTYPE == 3u) {
                o[i] = d * f32(nib) + m;
            } else {
                o[i] = d * KV[nib];
            }
        }
    } else if (QTYPE == 6u || QTYPE == 7u) {
        // Q5_0, Q5_1: bit 4 of element j is bit j of the u32 qh.
        let d = f16_at(blk);
        var m = 0.0;
        var hoff = blk + 2u;
        if (QTYPE == 7u) {
            m = f16_at(blk + 2u);
            hoff = blk + 4u;
        }
        let qh = u32_at(hoff);
        let qs = load16(hoff + 4u);
        for (var i = 0u; i < 16u; i++) {
            let nib = (byte_of(qs, i) >> (4u * q)) & 15u;
            let v = nib | (((qh >> (16u * q + i)) & 1u) << 4u);
            if (QTYPE == 6u) {
                o[i] = d * f32(i32(v) - 16);
            } else {
                o[i] = d * f32(v) + m;
            }
        }
    } else if (QTYPE == 8u) {
        // Q8_0: f16 d, 32 i8.
        let d = f16_at(blk);
        let qs = load16(blk + 2u + 16u * q);
        for (var i = 0u; i < 16u; i++) {
            o[i] = f32(sbyte_of(qs, i)) * d;
        }
    } else if (QTYPE == 10u) {
        // Q2_K: scales[16], qs[64], d, dmin; element 128 h + 32 j + l.
        let h = q / 8u;
        let j = (q / 2u) % 4u;
        let qs = load16(blk + 16u + 32u * h + 16u * (q % 2u));
        let sc = byte_at(blk + q);
        let dl = f16_at(blk + 80u) * f32(sc & 15u);
        let ml = f16_at(blk + 82u) * f32(sc >> 4u);
        for (var i = 0u; i < 16u; i++) {
            o[i] = dl * f32((byte_of(qs, i) >> (2u * j)) & 3u) - ml;
        }
    } else if (QTYPE == 11u) {
        // Q3_K: hmask[32], qs[64], scales[12], d.
        let h = q / 8u;
        let j = (q / 2u) % 4u;
        let l0 = 16u * (q % 2u);
        let hm = load16(blk + l0);
        let qs = load16(blk + 32u + 32u * h + l0);
        let lo = (byte_at(blk + 96u + q % 8u) >> (4u * (q / 8u))) & 15u;
        let hi = (byte_at(blk + 104u + q % 4u) >> (2u * (q / 4u))) & 3u;
        let dl = f16_at(blk + 108u) * f32(i32(lo | (hi << 4u)) - 32);
        for (var i = 0u; i < 16u; i++) {
            let lo2 = i32((byte_of(qs, i) >> (2u * j)) & 3u);
            let hbit = (byte_of(hm, i) >> (q / 2u)) & 1u;
            o[i] = dl * f32(select(lo2 - 4, lo2, hbit == 1u));
        }
    } else if (QTYPE == 12u || QTYPE == 13u) {
        // Q4_K, Q5_K: d, dmin, scales[12], (Q5_K: qh[32]), qs[128]; sub-block s = q / 2.
        let s = q / 2u;
        let half = 16u * (q % 2u);
        let sm = scale_min_k4(blk + 4u, s);
        let d1 = f16_at(blk) * f32(sm.x);
        let m1 = f16_at(blk + 2u) * f32(sm.y);
        var qoff = blk + 16u;
        var qh = vec4<u32>(0u);
        if (QTYPE == 13u) {
            qh = load16(blk + 16u + half);
            qoff = blk + 48u;
        }
        let qs = load16(qoff + 32u * (s / 2u) + half);
        for (var i = 0u; i < 16u; i++) {
            let v = ((byte_of(qs, i) >> (4u * (s % 2u))) & 15u) | (((byte_of(qh, i) >> s) & 1u) << 4u);
            o[i] = d1 * f32(v) - m1;
        }
    } else if (QTYPE == 14u) {
        // Q6_K: ql[128], qh[64], scales[16] (i8), d; element 128 h + 32 k + l.
        let h = q / 8u;
        let k = (q / 2u) % 4u;
        let l0 = 16u * (q % 2u);
        let ql = load16(blk + 64u * h + 32u * (k % 2u) + l0);
        let qh = load16(blk + 128u + 32u * h + l0);
        let sc = extractBits(i32(byte_at(blk + 192u + q)), 0u, 8u);
        let ds = f16_at(blk + 208u) * f32(sc);
        for (var i = 0u; i < 16u; i++) {
            let lo = (byte_of(ql, i) >> (4u * (k / 2u))) & 15u;
            let hi = (byte_of(qh, i) >> (2u * k)) & 3u;
            o[i] = ds * f32(i32(lo | (hi << 4u)) - 32);
        }
    } else if (QTYPE == 23u) {
        // IQ4_XS: d, scales_h (u16), scales_l[4], qs[128]; sub-block ib = q / 2.
        let ib = q / 2u;
        let lo = (byte_at(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
        let hi = (u16_at(blk + 2u) >> (2u * ib)) & 3u;
        let dl = f16_at(blk) * f32(i32(lo | (hi << 4u)) - 32);
        let qs = load16(blk + 8u + 16u * ib);
        for (var i = 0u; i < 16u; i++) {
            o[i] = dl * KV[(byte_of(qs, i) >> (4u * (q % 2u))) & 15u];
        }
    }
    return o;
}

// Byte offset of unit u (16 elements) of a row starting at byte `row`.
fn unit_block(row: u32, u: u32) -> u32 {
    return row + (u / (BLOCK / 16u)) * TS;
}

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(WG)
fn matvec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
          @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let row0 = (wid.y * nwg.x + wid.x) * R;
    if (row0 >= p.rows) {
        return;
    }
    let nr = min(R, p.rows - row0);
    let units = p.cols / 16u;
    let upb = BLOCK / 16u;
    let rb = (p.cols / BLOCK) * TS;
    var acc: array<f32, 4>;
    for (var r = 0u; r < 4u; r++) {
        acc[r] = 0.0;
    }
    for (var u = lid; u < units; u += WG) {
        var xv: array<f32, 16>;
        for (var i = 0u; i < 4u; i++) {
            let v = x4[4u * u + i];
            xv[4u * i] = v.x;
            xv[4u * i + 1u] = v.y;
            xv[4u * i + 2u] = v.z;
            xv[4u * i + 3u] = v.w;
        }
        let boff = (u / upb) * TS;
        let q = u % upb;
        for (var r = 0u; r < nr; r++) {
            var wv = dequant16((row0 + r) * rb + boff, q);
            var s = 0.0;
            for (var i = 0u; i < 16u; i++) {
                s += wv[i] * xv[i];
            }
            acc[r] += s;
        }
    }
    for (var r = 0u; r < R; r++) {
        let s = subgroupAdd(acc[r]);
        if (sg_lane == 0u) {
            red[r * 64u + sg_id] = s;
        }
    }
    workgroupBarrier();
    if (lid < nr) {
        var total = 0.0;
        for (var i = 0u; i < n_sg; i++) {
            total += red[lid * 64u + i];
        }
        let o = p.row_offset + row0 + lid;
        if (p.accumulate != 0u) {
            total += y[o];
        }
        y[o] = total;
    }
}

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;

var<workgroup> xs: array<f32, 1024>; // [BK][BM]
var<workgroup> ws: array<f32, 1024>; // [BK][BN]

@compute @workgroup_size(256)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r0 = wid.x * BN;
    let m0 = wid.y * BM;
    let tx = lid % 16u;
    let ty = lid / 16u;
    let rb = (p.cols / BLOCK) * TS;
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }
    for (var k0 = 0u; k0 < p.cols; k0 += BK) {
        // Invocations 64..255 stage the 64 x 16 slice of X while 0..63 dequantize W's.
        if (lid >= BN) {
            for (var idx = lid - BN; idx < BM * BK; idx += 256u - BN) {
                let mm = idx / BK;
                let kk = idx % BK;
                var xv = 0.0;
                if (m0 + mm < p.n) {
                    xv = x[(m0 + mm) * p.cols + k0 + kk];
                }
                xs[kk * BM + mm] = xv;
            }
        } else {
            var wv: array<f32, 16>;
            let r = r0 + lid;
            if (r < p.rows) {
                let u = k0 / 16u;
                wv = dequant16(unit_block(r * rb, u), u % (BLOCK / 16u));
            }
            for (var kk = 0u; kk < BK; kk++) {
                ws[kk * BN + lid] = wv[kk];
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<f32, 4>;
            var b: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = xs[kk * BM + ty + 16u * i];
                b[i] = ws[kk * BN + tx + 16u * i];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] += a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + ty + 16u * i;
        if (m >= p.n) {
            continue;
        }
        for (var j = 0u; j < 4u; j++) {
            let r = r0 + tx + 16u * j;
            if (r >= p.rows) {
                continue;
            }
            let o = m * p.y_stride + p.row_offset + r;
            var v = acc[i * 4u + j];
            if (p.accumulate != 0u) {
                v += y[o];
            }
            y[o] = v;
        }
    }
}

@group(0) @binding(1) var<storage, read> ids: array<u32>;

@compute @workgroup_size(WG)
fn embedding(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.y;
    let u = wid.x * WG + lid;
    let units = p.cols / 16u;
    if (t >= p.n || u >= units) {
        return;
    }
    let id = ids[t];
    let o = t * p.cols + 16u * u;
    if (id >= p.y_stride) {
        if (p.row_offset == 0u) {
            for (var i = 0u; i < 16u; i++) {
                y[o + i] = bitcast<f32>(0x7fc00000u);
            }
        }
        return;
    }
    if (id < p.row_offset || id >= p.row_offset + p.rows) {
        return;
    }
    let rb = (p.cols / BLOCK) * TS;
    var v = dequant16(unit_block((id - p.row_offset) * rb, u), u % (BLOCK / 16u));
    for (var i = 0u; i < 16u; i++) {
        y[o + i] = v[i];
    }
}
