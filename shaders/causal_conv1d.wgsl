// Depthwise causal 1-D convolution with optional SiLU and a rolling state: the short
// convolution of a Gated DeltaNet layer (vkllm_cpu::causal_conv1d).
//   out[t, c] = act(sum_j w[c, j] * xe[t + j, c]),  xe = state ++ x (rows),
//   then state = the last K - 1 rows of xe.
//
// The state holds several sequences, slot-major: slot s owns rows s (K - 1) .. (s + 1) (K - 1).
// Two modes (push constant `per_row`):
// - sequence (0): the n rows are consecutive tokens of the sequence in slot `slot` (prefill,
//   single-sequence decode);
// - per row (1): row t is one token of the sequence in slot t (the batched decode step); a row
//   whose position pos[t] >= capacity is an idle slot: its state is not touched and its output
//   row is written as zeros.
//
// Shapes: x, out: [n, C] f32; w: [C, K] f32; state: [slots, K - 1, C] f32 (read and rewritten);
// pos: [n] u32 (read in per-row mode only).
// Workgroup: WG invocations (default 64), one channel each, over a block of TB consecutive rows
// (grid: channel blocks x row blocks). Outputs are independent given the inputs; only the first
// K - 1 outputs of a sequence read its state, and only the first row block (which holds them)
// rewrites it, after its own reads, so row blocks run in parallel. Reads and writes of x / out /
// state are coalesced across the channels of a workgroup.
// The state is rewritten row by row in increasing order: row r takes xe[len + r], which is
// either an input row or an old state row with index len + r > r, not yet overwritten.
// Shared memory: none.

override WG: u32 = 64;
// Rows per invocation.
override TB: u32 = 16;

struct Params {
    n: u32,
    channels: u32,
    kernel: u32,
    apply_silu: u32,
    per_row: u32,
    slot: u32,
    capacity: u32,
    pad: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> pos: array<u32>;

// Row r of state ++ x for the sequence whose state starts at `base` and whose first input row
// is t0.
fn xe(r: u32, c: u32, base: u32, t0: u32) -> f32 {
    let hist = p.kernel - 1u;
    if (r < hist) {
        return state[base + r * p.channels + c];
    }
    return x[(t0 + r - hist) * p.channels + c];
}

// Outputs of rows t0 .. t0 + len of the sequence whose state starts at `base` and whose first
// input row is `first`, channel c.
fn outputs(c: u32, first: u32, t0: u32, len: u32, base: u32) {
    for (var t = t0; t < t0 + len; t++) {
        var acc = 0.0;
        for (var j = 0u; j < p.kernel; j++) {
            acc += w[c * p.kernel + j] * xe(t + j, c, base, first);
        }
        if (p.apply_silu != 0u) {
            // exp(-acc) is inf for acc < -88: acc / inf = -0, the right limit.
            acc = acc / (1.0 + exp(-acc));
        }
        out[(first + t) * p.channels + c] = acc;
    }
}

// The state of the sequence at `base` after its `len` rows (first input row `first`).
fn roll_state(c: u32, first: u32, len: u32, base: u32) {
    for (var r = 0u; r + 1u < p.kernel; r++) {
        state[base + r * p.channels + c] = xe(len + r, c, base, first);
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = wid.y * nwg.x + wid.x;
    let cblocks = (p.channels + WG - 1u) / WG;
    let c = (blk % cblocks) * WG + lid;
    let t0 = (blk / cblocks) * TB;
    if (c >= p.channels || t0 >= p.n) {
        return;
    }
    let len = min(TB, p.n - t0);
    let slot_len = (p.kernel - 1u) * p.channels;
    if (p.per_row == 0u) {
        let base = p.slot * slot_len;
        outputs(c, 0u, t0, len, base);
        if (t0 == 0u) {
            roll_state(c, 0u, p.n, base);
        }
        return;
    }
    for (var t = t0; t < t0 + len; t++) {
        if (pos[t] >= p.capacity) {
            out[t * p.channels + c] = 0.0;
        } else {
            outputs(c, t, 0u, 1u, t * slot_len);
            roll_state(c, t, 1u, t * slot_len);
        }
    }
}
