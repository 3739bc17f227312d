//! The gated delta rule (Gated DeltaNet's token mixer), in its two equivalent forms: the
//! recurrence (decode) and the chunked parallel form (prefill), after transformers'
//! `torch_recurrent_gated_delta_rule` and `torch_chunk_gated_delta_rule`.
//!
//! Per value head `h` (served by key head `h / (n_v_heads / n_k_heads)`, or `h % n_k_heads` when
//! the value heads are stored tiled, see [`DeltaShape::tiled_v_heads`]), with a state matrix
//! `S` of `[k_dim, v_dim]` and, for each token, `q` and `k` L2-normalised (eps 1e-6, see
//! [`crate::l2norm`]) and `q` scaled by `1 / sqrt(k_dim)`:
//!
//! ```text
//! S     = exp(g) * S
//! delta = beta * (v - S^T k)
//! S     = S + k delta^T
//! out   = S^T q
//! ```
//!
//! The chunked form processes `chunk` tokens at once (cumulative decays `G` inside the chunk, the
//! WY/UT transform `(I + L) U = diag(beta) V`, `(I + L) W = diag(beta exp(G)) K` with
//! `L[i][j] = beta_i (k_i . k_j) exp(G_i - G_j)` for `j < i`, then one state update per chunk).
//! Both forms compute in f64 and round outputs and the final state once to f32.
//!
//! Layouts: `q`, `k`: `[n, n_k_heads * k_dim]`; `v`, `out`: `[n, n_v_heads * v_dim]`;
//! `g`, `beta`: `[n, n_v_heads]`; `state`: `[n_v_heads, k_dim, v_dim]`.
//! [`delta_gates`] computes `g` and `beta` from the layer's projections.

use crate::l2norm::l2norm_f64;

/// The epsilon of the q/k L2 normalisation (`use_qk_l2norm_in_kernel`).
pub const DELTA_L2NORM_EPS: f64 = 1e-6;

/// Head counts and sizes of a Gated DeltaNet layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaShape {
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
    /// Value heads in tiled order (llama.cpp's Qwen3.5 GGUF files: value head `j * k_heads + kh`
    /// is Hugging Face's `kh * (v_heads / k_heads) + j`) rather than grouped by key head. Every
    /// per-value-head tensor of such a file is in this order, so only the key head a value
    /// head reads changes.
    pub tiled_v_heads: bool,
}

impl DeltaShape {
    /// Width of a q or k row.
    pub fn qk_width(&self) -> usize {
        self.n_k_heads * self.k_dim
    }

    /// Width of a v or output row.
    pub fn v_width(&self) -> usize {
        self.n_v_heads * self.v_dim
    }

    /// Values in the recurrent state.
    pub fn state_len(&self) -> usize {
        self.n_v_heads * self.k_dim * self.v_dim
    }

    /// The key head serving value head `h`.
    pub fn k_head(&self, h: usize) -> usize {
        if self.tiled_v_heads {
            h % self.n_k_heads
        } else {
            h / (self.n_v_heads / self.n_k_heads)
        }
    }

    /// Checks the layouts; returns the token count.
    fn check(&self, q: &[f32], k: &[f32], v: &[f32], g: &[f32], beta: &[f32]) -> usize {
        assert!(
            self.n_k_heads > 0
                && self.k_dim > 0
                && self.v_dim > 0
                && self.n_v_heads.is_multiple_of(self.n_k_heads)
                && self.n_v_heads > 0,
            "gated_delta_rule: bad shape {self:?}"
        );
        let n = g.len() / self.n_v_heads;
        assert_eq!(g.len(), n * self.n_v_heads, "gated_delta_rule: g");
        assert_eq!(beta.len(), g.len(), "gated_delta_rule: beta");
        assert_eq!(q.len(), n * self.qk_width(), "gated_delta_rule: q");
        assert_eq!(k.len(), n * self.qk_width(), "gated_delta_rule: k");
        assert_eq!(v.len(), n * self.v_width(), "gated_delta_rule: v");
        n
    }

    /// Token `t`'s q (scaled) and k of key head `kh`, normalised, in f64.
    fn qk(&self, q: &[f32], k: &[f32], t: usize, kh: usize) -> (Vec<f64>, Vec<f64>) {
        let off = t * self.qk_width() + kh * self.k_dim;
        let scale = 1.0 / (self.k_dim as f64).sqrt();
        let mut qn = l2norm_f64(&q[off..off + self.k_dim], DELTA_L2NORM_EPS);
        qn.iter_mut().for_each(|x| *x *= scale);
        (qn, l2norm_f64(&k[off..off + self.k_dim], DELTA_L2NORM_EPS))
    }
}

/// `softplus(x) = log(1 + exp(x))`, with PyTorch's default threshold (x above 20 returns x).
pub fn softplus(x: f64) -> f64 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// The per-token gates of a Gated DeltaNet layer, for rows of `n_v_heads = a_log.len()` values:
/// `g = -exp(A_log) * softplus(a + dt_bias)` (the log-decay, <= 0) and `beta = sigmoid(b)`,
/// each computed in f64 and rounded once.
///
/// # Panics
/// If the lengths do not match (`a`, `b`, `g`, `beta`: `[n, heads]`; `a_log`, `dt_bias`: `[heads]`).
pub fn delta_gates(
    a: &[f32],
    b: &[f32],
    a_log: &[f32],
    dt_bias: &[f32],
    g: &mut [f32],
    beta: &mut [f32],
) {
    let heads = a_log.len();
    assert!(
        heads > 0 && dt_bias.len() == heads,
        "delta_gates: head count"
    );
    assert!(
        a.len().is_multiple_of(heads)
            && b.len() == a.len()
            && g.len() == a.len()
            && beta.len() == a.len(),
        "delta_gates: lengths"
    );
    for (i, (gv, bv)) in g.iter_mut().zip(beta.iter_mut()).enumerate() {
        let h = i % heads;
        let x = f64::from(a[i]) + f64::from(dt_bias[h]);
        *gv = (-f64::from(a_log[h]).exp() * softplus(x)) as f32;
        *bv = (1.0 / (1.0 + (-f64::from(b[i])).exp())) as f32;
    }
}

/// The recurrent form over `n` tokens, updating `state`; see the module docs.
///
/// # Panics
/// If a length does not match the layouts in the module docs (programming errors).
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    shape: &DeltaShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &mut [f32],
    out: &mut [f32],
) {
    let n = shape.check(q, k, v, g, beta);
    assert_eq!(state.len(), shape.state_len(), "gated_delta_rule: state");
    assert_eq!(out.len(), v.len(), "gated_delta_rule: out");
    let (hv, dk, dv) = (shape.n_v_heads, shape.k_dim, shape.v_dim);
    for h in 0..hv {
        let kh = shape.k_head(h);
        let st = &mut state[h * dk * dv..(h + 1) * dk * dv];
        let mut s: Vec<f64> = st.iter().map(|&x| f64::from(x)).collect();
        let mut kv = vec![0f64; dv];
        for t in 0..n {
            let (qn, kn) = shape.qk(q, k, t, kh);
            let decay = f64::from(g[t * hv + h]).exp();
            let b = f64::from(beta[t * hv + h]);
            s.iter_mut().for_each(|x| *x *= decay);
            kv.fill(0.0);
            for (i, &ki) in kn.iter().enumerate() {
                for (acc, &sv) in kv.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                    *acc += sv * ki;
                }
            }
            let vrow = &v[t * hv * dv + h * dv..t * hv * dv + (h + 1) * dv];
            for (d, &vv) in kv.iter_mut().zip(vrow) {
                *d = (f64::from(vv) - *d) * b;
            }
            for (i, &ki) in kn.iter().enumerate() {
                for (sv, &d) in s[i * dv..(i + 1) * dv].iter_mut().zip(&kv) {
                    *sv += ki * d;
                }
            }
            let orow = &mut out[t * hv * dv + h * dv..t * hv * dv + (h + 1) * dv];
            for (j, o) in orow.iter_mut().enumerate() {
                let mut acc = 0f64;
                for (i, &qi) in qn.iter().enumerate() {
                    acc += s[i * dv + j] * qi;
                }
                *o = acc as f32;
            }
        }
        for (dst, &x) in st.iter_mut().zip(&s) {
            *dst = x as f32;
        }
    }
}

/// The chunked parallel form over `n` tokens in chunks of `chunk`, updating `state`; equal to
/// [`gated_delta_rule`] up to rounding (see the module docs).
///
/// # Panics
/// As [`gated_delta_rule`], and if `chunk` is zero.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule_chunked(
    shape: &DeltaShape,
    chunk: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &mut [f32],
    out: &mut [f32],
) {
    assert!(chunk > 0, "gated_delta_rule_chunked: chunk 0");
    let n = shape.check(q, k, v, g, beta);
    assert_eq!(state.len(), shape.state_len(), "gated_delta_rule: state");
    assert_eq!(out.len(), v.len(), "gated_delta_rule: out");
    let (hv, dk, dv) = (shape.n_v_heads, shape.k_dim, shape.v_dim);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for h in 0..hv {
        let kh = shape.k_head(h);
        let st = &mut state[h * dk * dv..(h + 1) * dk * dv];
        let mut s: Vec<f64> = st.iter().map(|&x| f64::from(x)).collect();
        for c0 in (0..n).step_by(chunk) {
            let len = chunk.min(n - c0);
            let (qs, ks): (Vec<_>, Vec<_>) = (c0..c0 + len).map(|t| shape.qk(q, k, t, kh)).unzip();
            let mut gc = Vec::with_capacity(len);
            let mut acc = 0f64;
            for t in c0..c0 + len {
                acc += f64::from(g[t * hv + h]);
                gc.push(acc);
            }
            let bt: Vec<f64> = (c0..c0 + len)
                .map(|t| f64::from(beta[t * hv + h]))
                .collect();
            // U = (I + L)^-1 diag(beta) V and W = (I + L)^-1 diag(beta exp(G)) K by forward
            // substitution.
            let mut u: Vec<Vec<f64>> = Vec::with_capacity(len);
            let mut w: Vec<Vec<f64>> = Vec::with_capacity(len);
            for i in 0..len {
                let t = c0 + i;
                let vrow = &v[t * hv * dv + h * dv..t * hv * dv + (h + 1) * dv];
                let mut ui: Vec<f64> = vrow.iter().map(|&x| bt[i] * f64::from(x)).collect();
                let eg = gc[i].exp();
                let mut wi: Vec<f64> = ks[i].iter().map(|&x| bt[i] * eg * x).collect();
                for j in 0..i {
                    let a = bt[i] * dot(&ks[i], &ks[j]) * (gc[i] - gc[j]).exp();
                    ui.iter_mut().zip(&u[j]).for_each(|(x, y)| *x -= a * y);
                    wi.iter_mut().zip(&w[j]).for_each(|(x, y)| *x -= a * y);
                }
                u.push(ui);
                w.push(wi);
            }
            // v_new = U - W S (the part of U the old state does not already predict).
            let vnew: Vec<Vec<f64>> = (0..len)
                .map(|i| {
                    let mut r = u[i].clone();
                    for (kk, &wk) in w[i].iter().enumerate() {
                        for (x, &sv) in r.iter_mut().zip(&s[kk * dv..(kk + 1) * dv]) {
                            *x -= wk * sv;
                        }
                    }
                    r
                })
                .collect();
            // out_i = exp(G_i) q_i^T S + sum_{j <= i} (q_i . k_j) exp(G_i - G_j) v_new_j
            for i in 0..len {
                let t = c0 + i;
                let mut o = vec![0f64; dv];
                let eg = gc[i].exp();
                for (kk, &qk) in qs[i].iter().enumerate() {
                    for (x, &sv) in o.iter_mut().zip(&s[kk * dv..(kk + 1) * dv]) {
                        *x += eg * qk * sv;
                    }
                }
                for j in 0..=i {
                    let a = dot(&qs[i], &ks[j]) * (gc[i] - gc[j]).exp();
                    o.iter_mut().zip(&vnew[j]).for_each(|(x, y)| *x += a * y);
                }
                let orow = &mut out[t * hv * dv + h * dv..t * hv * dv + (h + 1) * dv];
                for (dst, x) in orow.iter_mut().zip(o) {
                    *dst = x as f32;
                }
            }
            // S = exp(G_last) S + sum_j exp(G_last - G_j) k_j v_new_j^T
            let glast = gc[len - 1];
            let el = glast.exp();
            s.iter_mut().for_each(|x| *x *= el);
            for j in 0..len {
                let dj = (glast - gc[j]).exp();
                for (kk, &kv) in ks[j].iter().enumerate() {
                    let c = dj * kv;
                    for (x, &y) in s[kk * dv..(kk + 1) * dv].iter_mut().zip(&vnew[j]) {
                        *x += c * y;
                    }
                }
            }
        }
        for (dst, &x) in st.iter_mut().zip(&s) {
            *dst = x as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    const ONE: DeltaShape = DeltaShape {
        n_k_heads: 1,
        n_v_heads: 1,
        k_dim: 2,
        v_dim: 1,
        tiled_v_heads: false,
    };

    /// Two tokens on one head worked by hand (k_dim 2, v_dim 1; module-doc recurrence).
    #[test]
    fn hand_values() {
        // t0: q = [1, 0] -> [1, 0] / sqrt 2; k = [0, 2] -> [0, 1]; v = 3; decay 0.5; beta 0.5.
        //   S = [4, 2] * 0.5 = [2, 1]; S^T k = 1; delta = (3 - 1) * 0.5 = 1; S = [2, 2];
        //   out = S . q = 2 / sqrt 2 = sqrt 2.
        // t1: q = [0, 1] -> [0, 1] / sqrt 2; k = [1, 0]; v = 1; decay 1; beta 1.
        //   S^T k = 2; delta = -1; S = [1, 2]; out = 2 / sqrt 2 = sqrt 2.
        let q = [1.0, 0.0, 0.0, 1.0];
        let k = [0.0, 2.0, 1.0, 0.0];
        let v = [3.0, 1.0];
        let g = [0.5f32.ln(), 0.0];
        let beta = [0.5, 1.0];
        for chunked in [false, true] {
            let mut state = [4.0, 2.0];
            let mut out = [f32::NAN; 2];
            if chunked {
                gated_delta_rule_chunked(&ONE, 2, &q, &k, &v, &g, &beta, &mut state, &mut out);
            } else {
                gated_delta_rule(&ONE, &q, &k, &v, &g, &beta, &mut state, &mut out);
            }
            let s2 = std::f32::consts::SQRT_2;
            // l2norm's eps (1e-6) moves the results by ~1e-6 relative.
            for (got, want) in out.iter().zip([s2, s2]) {
                assert!((got - want).abs() < 4e-6, "{chunked}: {out:?}");
            }
            for (got, want) in state.iter().zip([1.0, 2.0]) {
                assert!((got - want).abs() < 4e-6, "{chunked}: {state:?}");
            }
        }
    }

    #[test]
    fn gates_hand_values() {
        // A_log = ln 2 -> exp = 2; a + dt_bias = 0 -> softplus = ln 2; g = -2 ln 2.
        // b = 0 -> beta 0.5; a + dt = 30 -> softplus = 30 (threshold); g = -60.
        let mut g = [0.0; 2];
        let mut beta = [0.0; 2];
        delta_gates(
            &[-1.0, 29.0],
            &[0.0, 1.0],
            &[2f32.ln()],
            &[1.0],
            &mut g,
            &mut beta,
        );
        assert!((g[0] + 2.0 * 2f32.ln()).abs() < 1e-6, "{g:?}");
        assert!((g[1] + 60.0).abs() < 1e-4, "{g:?}");
        assert_eq!(beta[0], 0.5);
        assert!((f64::from(beta[1]) - 1.0 / (1.0 + (-1f64).exp())).abs() < 1e-7);
    }

    struct Case {
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        g: Vec<f32>,
        beta: Vec<f32>,
        state: Vec<f32>,
    }

    fn case(seed: u64, n: usize, shape: DeltaShape) -> Case {
        let mut rng = Rng::new(seed);
        let hv = shape.n_v_heads;
        Case {
            q: rng.vec(n * shape.qk_width()),
            k: rng.vec(n * shape.qk_width()),
            v: rng
                .vec(n * shape.v_width())
                .iter()
                .map(|x| 2.0 * x)
                .collect(),
            // log-decays in (-2, 0], a few exactly 0.
            g: (0..n * hv)
                .map(|i| if i % 7 == 0 { 0.0 } else { rng.f32() - 1.0 })
                .collect(),
            beta: (0..n * hv).map(|_| 0.5 + 0.5 * rng.f32()).collect(),
            state: rng.vec(shape.state_len()),
        }
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn chunked_equals_recurrent() {
        let shape = DeltaShape {
            n_k_heads: 2,
            n_v_heads: 4,
            k_dim: 8,
            v_dim: 5,
            tiled_v_heads: false,
        };
        let n = 37;
        let c = case(5, n, shape);
        let mut s_rec = c.state.clone();
        let mut o_rec = vec![f32::NAN; n * shape.v_width()];
        gated_delta_rule(
            &shape, &c.q, &c.k, &c.v, &c.g, &c.beta, &mut s_rec, &mut o_rec,
        );
        for chunk in [1, 3, 16, 64] {
            let mut s = c.state.clone();
            let mut o = vec![f32::NAN; n * shape.v_width()];
            gated_delta_rule_chunked(
                &shape, chunk, &c.q, &c.k, &c.v, &c.g, &c.beta, &mut s, &mut o,
            );
            assert!(
                max_diff(&o, &o_rec) < 1e-5,
                "chunk {chunk}: out {}",
                max_diff(&o, &o_rec)
            );
            assert!(
                max_diff(&s, &s_rec) < 1e-5,
                "chunk {chunk}: state {}",
                max_diff(&s, &s_rec)
            );
        }
    }

    #[test]
    fn token_by_token_equals_all_at_once() {
        let shape = DeltaShape {
            n_k_heads: 1,
            n_v_heads: 3,
            k_dim: 4,
            v_dim: 6,
            tiled_v_heads: false,
        };
        let n = 9;
        let c = case(8, n, shape);
        let mut s_all = c.state.clone();
        let mut o_all = vec![f32::NAN; n * shape.v_width()];
        gated_delta_rule_chunked(
            &shape, 4, &c.q, &c.k, &c.v, &c.g, &c.beta, &mut s_all, &mut o_all,
        );
        let mut s = c.state.clone();
        let (qw, vw, hv) = (shape.qk_width(), shape.v_width(), shape.n_v_heads);
        for t in 0..n {
            let mut o = vec![f32::NAN; vw];
            gated_delta_rule(
                &shape,
                &c.q[t * qw..(t + 1) * qw],
                &c.k[t * qw..(t + 1) * qw],
                &c.v[t * vw..(t + 1) * vw],
                &c.g[t * hv..(t + 1) * hv],
                &c.beta[t * hv..(t + 1) * hv],
                &mut s,
                &mut o,
            );
            assert!(
                max_diff(&o, &o_all[t * vw..(t + 1) * vw]) < 1e-5,
                "token {t}"
            );
        }
        assert!(max_diff(&s, &s_all) < 1e-5);
    }

    /// Tiled value heads: permuting every per-value-head input into tiled order and reading
    /// keys by `h % k_heads` gives the grouped result, permuted the same way.
    #[test]
    fn tiled_order_is_a_permutation_of_grouped() {
        let grouped = DeltaShape {
            n_k_heads: 2,
            n_v_heads: 6,
            k_dim: 4,
            v_dim: 3,
            tiled_v_heads: false,
        };
        let tiled = DeltaShape {
            tiled_v_heads: true,
            ..grouped
        };
        let (n, hk, hv, dv) = (5, 2, 6, 3);
        let r = hv / hk;
        let c = case(13, n, grouped);
        // tiled position of grouped head g = kh * r + j is j * hk + kh.
        let pos = |g: usize| (g % r) * hk + g / r;
        let perm_heads = |x: &[f32], width: usize| -> Vec<f32> {
            let mut y = vec![0.0; x.len()];
            for (t, row) in x.chunks_exact(hv * width).enumerate() {
                for g in 0..hv {
                    let dst = t * hv * width + pos(g) * width;
                    y[dst..dst + width].copy_from_slice(&row[g * width..(g + 1) * width]);
                }
            }
            y
        };
        let kd = grouped.k_dim;
        let mut s_g = c.state.clone();
        let mut o_g = vec![f32::NAN; n * hv * dv];
        gated_delta_rule(
            &grouped, &c.q, &c.k, &c.v, &c.g, &c.beta, &mut s_g, &mut o_g,
        );
        let mut s_t = perm_heads(&c.state, kd * dv);
        let mut o_t = vec![f32::NAN; n * hv * dv];
        let (v_t, g_t, b_t) = (
            perm_heads(&c.v, dv),
            perm_heads(&c.g, 1),
            perm_heads(&c.beta, 1),
        );
        gated_delta_rule(&tiled, &c.q, &c.k, &v_t, &g_t, &b_t, &mut s_t, &mut o_t);
        assert_eq!(o_t, perm_heads(&o_g, dv));
        assert_eq!(s_t, perm_heads(&s_g, kd * dv));
        let mut s_c = perm_heads(&c.state, kd * dv);
        let mut o_c = vec![f32::NAN; n * hv * dv];
        gated_delta_rule_chunked(&tiled, 2, &c.q, &c.k, &v_t, &g_t, &b_t, &mut s_c, &mut o_c);
        assert!(max_diff(&o_c, &o_t) < 1e-5 && max_diff(&s_c, &s_t) < 1e-5);
    }

    /// With beta = 1 and no decay the rule stores v exactly under a key: writing v under unit key
    /// e_0 into a zero state, then reading with q = e_0 gives v / sqrt(k_dim).
    #[test]
    fn stores_and_recalls() {
        let shape = DeltaShape {
            n_k_heads: 1,
            n_v_heads: 1,
            k_dim: 4,
            v_dim: 3,
            tiled_v_heads: false,
        };
        let e0 = [1.0, 0.0, 0.0, 0.0];
        let e1 = [0.0, 1.0, 0.0, 0.0];
        let mut state = vec![0.0; 12];
        let mut out = vec![f32::NAN; 6];
        // t0 writes [1, 2, 3] under e0 (reads with q = e1: 0); t1 writes [7, 8, 9] under e0 again
        // (delta rule: replaces, not adds) and reads with q = e0.
        let q: Vec<f32> = e1.iter().chain(&e0).copied().collect();
        let k: Vec<f32> = e0.iter().chain(&e0).copied().collect();
        gated_delta_rule(
            &shape,
            &q,
            &k,
            &[1.0, 2.0, 3.0, 7.0, 8.0, 9.0],
            &[0.0, 0.0],
            &[1.0, 1.0],
            &mut state,
            &mut out,
        );
        let want = [0.0, 0.0, 0.0, 3.5, 4.0, 4.5];
        assert!(max_diff(&out, &want) < 1e-5, "{out:?}");
        assert!(max_diff(&state[..3], &[7.0, 8.0, 9.0]) < 1e-5, "{state:?}");
    }
}
