// The gated delta rule over n tokens of one sequence in its chunked form (prefill), gates
// included: the same math as gated_delta_rule.wgsl (vkllm_cpu::gated_delta_rule, whose chunked
// f64 form is vkllm_cpu::gated_delta_rule_chunked), C = 16 tokens at a time.
//
// Within a chunk starting from state S0, with G_i the cumulative log-decay of tokens 0..=i and
// q, k L2-normalised (q scaled by 1/sqrt(DK)), the recurrence unrolls to
//   delta_i = beta_i (v_i - e^G_i S0^T k_i - sum_{j<i} e^(G_i - G_j) (k_i . k_j) delta_j)
//   out_i   = e^G_i S0^T q_i + sum_{j<=i} e^(G_i - G_j) (q_i . k_j) delta_j
//   S       = e^G_last S0 + sum_j e^(G_last - G_j) k_j delta_j^T
// (every exponent <= 0: no overflow). The C x C products k_i . k_j and q_i . k_j do not depend
// on the value column, so a workgroup computes them once in shared memory; each invocation then
// owns one column of S (and of v, delta, out): one pass over its column to form S0^T k_i and
// S0^T q_i for the whole chunk, a forward substitution of C steps, and one pass to write the
// new column. Versus the recurrence that is 2 passes over the state per chunk instead of per
// token, and 4 barriers per chunk instead of 2 per token.
//
// Shapes: qkv: [n, 2 HK DK + HV DV] f32 rows [q | k | v]; a, b: [n, HV]; a_log, dt_bias: [HV];
// state: [slots, HV, DK, DV] (slot `slot` read and updated); out: [n, HV DV].
// Workgroup: WG invocations (64) per (head, block of WG columns). DK <= 128.
// Shared memory: 2 * 16 * 128 (q, k) + 2 * 16 * 16 (products) + 4 * 16 f32 (~18.3 KiB).

override WG: u32 = 64;
const C: u32 = 16u;
const DKM: u32 = 128u;

struct Params {
    n: u32,
    hk: u32,
    hv: u32,
    dk: u32,
    dv: u32,
    col_blocks: u32,
    tiled: u32,
    slot: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> a_log: array<f32>;
@group(0) @binding(4) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> state: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

var<workgroup> qs: array<f32, 2048>; // [C][DKM]
var<workgroup> ks: array<f32, 2048>;
// kk[i][j] = beta_i e^(G_i - G_j) (k_i . k_j) for j < i, qk[i][j] = e^(G_i - G_j) (q_i . k_j) for
// j <= i, zero elsewhere.
var<workgroup> kk: array<f32, 256>;
var<workgroup> qk: array<f32, 256>;
var<workgroup> gs: array<f32, 16>; // g, then cumulative G
var<workgroup> bt: array<f32, 16>; // beta
var<workgroup> rq: array<f32, 16>; // 1 / |q| * scale
var<workgroup> rk: array<f32, 16>; // 1 / |k|

fn softplus(x: f32) -> f32 {
    if (x > 20.0) {
        return x;
    }
    return log(1.0 + exp(x));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = wid.y * nwg.x + wid.x;
    let h = blk / p.col_blocks;
    // Uniform per workgroup: the whole workgroup leaves together.
    if (h >= p.hv) {
        return;
    }
    let j = (blk % p.col_blocks) * WG + lid;
    let owns_col = j < p.dv;
    var kh = h / (p.hv / p.hk);
    if (p.tiled != 0u) {
        kh = h % p.hk;
    }
    let width = 2u * p.hk * p.dk + p.hv * p.dv;
    let scale = 1.0 / sqrt(f32(p.dk));
    let decay_a = exp(a_log[h]);
    let sbase = (p.slot * p.hv + h) * p.dk * p.dv + j;
    for (var c0 = 0u; c0 < p.n; c0 += C) {
        let len = min(C, p.n - c0);
        // 1. q, k rows and gates of the chunk (zeros past its end).
        for (var idx = lid; idx < C * p.dk; idx += WG) {
            let i = idx / p.dk;
            let d = idx % p.dk;
            var qv = 0.0;
            var kv = 0.0;
            if (i < len) {
                let row = (c0 + i) * width;
                qv = qkv[row + kh * p.dk + d];
                kv = qkv[row + p.hk * p.dk + kh * p.dk + d];
            }
            qs[i * DKM + d] = qv;
            ks[i * DKM + d] = kv;
        }
        if (lid < C) {
            var g = 0.0;
            var beta = 0.0;
            if (lid < len) {
                let t = c0 + lid;
                g = -decay_a * softplus(a[t * p.hv + h] + dt_bias[h]);
                beta = 1.0 / (1.0 + exp(-b[t * p.hv + h]));
            }
            gs[lid] = g;
            bt[lid] = beta;
        }
        workgroupBarrier();
        // 2. norms (one token per invocation) and the cumulative decay.
        if (lid < C) {
            var sq = 0.0;
            var sk = 0.0;
            for (var d = 0u; d < p.dk; d++) {
                sq += qs[lid * DKM + d] * qs[lid * DKM + d];
                sk += ks[lid * DKM + d] * ks[lid * DKM + d];
            }
            rq[lid] = scale / sqrt(sq + 1e-6);
            rk[lid] = 1.0 / sqrt(sk + 1e-6);
        }
        if (lid == C) {
            var acc = 0.0;
            for (var i = 0u; i < C; i++) {
                acc += gs[i];
                gs[i] = acc;
            }
        }
        workgroupBarrier();
        for (var idx = lid; idx < C * p.dk; idx += WG) {
            let i = idx / p.dk;
            let d = idx % p.dk;
            qs[i * DKM + d] *= rq[i];
            ks[i * DKM + d] *= rk[i];
        }
        workgroupBarrier();
        // 3. the decayed products.
        for (var idx = lid; idx < C * C; idx += WG) {
            let i = idx / C;
            let jj = idx % C;
            var dkk = 0.0;
            var dqk = 0.0;
            if (jj <= i) {
                for (var d = 0u; d < p.dk; d++) {
                    let kj = ks[jj * DKM + d];
                    dkk += ks[i * DKM + d] * kj;
                    dqk += qs[i * DKM + d] * kj;
                }
                let e = exp(gs[i] - gs[jj]);
                dkk *= e * bt[i];
                dqk *= e;
            }
            kk[idx] = select(0.0, dkk, jj < i);
            qk[idx] = dqk;
        }
        workgroupBarrier();
        // 4. this invocation's column.
        if (owns_col) {
            var sk: array<f32, 16>;
            var sq: array<f32, 16>;
            for (var i = 0u; i < C; i++) {
                sk[i] = 0.0;
                sq[i] = 0.0;
            }
            for (var d = 0u; d < p.dk; d++) {
                let s = state[sbase + d * p.dv];
                for (var i = 0u; i < C; i++) {
                    sk[i] += s * ks[i * DKM + d];
                    sq[i] += s * qs[i * DKM + d];
                }
            }
            var dl: array<f32, 16>;
            for (var i = 0u; i < C; i++) {
                dl[i] = 0.0;
            }
            for (var i = 0u; i < len; i++) {
                let eg = exp(gs[i]);
                let v = qkv[(c0 + i) * width + 2u * p.hk * p.dk + h * p.dv + j];
                var acc = bt[i] * (v - eg * sk[i]);
                for (var jj = 0u; jj < i; jj++) {
                    acc -= kk[i * C + jj] * dl[jj];
                }
                dl[i] = acc;
                var o = eg * sq[i];
                for (var jj = 0u; jj <= i; jj++) {
                    o += qk[i * C + jj] * dl[jj];
                }
                out[(c0 + i) * p.hv * p.dv + h * p.dv + j] = o;
            }
            let gl = gs[len - 1u];
            let el = exp(gl);
            var wj: array<f32, 16>;
            for (var i = 0u; i < C; i++) {
                wj[i] = select(0.0, exp(gl - gs[i]) * dl[i], i < len);
            }
            for (var d = 0u; d < p.dk; d++) {
                var s = state[sbase + d * p.dv] * el;
                for (var i = 0u; i < C; i++) {
                    s += ks[i * DKM + d] * wj[i];
                }
                state[sbase + d * p.dv] = s;
            }
        }
        // The shared arrays are rewritten for the next chunk.
        workgroupBarrier();
    }
}
