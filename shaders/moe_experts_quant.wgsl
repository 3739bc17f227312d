// The routed experts of a MoE block over llama.cpp-quantized expert weights (the stacked GGUF
// blocks, dequantized in registers), reading only the selected experts' rows (grouped: one
// dispatch per stage for every token and every selected expert, expert ids read on the device):
//   gate_up (stage 0, w = gate): act[t, s, r] = gate[e] . x[t]
//   gate_up (stage 1, w = up):   act[t, s, r] = silu(act[t, s, r]) * (up[e] . x[t])
//   gate_up (stage 2, w = gate, w2 = up, one format): act[t, s, r] = silu(gate[e] . x[t]) *
//                                (up[e] . x[t]) in one pass
//   down_sum (w = down):         out[t, c]    = sum_s weights[t, s] * (down[e] . act[t, s])
// with e = ids[t, s]. Down is a dispatch of its own because it binds its weight buffer as `w`
// with its own format (QTYPE/BLOCK/TS overrides): files mix formats (Q4_K gate/up with Q6_K
// down); gate and up share one dispatch (stage 2) when they share a format.
//
// Shapes: w: expert e's rows e R .. (e + 1) R of a [E R, C] block matrix (gate/up: R = F,
// C = H; down: R = H, C = F), C a multiple of BLOCK; x: [n, H] f32; ids, weights: [n, K];
// act: [n, K, F] f32; out: [n, H] f32.
// Workgroup: teams of LPR invocations, one output row (one (t, s, r) or one (t, c)) per team,
// WG / LPR rows per workgroup (LPR = WG: one row per workgroup, the reference launch). Lane l of
// a team takes the 16-element units l, l + LPR, ... of the row (consecutive lanes read
// consecutive blocks); the team's sum is a subgroup reduction (clusters of LPR lanes in a larger
// subgroup, then across subgroups through `red` for a team wider than the subgroup;
// matvec_team.inc.wgsl). `down_sum` weighs and sums the K experts of a token in each lane, in a
// fixed order, before the team's sum (no atomics: bit-reproducible). Expert ids are clamped to
// E - 1 so a bad id cannot read outside the weights. Shared memory: 64 f32.
// The block decoding (QTYPE/BLOCK/TS overrides, `dequant16`) is quant_blocks.inc.wgsl:
// #include quant_blocks.inc.wgsl
// #include quant_words.inc.wgsl
// #include matvec_team.inc.wgsl

override WG: u32 = 128;
override LPR: u32 = 16;

struct Params {
    n: u32,
    top_k: u32,
    hidden: u32,
    ff: u32,
    n_experts: u32,
    stage: u32,
    pad0: u32,
    pad1: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read> weights: array<f32>;
@group(0) @binding(4) var<storage, read_write> act: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read> w2: array<u32>;

var<workgroup> red: array<f32, 64>;

// Which weight binding `wd` reads (w2: stage 2's up matrix).
var<private> from_w2: bool = false;

// What quant_blocks.inc.wgsl reads the weight through.
fn wd(i: u32) -> u32 {
    if (from_w2) {
        return w2[i];
    }
    return w[i];
}

fn expert(slot: u32) -> u32 {
    return min(ids[slot], p.n_experts - 1u);
}

// Team lane `tl`'s share of row `row` (of `cols` elements) of `w` dotted with the f32 vector at
// `v` of `x` (from_act false) or `act` (true).
fn partial_dot(row: u32, cols: u32, v: u32, from_act: bool, tl: u32) -> f32 {
    let rb = (cols / BLOCK) * TS;
    let upb = BLOCK / 16u;
    var acc = 0.0;
    for (var u = tl; u < cols / 16u; u += LPR) {
        let wv = dequant16(row * rb + (u / upb) * TS, u % upb);
        var s = 0.0;
        for (var i = 0u; i < 16u; i++) {
            var xv: f32;
            if (from_act) {
                xv = act[v + 16u * u + i];
            } else {
                xv = x[v + 16u * u + i];
            }
            s += wv[i] * xv;
        }
        acc += s;
    }
    return acc;
}

// The total of every lane's v over its team (all invocations call it, in uniform control flow).
fn team_total(v: f32, team: u32, sg_id: u32, sg_lane: u32, sg_size: u32) -> f32 {
    var s: f32;
    if (sg_size <= LPR) {
        s = subgroupAdd(v);
    } else {
        s = cluster_sum(v, sg_lane / LPR, sg_size);
    }
    if (sg_size < LPR) {
        if (sg_lane == 0u) {
            red[sg_id] = s;
        }
        workgroupBarrier();
        s = red_team_sum(team, 0u, 1u, sg_size);
        // red is rewritten by the next call.
        workgroupBarrier();
    }
    return s;
}

@compute @workgroup_size(WG)
fn gate_up(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
           @builtin(subgroup_size) sg_size: u32) {
    let rows = p.n * p.top_k * p.ff;
    let first = (wid.y * nwg.x + wid.x) * (WG / LPR);
    if (first >= rows) {
        return;
    }
    let v = sg_id * sg_size + sg_lane;
    let team = v / LPR;
    let tl = v % LPR;
    let idx = first + team;
    let live = idx < rows;
    var d = 0.0;
    var d2 = 0.0;
    if (live) {
        let slot = idx / p.ff;
        let row = expert(slot) * p.ff + idx % p.ff;
        let v = (slot / p.top_k) * p.hidden;
        d = partial_dot(row, p.hidden, v, false, tl);
        if (p.stage == 2u) {
            from_w2 = true;
            d2 = partial_dot(row, p.hidden, v, false, tl);
        }
    }
    let total = team_total(d, team, sg_id, sg_lane, sg_size);
    var total2 = 0.0;
    if (p.stage == 2u) {
        total2 = team_total(d2, team, sg_id, sg_lane, sg_size);
    }
    if (live && tl == 0u) {
        if (p.stage == 0u) {
            act[idx] = total;
        } else if (p.stage == 1u) {
            let g = act[idx];
            act[idx] = (g / (1.0 + exp(-g))) * total;
        } else {
            act[idx] = (total / (1.0 + exp(-total))) * total2;
        }
    }
}

@compute @workgroup_size(WG)
fn down_sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
            @builtin(subgroup_size) sg_size: u32) {
    let rows = p.n * p.hidden;
    let first = (wid.y * nwg.x + wid.x) * (WG / LPR);
    if (first >= rows) {
        return;
    }
    let v = sg_id * sg_size + sg_lane;
    let team = v / LPR;
    let tl = v % LPR;
    let idx = first + team;
    let live = idx < rows;
    var acc = 0.0;
    if (live) {
        let t = idx / p.hidden;
        let c = idx % p.hidden;
        for (var s = 0u; s < p.top_k; s++) {
            let slot = t * p.top_k + s;
            let row = expert(slot) * p.hidden + c;
            acc += weights[slot] * partial_dot(row, p.ff, slot * p.ff, true, tl);
        }
    }
    let total = team_total(acc, team, sg_id, sg_lane, sg_size);
    if (live && tl == 0u) {
        out[idx] = total;
    }
}
