// x *= sigmoid(gate), elementwise (the gated attention's output gate) or one gate per row of
// `cols` (the shared expert's scalar gate): vkllm_cpu::sigmoid_mul.
//
// Shapes: x: [n] f32 (rows of `cols`), read and written; gate: [n] or [n / cols] f32.
// Workgroup: WG invocations (default 256), one element each, 2-D grid as in elementwise.wgsl.
// Shared memory: none.

override WG: u32 = 256;

struct Params {
    n: u32,
    cols: u32,
    per_row: u32,
    pad: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> gate: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if (i >= p.n) {
        return;
    }
    var gi = i;
    if (p.per_row != 0u) {
        gi = i / p.cols;
    }
    x[i] = x[i] * (1.0 / (1.0 + exp(-gate[gi])));
}
