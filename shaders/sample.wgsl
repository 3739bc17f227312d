// Token sampling on the GPU: the exact algorithm of vkllm-cpu's sampler (sampler v1, see
// vkllm_cpu::sampler), so that on identical logits the GPU picks the same token as the CPU.
//
// Compiled with SPIR-V NoContraction on every float add/sub/mul (KernelSpec::exact_fp): the
// specification forbids fused multiply-adds; every constant is given by its f32 bit pattern.
//
// Rows: the kernel samples `n_rows` independent rows (decode slots), one workgroup each; row r's
// settings are cfg[r] (a storage buffer, so a recorded decode step replays with settings and the
// step counter the host or the previous step left there; cfg[r].live = 0 skips the row).
// Shapes: logits [n_rows, V] f32; counts [n_rows, V] u32 (read only when use_counts = 1); bias
// [n_rows, max_bias] pairs of (token id u32, bias f32 bits), the first cfg[r].n_bias used;
// scratch [n_rows, 4 P] u32 with P = next_pow2(V) (working logits, candidate logits, candidate
// ids, candidate weights); out [n_rows] u32, the chosen tokens.
// Workgroup: ONE workgroup of 256 invocations does everything (the running sums of the
// specification are sequential, so the whole choice lives in one workgroup):
//   1. penalties (parallel), 2. logit bias in list order (invocation 0), NaN -> -inf and
//   temperature (parallel) with a shared-memory argmax (greedy result / top candidate l0),
//   3. compaction of the candidates whose weight exp_s(l - l0) is not 0 (l - l0 >= -86; the
//   others form the tail of the sorted order and change no sum), 4. bitonic sort of the
//   candidates by (logit descending, id ascending) in the scratch buffer, 5. weights (parallel),
//   running sums, top-p, min-p and the Philox4x32-10 draw (invocation 0, sequential as specified).
// Cost: dominated by the sort, O(m log^2 m) for m candidates, and the sequential sum over m; fine
// for tests and low-entropy decoding, a multi-workgroup top-k prefilter is the next step for speed.
// Shared memory: 256 x (f32 + u32) + 1 atomic = 2 KiB.

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;

struct Params {
    v: u32,
    p2: u32,
    n_rows: u32,
    max_bias: u32,
    // > 0: `argmax_partial` ran first and left n_part (logit bits, id) pairs at the start of each
    // greedy row's scratch; the greedy fast path reduces those instead of the whole row.
    n_part: u32,
}

struct Row {
    n_bias: u32,
    use_counts: u32,
    greedy: u32,
    top_k: u32,
    top_p: f32,
    min_p: f32,
    rep: f32,
    inv_rep: f32,
    presence: f32,
    frequency: f32,
    inv_t: f32,
    seed_lo: u32,
    seed_hi: u32,
    seq_lo: u32,
    seq_hi: u32,
    step_lo: u32,
    step_hi: u32,
    live: u32,
    pad0: u32,
    pad1: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> counts: array<u32>;
@group(0) @binding(2) var<storage, read> bias: array<u32>;
@group(0) @binding(3) var<storage, read> cfg: array<Row>;
@group(0) @binding(4) var<storage, read_write> scratch: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<u32>;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;
var<workgroup> n_cand: atomic<u32>;

// NaN / finiteness by bit tests: compilers may fold `x != x` to false (no NaN-preserving float
// controls are requested), which would let a NaN through.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u;
}

var<private> s0: u32;

// Scratch of the current row: word i of its 4 P words.
fn f(i: u32) -> f32 {
    return bitcast<f32>(scratch[s0 + i]);
}

fn sset(i: u32, x: u32) {
    scratch[s0 + i] = x;
}

fn sget(i: u32) -> u32 {
    return scratch[s0 + i];
}

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    if (i == NONE) {
        return false;
    }
    if (bi == NONE) {
        return true;
    }
    return v > bv || (v == bv && i < bi);
}

// Candidate order: logit descending (numeric: -0 == +0), then id ascending.
fn before(al: f32, ai: u32, bl: f32, bi: u32) -> bool {
    return al > bl || (al == bl && ai < bi);
}

fn exp_s(x_in: f32) -> f32 {
    if (is_nan(x_in) || bitcast<u32>(x_in) == 0xff800000u || x_in < -86.0) {
        return 0.0;
    }
    let x = min(x_in, 0.0);
    let log2e = bitcast<f32>(0x3fb8aa3bu);
    let ln2_hi = bitcast<f32>(0x3f318000u);
    let ln2_lo = bitcast<f32>(0xb95e8083u);
    let k = floor(x * log2e + 0.5);
    let r = (x - k * ln2_hi) - k * ln2_lo;
    var q = bitcast<f32>(0x39500d01u) * r + bitcast<f32>(0x3ab60b61u);
    q = q * r + bitcast<f32>(0x3c088889u);
    q = q * r + bitcast<f32>(0x3d2aaaabu);
    q = q * r + bitcast<f32>(0x3e2aaaabu);
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r + 1.0;
    let scale = bitcast<f32>(u32(i32(k) + 127) << 23u);
    return q * scale;
}

// (high, low) words of the 64-bit product a * b.
fn mulhilo(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, a * b);
}

fn philox(ctr: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = ctr;
    var k = key;
    for (var round = 0u; round < 10u; round++) {
        if (round > 0u) {
            k.x += 0x9e3779b9u;
            k.y += 0xbb67ae85u;
        }
        let r0 = mulhilo(0xd2511f53u, c.x);
        let r1 = mulhilo(0xcd9e8d57u, c.z);
        c = vec4<u32>(r1.x ^ c.y ^ k.x, r1.y, r0.x ^ c.w ^ k.y, r0.y);
    }
    return c;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.x;
    let c = cfg[row];
    if (c.live == 0u) {
        return;
    }
    let v = p.v;
    let big_p = p.p2;
    let neg_inf = bitcast<f32>(0xff800000u);
    s0 = row * 4u * big_p;
    let l_off = row * v;
    let b_off = row * p.max_bias * 2u;
    let n_bias = min(c.n_bias, p.max_bias);

    // Greedy without penalties or bias (the common case): one argmax pass over the logits,
    // the same choice as the full path below (NaN counts as -inf, ties go to the lower id).
    if (c.greedy != 0u && c.use_counts == 0u && n_bias == 0u) {
        var gv = 0.0;
        var gi = NONE;
        if (p.n_part > 0u) {
            for (var i = lid; i < p.n_part; i += WG) {
                let x = f(2u * i);
                let xi = sget(2u * i + 1u);
                if (better(x, xi, gv, gi)) {
                    gv = x;
                    gi = xi;
                }
            }
        } else {
            for (var i = lid; i < v; i += WG) {
                var x = logits[l_off + i];
                if (is_nan(x)) {
                    x = neg_inf;
                }
                if (better(x, i, gv, gi)) {
                    gv = x;
                    gi = i;
                }
            }
        }
        best_v[lid] = gv;
        best_i[lid] = gi;
        workgroupBarrier();
        for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
            if (lid < stride && better(best_v[lid + stride], best_i[lid + stride], best_v[lid], best_i[lid])) {
                best_v[lid] = best_v[lid + stride];
                best_i[lid] = best_i[lid + stride];
            }
            workgroupBarrier();
        }
        if (lid == 0u) {
            out[row] = best_i[0];
        }
        return;
    }

    // 1. penalties
    for (var i = lid; i < v; i += WG) {
        var x = logits[l_off + i];
        if (c.use_counts != 0u) {
            let n = counts[l_off + i];
            if (n > 0u) {
                if (x > 0.0) {
                    x = x * c.inv_rep;
                } else {
                    x = x * c.rep;
                }
                x = x - c.presence;
                x = x - c.frequency * f32(n);
            }
        }
        sset(i, bitcast<u32>(x));
    }
    storageBarrier();
    // 2. logit bias, in list order
    if (lid == 0u) {
        for (var b = 0u; b < n_bias; b++) {
            let id = bias[b_off + 2u * b];
            if (id < v) {
                sset(id, bitcast<u32>(f(id) + bitcast<f32>(bias[b_off + 2u * b + 1u])));
            }
        }
    }
    storageBarrier();
    // NaN -> -inf, temperature, argmax
    var bv = 0.0;
    var bi = NONE;
    for (var i = lid; i < v; i += WG) {
        var x = f(i);
        if (is_nan(x)) {
            x = neg_inf;
        }
        if (c.greedy == 0u) {
            x = x * c.inv_t;
        }
        sset(i, bitcast<u32>(x));
        if (better(x, i, bv, bi)) {
            bv = x;
            bi = i;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    if (lid == 0u) {
        atomicStore(&n_cand, 0u);
    }
    storageBarrier();
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride && better(best_v[lid + stride], best_i[lid + stride], best_v[lid], best_i[lid])) {
            best_v[lid] = best_v[lid + stride];
            best_i[lid] = best_i[lid + stride];
        }
        workgroupBarrier();
    }
    let l0 = best_v[0];
    let i0 = best_i[0];
    if (c.greedy != 0u || !is_finite(l0)) {
        if (lid == 0u) {
            out[row] = i0;
        }
        return;
    }
    // 3. candidates with a non-zero weight
    for (var i = lid; i < v; i += WG) {
        let x = f(i);
        if (is_finite(x) && !(x - l0 < -86.0)) {
            let k = atomicAdd(&n_cand, 1u);
            sset(big_p + k, bitcast<u32>(x));
            sset(2u * big_p + k, i);
        }
    }
    let m = workgroupUniformLoad(&n_cand);
    var m2 = 1u;
    while (m2 < m) {
        m2 *= 2u;
    }
    for (var i = m + lid; i < m2; i += WG) {
        sset(big_p + i, bitcast<u32>(neg_inf));
        sset(2u * big_p + i, NONE);
    }
    storageBarrier();
    // 4. bitonic sort of [0, m2) by `before`
    for (var k = 2u; k <= m2; k *= 2u) {
        for (var j = k / 2u; j > 0u; j /= 2u) {
            for (var i = lid; i < m2; i += WG) {
                let ixj = i ^ j;
                if (ixj > i) {
                    let al = f(big_p + i);
                    let ai = sget(2u * big_p + i);
                    let bl = f(big_p + ixj);
                    let bj = sget(2u * big_p + ixj);
                    var swap = before(bl, bj, al, ai);
                    if ((i & k) != 0u) {
                        swap = before(al, ai, bl, bj);
                    }
                    if (swap) {
                        sset(big_p + i, bitcast<u32>(bl));
                        sset(2u * big_p + i, bj);
                        sset(big_p + ixj, bitcast<u32>(al));
                        sset(2u * big_p + ixj, ai);
                    }
                }
            }
            storageBarrier();
        }
    }
    // 5. top-k, weights
    var n = m;
    if (c.top_k > 0u && c.top_k < v) {
        n = min(n, c.top_k);
    }
    for (var i = lid; i < n; i += WG) {
        sset(3u * big_p + i, bitcast<u32>(exp_s(f(big_p + i) - l0)));
    }
    storageBarrier();
    if (lid != 0u) {
        return;
    }
    // running sums (into the working-logit area, no longer needed), top-p, min-p, draw
    var acc = 0.0;
    for (var i = 0u; i < n; i++) {
        acc = acc + f(3u * big_p + i);
        sset(i, bitcast<u32>(acc));
    }
    if (c.top_p < 1.0) {
        let thr = c.top_p * f(n - 1u);
        for (var i = 0u; i < n; i++) {
            if (f(i) >= thr) {
                n = i + 1u;
                break;
            }
        }
    }
    if (c.min_p > 0.0) {
        for (var i = 1u; i < n; i++) {
            if (f(3u * big_p + i) < c.min_p) {
                n = i;
                break;
            }
        }
    }
    let kept = f(n - 1u);
    let step = vec2<u32>(c.step_lo, c.step_hi);
    let w = philox(vec4<u32>(c.seq_lo, c.seq_hi, step.x, step.y), vec2<u32>(c.seed_lo, c.seed_hi));
    let u = f32(w.x >> 8u) * bitcast<f32>(0x33800000u);
    let goal = u * kept;
    var pick = NONE;
    for (var i = 0u; i < n; i++) {
        if (f(i) > goal) {
            pick = i;
            break;
        }
    }
    if (pick == NONE) {
        for (var i = 0u; i < n; i++) {
            if (f(i) >= kept) {
                pick = i;
                break;
            }
        }
    }
    if (pick == NONE) {
        pick = n - 1u;
    }
    out[row] = sget(2u * big_p + pick);
}

// Greedy rows without penalties or bias, first pass: workgroup (g, row) takes the argmax of
// logits [g * chunk, (g + 1) * chunk) of its row (NaN as -inf, ties to the lower id, as the main
// pass) and writes (logit bits, id) to scratch words 2 g, 2 g + 1 of the row; `main` then
// reduces p.n_part pairs in one workgroup instead of V logits. The order is total, so the choice
// is exactly the one-pass argmax's. Other rows return at once (their scratch is main's).
@compute @workgroup_size(256)
fn argmax_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = wid.x;
    let row = wid.y;
    let c = cfg[row];
    if (c.live == 0u || c.greedy == 0u || c.use_counts != 0u || min(c.n_bias, p.max_bias) != 0u) {
        return;
    }
    let v = p.v;
    let neg_inf = bitcast<f32>(0xff800000u);
    s0 = row * 4u * p.p2;
    let l_off = row * v;
    let chunk = (v + p.n_part - 1u) / p.n_part;
    let lo = g * chunk;
    let hi = min(v, lo + chunk);
    var gv = 0.0;
    var gi = NONE;
    for (var i = lo + lid; i < hi; i += WG) {
        var x = logits[l_off + i];
        if (is_nan(x)) {
            x = neg_inf;
        }
        if (better(x, i, gv, gi)) {
            gv = x;
            gi = i;
        }
    }
    best_v[lid] = gv;
    best_i[lid] = gi;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride && better(best_v[lid + stride], best_i[lid + stride], best_v[lid], best_i[lid])) {
            best_v[lid] = best_v[lid + stride];
            best_i[lid] = best_i[lid + stride];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        sset(2u * g, bitcast<u32>(best_v[0]));
        sset(2u * g + 1u, best_i[0]);
    }
}
