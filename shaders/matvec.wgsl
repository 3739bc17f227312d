// Matrix-vector product y = W x (+ y when accumulating): the decode-time projection.
//
// Shapes: W [rows, cols] as u32 words (DTYPE 0: f32 bits; 1: f16 pairs; 2: bf16 pairs, element
// e = low half of word e/2 when e is even; 16-bit types need even cols so each row starts on a
// word); x [cols] f32; y [row_offset + rows] f32 (row_offset places a row-split part of a large
// matrix in the full output).
// Workgroup: WG invocations (default 256) compute R rows (default 2) at once: each invocation
// strides over the columns (consecutive invocations read consecutive words: coalesced), keeps R
// partial sums and reuses each x value R times; the R sums are reduced with subgroupAdd, then
// across subgroups through shared memory (any subgroup size >= 4). The kernel is memory bound:
// every weight byte is read once; x (<= 64 KiB) stays in cache.
// Shared memory: R * 64 f32 (<= 1 KiB).
// Two entry points: `main` reads one 32-bit word per invocation and step (any even cols);
// `main_vec` reads 16-byte vec4 words (4 f32 or 8 f16/bf16 weights) when cols is a multiple of
// 4 (f32) or 8 (16-bit), so each warp-wide load moves 512 bytes: the bandwidth path.

override WG: u32 = 256;
override R: u32 = 2;
override DTYPE: u32 = 0;

struct Params {
    rows: u32,
    cols: u32,
    row_offset: u32,
    accumulate: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
// The same bindings seen as 16-byte words (used by `main_vec` only).
@group(0) @binding(0) var<storage, read> w4: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;

var<workgroup> red: array<f32, 256>;

fn pair(word: u32) -> vec2<f32> {
    if (DTYPE == 1u) {
        return unpack2x16float(word);
    }
    return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let row0 = (wid.y * nwg.x + wid.x) * R;
    if (row0 >= p.rows) {
        return;
    }
    let nr = min(R, p.rows - row0);
    var acc: array<f32, 4>;
    for (var r = 0u; r < 4u; r++) {
        acc[r] = 0.0;
    }
    if (DTYPE == 0u) {
        for (var c = lid; c < p.cols; c += WG) {
            let xv = x[c];
            for (var r = 0u; r < nr; r++) {
                acc[r] += bitcast<f32>(w[(row0 + r) * p.cols + c]) * xv;
            }
        }
    } else {
        let words = p.cols / 2u;
        for (var j = lid; j < words; j += WG) {
            let xv = vec2<f32>(x[2u * j], x[2u * j + 1u]);
            for (var r = 0u; r < nr; r++) {
                acc[r] += dot(pair(w[(row0 + r) * words + j]), xv);
            }
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

// Dot product of 8 packed 16-bit weights with 8 activations.
fn dot8(wv: vec4<u32>, xa: vec4<f32>, xb: vec4<f32>) -> f32 {
    return dot(pair(wv.x), xa.xy) + dot(pair(wv.y), xa.zw) + dot(pair(wv.z), xb.xy)
        + dot(pair(wv.w), xb.zw);
}

@compute @workgroup_size(WG)
fn main_vec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
            @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let row0 = (wid.y * nwg.x + wid.x) * R;
    if (row0 >= p.rows) {
        return;
    }
    let nr = min(R, p.rows - row0);
    var acc: array<f32, 4>;
    for (var r = 0u; r < 4u; r++) {
        acc[r] = 0.0;
    }
    if (DTYPE == 0u) {
        let words = p.cols / 4u;
        for (var j = lid; j < words; j += WG) {
            let xv = x4[j];
            for (var r = 0u; r < nr; r++) {
                acc[r] += dot(bitcast<vec4<f32>>(w4[(row0 + r) * words + j]), xv);
            }
        }
    } else {
        let words = p.cols / 8u;
        for (var j = lid; j < words; j += WG) {
            let xa = x4[2u * j];
            let xb = x4[2u * j + 1u];
            for (var r = 0u; r < nr; r++) {
                acc[r] += dot8(w4[(row0 + r) * words + j], xa, xb);
            }
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
