// The routed experts of a MoE block, reading only the selected experts' weights (grouped: one
// dispatch per stage for every token and every selected expert, expert ids read on the device):
//   gate_up: act[t, s, r] = silu(gate[e] . x[t])_r * (up[e] . x[t])_r,   e = ids[t, s]
//   down:    out[t, c]    = sum_s weights[t, s] * (down[e] . act[t, s])_c  (s in order)
//
// Shapes: x: [n, H] f32; ids, weights: [n, K]; gate, up: [E * F, H] f32 (expert e's rows
// e F .. (e + 1) F); down: [E * H, F] f32; act: [n, K, F] scratch; out: [n, H].
// Workgroup: WG invocations (default 64) per output row (gate_up: one (t, s, r); down: one (t, c)),
// striding over the row's inputs (coalesced), reduced with subgroupAdd then across subgroups
// through shared memory (any subgroup size >= 4). `down` sums the K experts of a token in a fixed
// order (no atomics: bit-reproducible). Expert ids are clamped to E - 1 so a bad id cannot read
// outside the weights.
// Shared memory: 2 * 64 f32.

override WG: u32 = 64;

struct Params {
    n: u32,
    top_k: u32,
    hidden: u32,
    ff: u32,
    n_experts: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> weights: array<f32>;
@group(0) @binding(3) var<storage, read> gate: array<f32>;
@group(0) @binding(4) var<storage, read> up: array<f32>;
@group(0) @binding(5) var<storage, read> down: array<f32>;
@group(0) @binding(6) var<storage, read_write> act: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

var<workgroup> red_a: array<f32, 64>;
var<workgroup> red_b: array<f32, 64>;

fn expert(slot: u32) -> u32 {
    return min(ids[slot], p.n_experts - 1u);
}

@compute @workgroup_size(WG)
fn gate_up(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
           @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let idx = wid.y * nwg.x + wid.x;
    if (idx >= p.n * p.top_k * p.ff) {
        return;
    }
    let slot = idx / p.ff;
    let r = idx % p.ff;
    let t = slot / p.top_k;
    let wrow = (expert(slot) * p.ff + r) * p.hidden;
    var g = 0.0;
    var u = 0.0;
    for (var c = lid; c < p.hidden; c += WG) {
        let xv = x[t * p.hidden + c];
        g += gate[wrow + c] * xv;
        u += up[wrow + c] * xv;
    }
    let sg = subgroupAdd(g);
    let su = subgroupAdd(u);
    if (sg_lane == 0u) {
        red_a[sg_id] = sg;
        red_b[sg_id] = su;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var tg = 0.0;
        var tu = 0.0;
        for (var s = 0u; s < n_sg; s++) {
            tg += red_a[s];
            tu += red_b[s];
        }
        act[idx] = (tg / (1.0 + exp(-tg))) * tu;
    }
}

@compute @workgroup_size(WG)
fn down_sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
            @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let idx = wid.y * nwg.x + wid.x;
    if (idx >= p.n * p.hidden) {
        return;
    }
    let t = idx / p.hidden;
    let c = idx % p.hidden;
    var total = 0.0;
    for (var s = 0u; s < p.top_k; s++) {
        let slot = t * p.top_k + s;
        let wrow = (expert(slot) * p.hidden + c) * p.ff;
        var d = 0.0;
        for (var f = lid; f < p.ff; f += WG) {
            d += down[wrow + f] * act[slot * p.ff + f];
        }
        let sd = subgroupAdd(d);
        if (sg_lane == 0u) {
            red_a[sg_id] = sd;
        }
        workgroupBarrier();
        var dsum = 0.0;
        for (var k = 0u; k < n_sg; k++) {
            dsum += red_a[k];
        }
        total += weights[slot] * dsum;
        // red_a is rewritten for the next expert.
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[idx] = total;
    }
}
