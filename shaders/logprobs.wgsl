// Log-probabilities for API output: the chosen token's logprob and the top-n (id, logprob) of
// each row, written into a ring of per-step records so several decode steps can run in one submit.
//
// Reference: vkllm_cpu::sampler::{log_softmax, top_logprobs} (f64 there, f32 here: the tolerance
// is stated in the parity test). logprob_i = l_i - (m + ln(sum_j exp(l_j - m))), m = max l.
// Top-n order: logit descending (NaN ranks as -inf), then id ascending - the CPU's order.
//
// Shapes: logits [n_rows, V] f32; chosen [n_rows] u32 (the sampled ids); want [n_rows] u32 (top-n
// for the row, 0..=n_top; 0xffffffff: no logprobs, the row is skipped); ctl [1+] u32, ctl[0] is the
// ring step; out: records of `2 + 2 n_top` words at ((ctl[0] * n_rows) + row) * stride:
// [chosen logprob (f32 bits), count, (id, logprob bits) x count].
// Workgroup: one per row, WG = 256 invocations; n_top + 2 passes over the row with workgroup
// reductions in shared memory. Shared memory: 256 x (f32 + u32) = 2 KiB.

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;

struct Params {
    v: u32,
    n_rows: u32,
    n_top: u32,
    stride: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> chosen: array<u32>;
@group(0) @binding(2) var<storage, read> want: array<u32>;
@group(0) @binding(3) var<storage, read> ctl: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

var<workgroup> red_v: array<f32, 256>;
var<workgroup> red_i: array<u32, 256>;

fn key(x: f32) -> f32 {
    if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u) {
        return bitcast<f32>(0xff800000u);
    }
    return x;
}

// (a, ai) ranks before (b, bi).
fn before(a: f32, ai: u32, b: f32, bi: u32) -> bool {
    if (bi == NONE) {
        return ai != NONE;
    }
    if (ai == NONE) {
        return false;
    }
    return a > b || (a == b && ai < bi);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.x;
    let n = want[row];
    if (n == NONE) {
        return;
    }
    let n_top = min(n, p.n_top);
    let base = row * p.v;
    let rec = (ctl[0] * p.n_rows + row) * p.stride;
    let neg_inf = bitcast<f32>(0xff800000u);

    // max (NaN ignored, as f32::max does)
    var m = neg_inf;
    for (var i = lid; i < p.v; i += WG) {
        let x = logits[base + i];
        if (x > m) {
            m = x;
        }
    }
    red_v[lid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            red_v[lid] = max(red_v[lid], red_v[lid + s]);
        }
        workgroupBarrier();
    }
    let mx = red_v[0];
    workgroupBarrier();
    var acc = 0.0;
    for (var i = lid; i < p.v; i += WG) {
        acc += exp(logits[base + i] - mx);
    }
    red_v[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            red_v[lid] = red_v[lid] + red_v[lid + s];
        }
        workgroupBarrier();
    }
    var lse = mx + log(red_v[0]);
    if (mx == neg_inf) {
        lse = 0.0;
    }
    workgroupBarrier();
    if (lid == 0u) {
        let c = chosen[row];
        var lp = neg_inf;
        if (c < p.v && mx != neg_inf) {
            lp = logits[base + c] - lse;
        }
        out[rec] = bitcast<u32>(lp);
        out[rec + 1u] = n_top;
    }

    // top-n: each pass takes the best element ranked after the previous pick
    var pv = 0.0;
    var pi = NONE;
    for (var t = 0u; t < n_top; t++) {
        var bv = 0.0;
        var bi = NONE;
        for (var i = lid; i < p.v; i += WG) {
            let x = key(logits[base + i]);
            let after_prev = pi == NONE || before(pv, pi, x, i);
            if (after_prev && before(x, i, bv, bi)) {
                bv = x;
                bi = i;
            }
        }
        red_v[lid] = bv;
        red_i[lid] = bi;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s /= 2u) {
            if (lid < s && before(red_v[lid + s], red_i[lid + s], red_v[lid], red_i[lid])) {
                red_v[lid] = red_v[lid + s];
                red_i[lid] = red_i[lid + s];
            }
            workgroupBarrier();
        }
        pv = red_v[0];
        pi = red_i[0];
        workgroupBarrier();
        if (lid == 0u) {
            var lp = neg_inf;
            if (pi != NONE && mx != neg_inf) {
                lp = logits[base + pi] - lse;
            }
            out[rec + 2u + 2u * t] = pi;
            out[rec + 3u + 2u * t] = bitcast<u32>(lp);
        }
    }
}
