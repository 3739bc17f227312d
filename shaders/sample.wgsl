// Token sampling on the GPU: vkllm-cpu's sampler v2 (vkllm_cpu::sampler), so that on identical
// logits the GPU picks the same token as the CPU.
//
// Compiled with SPIR-V NoContraction on every float add/sub/mul (KernelSpec::exact_fp): the
// specification forbids fused multiply-adds; every constant is given by its f32 bit pattern.
//
// Four passes over `n_rows` rows (decode slots); row r's settings are cfg[r] (a storage buffer,
// so a recorded decode step replays with the settings and step the host or the previous step
// left there; cfg[r].live = 0 skips the row). Passes 1-3 split each row into `parts` chunks
// (grid parts x rows), pass 4 takes one workgroup per row:
//   prep:   penalties, bias, NaN -> -inf, temperature; the working logits x go to scratch; per
//           part the maximum (l0 candidates) and, for rows with no filter, the Gumbel race.
//           "Fast" rows (greedy, unfiltered, top-k <= KF) are finished here: top-k parts list
//           their own candidates, and the row's last workgroup to arrive draws the token.
//           Workgroup (0, 0) writes the launch sizes of passes 2-4 (zero when no live row
//           needs them; they are dispatched indirectly).
//   sieve:  l0 from the part maxima; min-p-only rows run the race over the min-p survivors;
//           top-k / top-p rows count (and for top-p weigh) x into buckets of d = x - l0.
//   gather: the bucket where top-k's count (or top-p's exact integer mass) is reached; top-k
//           rows list every token up to it, top-p rows race the tokens before it and list it.
//   finish: sorts the short list by (x descending, id ascending), applies top-k, top-p (exact
//           integer prefix sums), min-p, races the survivors, and merges the part winners.
// Shapes: logits [n_rows, V] f32; counts [n_rows, V] u32 (read only when use_counts = 1); bias
// [n_rows, max_bias] pairs (id u32, bias f32 bits), the first cfg[r].n_bias used; scratch
// [n_rows, 3 V + 4 NP + 2 P] u32 with P = next_pow2(V); ctr [HEAD + n_rows (3 NB + 4)] u32
// (launch sizes, then per row: bucket counts, low and high 12-bit weight sums, list length,
// prep's arrival counter); out [n_rows] u32; mask [n_rows, ceil(V / 32)] u32, read only when
// cfg[r].masked = 1: bit i % 32 of word i / 32 clear bans token i (-inf after the bias, as
// vkllm_cpu::sampler::apply_mask).

// #include sample_math.inc.wgsl
// #include sample_list.inc.wgsl

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;
// Buckets of d = x - l0, 1/32 nat wide (the last one holds everything below -32).
const NB: u32 = 1024u;
// Parts per row at most (the partials area of scratch).
const NP: u32 = 128u;
// Candidates sorted in workgroup memory; longer lists sort in scratch.
const LCAP: u32 = 1024u;
// Top-k rows with k <= KF are finished by prep alone (from per-part candidate lists).
const KF: u32 = 128u;
// List entries per invocation the last workgroup of prep loads at a time (two invocations per
// part: the first 2 FB entries of each part's list before theta is known).
const FB: u32 = 4u;
// ctr: words 0..8 hold the launch sizes of passes 2-4; row r's counters start at
// HEAD + r * (3 NB + 4): bucket counts, weight halves, then the list length (LEN, cleared by
// prep) and prep's arrival count (ARRIVED), which is zero before the first dispatch and left
// zero by every dispatch (one word spare).
const HEAD: u32 = 16u;
const LEN: u32 = 3072u;
const ARRIVED: u32 = 3073u;

struct Params {
    v: u32,
    p2: u32,
    n_rows: u32,
    max_bias: u32,
    parts: u32,
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
    masked: u32,
    pad1: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> counts: array<u32>;
@group(0) @binding(2) var<storage, read> bias: array<u32>;
@group(0) @binding(3) var<storage, read> cfg: array<Row>;
@coherent @group(0) @binding(4) var<storage, read_write> scratch: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<u32>;
@group(0) @binding(6) var<storage, read_write> ctr: array<atomic<u32>>;
@group(0) @binding(7) var<storage, read> mask: array<u32>;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;
var<workgroup> scan_a: array<u32, 256>;
var<workgroup> scan_b: array<u32, 256>;
var<workgroup> sh_u: array<u32, 4>;
var<workgroup> sh_t: u32;
var<workgroup> wg_last: u32;
var<workgroup> hist: array<atomic<u32>, 3072>;
var<workgroup> sk: array<f32, 1024>;
var<workgroup> si: array<u32, 1024>;
var<workgroup> pm4: array<vec4<f32>, 32>;

// Row-relative scratch words.
var<private> s0: u32;
var<private> c0: u32;

// Points s0 and c0 at `row`'s scratch and counters.
fn at_row(row: u32) {
    s0 = row * (3u * p.v + 4u * NP + 2u * p.p2);
    c0 = HEAD + row * (3u * NB + 4u);
}

fn sget(i: u32) -> u32 {
    return scratch[s0 + i];
}

fn sset(i: u32, x: u32) {
    scratch[s0 + i] = x;
}

fn xs(i: u32) -> f32 {
    return bitcast<f32>(scratch[s0 + i]);
}

fn off_pm() -> u32 {
    return p.v;
}

fn off_pg() -> u32 {
    return p.v + 2u * NP;
}

fn off_list() -> u32 {
    return p.v + 4u * NP;
}

// Top-k <= KF rows (which never race in prep) keep their part list lengths in the race pairs'
// words: part g's at off_len() + g.
fn off_len() -> u32 {
    return off_pg();
}

// prep's per-part candidate pairs (top-k <= KF rows), 2 V words: part g's from its chunk's start.
fn off_cand() -> u32 {
    return p.v + 4u * NP + 2u * p.p2;
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

// Candidate order: x descending (numeric: -0 == +0), then id ascending.
fn before(al: f32, ai: u32, bl: f32, bi: u32) -> bool {
    return al > bl || (al == bl && ai < bi);
}

// Subgroup layout of the invocation (set by `enter`).
var<private> sg_lane: u32;
var<private> sg_size: u32;
var<private> sg_id: u32;
var<private> n_sg: u32;

// Records the subgroup layout and returns the invocation's rank sg_id * sg_size + sg_lane, used
// as its index everywhere (so subgroup scans follow index order; 256 is a multiple of every
// subgroup size, so subgroups are full and the ranks cover 0..255).
fn enter(lane: u32, size: u32, id: u32, n: u32) -> u32 {
    sg_lane = lane;
    sg_size = size;
    sg_id = id;
    n_sg = n;
    return id * size + lane;
}

// Workgroup argmax of every invocation's (v, i); all invocations get the winner. A butterfly
// of shuffles within each subgroup, then every invocation reduces the subgroup winners.
fn wg_best(v: f32, i: u32, lid: u32) -> vec2<u32> {
    var bv = v;
    var bi = i;
    for (var o = 1u; o < sg_size; o *= 2u) {
        let ov = subgroupShuffleXor(bv, o);
        let oi = subgroupShuffleXor(bi, o);
        if (better(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
    workgroupBarrier();
    if (sg_lane == 0u) {
        best_v[sg_id] = bv;
        best_i[sg_id] = bi;
    }
    workgroupBarrier();
    var rv = best_v[0];
    var ri = best_i[0];
    for (var k = 1u; k < n_sg; k++) {
        if (better(best_v[k], best_i[k], rv, ri)) {
            rv = best_v[k];
            ri = best_i[k];
        }
    }
    return vec2<u32>(bitcast<u32>(rv), ri);
}

// The workgroup's winner of every invocation's (v, i) into part pair g at scratch word `at`.
fn put_part(at: u32, g: u32, v: f32, i: u32, lid: u32) -> vec2<u32> {
    let w = wg_best(v, i, lid);
    if (lid == 0u) {
        sset(at + 2u * g, w.x);
        sset(at + 2u * g + 1u, w.y);
    }
    return w;
}

// The invocation's best (x + gumbel, id) of the race so far (`race` adds a token).
var<private> race_v: f32;
var<private> race_i: u32 = 0xffffffffu;

fn race(c: Row, x: f32, i: u32) {
    race_with(x + gumbel(c, i), i);
}

// `race` with the token's score x + gumbel already taken.
fn race_with(s: f32, i: u32) {
    if (better(s, i, race_v, race_i)) {
        race_v = s;
        race_i = i;
    }
}

// Argmax of n (value bits, id) pairs at scratch word `at` (all invocations get it).
fn reduce_pairs(at: u32, n: u32, lid: u32) -> vec2<u32> {
    var bv = 0.0;
    var bi = NONE;
    for (var i = lid; i < n; i += WG) {
        let x = xs(at + 2u * i);
        let xi = sget(at + 2u * i + 1u);
        if (better(x, xi, bv, bi)) {
            bv = x;
            bi = xi;
        }
    }
    return wg_best(bv, bi, lid);
}

// Token i's Gumbel variate for the row's (seed, seq, step).
fn gumbel(c: Row, i: u32) -> f32 {
    let w4 = philox(vec4<u32>(i >> 2u, c.step_lo, c.seq_lo, c.seq_hi ^ c.step_hi), vec2<u32>(c.seed_lo, c.seed_hi));
    var w = w4.x;
    switch (i & 3u) {
        case 1u: { w = w4.y; }
        case 2u: { w = w4.z; }
        case 3u: { w = w4.w; }
        default: {}
    }
    let u = f32((w >> 9u) * 2u + 1u) * bitcast<f32>(0x33800000u);
    return -log_s(-log_s(u));
}

// -inf tokens (banned: mask, bias, NaN) are never drawn while l0 is finite: no pass counts or
// lists them (a row with few allowed tokens would otherwise list the whole vocabulary).
fn is_neg_inf(x: f32) -> bool {
    return bitcast<u32>(x) == 0xff800000u;
}

fn bucket(d: f32) -> u32 {
    let t = -d * 32.0;
    if (!(t < f32(NB - 1u))) {
        return NB - 1u;
    }
    return u32(floor(t));
}

fn top_k_on(c: Row) -> bool {
    return c.top_k > 0u && c.top_k < p.v;
}

fn top_p_on(c: Row) -> bool {
    return c.top_p < 1.0;
}

// Rows prep finishes alone: greedy, unfiltered, and top-k with k <= KF (with or without top-p
// and min-p); the others go through sieve, gather and finish.
fn fast(c: Row) -> bool {
    if (c.greedy != 0u) {
        return true;
    }
    if (top_k_on(c)) {
        return c.top_k <= KF;
    }
    return !top_p_on(c) && !(c.min_p > 0.0);
}

// The row's chunk of pass 1-3: [lo, hi) with lo a multiple of 4 (Philox words come in fours).
fn chunk(g: u32) -> vec2<u32> {
    let n = ((p.v + p.parts - 1u) / p.parts + 3u) & ~3u;
    let lo = min(p.v, g * n);
    return vec2<u32>(lo, min(p.v, lo + n));
}

// Pass 1.
@compute @workgroup_size(256)
fn prep(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) size: u32, @builtin(subgroup_id) sgi: u32,
        @builtin(num_subgroups) nsg: u32) {
    let lid = enter(lane, size, sgi, nsg);
    let g = wid.x;
    let row = wid.y;
    prep_part(g, row, lid);
    // Last, so that it delays no row's arrival (the later passes start after all of pass 1).
    if (g == 0u && row == 0u) {
        launch_args(lid);
    }
}

// Pass 1's work on part g of `row`.
fn prep_part(g: u32, row: u32, lid: u32) {
    let c = cfg[row];
    if (c.live == 0u) {
        return;
    }
    let v = p.v;
    at_row(row);
    // The later passes' counters (rows prep finishes alone read none of them).
    if (g == 0u && !fast(c)) {
        for (var i = lid; i <= LEN; i += WG) {
            atomicStore(&ctr[c0 + i], 0u);
        }
    }
    let l_off = row * v;
    let b_off = row * p.max_bias * 2u;
    let n_bias = min(c.n_bias, p.max_bias);
    let m_off = row * ((v + 31u) >> 5u);
    let sampled = c.greedy == 0u;
    let racing = sampled && !top_k_on(c) && !top_p_on(c) && !(c.min_p > 0.0);
    let neg_inf = bitcast<f32>(0xff800000u);
    let r = chunk(g);
    // Working logits go to scratch for the later passes, and for top-k rows whose chunk does
    // not fit the registers (xr: the invocation's first 8).
    let keep_x = sampled && (!fast(c) || r.y - r.x > 8u * WG);
    var xr: array<f32, 8>;
    var bv = 0.0;
    var bi = NONE;
    // Batches of 8 tokens per invocation, loaded before use (independent loads in flight).
    for (var base = r.x + lid; base < r.y; base += 8u * WG) {
        var lv: array<f32, 8>;
        for (var u = 0u; u < 8u; u++) {
            let i = base + u * WG;
            if (i < r.y) {
                lv[u] = logits[l_off + i];
            }
        }
        for (var u = 0u; u < 8u; u++) {
            let i = base + u * WG;
            if (i >= r.y) {
                break;
            }
            var x = lv[u];
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
            for (var b = 0u; b < n_bias; b++) {
                if (bias[b_off + 2u * b] == i) {
                    x = x + bitcast<f32>(bias[b_off + 2u * b + 1u]);
                }
            }
            if (is_nan(x)) {
                x = neg_inf;
            }
            if (c.masked != 0u && ((mask[m_off + (i >> 5u)] >> (i & 31u)) & 1u) == 0u) {
                x = neg_inf;
            }
            if (sampled) {
                x = x * c.inv_t;
            }
            if (keep_x) {
                sset(i, bitcast<u32>(x));
            }
            xr[u] = x;
            if (better(x, i, bv, bi)) {
                bv = x;
                bi = i;
            }
            if (racing) {
                race(c, x, i);
            }
        }
    }
    // prep's part list (list_part) counts in hist: cleared here, ordered by put_part's barriers.
    let lists = sampled && top_k_on(c) && fast(c);
    if (lists) {
        for (var i = lid; i < NB; i += WG) {
            atomicStore(&hist[i], 0u);
        }
    }
    let pm = put_part(off_pm(), g, bv, bi, lid);
    if (racing) {
        _ = put_part(off_pg(), g, race_v, race_i, lid);
    }
    if (!fast(c)) {
        return;
    }
    if (lists) {
        list_part(c, g, r, bitcast<f32>(pm.x), lid, xr);
    }
    // The last of the row's workgroups to get here finishes the row (attention_fused.wgsl's
    // "last workgroup" ordering: release, count in, acquire).
    storageBarrier();
    if (lid == 0u) {
        let before = atomicAdd(&ctr[c0 + ARRIVED], 1u);
        wg_last = select(0u, 1u, before == p.parts - 1u);
    }
    storageBarrier();
    if (workgroupUniformLoad(&wg_last) == 0u) {
        return;
    }
    if (lid == 0u) {
        atomicStore(&ctr[c0 + ARRIVED], 0u);
    }
    finish_fast(c, row, lid);
}

// The launch sizes of passes 2-4 (ctr words 0..8, read by indirect dispatches): their grids when
// a live row needs them, no workgroups otherwise. Written by one workgroup from cfg alone.
fn launch_args(lid: u32) {
    var slow = 0u;
    for (var r = lid; r < p.n_rows; r += WG) {
        let cr = cfg[r];
        if (cr.live != 0u && !fast(cr)) {
            slow = 1u;
        }
    }
    _ = scan2(slow, 0u, lid);
    let any = workgroupUniformLoad(&scan_a[WG - 1u]) != 0u;
    if (lid == 0u) {
        let parts = select(0u, p.parts, any);
        atomicStore(&ctr[0], parts);
        atomicStore(&ctr[1], p.n_rows);
        atomicStore(&ctr[2], 1u);
        atomicStore(&ctr[3], parts);
        atomicStore(&ctr[4], p.n_rows);
        atomicStore(&ctr[5], 1u);
        atomicStore(&ctr[6], select(0u, p.n_rows, any));
        atomicStore(&ctr[7], 1u);
        atomicStore(&ctr[8], 1u);
    }
    workgroupBarrier();
}

// Pass 2.
@compute @workgroup_size(256)
fn sieve(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) size: u32, @builtin(subgroup_id) sgi: u32,
        @builtin(num_subgroups) nsg: u32) {
    let lid = enter(lane, size, sgi, nsg);
    let g = wid.x;
    let row = wid.y;
    let c = cfg[row];
    let tk = top_k_on(c);
    let tp = top_p_on(c);
    let mp = c.min_p > 0.0;
    if (c.live == 0u || fast(c)) {
        return;
    }
    at_row(row);
    let top = reduce_pairs(off_pm(), p.parts, lid);
    let l0 = bitcast<f32>(top.x);
    if (!is_finite(l0)) {
        return;
    }
    let r = chunk(g);
    if (!tk && !tp) {
        // min-p only: the race over the survivors.
        for (var i = r.x + lid; i < r.y; i += WG) {
            let x = xs(i);
            if (i == top.y || exp_s(x - l0) >= c.min_p) {
                race(c, x, i);
            }
        }
        _ = put_part(off_pg(), g, race_v, race_i, lid);
        return;
    }
    let weigh = tp && !tk;
    let n_hist = select(NB, 3u * NB, weigh);
    for (var i = lid; i < n_hist; i += WG) {
        atomicStore(&hist[i], 0u);
    }
    workgroupBarrier();
    for (var i = r.x + lid; i < r.y; i += WG) {
        let x = xs(i);
        if (is_neg_inf(x)) {
            continue;
        }
        let d = x - l0;
        let b = bucket(d);
        atomicAdd(&hist[b], 1u);
        if (weigh) {
            let q = weight_q(d);
            if (q != 0u) {
                atomicAdd(&hist[NB + b], q & 0xfffu);
                atomicAdd(&hist[2u * NB + b], q >> 12u);
            }
        }
    }
    workgroupBarrier();
    for (var i = lid; i < n_hist; i += WG) {
        let n = atomicLoad(&hist[i]);
        if (n != 0u) {
            atomicAdd(&ctr[c0 + i], n);
        }
    }
}

// Inclusive workgroup scan of (a, b) pairs in rank order (u32 sums: exact, so the order of
// the additions is free); the totals are left in scan_a[WG - 1], scan_b[WG - 1].
fn scan2(a: u32, b: u32, lid: u32) -> vec2<u32> {
    let ia = subgroupInclusiveAdd(a);
    let ib = subgroupInclusiveAdd(b);
    workgroupBarrier();
    if (sg_lane == sg_size - 1u) {
        scan_a[sg_id] = ia;
        scan_b[sg_id] = ib;
    }
    workgroupBarrier();
    var pa = 0u;
    var pb = 0u;
    for (var k = 0u; k < sg_id; k++) {
        pa += scan_a[k];
        pb += scan_b[k];
    }
    // The last invocation's own prefix is the total (rank WG - 1 reads only ranks < n_sg - 1).
    if (lid == WG - 1u) {
        scan_a[WG - 1u] = pa + ia;
        scan_b[WG - 1u] = pb + ib;
    }
    return vec2<u32>(pa + ia, pb + ib);
}

// The boundary bucket of a top-k / top-p row from the global histogram: sh_u[0] = bucket;
// top-p only rows: sh_u[1], sh_u[2] = the weight of the buckets before it (high, low 12-bit
// sums). All invocations call it.
fn boundary(c: Row, tk: bool, lid: u32) {
    // Each invocation owns 4 consecutive buckets: counts (top-k) or weight halves (top-p).
    var a: array<u32, 4>;
    var h: array<u32, 4>;
    var sa = 0u;
    var sh = 0u;
    for (var j = 0u; j < 4u; j++) {
        let b = 4u * lid + j;
        if (tk) {
            a[j] = atomicLoad(&ctr[c0 + b]);
            h[j] = 0u;
        } else {
            a[j] = atomicLoad(&ctr[c0 + NB + b]);
            h[j] = atomicLoad(&ctr[c0 + 2u * NB + b]);
        }
        sa += a[j];
        sh += h[j];
    }
    if (lid == 0u) {
        // Top-k: fewer than k tokens are finite (-inf ones are not counted): all of them.
        sh_u[0] = select(0u, NB - 1u, tk);
        sh_u[1] = 0u;
        sh_u[2] = 0u;
    }
    let inc = scan2(sa, sh, lid);
    if (tk) {
        var run = inc.x - sa;
        for (var j = 0u; j < 4u; j++) {
            if (run < c.top_k && run + a[j] >= c.top_k) {
                sh_u[0] = 4u * lid + j;
            }
            run += a[j];
        }
        workgroupBarrier();
        return;
    }
    let tot_l = workgroupUniformLoad(&scan_a[WG - 1u]);
    let tot_h = workgroupUniformLoad(&scan_b[WG - 1u]);
    let thr = c.top_p * mass_f32(tot_h, tot_l);
    var rl = inc.x - sa;
    var rh = inc.y - sh;
    for (var j = 0u; j < 4u; j++) {
        if (mass_f32(rh, rl) < thr && mass_f32(rh + h[j], rl + a[j]) >= thr) {
            sh_u[0] = 4u * lid + j;
            sh_u[1] = rh;
            sh_u[2] = rl;
        }
        rl += a[j];
        rh += h[j];
    }
    workgroupBarrier();
}

// Pass 3.
@compute @workgroup_size(256)
fn gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) size: u32, @builtin(subgroup_id) sgi: u32,
        @builtin(num_subgroups) nsg: u32) {
    let lid = enter(lane, size, sgi, nsg);
    let g = wid.x;
    let row = wid.y;
    let c = cfg[row];
    let tk = top_k_on(c);
    let tp = top_p_on(c);
    if (c.live == 0u || fast(c) || !(tk || tp)) {
        return;
    }
    at_row(row);
    let top = reduce_pairs(off_pm(), p.parts, lid);
    let l0 = bitcast<f32>(top.x);
    if (!is_finite(l0)) {
        return;
    }
    boundary(c, tk, lid);
    let bb = workgroupUniformLoad(&sh_u[0]);
    let r = chunk(g);
    let n_at = c0 + 3u * NB;
    for (var i = r.x + lid; i < r.y; i += WG) {
        let x = xs(i);
        if (is_neg_inf(x)) {
            continue;
        }
        let b = bucket(x - l0);
        if (b == bb || (tk && b < bb)) {
            let k = atomicAdd(&ctr[n_at], 1u);
            sset(off_list() + 2u * k, bitcast<u32>(x));
            sset(off_list() + 2u * k + 1u, i);
        } else if (b < bb) {
            // top-p only: kept without sorting; min-p, then the race.
            if (!(c.min_p > 0.0) || i == top.y || exp_s(x - l0) >= c.min_p) {
                race(c, x, i);
            }
        }
    }
    if (!tk) {
        _ = put_part(off_pg(), g, race_v, race_i, lid);
    }
}

var<workgroup> n_sub: atomic<u32>;

// Pass 4.
@compute @workgroup_size(256)
fn finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) size: u32, @builtin(subgroup_id) sgi: u32,
        @builtin(num_subgroups) nsg: u32) {
    let lid = enter(lane, size, sgi, nsg);
    let row = wid.x;
    let c = cfg[row];
    if (c.live == 0u || fast(c)) {
        return;
    }
    at_row(row);
    let top = reduce_pairs(off_pm(), p.parts, lid);
    let l0 = bitcast<f32>(top.x);
    let tk = top_k_on(c);
    let tp = top_p_on(c);
    if (!is_finite(l0)) {
        if (lid == 0u) {
            out[row] = top.y;
        }
        return;
    }
    if (!tk) {
        // The part winners of the race (sieve or gather).
        let w = reduce_pairs(off_pg(), p.parts, lid);
        race_v = bitcast<f32>(w.x);
        race_i = w.y;
        if (!tp) {
            if (lid == 0u) {
                out[row] = race_i;
            }
            return;
        }
    }
    let mp = c.min_p > 0.0;
    if (lid == 0u) {
        sh_u[3] = atomicLoad(&ctr[c0 + 3u * NB]);
    }
    let n = workgroupUniformLoad(&sh_u[3]);
    // Top-p's prefix sums (exact, as 12-bit halves) start at `base`: for top-p-only rows the
    // mass of the buckets (and sub-buckets) before the sorted entries.
    var base_h = 0u;
    var base_l = 0u;
    var thr = 0.0;
    var n_sort = n;
    // The sorted entries are one sub-bucket of the list, gathered into sk/si.
    var sub = false;
    if (!tk) {
        boundary(c, false, lid);
        let bb = workgroupUniformLoad(&sh_u[0]);
        base_h = workgroupUniformLoad(&sh_u[1]);
        base_l = workgroupUniformLoad(&sh_u[2]);
        var zl = 0u;
        var zh = 0u;
        for (var b = lid; b < NB; b += WG) {
            zl += atomicLoad(&ctr[c0 + NB + b]);
            zh += atomicLoad(&ctr[c0 + 2u * NB + b]);
        }
        _ = scan2(zl, zh, lid);
        let tot_l = workgroupUniformLoad(&scan_a[WG - 1u]);
        let tot_h = workgroupUniformLoad(&scan_b[WG - 1u]);
        thr = c.top_p * mass_f32(tot_h, tot_l);
        // The list is the boundary bucket: split it into sub-buckets the same way, race the
        // ones before the crossing, sort only the crossing one (when it fits sk/si).
        for (var i = lid; i < 3u * NB; i += WG) {
            atomicStore(&hist[i], 0u);
        }
        if (lid == 0u) {
            atomicStore(&n_sub, 0u);
        }
        workgroupBarrier();
        for (var j = lid; j < n; j += WG) {
            let d = xs(off_list() + 2u * j) - l0;
            let sb = sub_bucket(d, bb);
            let q = weight_q(d);
            atomicAdd(&hist[sb], 1u);
            atomicAdd(&hist[NB + sb], q & 0xfffu);
            atomicAdd(&hist[2u * NB + sb], q >> 12u);
        }
        workgroupBarrier();
        sub_cross(base_h, base_l, thr, lid);
        let ss = workgroupUniformLoad(&sh_u[0]);
        if (lid == 0u) {
            sh_u[3] = atomicLoad(&hist[ss]);
        }
        let cnt = workgroupUniformLoad(&sh_u[3]);
        if (cnt <= LCAP) {
            sub = true;
            n_sort = cnt;
            base_h = workgroupUniformLoad(&sh_u[1]);
            base_l = workgroupUniformLoad(&sh_u[2]);
            for (var j = lid; j < n; j += WG) {
                let x = xs(off_list() + 2u * j);
                let id = sget(off_list() + 2u * j + 1u);
                let sb = sub_bucket(x - l0, bb);
                if (sb == ss) {
                    let k = atomicAdd(&n_sub, 1u);
                    sk[k] = x;
                    si[k] = id;
                } else if (sb < ss && (!mp || id == top.y || exp_s(x - l0) >= c.min_p)) {
                    race(c, x, id);
                }
            }
            workgroupBarrier();
        }
    }
    draw(c, row, lid, top, n, n_sort, sub, base_h, base_l, thr);
}
