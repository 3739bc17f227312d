// RMSNorm over rows, in transformers' order: r = 1 / sqrt(mean(x^2) + eps), out = (x * r) * (offset + w).
//   main:        out = rmsnorm(x)                            (hidden norm; q/k per-head norm with rows = tokens * heads)
//   add_rmsnorm: residual += x, out = rmsnorm(residual)      (the residual add fused in front of the norm)
//
// Shapes: x, out, residual: [rows, n] f32; weight: [n] f32. `offset` is 0 (Llama/Qwen) or 1 (Gemma's 1 + w).
// Workgroup: WG invocations (default 256) per row; each strides over the row (coalesced), the
// sum of squares is reduced with subgroupAdd then across subgroups through `red` (correct for any
// subgroup size >= 4: at most WG / 4 = 64 partial sums). One row per workgroup: rows are short
// (<= 8192) so one pass over a row by 256 invocations is enough; the row is read twice (the
// second read hits cache).
// Shared memory: 64 f32 (256 B).
// #include reduce.inc.wgsl
// HALF (main only): 1 also writes the output rows as f16 pairs to out16 ([rows, n / 2] u32, n
// even), for a cooperative-matrix matmul that reads its X as f16 (`to_f16.wgsl`'s layout and
// rounding, saving that dispatch): invocation j normalises the pair (2j, 2j + 1) and writes
// both f32 values and their f16 pair (the same arithmetic as the f32-only path).
override HALF: u32 = 0;

override WG: u32 = 256;

struct Params {
    rows: u32,
    n: u32,
    eps: f32,
    weight_offset: f32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> residual: array<f32>;

@group(0) @binding(4) var<storage, read_write> out16: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.n;
    var ss = 0.0;
    for (var i = lid; i < p.n; i += WG) {
        let v = x[base + i];
        ss += v * v;
    }
    let total = wg_sum(ss, sg_id, sg_lane, n_sg);
    let r = 1.0 / sqrt(total / f32(p.n) + p.eps);
    if (HALF == 1u) {
        // Pairs (2j, 2j + 1): the f32 rows and their f16 copy from the same registers (no
        // storage barrier and no read-back of `out`). Invocation j reads only the elements it
        // writes, and every read of the sums above is behind wg_sum's barrier, so `out` may be
        // `x` here too.
        for (var j = lid; 2u * j < p.n; j += WG) {
            let e = base + 2u * j;
            let y0 = (x[e] * r) * (p.weight_offset + weight[2u * j]);
            let y1 = (x[e + 1u] * r) * (p.weight_offset + weight[2u * j + 1u]);
            out[e] = y0;
            out[e + 1u] = y1;
            out16[base / 2u + j] = pack2x16float(vec2<f32>(y0, y1));
        }
        return;
    }
    for (var i = lid; i < p.n; i += WG) {
        out[base + i] = (x[base + i] * r) * (p.weight_offset + weight[i]);
    }
}

@compute @workgroup_size(WG)
fn add_rmsnorm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
               @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.n;
    var ss = 0.0;
    for (var i = lid; i < p.n; i += WG) {
        let h = residual[base + i] + x[base + i];
        residual[base + i] = h;
        ss += h * h;
    }
    let total = wg_sum(ss, sg_id, sg_lane, n_sg);
    let r = 1.0 / sqrt(total / f32(p.n) + p.eps);
    // Each invocation re-reads only the elements it wrote itself.
    for (var i = lid; i < p.n; i += WG) {
        out[base + i] = (residual[base + i] * r) * (p.weight_offset + weight[i]);
    }
}
