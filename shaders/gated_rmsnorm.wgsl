// RMSNorm gated by SiLU (the output norm of a Gated DeltaNet layer, vkllm_cpu::gated_rmsnorm):
//   out = (w * (x * r)) * silu(z),  r = 1 / sqrt(mean(x^2) + eps)
//
// Shapes: x, z, out: [rows, n] f32 (one row per token and value head); w: [n] f32 (plain weight).
// Workgroup: WG invocations (default 64) per row, striding over it; the sum of squares is reduced
// with subgroupAdd, then across subgroups (`wg_sum`, reduce.inc.wgsl). Rows are short (the value
// head size, 128 in Qwen3.5), hence the small workgroup.
// Shared memory: 64 f32.
// #include reduce.inc.wgsl

override WG: u32 = 64;

struct Params {
    rows: u32,
    n: u32,
    eps: f32,
    pad: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

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
    for (var i = lid; i < p.n; i += WG) {
        let zv = z[base + i];
        out[base + i] = (weight[i] * (x[base + i] * r)) * (zv / (1.0 + exp(-zv)));
    }
}
