// Candidate lists and the end of a row's draw, included by sample.wgsl: prep's per-part lists
// and last-workgroup finish for fast rows, the list helpers, top-p's sub-buckets, and `draw`
// (shared with `finish`), which sorts the list, applies top-k, top-p and min-p and races the
// survivors.

var<private> in_sh: bool;

fn lk(j: u32) -> f32 {
    if (in_sh) {
        return sk[j];
    }
    return xs(off_list() + 2u * j);
}

fn li(j: u32) -> u32 {
    if (in_sh) {
        return si[j];
    }
    return sget(off_list() + 2u * j + 1u);
}

fn lset(j: u32, x: f32, i: u32) {
    if (in_sh) {
        sk[j] = x;
        si[j] = i;
    } else {
        sset(off_list() + 2u * j, bitcast<u32>(x));
        sset(off_list() + 2u * j + 1u, i);
    }
}

fn list_barrier() {
    if (in_sh) {
        workgroupBarrier();
    } else {
        storageBarrier();
        workgroupBarrier();
    }
}

// Sub-bucket of a token of top-p's boundary bucket `bb`: 1024 slices of the bucket (the same
// t as `bucket`, so the order still follows the candidate order).
fn sub_bucket(d: f32, bb: u32) -> u32 {
    let u = (-d * 32.0 - f32(bb)) * 1024.0;
    if (!(u < f32(NB - 1u))) {
        return NB - 1u;
    }
    return u32(floor(u));
}

// `boundary` for the sub-buckets in `hist`, from the mass (bh, bl) before the bucket: sh_u[0] =
// the sub-bucket where the mass reaches thr (0 if none), sh_u[1], sh_u[2] = the mass before it.
fn sub_cross(bh: u32, bl: u32, thr: f32, lid: u32) {
    var wl = 0u;
    var wh = 0u;
    for (var j = 0u; j < 4u; j++) {
        wl += atomicLoad(&hist[NB + 4u * lid + j]);
        wh += atomicLoad(&hist[2u * NB + 4u * lid + j]);
    }
    if (lid == 0u) {
        sh_u[0] = 0u;
        sh_u[1] = bh;
        sh_u[2] = bl;
    }
    let inc = scan2(wl, wh, lid);
    var rl = bl + inc.x - wl;
    var rh = bh + inc.y - wh;
    for (var j = 0u; j < 4u; j++) {
        let b = 4u * lid + j;
        let nl = atomicLoad(&hist[NB + b]);
        let nh = atomicLoad(&hist[2u * NB + b]);
        if (mass_f32(rh, rl) < thr && mass_f32(rh + nh, rl + nl) >= thr) {
            sh_u[0] = b;
            sh_u[1] = rh;
            sh_u[2] = rl;
        }
        rl += nl;
        rh += nh;
    }
    workgroupBarrier();
}

// Top-p weights of the short list's entries, and top-k's Z (low and high 12-bit sums).
var<workgroup> sq: array<u32, 256>;
var<workgroup> zq: array<atomic<u32>, 2>;

// `draw` for a list of at most WG entries in sk/si, without sorting it: an entry's place in the
// order is the number of entries before it (the order is total: ids differ) and its top-p prefix
// is their weight, both counted in one pass; tpe adjacent invocations (one subgroup) split an
// entry's comparisons. The same keep rules as the sorted walk, so the same survivors.
fn draw_short(c: Row, row: u32, lid: u32, top: vec2<u32>, n: u32, n_sort: u32, base_h: u32,
              base_l: u32, thr_in: f32) {
    let l0 = bitcast<f32>(top.x);
    let tk = top_k_on(c);
    let tp = top_p_on(c);
    let mp = c.min_p > 0.0;
    if (lid < n_sort) {
        var q = 0u;
        if (tp) {
            q = weight_q(sk[lid] - l0);
        }
        sq[lid] = q;
    }
    if (lid < 2u) {
        atomicStore(&zq[lid], 0u);
    }
    workgroupBarrier();
    // Top-k + top-p rows (a barrier before the race): when the rank lanes leave whole subgroups
    // for one invocation per entry, those compute the Gumbel variates meanwhile (into scan_b).
    let early = tk && tp && gum_lanes(1u, n_sort) + n_sort <= WG;
    var tpe = 1u;
    while (tpe < 8u && 2u * tpe * n_sort <= WG && 2u * tpe <= sg_size
        && (!early || gum_lanes(2u * tpe, n_sort) + n_sort <= WG)) {
        tpe *= 2u;
    }
    let g0 = gum_lanes(tpe, n_sort);
    if (early && lid >= g0 && lid < g0 + n_sort) {
        scan_b[lid - g0] = bitcast<u32>(gumbel(c, si[lid - g0]));
    }
    let e = lid / tpe;
    let lead = lid % tpe == 0u;
    let neg_inf = bitcast<f32>(0xff800000u);
    var x = neg_inf;
    var id = NONE;
    var rank = 0u;
    var pl = 0u;
    var ph = 0u;
    if (e < n_sort) {
        x = sk[e];
        id = si[e];
        for (var j = lid % tpe; j < n_sort; j += tpe) {
            if (before(sk[j], si[j], x, id)) {
                rank++;
                pl += sq[j] & 0xfffu;
                ph += sq[j] >> 12u;
            }
        }
    }
    for (var o = 1u; o < tpe; o *= 2u) {
        rank += subgroupShuffleXor(rank, o);
        pl += subgroupShuffleXor(pl, o);
        ph += subgroupShuffleXor(ph, o);
    }
    // Top-k's set: the first nk in the order; with top-p too, Z is their weight.
    var nk = n_sort;
    var thr = thr_in;
    if (tk) {
        nk = min(n, c.top_k);
    }
    let in_k = e < n_sort && lead && rank < nk;
    if (tk && tp) {
        var q = 0u;
        if (in_k) {
            q = sq[e];
        }
        let zl = subgroupAdd(q & 0xfffu);
        let zh = subgroupAdd(q >> 12u);
        if (sg_lane == 0u) {
            atomicAdd(&zq[0], zl);
            atomicAdd(&zq[1], zh);
        }
        workgroupBarrier();
        thr = c.top_p * mass_f32(atomicLoad(&zq[1]), atomicLoad(&zq[0]));
    }
    var keep = in_k;
    if (keep && tp && id != top.y) {
        keep = mass_f32(base_h + ph, base_l + pl) < thr;
    }
    if (keep && mp && id != top.y) {
        keep = exp_s(x - l0) >= c.min_p;
    }
    if (keep) {
        if (early) {
            race_with(x + bitcast<f32>(scan_b[e]), id);
        } else {
            race(c, x, id);
        }
    }
    let w = wg_best(race_v, race_i, lid);
    if (lid == 0u) {
        out[row] = w.y;
    }
}

// The first invocation past tpe lanes for each of n entries, rounded up to a whole subgroup.
fn gum_lanes(tpe: u32, n: u32) -> u32 {
    return (tpe * n + sg_size - 1u) / sg_size * sg_size;
}

// Sorts the row's n_sort listed candidates (in sk/si when `direct`, else at off_list, n of
// them), applies top-k, top-p (prefix sums from the mass (base_h, base_l) before the list;
// threshold `thr_in` for top-p-only rows) and min-p, races the survivors (on top of the race
// state the invocation holds) and writes the winner to out[row]. All invocations call it.
fn draw(c: Row, row: u32, lid: u32, top: vec2<u32>, n: u32, n_sort: u32, direct: bool,
        base_h_in: u32, base_l_in: u32, thr_in: f32) {
    let sub = direct;
    let l0 = bitcast<f32>(top.x);
    let tk = top_k_on(c);
    let tp = top_p_on(c);
    let mp = c.min_p > 0.0;
    let neg_inf = bitcast<f32>(0xff800000u);
    var base_h = base_h_in;
    var base_l = base_l_in;
    var thr = thr_in;
    var m2 = 1u;
    while (m2 < n_sort) {
        m2 *= 2u;
    }
    in_sh = sub || m2 <= LCAP;
    if (in_sh && n_sort <= WG) {
        // No padding: draw_short reads entries below n_sort only (entry j by invocation j first,
        // the others after its barrier).
        if (!sub && lid < n_sort) {
            sk[lid] = xs(off_list() + 2u * lid);
            si[lid] = sget(off_list() + 2u * lid + 1u);
        }
        draw_short(c, row, lid, top, n, n_sort, base_h, base_l, thr);
        return;
    }
    if (sub) {
        for (var j = n_sort + lid; j < m2; j += WG) {
            sk[j] = neg_inf;
            si[j] = NONE;
        }
    } else if (in_sh) {
        for (var j = lid; j < m2; j += WG) {
            if (j < n) {
                sk[j] = xs(off_list() + 2u * j);
                si[j] = sget(off_list() + 2u * j + 1u);
            } else {
                sk[j] = neg_inf;
                si[j] = NONE;
            }
        }
    } else {
        for (var j = n + lid; j < m2; j += WG) {
            sset(off_list() + 2u * j, bitcast<u32>(neg_inf));
            sset(off_list() + 2u * j + 1u, NONE);
        }
    }
    list_barrier();
    // Bitonic sort of [0, m2) by `before`.
    for (var k = 2u; k <= m2; k *= 2u) {
        for (var j = k / 2u; j > 0u; j /= 2u) {
            for (var i = lid; i < m2; i += WG) {
                let ixj = i ^ j;
                if (ixj > i) {
                    let al = lk(i);
                    let ai = li(i);
                    let bl = lk(ixj);
                    let bj = li(ixj);
                    var swap = before(bl, bj, al, ai);
                    if ((i & k) != 0u) {
                        swap = before(al, ai, bl, bj);
                    }
                    if (swap) {
                        lset(i, bl, bj);
                        lset(ixj, al, ai);
                    }
                }
            }
            list_barrier();
        }
    }
    // Top-k's set is the first nk entries; with top-p too, Z is their mass.
    var nk = n_sort;
    // Top-k + top-p with k <= WG: Z is the one block's total, taken in the loop below.
    var z_later = false;
    if (tk) {
        nk = min(n, c.top_k);
        z_later = tp && nk <= WG;
        if (tp && !z_later) {
            var zl = 0u;
            var zh = 0u;
            for (var j = lid; j < nk; j += WG) {
                let q = weight_q(lk(j) - l0);
                zl += q & 0xfffu;
                zh += q >> 12u;
            }
            _ = scan2(zl, zh, lid);
            let tot_l = workgroupUniformLoad(&scan_a[WG - 1u]);
            let tot_h = workgroupUniformLoad(&scan_b[WG - 1u]);
            thr = c.top_p * mass_f32(tot_h, tot_l);
        }
    }
    // Blocks of WG entries: exclusive prefix = base + the scan within the block.
    for (var blk = 0u; blk < nk; blk += WG) {
        let j = blk + lid;
        var q = 0u;
        var x = neg_inf;
        var id = NONE;
        if (j < nk) {
            x = lk(j);
            id = li(j);
            if (tp) {
                q = weight_q(x - l0);
            }
        }
        let inc = scan2(q & 0xfffu, q >> 12u, lid);
        let tot_l = workgroupUniformLoad(&scan_a[WG - 1u]);
        let tot_h = workgroupUniformLoad(&scan_b[WG - 1u]);
        if (z_later) {
            thr = c.top_p * mass_f32(tot_h, tot_l);
        }
        let pl = base_l + inc.x - (q & 0xfffu);
        let ph = base_h + inc.y - (q >> 12u);
        var keep = j < nk;
        if (keep && tp && id != top.y) {
            keep = mass_f32(ph, pl) < thr;
        }
        if (keep && mp && id != top.y) {
            keep = exp_s(x - l0) >= c.min_p;
        }
        if (keep) {
            race(c, x, id);
        }
        base_l += tot_l;
        base_h += tot_h;
    }
    let w = wg_best(race_v, race_i, lid);
    if (lid == 0u) {
        out[row] = w.y;
    }
}

// Top-k <= KF rows: lists the part's candidates for the top k, every token whose bucket of
// d = x - lm (lm: the part's maximum) is at or before the bucket where the part's count reaches
// k (a superset of the part's top k, so the union over parts holds the row's top k and every
// token of its boundary bucket that can be among them). The (x, id) pairs go to the part's own
// place, off_cand + 2 r.x, in bucket order (ties within a bucket in any order), and their count
// to off_len() + g; the last workgroup reads each list only as far as it can reach theta. x comes
// from xr (token r.x + lid + u WG is xr[u]) when the chunk fits, else from scratch.
// `hist` is cleared by the caller before a workgroup barrier.
fn list_part(c: Row, g: u32, r: vec2<u32>, lm: f32, lid: u32, xr: array<f32, 8>) {
    let in_reg = r.y - r.x <= 8u * WG;
    if (in_reg) {
        for (var u = 0u; u < 8u; u++) {
            if (r.x + lid + u * WG < r.y && !is_neg_inf(xr[u])) {
                atomicAdd(&hist[bucket(xr[u] - lm)], 1u);
            }
        }
    } else {
        for (var i = r.x + lid; i < r.y; i += WG) {
            let x = xs(i);
            if (!is_neg_inf(x)) {
                atomicAdd(&hist[bucket(x - lm)], 1u);
            }
        }
    }
    workgroupBarrier();
    // hist now holds where each bucket's entries start.
    let bk = cross_k(c.top_k, lid);
    if (lid == 0u) {
        sset(off_len() + g, bk.y);
    }
    if (in_reg) {
        for (var u = 0u; u < 8u; u++) {
            let i = r.x + lid + u * WG;
            if (i < r.y && !is_neg_inf(xr[u])) {
                let b = bucket(xr[u] - lm);
                if (b <= bk.x) {
                    put_cand(r.x + atomicAdd(&hist[b], 1u), xr[u], i);
                }
            }
        }
    } else {
        for (var i = r.x + lid; i < r.y; i += WG) {
            let x = xs(i);
            if (!is_neg_inf(x)) {
                let b = bucket(x - lm);
                if (b <= bk.x) {
                    put_cand(r.x + atomicAdd(&hist[b], 1u), x, i);
                }
            }
        }
    }
}

fn put_cand(k: u32, x: f32, i: u32) {
    sset(off_cand() + 2u * k, bitcast<u32>(x));
    sset(off_cand() + 2u * k + 1u, i);
}

// The bucket of `hist` (counts) where the running count first reaches k, and the count through
// it; (NB - 1, total) when it never does (not uniform: the analysis cannot see that every
// invocation reads the same words). Leaves in `hist` each bucket's running count before it
// (where its entries start in a list in bucket order). All invocations call it.
fn cross_k(k: u32, lid: u32) -> vec2<u32> {
    var a: array<u32, 4>;
    var sa = 0u;
    for (var j = 0u; j < 4u; j++) {
        a[j] = atomicLoad(&hist[4u * lid + j]);
        sa += a[j];
    }
    let inc = scan2(sa, 0u, lid);
    // The last invocation's inclusive count is the total: it writes the answer when k is never
    // reached, the crossing invocation otherwise.
    if (lid == WG - 1u && inc.x < k) {
        sh_u[0] = NB - 1u;
        sh_u[1] = inc.x;
    }
    var run = inc.x - sa;
    for (var j = 0u; j < 4u; j++) {
        if (run < k && run + a[j] >= k) {
            sh_u[0] = 4u * lid + j;
            sh_u[1] = run + a[j];
        }
        atomicStore(&hist[4u * lid + j], run);
        run += a[j];
    }
    workgroupBarrier();
    return vec2<u32>(sh_u[0], sh_u[1]);
}

// Appends a candidate to the short list in sk/si (counted past LCAP, stored up to it).
fn keep_cand(x: f32, i: u32) {
    let k = atomicAdd(&n_sub, 1u);
    if (k < LCAP) {
        sk[k] = x;
        si[k] = i;
    }
}

// Part lengths of prep's candidate lists (top-k rows), for the last workgroup.
var<workgroup> plen: array<u32, NP>;

// `prep`'s last workgroup of a fast row: greedy rows take the part maxima's winner, unfiltered
// rows the race winners', top-k rows keep the listed candidates at or above theta (a lower
// bound on the row's k-th largest x) and `draw` from them; when more than LCAP tie there,
// they bucket every candidate by d = x - l0 as `sieve` would and keep those up to top-k's
// boundary bucket.
fn finish_fast(c: Row, row: u32, lid: u32) {
    let sampled_k = c.greedy == 0u && top_k_on(c);
    // The short list's count (ordered before its first use by the barriers below).
    if (lid == 0u) {
        atomicStore(&n_sub, 0u);
    }
    // Invocation g < parts holds part g's maximum (and list length).
    var pv = 0.0;
    var pi = NONE;
    if (lid < p.parts) {
        pv = xs(off_pm() + 2u * lid);
        pi = sget(off_pm() + 2u * lid + 1u);
        if (sampled_k) {
            plen[lid] = sget(off_len() + lid);
        }
    }
    // Invocations (e, h) = (lid % NP, lid / NP) load entries FB h .. FB h + FB - 1 of part e's
    // list before theta is known (entries past the list's length are dropped below).
    let e = lid % NP;
    let h = lid / NP;
    var ce = vec2<u32>(0u, 0u);
    var cx: array<f32, FB>;
    var ci: array<u32, FB>;
    if (sampled_k && e < p.parts) {
        ce = chunk(e);
        for (var u = 0u; u < FB; u++) {
            let j = ce.x + FB * h + u;
            if (j < ce.y) {
                cx[u] = xs(off_cand() + 2u * j);
                ci[u] = sget(off_cand() + 2u * j + 1u);
            }
        }
    }
    let top = wg_best(pv, pi, lid);
    let l0 = bitcast<f32>(top.x);
    if (c.greedy != 0u || !is_finite(l0)) {
        if (lid == 0u) {
            out[row] = top.y;
        }
        return;
    }
    if (!top_k_on(c)) {
        let w = reduce_pairs(off_pg(), p.parts, lid);
        if (lid == 0u) {
            out[row] = w.y;
        }
        return;
    }
    let theta = kth_part_max(pv, pi, c.top_k, lid);
    // A part's list is in bucket order of x - lm: past an entry whose bucket is beyond theta's,
    // nothing reaches theta. The prefetched blocks are kept with one atomic per subgroup; an
    // invocation whose block ends at or above theta's bucket reads on (every other block of the
    // part) until one does not.
    let live = e < p.parts;
    var n = 0u;
    var lm = 0.0;
    var bt = 0u;
    if (live) {
        n = plen[e];
        lm = pm4[e / 4u][e % 4u];
        bt = bucket(theta - lm);
    }
    var bits = 0u;
    var cnt = 0u;
    for (var u = 0u; u < FB; u++) {
        if (live && FB * h + u < n && cx[u] >= theta) {
            bits |= 1u << u;
            cnt++;
        }
    }
    let pre = subgroupExclusiveAdd(cnt);
    let tot = subgroupAdd(cnt);
    var base = 0u;
    if (sg_lane == 0u && tot != 0u) {
        base = atomicAdd(&n_sub, tot);
    }
    var at = subgroupBroadcast(base, 0u) + pre;
    for (var u = 0u; u < FB; u++) {
        if (((bits >> u) & 1u) != 0u) {
            if (at < LCAP) {
                sk[at] = cx[u];
                si[at] = ci[u];
            }
            at++;
        }
    }
    if (live && FB * h + FB <= n && bucket(cx[FB - 1u] - lm) <= bt) {
        var j0 = FB * h + 2u * FB;
        loop {
            for (var u = 0u; u < FB; u++) {
                if (j0 + u < n) {
                    cx[u] = xs(off_cand() + 2u * (ce.x + j0 + u));
                    ci[u] = sget(off_cand() + 2u * (ce.x + j0 + u) + 1u);
                }
            }
            for (var u = 0u; u < FB; u++) {
                if (j0 + u < n && cx[u] >= theta) {
                    keep_cand(cx[u], ci[u]);
                }
            }
            if (!(j0 + FB <= n && bucket(cx[FB - 1u] - lm) <= bt)) {
                break;
            }
            j0 += 2u * FB;
        }
    }
    let ns = workgroupUniformLoad(&n_sub);
    if (ns <= LCAP) {
        draw(c, row, lid, top, ns, ns, true, 0u, 0u, 0.0);
        return;
    }
    // Many ties at theta: every listed candidate, part by part.
    for (var i = lid; i < NB; i += WG) {
        atomicStore(&hist[i], 0u);
    }
    if (lid == 0u) {
        atomicStore(&n_sub, 0u);
    }
    workgroupBarrier();
    for (var g = 0u; g < p.parts; g++) {
        let at = off_cand() + 2u * chunk(g).x;
        for (var j = lid; j < plen[g]; j += WG) {
            atomicAdd(&hist[bucket(xs(at + 2u * j) - l0)], 1u);
        }
    }
    workgroupBarrier();
    let bk = cross_k(c.top_k, lid);
    let nb = workgroupUniformLoad(&sh_u[1]);
    let direct = nb <= LCAP;
    for (var g = 0u; g < p.parts; g++) {
        let at = off_cand() + 2u * chunk(g).x;
        for (var j = lid; j < plen[g]; j += WG) {
            let x = xs(at + 2u * j);
            if (bucket(x - l0) <= bk.x) {
                let id = sget(at + 2u * j + 1u);
                let k = atomicAdd(&n_sub, 1u);
                if (direct) {
                    sk[k] = x;
                    si[k] = id;
                } else {
                    sset(off_list() + 2u * k, bitcast<u32>(x));
                    sset(off_list() + 2u * k + 1u, id);
                }
            }
        }
    }
    storageBarrier();
    workgroupBarrier();
    draw(c, row, lid, top, nb, nb, direct, 0u, 0u, 0.0);
}

// A lower bound on the row's k-th largest x: the largest part maximum with at least k part
// maxima at or above it (k distinct tokens), -inf when k > parts. (pv, pi): invocation g's
// part maximum for g < parts (pi = NONE: an empty part). All invocations call it. The counts
// read the maxima as vec4s from `pm4` (empty parts -inf, padding NaN: never at or above
// anything), two invocations per part maximum, each over half of them.
fn kth_part_max(pv: f32, pi: u32, k: u32, lid: u32) -> f32 {
    let neg_inf = bitcast<f32>(0xff800000u);
    // pm4, scan_a and best_v are free: wg_best's last reads of best_v come before the barrier
    // after pm4 is written.
    if (lid < NP) {
        var v = bitcast<f32>(0x7fc00000u);
        if (lid < p.parts) {
            v = select(pv, neg_inf, pi == NONE);
        }
        pm_flat(lid, v);
    }
    workgroupBarrier();
    let e = lid % NP;
    let half = lid / NP;
    let n4 = (p.parts + 3u) / 4u;
    let per = (n4 + 1u) / 2u;
    let me = pm4[e / 4u][e % 4u];
    var ge = 0u;
    for (var q = half * per; q < min(n4, half * per + per); q++) {
        let w = pm4[q];
        ge += select(0u, 1u, w.x >= me) + select(0u, 1u, w.y >= me) + select(0u, 1u, w.z >= me)
            + select(0u, 1u, w.w >= me);
    }
    scan_a[lid] = ge;
    workgroupBarrier();
    var cand = neg_inf;
    if (lid < p.parts && pi != NONE && k <= p.parts && scan_a[lid] + scan_a[lid + NP] >= k) {
        cand = pv;
    }
    let m = subgroupMax(cand);
    if (sg_lane == 0u) {
        best_v[sg_id] = m;
    }
    workgroupBarrier();
    var r = best_v[0];
    for (var s = 1u; s < n_sg; s++) {
        r = max(r, best_v[s]);
    }
    return r;
}

// pm4 as a flat array: entry i of the part maxima.
fn pm_flat(i: u32, v: f32) {
    pm4[i / 4u][i % 4u] = v;
}
