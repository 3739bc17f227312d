// The gated delta rule over n tokens in order (recurrent form), gates included: the token mixer
// of a Gated DeltaNet layer (vkllm_cpu::delta_gates + vkllm_cpu::gated_delta_rule).
// Per value head h (key head kh = h / (HV / HK), or h % HK when the value heads are tiled), state
// S [DK, DV] at state[(h * DK + i) * DV + j]:
//   g = -exp(a_log[h]) * softplus(a[t, h] + dt_bias[h]),  beta = sigmoid(b[t, h])
//   q = l2norm(q) / sqrt(DK),  k = l2norm(k)           (eps 1e-6)
//   S = exp(g) S;  delta = beta (v - S^T k);  S += k delta^T;  out = S^T q
//
// The state holds several sequences, slot-major: slot s owns [HV, DK, DV] values from
// s HV DK DV. Two modes (push constant `per_row`):
// - sequence (0): the n rows are consecutive tokens of the sequence in slot `slot` (prefill,
//   single-sequence decode);
// - per row (1): row t is one token of the sequence in slot t (the batched decode step); a row
//   whose position pos[t] >= capacity is an idle slot: its state is not touched and its output
//   row is written as zeros.
//
// Shapes: qkv: [n, 2 HK DK + HV DV] f32 rows [q (HK DK) | k (HK DK) | v (HV DV)] (the conv
// output); a, b: [n, HV]; a_log, dt_bias: [HV]; state: [slots, HV, DK, DV] (read and updated);
// out: [n, HV DV]; pos: [n] u32 (read in per-row mode only); z: [n, HV DV], norm_w: [DV] (read by
// main_wide with NORM = 1 only).
// Workgroup: WG invocations (default 64) per (row in per-row mode, head, block of WG columns
// of S); invocation j owns
// column j: per token it reads the column once to form S^T k, then writes the updated column and
// forms S^T q on the way (the state stays in the buffer, 2 reads + 1 write of DK values per token;
// columns are coalesced across the workgroup). q and k of the token are normalised cooperatively
// into shared memory (subgroupAdd, then across subgroups: any subgroup size >= 4). Prefill walks
// the tokens in order (the chunked parallel form is the CPU's; both agree, see vkllm-cpu).
// Shared memory: 4 * 256 f32 (4 KiB; main_wide adds its partial sums); DK <= 256.

override WG: u32 = 64;

struct Params {
    n: u32,
    hk: u32,
    hv: u32,
    dk: u32,
    dv: u32,
    col_blocks: u32,
    tiled: u32,
    per_row: u32,
    slot: u32,
    capacity: u32,
    eps: f32,
    pad1: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> a_log: array<f32>;
@group(0) @binding(4) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> state: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read> pos: array<u32>;
// main_wide with NORM = 1 only: the gate z ([n, HV DV]) and weight ([DV]) of the output norm.
@group(0) @binding(8) var<storage, read> z: array<f32>;
@group(0) @binding(9) var<storage, read> norm_w: array<f32>;

var<workgroup> qs: array<f32, 256>;
var<workgroup> ks: array<f32, 256>;
// Per-subgroup partial sums (up to 1,024 invocations in subgroups of at least 4).
var<workgroup> red_q: array<f32, 256>;
var<workgroup> red_k: array<f32, 256>;
var<workgroup> idle_wg: u32;

// Token row `row`'s q and k of key head kh into qs / ks (invocations lid, lid + wg, ...) and
// their inverse L2 norms (q's times 1 / sqrt(DK)), summed over the workgroup through red_q /
// red_k. Uniform control flow (it has a barrier).
fn load_qk(row: u32, kh: u32, lid: u32, wg: u32, sg_id: u32, sg_lane: u32, n_sg: u32) -> vec2<f32> {
    var sq = 0.0;
    var sk = 0.0;
    for (var i = lid; i < p.dk; i += wg) {
        let qv = qkv[row + kh * p.dk + i];
        let kv = qkv[row + p.hk * p.dk + kh * p.dk + i];
        qs[i] = qv;
        ks[i] = kv;
        sq += qv * qv;
        sk += kv * kv;
    }
    let s1 = subgroupAdd(sq);
    let s2 = subgroupAdd(sk);
    if (sg_lane == 0u) {
        red_q[sg_id] = s1;
        red_k[sg_id] = s2;
    }
    workgroupBarrier();
    var tq = 0.0;
    var tk = 0.0;
    for (var g = 0u; g < n_sg; g++) {
        tq += red_q[g];
        tk += red_k[g];
    }
    return vec2<f32>((1.0 / sqrt(f32(p.dk))) / sqrt(tq + 1e-6), 1.0 / sqrt(tk + 1e-6));
}

fn softplus(x: f32) -> f32 {
    if (x > 20.0) {
        return x;
    }
    return log(1.0 + exp(x));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    var blk = wid.y * nwg.x + wid.x;
    var t0 = 0u;
    var t1 = p.n;
    var slot = p.slot;
    if (p.per_row != 0u) {
        let per_row_blocks = p.hv * p.col_blocks;
        t0 = blk / per_row_blocks;
        t1 = t0 + 1u;
        slot = t0;
        blk = blk % per_row_blocks;
        // Uniform per workgroup: the whole workgroup leaves together.
        if (t0 >= p.n) {
            return;
        }
    }
    let h = blk / p.col_blocks;
    if (h >= p.hv) {
        return;
    }
    let j = (blk % p.col_blocks) * WG + lid;
    let owns_col = j < p.dv;
    if (p.per_row != 0u) {
        if (lid == 0u) {
            idle_wg = select(0u, 1u, pos[t0] >= p.capacity);
        }
        if (workgroupUniformLoad(&idle_wg) != 0u) {
            if (owns_col) {
                out[t0 * p.hv * p.dv + h * p.dv + j] = 0.0;
            }
            return;
        }
    }
    var kh = h / (p.hv / p.hk);
    if (p.tiled != 0u) {
        kh = h % p.hk;
    }
    let width = 2u * p.hk * p.dk + p.hv * p.dv;
    let decay_a = exp(a_log[h]);
    let sbase = (slot * p.hv + h) * p.dk * p.dv + j;
    for (var t = t0; t < t1; t++) {
        let row = t * width;
        let r = load_qk(row, kh, lid, WG, sg_id, sg_lane, n_sg);
        let rq = r.x;
        let rk = r.y;
        let g = -decay_a * softplus(a[t * p.hv + h] + dt_bias[h]);
        let beta = 1.0 / (1.0 + exp(-b[t * p.hv + h]));
        let decay = exp(g);
        if (owns_col) {
            var kv_mem = 0.0;
            for (var i = 0u; i < p.dk; i++) {
                kv_mem += (state[sbase + i * p.dv] * decay) * (ks[i] * rk);
            }
            let delta = (qkv[row + 2u * p.hk * p.dk + h * p.dv + j] - kv_mem) * beta;
            var o = 0.0;
            for (var i = 0u; i < p.dk; i++) {
                let s = state[sbase + i * p.dv] * decay + (ks[i] * rk) * delta;
                state[sbase + i * p.dv] = s;
                o += s * (qs[i] * rq);
            }
            out[t * p.hv * p.dv + h * p.dv + j] = o;
        }
        // qs, ks and the partial sums are rewritten for the next token.
        workgroupBarrier();
    }
}

// main_wide: the same recurrence with the state in registers. A workgroup of CW * RG
// invocations takes CW columns of one head's S (lane c of row group rg: column c, rows
// rg, rg + RG, ..., at most RPT = ceil(DK / RG) of them), reads them once before the first token
// and writes them once after the last; S^T k and S^T q are summed over the row groups through
// `parts`. More workgroups of more invocations than `main` (whose invocations walk a whole
// column twice per token), for the decode step.
override CW: u32 = 32;
override RG: u32 = 8;
override RPT: u32 = 16;
// CW * RG.
override WGW: u32 = 256;
// 1: each output row is written through the layer's gated RMSNorm (gated_rmsnorm.wgsl's
// formula, eps the push constant `eps`): out = (norm_w * (o * r)) * silu(z), r = 1 / sqrt(mean
// over the head of o^2 + eps); needs CW >= DV (one workgroup per head and row).
override NORM: u32 = 0;

var<workgroup> parts: array<f32, 1024>;

@compute @workgroup_size(WGW)
fn main_wide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
             @builtin(subgroup_invocation_id) sg_lane: u32,
             @builtin(num_subgroups) n_sg: u32) {
    var blk = wid.y * nwg.x + wid.x;
    var t0 = 0u;
    var t1 = p.n;
    var slot = p.slot;
    if (p.per_row != 0u) {
        let per_row_blocks = p.hv * p.col_blocks;
        t0 = blk / per_row_blocks;
        t1 = t0 + 1u;
        slot = t0;
        blk = blk % per_row_blocks;
        if (t0 >= p.n) {
            return;
        }
    }
    let h = blk / p.col_blocks;
    if (h >= p.hv) {
        return;
    }
    let c = lid % CW;
    let rg = lid / CW;
    let j = (blk % p.col_blocks) * CW + c;
    let owns_col = j < p.dv;
    if (p.per_row != 0u) {
        if (lid == 0u) {
            idle_wg = select(0u, 1u, pos[t0] >= p.capacity);
        }
        if (workgroupUniformLoad(&idle_wg) != 0u) {
            if (owns_col && rg == 0u) {
                out[t0 * p.hv * p.dv + h * p.dv + j] = 0.0;
            }
            return;
        }
    }
    var kh = h / (p.hv / p.hk);
    if (p.tiled != 0u) {
        kh = h % p.hk;
    }
    let width = 2u * p.hk * p.dk + p.hv * p.dv;
    let decay_a = exp(a_log[h]);
    let sbase = (slot * p.hv + h) * p.dk * p.dv + j;
    var s: array<f32, 32>;
    for (var r = 0u; r < RPT; r++) {
        let i = r * RG + rg;
        s[r] = 0.0;
        if (owns_col && i < p.dk) {
            s[r] = state[sbase + i * p.dv];
        }
    }
    for (var t = t0; t < t1; t++) {
        let row = t * width;
        let r = load_qk(row, kh, lid, WGW, sg_id, sg_lane, n_sg);
        let rq = r.x;
        let rk = r.y;
        let g = -decay_a * softplus(a[t * p.hv + h] + dt_bias[h]);
        let beta = 1.0 / (1.0 + exp(-b[t * p.hv + h]));
        let decay = exp(g);
        var kv_part = 0.0;
        for (var r = 0u; r < RPT; r++) {
            let i = r * RG + rg;
            if (i < p.dk) {
                kv_part += (s[r] * decay) * (ks[i] * rk);
            }
        }
        parts[rg * CW + c] = kv_part;
        workgroupBarrier();
        var kv_mem = 0.0;
        for (var q = 0u; q < RG; q++) {
            kv_mem += parts[q * CW + c];
        }
        var v = 0.0;
        if (owns_col) {
            v = qkv[row + 2u * p.hk * p.dk + h * p.dv + j];
        }
        let delta = (v - kv_mem) * beta;
        // Every lane has read its column's partial sums before they are replaced.
        workgroupBarrier();
        var o_part = 0.0;
        for (var r = 0u; r < RPT; r++) {
            let i = r * RG + rg;
            if (i < p.dk) {
                s[r] = s[r] * decay + (ks[i] * rk) * delta;
                o_part += s[r] * (qs[i] * rq);
            }
        }
        parts[rg * CW + c] = o_part;
        workgroupBarrier();
        var o = 0.0;
        if (owns_col && rg == 0u) {
            for (var q = 0u; q < RG; q++) {
                o += parts[q * CW + c];
            }
        }
        let oi = t * p.hv * p.dv + h * p.dv + j;
        if (NORM == 0u) {
            if (owns_col && rg == 0u) {
                out[oi] = o;
            }
        } else {
            // The head's sum of squares (red_q is free: read before the barriers above).
            let so = subgroupAdd(o * o);
            if (sg_lane == 0u) {
                red_q[sg_id] = so;
            }
            workgroupBarrier();
            var ss = 0.0;
            for (var g = 0u; g < n_sg; g++) {
                ss += red_q[g];
            }
            if (owns_col && rg == 0u) {
                let r = 1.0 / sqrt(ss / f32(p.dv) + p.eps);
                let zv = z[oi];
                out[oi] = (norm_w[j] * (o * r)) * (zv / (1.0 + exp(-zv)));
            }
        }
        // qs, ks, the norm sums and parts are rewritten for the next token.
        workgroupBarrier();
    }
    for (var r = 0u; r < RPT; r++) {
        let i = r * RG + rg;
        if (owns_col && i < p.dk) {
            state[sbase + i * p.dv] = s[r];
        }
    }
}
