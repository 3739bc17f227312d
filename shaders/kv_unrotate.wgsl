// The rotation of V units (rotated q4_0, tq4) undone on attention's output
// (vkllm_cpu::kv_quant::unrotate): an attention that reads such a V cache in place sums rotated
// values, so each 64-value unit of its output (heads of whole units) is rotated back in place,
// x_j = D_jj (1/8) sum_i H_ji y_i (kv_quant.inc.wgsl's R; sums over i = 0..63 in order, every
// product exact).
//
// Shapes: x [n] f32, n a multiple of 64, read and written. Workgroup: 64 invocations per unit
// (2-D grid: unit = wid.y * num_workgroups.x + wid.x), one value each, through shared memory
// (64 f32).
//
// #include kv_quant.inc.wgsl

struct Params {
    n: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read_write> x: array<f32>;

var<workgroup> y: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let u = wid.y * nwg.x + wid.x;
    // Workgroup-uniform: every invocation reaches the barrier or none does.
    if (64u * u >= p.n) {
        return;
    }
    let e = 64u * u + lid;
    y[lid] = x[e];
    workgroupBarrier();
    var r = 0.0;
    for (var i = 0u; i < 64u; i++) {
        r += kvq_hadamard(lid, i) * y[i];
    }
    x[e] = r * 0.125 * kvq_sign(lid);
}
