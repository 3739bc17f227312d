// Mixture-of-Experts routing (vkllm_cpu::moe_route): per token, p = softmax(logits), the top_k
// experts by p (largest first, ties to the lower index), optionally renormalised by their sum.
//
// Shapes: logits: [n, E] f32; ids: [n, top_k] u32; weights: [n, top_k] f32. top_k <= 32.
// Workgroup: WG invocations (default 64), one token each: the expert count is small (<= 512)
// and top_k passes over it cost O(top_k^2 E) per token, far below the router matvec before it.
// Shared memory: none.

override WG: u32 = 64;

struct Params {
    n: u32,
    n_experts: u32,
    top_k: u32,
    renormalize: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> weights: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = (wid.y * nwg.x + wid.x) * WG + lid;
    if (t >= p.n) {
        return;
    }
    let base = t * p.n_experts;
    var m = -3.0e38;
    for (var e = 0u; e < p.n_experts; e++) {
        m = max(m, logits[base + e]);
    }
    var sum = 0.0;
    for (var e = 0u; e < p.n_experts; e++) {
        sum += exp(logits[base + e] - m);
    }
    var chosen: array<u32, 32>;
    var total = 0.0;
    for (var s = 0u; s < p.top_k; s++) {
        var best = 0u;
        var best_p = -1.0;
        for (var e = 0u; e < p.n_experts; e++) {
            var taken = false;
            for (var q = 0u; q < s; q++) {
                taken = taken || chosen[q] == e;
            }
            let pe = exp(logits[base + e] - m) / sum;
            // Strictly greater: the first of equal probabilities (the lower index) wins.
            if (!taken && pe > best_p) {
                best_p = pe;
                best = e;
            }
        }
        chosen[s] = best;
        ids[t * p.top_k + s] = best;
        weights[t * p.top_k + s] = best_p;
        total += best_p;
    }
    if (p.renormalize != 0u) {
        for (var s = 0u; s < p.top_k; s++) {
            weights[t * p.top_k + s] = weights[t * p.top_k + s] / total;
        }
    }
}
