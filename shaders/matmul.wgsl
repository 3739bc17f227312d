// Tiled matrix-matrix product for prefill: Y = X W^T (+ Y when accumulating).
//
// Shapes: X [n, cols] f32 (n tokens); W [rows, cols] as u32 words (DTYPE 0: f32 bits; 1: f16
// pairs; 2: bf16 pairs, element e = low half of word e/2 when e is even); Y [n, y_stride] f32, this
// dispatch writing columns [row_offset, row_offset + rows) (row_offset/y_stride place a row-split
// part of a large weight).
// Workgroup: 256 invocations as 16 x 16; a workgroup computes a 64 (tokens) x 64 (rows) tile of
// Y, each invocation a 4 x 4 block (tokens ty + 16 i, rows tx + 16 j: a warp's loads from `ws`
// hit consecutive words). The K dimension is walked in steps of 16: each step stages a 64 x 16
// slice of X and of W in shared memory (4 loads per invocation each, 16-bit weights widened to
// f32 on the way in) so each loaded value is used 64 times. Edges are zero-filled, so no shape
// needs to be a multiple of the tile.
// Shared memory: 2 x 16 x 64 f32 = 8 KiB (fits every device's 16 KiB minimum).

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
override DTYPE: u32 = 0;

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

var<workgroup> xs: array<f32, 1024>; // [BK][BM]
var<workgroup> ws: array<f32, 1024>; // [BK][BN]

fn load_w(e: u32) -> f32 {
    if (DTYPE == 0u) {
        return bitcast<f32>(w[e]);
    }
    let word = w[e >> 1u];
    let odd = (e & 1u) == 1u;
    if (DTYPE == 1u) {
        let pair = unpack2x16float(word);
        return select(pair.x, pair.y, odd);
    }
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, odd));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r0 = wid.x * BN;
    let m0 = wid.y * BM;
    let tx = lid % 16u;
    let ty = lid / 16u;
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }
    for (var k0 = 0u; k0 < p.cols; k0 += BK) {
        for (var q = 0u; q < 4u; q++) {
            let idx = lid + 256u * q;
            let mm = idx / BK;
            let kk = idx % BK;
            let k = k0 + kk;
            var xv = 0.0;
            if (m0 + mm < p.n && k < p.cols) {
                xv = x[(m0 + mm) * p.cols + k];
            }
            xs[kk * BM + mm] = xv;
            var wv = 0.0;
            if (r0 + mm < p.rows && k < p.cols) {
                wv = load_w((r0 + mm) * p.cols + k);
            }
            ws[kk * BN + mm] = wv;
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
