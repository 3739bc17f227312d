// Products with llama.cpp-quantized weights, read block by block from the raw GGUF bytes and
// dequantized in registers: `matvec` (decode, y = W x), `matmul` (prefill, Y = X W^T) and
// `embedding` (row gather of a quantized table). Activations and outputs are f32.
//
// Weights: W [rows, cols] as the file stores it: each row is cols / BLOCK blocks of TS bytes
// (ggml's layout, little-endian), rows packed back to back, seen here as a u32 array (the tail
// padded to a whole word). The block decoders (`dequant16` and the unaligned readers) live in
// quant_blocks.inc.wgsl. The unit of work is 16 consecutive elements of a row: half a 32-element
// block, or one of the 16 scale groups of a 256-element K-quant super-block.
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

// #include quant_blocks.inc.wgsl
// #include quant_words.inc.wgsl

override WG: u32 = 256;
override R: u32 = 2;

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

// Word i of the weight, and 16 bytes from any byte offset as 4 little-endian words (reads a
// fifth word only when the bytes straddle it, so never past the data): the interface of
// quant_blocks.inc.wgsl.
fn wd(i: u32) -> u32 {
    return w[i];
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
