//! Causal multi-head attention with grouped KV heads, sliding window and score soft-capping.
//!
//! For query token `t` at absolute position `p = q_pos[t]` and query head `h` (KV head
//! `h / (n_heads / n_kv_heads)`):
//!
//! 1. visible keys: `j in 0..n_kv` with `j <= p` and, if `window = Some(w)`, `p - j < w`. This is
//!    transformers' convention: `masking_utils.sliding_window_overlay` keeps
//!    `kv_idx > q_idx - sliding_window`, combined with `causal_mask_function` (`kv_idx <= q_idx`),
//!    so a window of `w` shows the current token and the `w - 1` before it;
//! 2. `s_j = dot(q, k_j) * scale` ([`crate::dot`], then an f32 multiply), then if
//!    `softcap = Some(c)`: `s_j = c * tanh(s_j / c)` ([`crate::softcap_one`]);
//! 3. `w_j = exp(s_j - max_j s_j)` in f64, `sum` in f64 in key order;
//! 4. `out[d] = (sum_j w_j * v_j[d]) / sum`, accumulated in f64, rounded once to f32.
//!
//! A query that sees no key (impossible with causal positions `p < n_kv`, but guarded) gets a
//! zero output.
//!
//! [`attention_ring`] reads the same keys from a ring of rows (sliding-window layers keep only
//! their window): key `j` is row `j % ring`. The keys visited, their order and the arithmetic
//! are those above, so the result is bit-identical to [`attention`] over the full cache. Above ~1M multiply-accumulates the query tokens are split over scoped threads;
//! each output row is computed by one thread, so the result never depends on the thread count.

use crate::dot::dot;
use crate::elementwise::softcap_one;
use crate::threads::threads_for;

/// Shapes and options of one attention call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnParams {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (divides `n_heads`).
    pub n_kv_heads: usize,
    /// Dimension of every head (q, k and v alike).
    pub head_dim: usize,
    /// Score multiplier, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// Score soft-cap `c`: `s = c * tanh(s / c)` (Gemma 2).
    pub softcap: Option<f32>,
    /// Sliding window: a query at `p` sees keys `j` with `p - j < window`.
    pub window: Option<usize>,
}

/// Attention over keys at positions `0..n_kv`.
///
/// `q: [n_q, n_heads * head_dim]`, `k` and `v: [n_kv, n_kv_heads * head_dim]`,
/// `q_pos: [n_q]` absolute positions of the queries, `out: [n_q, n_heads * head_dim]`.
/// See the module docs for the exact arithmetic.
///
/// # Panics
/// If a length does not match, `n_kv_heads` is 0 or does not divide `n_heads` (programming
/// errors).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_q: usize,
    n_kv: usize,
    q_pos: &[usize],
    p: &AttnParams,
    out: &mut [f32],
) {
    let work = n_q * n_kv * p.n_heads * p.head_dim;
    let ring = n_kv.max(1);
    attention_threads(
        q,
        k,
        v,
        n_q,
        n_kv,
        ring,
        q_pos,
        p,
        out,
        threads_for(work, n_q),
    );
}

/// [`attention`] over a ring of `min(n_kv, ring)` cache rows: the key at position `j` is row
/// `j % ring` of `k` and `v` (`[min(n_kv, ring), n_kv_heads * head_dim]`). Every query's visible
/// keys must fit in the ring (at most `ring` of them), else older keys would have been
/// overwritten: a sliding-window layer whose ring holds at least its window.
///
/// # Panics
/// As [`attention`]; also if `ring` is 0 or a query sees more than `ring` keys (programming
/// errors).
#[allow(clippy::too_many_arguments)]
pub fn attention_ring(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_q: usize,
    n_kv: usize,
    ring: usize,
    q_pos: &[usize],
    p: &AttnParams,
    out: &mut [f32],
) {
    assert!(ring > 0, "attention_ring: ring of 0 rows");
    let span = p.window.map_or(n_kv, |w| w.min(n_kv));
    let work = n_q * span * p.n_heads * p.head_dim;
    attention_threads(
        q,
        k,
        v,
        n_q,
        n_kv,
        ring,
        q_pos,
        p,
        out,
        threads_for(work, n_q),
    );
}

/// The visible keys `lo..hi` of a query at `pos` over keys `0..n_kv`.
fn visible(pos: usize, n_kv: usize, window: Option<usize>) -> (usize, usize) {
    let hi = n_kv.min(pos.saturating_add(1));
    let lo = match window {
        Some(w) => pos.saturating_add(1).saturating_sub(w),
        None => 0,
    };
    (lo, hi)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_threads(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_q: usize,
    n_kv: usize,
    ring: usize,
    q_pos: &[usize],
    p: &AttnParams,
    out: &mut [f32],
    threads: usize,
) {
    assert!(
        p.n_kv_heads > 0 && p.n_heads.is_multiple_of(p.n_kv_heads),
        "attention: n_kv_heads must divide n_heads"
    );
    let q_row = p.n_heads * p.head_dim;
    let kv_row = p.n_kv_heads * p.head_dim;
    assert_eq!(q.len(), n_q * q_row, "attention: q shape");
    assert_eq!(out.len(), n_q * q_row, "attention: out shape");
    let rows = n_kv.min(ring);
    assert_eq!(k.len(), rows * kv_row, "attention: k shape");
    assert_eq!(v.len(), rows * kv_row, "attention: v shape");
    assert_eq!(q_pos.len(), n_q, "attention: one position per query");
    for &pos in q_pos {
        let (lo, hi) = visible(pos, n_kv, p.window);
        assert!(
            hi.saturating_sub(lo) <= ring,
            "attention: a query at {pos} sees more keys than the ring of {ring} rows holds"
        );
    }
    if n_q == 0 || q_row == 0 {
        return;
    }
    let run = |t0: usize, rows: &mut [f32]| {
        let mut scores = Vec::new();
        let mut acc = vec![0.0f64; p.head_dim];
        for (i, orow) in rows.chunks_exact_mut(q_row).enumerate() {
            let t = t0 + i;
            let qrow = &q[t * q_row..(t + 1) * q_row];
            one_query(
                k,
                v,
                n_kv,
                ring,
                q_pos[t],
                p,
                qrow,
                orow,
                &mut scores,
                &mut acc,
            );
        }
    };
    let threads = threads.clamp(1, n_q);
    if threads == 1 {
        run(0, out);
        return;
    }
    let chunk = n_q.div_ceil(threads);
    std::thread::scope(|s| {
        let mut parts = out.chunks_mut(chunk * q_row).enumerate();
        let first = parts.next();
        for (i, rows) in parts {
            s.spawn(move || run(i * chunk, rows));
        }
        if let Some((_, rows)) = first {
            run(0, rows);
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn one_query(
    k: &[f32],
    v: &[f32],
    n_kv: usize,
    ring: usize,
    pos: usize,
    p: &AttnParams,
    qrow: &[f32],
    orow: &mut [f32],
    scores: &mut Vec<f32>,
    acc: &mut [f64],
) {
    let hd = p.head_dim;
    let kv_row = p.n_kv_heads * hd;
    let group = p.n_heads / p.n_kv_heads;
    // Visible keys: lo..hi, key j in row j % ring.
    let (lo, hi) = visible(pos, n_kv, p.window);
    if lo >= hi {
        orow.fill(0.0);
        return;
    }
    for h in 0..p.n_heads {
        let kvh = h / group;
        let qh = &qrow[h * hd..(h + 1) * hd];
        scores.clear();
        for j in lo..hi {
            let r = j % ring;
            let kj = &k[r * kv_row + kvh * hd..r * kv_row + (kvh + 1) * hd];
            let mut s = dot(qh, kj) * p.scale;
            if let Some(c) = p.softcap {
                s = softcap_one(s, c);
            }
            scores.push(s);
        }
        let m = f64::from(scores.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        acc.fill(0.0);
        let mut sum = 0.0f64;
        for (idx, &s) in scores.iter().enumerate() {
            let w = (f64::from(s) - m).exp();
            sum += w;
            let r = (lo + idx) % ring;
            let vj = &v[r * kv_row + kvh * hd..r * kv_row + (kvh + 1) * hd];
            for (a, &vv) in acc.iter_mut().zip(vj) {
                *a += w * f64::from(vv);
            }
        }
        for (o, &a) in orow[h * hd..(h + 1) * hd].iter_mut().zip(acc.iter()) {
            *o = (a / sum) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    /// Independent f64 attention with an explicit mask matrix.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n_q: usize,
        n_kv: usize,
        q_pos: &[usize],
        p: &AttnParams,
    ) -> Vec<f64> {
        let (h_n, kvh_n, hd) = (p.n_heads, p.n_kv_heads, p.head_dim);
        let mut out = vec![0.0f64; n_q * h_n * hd];
        for t in 0..n_q {
            for h in 0..h_n {
                let kvh = h * kvh_n / h_n;
                let mut sc: Vec<Option<f64>> = Vec::new();
                for j in 0..n_kv {
                    let pos = q_pos[t] as i64;
                    let visible =
                        (j as i64) <= pos && p.window.is_none_or(|w| (j as i64) > pos - w as i64);
                    if !visible {
                        sc.push(None);
                        continue;
                    }
                    let mut s = 0.0f64;
                    for d in 0..hd {
                        s += f64::from(q[t * h_n * hd + h * hd + d])
                            * f64::from(k[j * kvh_n * hd + kvh * hd + d]);
                    }
                    s *= f64::from(p.scale);
                    if let Some(c) = p.softcap {
                        s = f64::from(c) * (s / f64::from(c)).tanh();
                    }
                    sc.push(Some(s));
                }
                let m = sc
                    .iter()
                    .flatten()
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = sc.iter().flatten().map(|s| (s - m).exp()).sum();
                for (j, s) in sc.iter().enumerate() {
                    if let Some(s) = s {
                        let w = (s - m).exp() / z;
                        for d in 0..hd {
                            out[t * h_n * hd + h * hd + d] +=
                                w * f64::from(v[j * kvh_n * hd + kvh * hd + d]);
                        }
                    }
                }
            }
        }
        out
    }

    fn params(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> AttnParams {
        AttnParams {
            n_heads,
            n_kv_heads,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: None,
            window: None,
        }
    }

    #[test]
    fn hand_values() {
        // One head, dim 1, two keys: q = 1, k = [0, ln 3], scale 1 -> weights [1/4, 3/4].
        let mut p = params(1, 1, 1);
        p.scale = 1.0;
        let k = [0.0, 3f32.ln()];
        let v = [4.0, 8.0];
        let mut out = [f32::NAN; 2];
        attention(&[1.0, 1.0], &k, &v, 2, 2, &[0, 1], &p, &mut out);
        // Query 0 sees only key 0; query 1 sees both: 4/4 + 8*3/4 = 7.
        assert_eq!(out[0], 4.0);
        assert!((out[1] - 7.0).abs() < 1e-6);
    }

    #[test]
    fn matches_naive_with_gqa_window_softcap() {
        let mut rng = Rng::new(31);
        let cases = [
            (4, 2, 8, None, None),
            (6, 3, 5, Some(3), None),
            (4, 1, 16, None, Some(5.0)),
            (8, 2, 7, Some(4), Some(2.0)),
            (3, 3, 9, Some(1), None),
        ];
        for (nh, nkv, hd, window, softcap) in cases {
            let mut p = params(nh, nkv, hd);
            p.window = window;
            p.softcap = softcap;
            let n_kv = 11;
            let n_q = 5;
            // The last 5 tokens of an 11-token prefill, like a chunked prefill.
            let q_pos: Vec<usize> = (6..11).collect();
            let q: Vec<f32> = rng.vec(n_q * nh * hd).iter().map(|x| x * 3.0).collect();
            let k: Vec<f32> = rng.vec(n_kv * nkv * hd).iter().map(|x| x * 3.0).collect();
            let v = rng.vec(n_kv * nkv * hd);
            let want = naive(&q, &k, &v, n_q, n_kv, &q_pos, &p);
            for threads in [1, 2, 3] {
                let mut out = vec![f32::NAN; n_q * nh * hd];
                attention_threads(&q, &k, &v, n_q, n_kv, n_kv, &q_pos, &p, &mut out, threads);
                for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(g) - w).abs() < 2e-6,
                        "{nh}/{nkv} w={window:?} {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn window_of_one_sees_only_itself() {
        let mut p = params(1, 1, 2);
        p.window = Some(1);
        let k = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut out = [f32::NAN; 6];
        attention(&[9.0; 6], &k, &v, 3, 3, &[0, 1, 2], &p, &mut out);
        assert_eq!(out, v);
    }

    #[test]
    fn no_visible_key_gives_zeros() {
        let mut p = params(2, 1, 3);
        p.window = Some(0);
        let mut out = [f32::NAN; 6];
        attention(&[1.0; 6], &[1.0; 3], &[1.0; 3], 1, 1, &[0], &p, &mut out);
        assert_eq!(out, [0.0; 6]);
    }

    #[test]
    fn large_enough_to_thread_matches_single_thread() {
        let mut rng = Rng::new(32);
        let p = params(8, 2, 64);
        let (n_q, n_kv) = (40, 64);
        let q = rng.vec(n_q * 8 * 64);
        let k = rng.vec(n_kv * 2 * 64);
        let v = rng.vec(n_kv * 2 * 64);
        let pos: Vec<usize> = (24..64).collect();
        let mut a = vec![f32::NAN; q.len()];
        let mut b = vec![f32::NAN; q.len()];
        attention(&q, &k, &v, n_q, n_kv, &pos, &p, &mut a);
        attention_threads(&q, &k, &v, n_q, n_kv, n_kv, &pos, &p, &mut b, 1);
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    }

    /// The ring holding the last `ring` of `n_kv` full-cache rows (row r = the latest position
    /// j < n_kv with j % ring == r).
    fn to_ring(full: &[f32], n_kv: usize, ring: usize, row: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; n_kv.min(ring) * row];
        for j in 0..n_kv {
            let r = j % ring;
            out[r * row..(r + 1) * row].copy_from_slice(&full[j * row..(j + 1) * row]);
        }
        out
    }

    #[test]
    fn ring_hand_values() {
        // One head, dim 1, window 2, ring 2: keys at positions 0..5 with k = 0 except position 4
        // (ln 3); the ring holds positions 4 (row 0) and 3 (row 1). Query at 4 sees 3 and 4:
        // weights 1/4, 3/4 -> 0.25 * v3 + 0.75 * v4.
        let mut p = params(1, 1, 1);
        p.scale = 1.0;
        p.window = Some(2);
        let k = [3f32.ln(), 0.0];
        let v = [8.0, 4.0];
        let mut out = [f32::NAN];
        attention_ring(&[1.0], &k, &v, 1, 5, 2, &[4], &p, &mut out);
        assert!((out[0] - 7.0).abs() < 1e-6, "{}", out[0]);
    }

    #[test]
    fn ring_equals_full_cache_bit_for_bit() {
        let mut rng = Rng::new(33);
        // (heads, kv heads, dim, window, softcap, n_kv, n_q, ring)
        let cases = [
            (4, 2, 8, 5, None, 23, 3, 7),
            (2, 1, 16, 16, Some(4.0), 100, 1, 16),
            (3, 3, 5, 9, None, 40, 6, 14),
            (4, 2, 8, 4, None, 3, 3, 6),
        ];
        for (nh, nkv, hd, w, softcap, n_kv, n_q, ring) in cases {
            let mut p = params(nh, nkv, hd);
            p.window = Some(w);
            p.softcap = softcap;
            let row = nkv * hd;
            let q = rng.vec(n_q * nh * hd);
            let k = rng.vec(n_kv * row);
            let v = rng.vec(n_kv * row);
            let pos: Vec<usize> = (n_kv - n_q..n_kv).collect();
            let mut full = vec![f32::NAN; q.len()];
            attention(&q, &k, &v, n_q, n_kv, &pos, &p, &mut full);
            let (kr, vr) = (to_ring(&k, n_kv, ring, row), to_ring(&v, n_kv, ring, row));
            let mut got = vec![f32::NAN; q.len()];
            attention_ring(&q, &kr, &vr, n_q, n_kv, ring, &pos, &p, &mut got);
            assert!(
                got.iter()
                    .zip(&full)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "ring {ring} n_kv {n_kv}"
            );
            // And both match the f64 recomputation.
            let want = naive(&q, &k, &v, n_q, n_kv, &pos, &p);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(&g, &w)| (f64::from(g) - w).abs() < 2e-6)
            );
        }
    }

    #[test]
    #[should_panic(expected = "more keys than the ring")]
    fn ring_smaller_than_window_panics() {
        let mut p = params(1, 1, 2);
        p.window = Some(4);
        let mut out = [0.0; 2];
        attention_ring(
            &[1.0; 2],
            &[0.0; 6],
            &[0.0; 6],
            1,
            10,
            3,
            &[9],
            &p,
            &mut out,
        );
    }
}
