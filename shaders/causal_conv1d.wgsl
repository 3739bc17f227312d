// Depthwise causal 1-D convolution with optional SiLU and a rolling state: the short
// convolution of a Gated DeltaNet layer (vkllm_cpu::causal_conv1d).
//   out[t, c] = act(sum_j w[c, j] * xe[t + j, c]),  xe = state ++ x (rows),
//   then state = the last K - 1 rows of xe.
//
// Shapes: x, out: [n, C] f32; w: [C, K] f32; state: [K - 1, C] f32 (read and rewritten).
// Workgroup: WG invocations (default 64), one channel each; a channel is sequential in t (the
// state carries over) and channels are independent, so each invocation walks the n tokens in
// order. Reads and writes of x / out / state are coalesced across the channels of a workgroup.
// The state is rewritten row by row in increasing order: row r takes xe[n + r], which is either
// an input row or an old state row with index n + r > r, not yet overwritten.
// Shared memory: none.

override WG: u32 = 64;

struct Params {
    n: u32,
    channels: u32,
    kernel: u32,
    apply_silu: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn xe(r: u32, c: u32) -> f32 {
    let hist = p.kernel - 1u;
    if (r < hist) {
        return state[r * p.channels + c];
    }
    return x[(r - hist) * p.channels + c];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let c = (wid.y * nwg.x + wid.x) * WG + lid;
    if (c >= p.channels) {
        return;
    }
    for (var t = 0u; t < p.n; t++) {
        var acc = 0.0;
        for (var j = 0u; j < p.kernel; j++) {
            acc += w[c * p.kernel + j] * xe(t + j, c);
        }
        if (p.apply_silu != 0u) {
            // exp(-acc) is inf for acc < -88: acc / inf = -0, the right limit.
            acc = acc / (1.0 + exp(-acc));
        }
        out[t * p.channels + c] = acc;
    }
    for (var r = 0u; r + 1u < p.kernel; r++) {
        state[r * p.channels + c] = xe(p.n + r, c);
    }
}
