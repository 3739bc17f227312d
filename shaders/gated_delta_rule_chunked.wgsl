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
// `main_wide` (below) keeps the state in registers instead, over wider workgroups.
//
// Shapes: qkv: [n, 2 HK DK + HV DV] f32 rows [q | k | v]; a, b: [n, HV]; a_log, dt_bias: [HV];
// state: [slots, HV, DK, DV] (slot `slot` read and updated); out: [n, HV DV].
// Workgroup (`main`): WG invocations (64) per (head, block of WG columns). DK <= 128.
// Shared memory (`main`): 2 * 16 * 128 (q, k) + 2 * 16 * 16 (products) + 4 * 16 f32 (~18.3 KiB).

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

// Token t's gates for value head h (decay_a = exp(a_log[h])): the log decay
// g = -decay_a * softplus(a + dt_bias) and the write strength beta = sigmoid(b).
fn gate_of(t: u32, h: u32, decay_a: f32) -> vec2<f32> {
    let g = -decay_a * softplus(a[t * p.hv + h] + dt_bias[h]);
    let beta = 1.0 / (1.0 + exp(-b[t * p.hv + h]));
    return vec2<f32>(g, beta);
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
            var gb = vec2<f32>(0.0);
            if (lid < len) {
                gb = gate_of(c0 + lid, h, decay_a);
            }
            gs[lid] = gb.x;
            bt[lid] = gb.y;
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

// main_wide: the same chunks with the state in registers (as main_wide of
// gated_delta_rule.wgsl). A workgroup of WGW = CW * RG invocations takes CW columns of one
// head's S; invocation (c = lid % CW, rg = lid / CW) holds rows rg, rg + RG, ... (RPT =
// ceil(DK / RG) <= 16 of them) of column c, read once before the first chunk and written once
// after the last. Per chunk, with every invocation sharing each step:
//   A. q and k of the chunk transposed into shared memory (qt, kt), v of the CW columns (uv),
//      the gates;
//   B. the raw products k_i . k_j, q_i . k_j, q_i . q_i (one pair (i, j) per invocation: the
//      norms scale the products afterwards), the cumulative decay, and each invocation's
//      partial sums over its rows of S0^T k_i and S0^T q_i for the C tokens (registers);
//   C. the S0^T k partial sums into qt and pw (q is read no more), the products scaled into kk,
//      qk as in `main`;
//   D. S0^T k summed over the row groups into u_i = beta_i (v_i - e^G_i S0^T k_i), in uv;
//   E. the forward substitution for delta (every invocation its column's C values, in
//      registers), the state update in registers, the S0^T q partial sums into qt and pw;
//   F. the outputs (invocation (c, rg): tokens rg, rg + RG, ... of column c).
// 6 barriers per chunk, no state traffic between the first chunk and the last.
// Workgroup: WGW = CW * RG (32 * 8) invocations per (head, block of CW columns); CW <= 32,
// WGW <= 256, DK <= 128.
// Shared memory: 3 * 2048 (qt, kt, pw) + 512 (uv) + 2 * 256 (kk, qk) + 7 * 16 f32 (~28.4 KiB).
override CW: u32 = 32;
override RG: u32 = 8;
override RPT: u32 = 16;
// CW * RG.
override WGW: u32 = 256;

// qt[d * 4 + i / 4][i % 4] = q_i[d] ([DKM][C] as vec4 of 4 tokens), kt alike. Between steps C
// and F, qt and pw hold partial sums: tokens 4 m .. 4 m + 3 of (row group rg, column c) at
// m * WGW + rg * CW + c (m < 2 in qt, m >= 2 in pw).
var<workgroup> qt: array<vec4<f32>, 512>;
var<workgroup> kt: array<vec4<f32>, 512>;
var<workgroup> pw: array<vec4<f32>, 512>;
// v of tokens 4 m .. 4 m + 3, column c at m * CW + c; from step D the right-hand side u.
var<workgroup> uv: array<vec4<f32>, 128>;
var<workgroup> gc: array<f32, 16>; // cumulative G
var<workgroup> nq: array<f32, 16>; // |q_i|^2
var<workgroup> nk: array<f32, 16>; // |k_i|^2

// Partial sums m (tokens 4 m .. 4 m + 3) of invocation idx = rg * CW + c, in qt or pw.
fn part_store(m: u32, idx: u32, x: vec4<f32>) {
    if (m < 2u) {
        qt[m * WGW + idx] = x;
    } else {
        pw[(m - 2u) * WGW + idx] = x;
    }
}

fn part(m: u32, idx: u32) -> vec4<f32> {
    if (m < 2u) {
        return qt[m * WGW + idx];
    }
    return pw[(m - 2u) * WGW + idx];
}

// G, 1 / |k| and beta of tokens 4 m .. 4 m + 3 (naga passes no workgroup pointers).
fn gc4(m: u32) -> vec4<f32> {
    return vec4<f32>(gc[4u * m], gc[4u * m + 1u], gc[4u * m + 2u], gc[4u * m + 3u]);
}

fn rk4(m: u32) -> vec4<f32> {
    return vec4<f32>(rk[4u * m], rk[4u * m + 1u], rk[4u * m + 2u], rk[4u * m + 3u]);
}

fn bt4(m: u32) -> vec4<f32> {
    return vec4<f32>(bt[4u * m], bt[4u * m + 1u], bt[4u * m + 2u], bt[4u * m + 3u]);
}

@compute @workgroup_size(WGW)
fn main_wide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let blk = wid.y * nwg.x + wid.x;
    let h = blk / p.col_blocks;
    // Uniform per workgroup: the whole workgroup leaves together.
    if (h >= p.hv) {
        return;
    }
    let c = lid % CW;
    let rg = lid / CW;
    let col0 = (blk % p.col_blocks) * CW;
    let j = col0 + c;
    let owns_col = j < p.dv;
    var kh = h / (p.hv / p.hk);
    if (p.tiled != 0u) {
        kh = h % p.hk;
    }
    let width = 2u * p.hk * p.dk + p.hv * p.dv;
    let qoff = kh * p.dk;
    let koff = p.hk * p.dk + kh * p.dk;
    let voff = 2u * p.hk * p.dk + h * p.dv;
    let scale = 1.0 / sqrt(f32(p.dk));
    let decay_a = exp(a_log[h]);
    let sbase = (p.slot * p.hv + h) * p.dk * p.dv + j;
    var s: array<f32, 16>;
    for (var r = 0u; r < RPT; r++) {
        let d = r * RG + rg;
        s[r] = 0.0;
        if (owns_col && d < p.dk) {
            s[r] = state[sbase + d * p.dv];
        }
    }
    for (var c0 = 0u; c0 < p.n; c0 += C) {
        let len = min(C, p.n - c0);
        // A. (zeros past the chunk's end and the head's last column). Token-fastest indices:
        // the transposed stores are conflict-free.
        for (var idx = lid; idx < C * p.dk; idx += WGW) {
            let i = idx % C;
            let d = idx / C;
            var qv = 0.0;
            var kv = 0.0;
            if (i < len) {
                let row = (c0 + i) * width;
                qv = qkv[row + qoff + d];
                kv = qkv[row + koff + d];
            }
            qt[idx / 4u][idx % 4u] = qv;
            kt[idx / 4u][idx % 4u] = kv;
        }
        for (var idx = lid; idx < C * CW; idx += WGW) {
            let i = idx / CW;
            let cc = idx % CW;
            var v = 0.0;
            if (i < len && col0 + cc < p.dv) {
                v = qkv[(c0 + i) * width + voff + col0 + cc];
            }
            uv[(i / 4u) * CW + cc][i % 4u] = v;
        }
        if (lid < C) {
            var gb = vec2<f32>(0.0);
            if (lid < len) {
                gb = gate_of(c0 + lid, h, decay_a);
            }
            gs[lid] = gb.x;
            bt[lid] = gb.y;
        }
        workgroupBarrier();
        // B.
        for (var idx = lid; idx < C * C; idx += WGW) {
            let i = idx / C;
            let jj = idx % C;
            var dkk = 0.0;
            var dqk = 0.0;
            var dqq = 0.0;
            for (var d = 0u; d < p.dk; d++) {
                let ki = kt[d * 4u + i / 4u][i % 4u];
                let qi = qt[d * 4u + i / 4u][i % 4u];
                let kj = kt[d * 4u + jj / 4u][jj % 4u];
                let qj = qt[d * 4u + jj / 4u][jj % 4u];
                dkk += ki * kj;
                dqk += qi * kj;
                dqq += qi * qj;
            }
            kk[idx] = dkk;
            qk[idx] = dqk;
            if (jj == i) {
                nk[i] = dkk;
                nq[i] = dqq;
            }
        }
        if (lid < C) {
            var acc = 0.0;
            for (var i = 0u; i <= lid; i++) {
                acc += gs[i];
            }
            gc[lid] = acc;
        }
        var pk: array<vec4<f32>, 4>;
        var pq: array<vec4<f32>, 4>;
        for (var m = 0u; m < 4u; m++) {
            pk[m] = vec4<f32>(0.0);
            pq[m] = vec4<f32>(0.0);
        }
        for (var r = 0u; r < RPT; r++) {
            let d = r * RG + rg;
            if (d < p.dk) {
                for (var m = 0u; m < 4u; m++) {
                    pk[m] += s[r] * kt[d * 4u + m];
                    pq[m] += s[r] * qt[d * 4u + m];
                }
            }
        }
        workgroupBarrier();
        // C.
        for (var m = 0u; m < 4u; m++) {
            part_store(m, lid, pk[m]);
        }
        if (lid < C) {
            rq[lid] = scale / sqrt(nq[lid] + 1e-6);
            rk[lid] = 1.0 / sqrt(nk[lid] + 1e-6);
        }
        for (var idx = lid; idx < C * C; idx += WGW) {
            let i = idx / C;
            let jj = idx % C;
            var fk = 0.0;
            var fq = 0.0;
            if (jj <= i) {
                let e = exp(gc[i] - gc[jj]);
                let rkj = 1.0 / sqrt(nk[jj] + 1e-6);
                fk = kk[idx] * (rkj / sqrt(nk[i] + 1e-6)) * e * bt[i];
                fq = qk[idx] * (rkj * scale / sqrt(nq[i] + 1e-6)) * e;
            }
            kk[idx] = select(0.0, fk, jj < i);
            qk[idx] = fq;
        }
        workgroupBarrier();
        // D. (invocations of row groups < 4: 4 tokens of a column each)
        for (var m = rg; m < 4u; m += RG) {
            var sk = vec4<f32>(0.0);
            for (var g = 0u; g < RG; g++) {
                sk += part(m, g * CW + c);
            }
            let eg = exp(gc4(m)) * rk4(m);
            uv[m * CW + c] = bt4(m) * (uv[m * CW + c] - eg * sk);
        }
        workgroupBarrier();
        // E. delta_i = u_i - sum_{j<i} kk[i][j] delta_j; then S = e^G_last S0 + sum_j
        // e^(G_last - G_j) k_j delta_j^T (k_j normalised by rk_j); tokens past the chunk's end
        // have beta = 0, so delta = 0 there.
        var dl: array<f32, 16>;
        for (var i = 0u; i < C; i++) {
            var acc = uv[(i / 4u) * CW + c][i % 4u];
            for (var jj = 0u; jj < i; jj++) {
                acc -= kk[i * C + jj] * dl[jj];
            }
            dl[i] = acc;
        }
        for (var m = 0u; m < 4u; m++) {
            part_store(m, lid, pq[m]);
        }
        let gl = gc[C - 1u];
        let el = exp(gl);
        var w: array<vec4<f32>, 4>;
        for (var m = 0u; m < 4u; m++) {
            let dm = vec4<f32>(dl[4u * m], dl[4u * m + 1u], dl[4u * m + 2u], dl[4u * m + 3u]);
            w[m] = exp(gl - gc4(m)) * rk4(m) * dm;
        }
        for (var r = 0u; r < RPT; r++) {
            let d = r * RG + rg;
            if (d < p.dk) {
                var acc = s[r] * el;
                for (var m = 0u; m < 4u; m++) {
                    acc += dot(kt[d * 4u + m], w[m]);
                }
                s[r] = acc;
            }
        }
        workgroupBarrier();
        // F. out_i = e^G_i S0^T q_i + sum_{j<=i} qk[i][j] delta_j.
        if (owns_col) {
            for (var i = rg; i < len; i += RG) {
                var sq = 0.0;
                for (var g = 0u; g < RG; g++) {
                    sq += part(i / 4u, g * CW + c)[i % 4u];
                }
                var o = exp(gc[i]) * rq[i] * sq;
                for (var jj = 0u; jj < C; jj++) {
                    o += qk[i * C + jj] * dl[jj];
                }
                out[(c0 + i) * p.hv * p.dv + h * p.dv + j] = o;
            }
        }
        // The shared arrays are rewritten for the next chunk.
        workgroupBarrier();
    }
    for (var r = 0u; r < RPT; r++) {
        let d = r * RG + rg;
        if (owns_col && d < p.dk) {
            state[sbase + d * p.dv] = s[r];
        }
    }
}
