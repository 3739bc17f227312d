// Mixture-of-Experts routing (vkllm_cpu::moe_route): per token, p = softmax(logits), the top_k
// experts by p (largest first, ties to the lower index), optionally renormalised by their sum.
//
// Shapes: logits: [n, E] f32; ids: [n, top_k] u32; weights: [n, top_k] f32. top_k <= 32,
// E <= WG * PER. With `shared` (vkllm_cpu::moe_route_shared) a shared expert takes a last slot:
// logits rows [n, E + 1] (the router's, then the shared expert's gate logit), outputs
// [n, top_k + 1] whose last entry is expert E with weight sigmoid(gate logit).
// Workgroup: one per token, WG invocations; invocation i holds experts i, i + WG, ... in
// registers. Max and softmax sum are workgroup reductions; each of the top_k picks is a
// workgroup argmax (subgroup max/min, then across subgroups through shared memory; any
// subgroup size). A decode step routes one token: a single invocation walking the experts
// top_k times was most of a 35B-A3B decode step.
// Shared memory: 3 x 64 words.

override WG: u32 = 128;
const PER: u32 = 8u;

struct Params {
    n: u32,
    n_experts: u32,
    top_k: u32,
    renormalize: u32,
    with_shared: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> weights: array<f32>;

var<workgroup> red_v: array<f32, 64>;
var<workgroup> red_e: array<u32, 64>;
var<workgroup> chosen_w: array<f32, 32>;

// Workgroup max (op 0) or sum (op 1) of v; every invocation gets it.
fn wg_reduce(v: f32, op: u32, sg_id: u32, sg_lane: u32, n_sg: u32) -> f32 {
    var s: f32;
    if (op == 0u) {
        s = subgroupMax(v);
    } else {
        s = subgroupAdd(v);
    }
    if (sg_lane == 0u) {
        red_v[sg_id] = s;
    }
    workgroupBarrier();
    var r = red_v[0];
    for (var k = 1u; k < n_sg; k++) {
        if (op == 0u) {
            r = max(r, red_v[k]);
        } else {
            r += red_v[k];
        }
    }
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let t = wid.y * nwg.x + wid.x;
    if (t >= p.n) {
        return;
    }
    let base = t * (p.n_experts + p.with_shared);
    // Output slots per token.
    let kk = p.top_k + p.with_shared;
    var l: array<f32, PER>;
    var m = -3.0e38;
    for (var j = 0u; j < PER; j++) {
        let e = lid + j * WG;
        l[j] = -3.0e38;
        if (e < p.n_experts) {
            l[j] = logits[base + e];
            m = max(m, l[j]);
        }
    }
    m = wg_reduce(m, 0u, sg_id, sg_lane, n_sg);
    var part = 0.0;
    for (var j = 0u; j < PER; j++) {
        if (lid + j * WG < p.n_experts) {
            part += exp(l[j] - m);
        }
    }
    let sum = wg_reduce(part, 1u, sg_id, sg_lane, n_sg);
    // Probabilities; -1 marks experts absent or already chosen.
    var pr: array<f32, PER>;
    for (var j = 0u; j < PER; j++) {
        pr[j] = -1.0;
        if (lid + j * WG < p.n_experts) {
            pr[j] = exp(l[j] - m) / sum;
        }
    }
    for (var s = 0u; s < p.top_k; s++) {
        // This invocation's best: the largest p, the lowest expert among equals (j ascending
        // is expert ascending).
        var bp = -1.0;
        var be = 0xffffffffu;
        for (var j = 0u; j < PER; j++) {
            if (pr[j] > bp) {
                bp = pr[j];
                be = lid + j * WG;
            }
        }
        let sp = subgroupMax(bp);
        var cand = 0xffffffffu;
        if (bp == sp) {
            cand = be;
        }
        let se = subgroupMin(cand);
        if (sg_lane == 0u) {
            red_v[sg_id] = sp;
            red_e[sg_id] = se;
        }
        workgroupBarrier();
        var gp = red_v[0];
        var ge = red_e[0];
        for (var k = 1u; k < n_sg; k++) {
            if (red_v[k] > gp || (red_v[k] == gp && red_e[k] < ge)) {
                gp = red_v[k];
                ge = red_e[k];
            }
        }
        workgroupBarrier();
        if (ge % WG == lid) {
            pr[ge / WG] = -1.0;
        }
        if (lid == 0u) {
            ids[t * kk + s] = ge;
            chosen_w[s] = gp;
        }
    }
    if (lid == 0u) {
        var total = 0.0;
        for (var s = 0u; s < p.top_k; s++) {
            total += chosen_w[s];
        }
        for (var s = 0u; s < p.top_k; s++) {
            var w = chosen_w[s];
            if (p.renormalize != 0u) {
                w = w / total;
            }
            weights[t * kk + s] = w;
        }
        if (p.with_shared != 0u) {
            ids[t * kk + p.top_k] = p.n_experts;
            weights[t * kk + p.top_k] = 1.0 / (1.0 + exp(-logits[base + p.n_experts]));
        }
    }
}
