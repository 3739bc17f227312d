//! Rotary position embedding (RoPE), computed the way Hugging Face transformers does in float32.
//!
//! Frequencies (`Rope::inv_freq`), for `i in 0..rotary_dim/2`:
//! - `e_i = (2i as f32) / (rotary_dim as f32)` (f32 divide);
//! - `inv_freq_i = 1 / theta^e_i`: `theta` as f32, the power correctly rounded to f32 (computed in
//!   f64 then rounded; PyTorch's vectorised `powf` is within 1 ulp of it), then an f32 divide;
//! - scaling, exactly as transformers' `modeling_rope_utils.py`:
//!   - `Linear { factor }` (`_compute_linear_scaling_rope_parameters`): `inv_freq / factor`;
//!   - `Llama3 {..}` (`_compute_llama3_parameters`), every step one f32 operation (Python scalars
//!     rounded to f32 where they meet the tensor, PyTorch's `a / tensor` is
//!     `reciprocal(tensor) * a`):
//!     `wavelen = (1 / inv) * f32(2 pi)`; `low_wl = f32(orig / low_freq_factor)`,
//!     `high_wl = f32(orig / high_freq_factor)`;
//!     `llama = wavelen > low_wl ? inv / factor : inv`;
//!     `smooth = ((1 / wavelen) * f32(orig) - low_freq_factor) / f32(high - low)`;
//!     `smoothed = ((1 - smooth) * llama) / factor + smooth * llama`;
//!     result `smoothed` where `!(wavelen < high_wl) && !(wavelen > low_wl)`, else `llama`.
//!   - `Yarn {..}` (`_compute_yarn_parameters`): the correction range in f64 (Python floats),
//!     `dim_of(r) = rotary_dim * ln(orig / (r * 2 pi)) / (2 ln theta)`, `low = dim_of(beta_fast)`,
//!     `high = dim_of(beta_slow)` (floored / ceiled when `truncate`), `low = max(low, 0)`,
//!     `high = min(high, rotary_dim - 1)`, `high += 0.001` when equal; then per frequency, f32:
//!     `ramp = clamp((i - f32(low)) / f32(high - low), 0, 1)`, `extra = 1 - ramp`,
//!     `inv = (1 / (f32(factor) * p_i)) * (1 - extra) + (1 / p_i) * extra` with `p_i = theta^e_i`;
//!     and every `cos` and `sin` multiplied by `f32(attention_factor)` (the config resolves it:
//!     `0.1 ln(factor) + 1` by default).
//!
//! Rotation at position `pos`: `angle_i = (pos as f32) * inv_freq_i` (one f32 product, as the
//! `inv_freq @ position_ids` outer product); `cos`/`sin` of that f32 angle correctly rounded to f32
//! (computed in f64). For each head, each rotated pair `(a, b)` becomes
//! `(a*cos - b*sin, b*cos + a*sin)` (f32, no fused multiply-add: transformers'
//! `q * cos + rotate_half(q) * sin`). Pairs are `(i, i + rotary_dim/2)` for [`RopeStyle::NeoX`]
//! (HF `rotate_half`) and `(2i, 2i + 1)` for [`RopeStyle::Interleaved`] (GGUF/llama.cpp "normal").
//! Dimensions `rotary_dim..head_dim` of each head (partial rotary) are left untouched.

use crate::CpuError;

/// Which dimensions form a rotated pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i+1)`: GGUF / llama.cpp "normal" mode.
    Interleaved,
    /// Pairs `(i, i + rotary_dim/2)`: Hugging Face `rotate_half`, llama.cpp "neox" mode.
    NeoX,
}

/// Frequency scaling (`rope_scaling` in a transformers config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Position interpolation: every frequency divided by `factor`.
    Linear {
        /// The divisor.
        factor: f32,
    },
    /// Llama 3.1 piecewise scaling.
    Llama3 {
        /// Divisor for low frequencies (`factor`).
        factor: f32,
        /// `low_freq_factor`.
        low_freq_factor: f32,
        /// `high_freq_factor`.
        high_freq_factor: f32,
        /// `original_max_position_embeddings`.
        original_max_position: usize,
    },
    /// YaRN: frequencies ramped between extrapolation (high) and interpolation by `factor`
    /// (low), `cos`/`sin` scaled by `attention_factor`.
    Yarn {
        /// Interpolation divisor of the low frequencies.
        factor: f32,
        /// The context the model was pretrained at (the correction range's `max_position`).
        original_max_position: usize,
        /// Rotations bounding the ramp (`beta_fast`, default 32; `beta_slow`, default 1).
        beta_fast: f32,
        beta_slow: f32,
        /// Multiplies every `cos` and `sin` (the attention temperature).
        attention_factor: f32,
        /// Floor / ceil the correction range (transformers' `truncate`, default true).
        truncate: bool,
    },
}

/// A rotary embedding configuration; see the module docs for the exact arithmetic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// Base (`rope_theta`).
    pub theta: f32,
    /// Dimensions rotated at the start of each head (even; `head_dim * partial_rotary_factor`).
    pub rotary_dim: usize,
    /// Pairing of dimensions.
    pub style: RopeStyle,
    /// Frequency scaling.
    pub scaling: RopeScaling,
}

impl Rope {
    /// Checks that `rotary_dim` is even, non-zero and at most `head_dim`.
    ///
    /// # Errors
    /// [`CpuError::InvalidRotaryDim`] otherwise.
    pub fn validate(&self, head_dim: usize) -> Result<(), CpuError> {
        if self.rotary_dim == 0 || !self.rotary_dim.is_multiple_of(2) || self.rotary_dim > head_dim
        {
            return Err(CpuError::InvalidRotaryDim {
                rotary_dim: self.rotary_dim,
                head_dim,
            });
        }
        Ok(())
    }

    /// The `rotary_dim / 2` inverse frequencies, scaling applied.
    pub fn inv_freq(&self) -> Vec<f32> {
        let rot = self.rotary_dim;
        let base = f64::from(self.theta);
        // p_i = theta^e_i (transformers' `pos_freqs`), inv_freq_i = 1 / p_i.
        let pows: Vec<f32> = (0..rot / 2)
            .map(|i| {
                let e = (2 * i) as f32 / rot as f32;
                base.powf(f64::from(e)) as f32
            })
            .collect();
        let mut inv: Vec<f32> = pows.iter().map(|p| 1.0 / p).collect();
        match self.scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => {
                for v in &mut inv {
                    *v /= factor;
                }
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position: orig,
            } => {
                let two_pi = (2.0 * std::f64::consts::PI) as f32;
                let orig64 = orig as f64;
                let low_wl = (orig64 / f64::from(low)) as f32;
                let high_wl = (orig64 / f64::from(high)) as f32;
                let span = (f64::from(high) - f64::from(low)) as f32;
                for v in &mut inv {
                    let wavelen = (1.0 / *v) * two_pi;
                    let llama = if wavelen > low_wl { *v / factor } else { *v };
                    let smooth = ((1.0 / wavelen) * orig as f32 - low) / span;
                    let smoothed = ((1.0 - smooth) * llama) / factor + smooth * llama;
                    // transformers' `~(wavelen < high) * ~(wavelen > low)`, NaN semantics kept.
                    #[allow(clippy::neg_cmp_op_on_partial_ord)]
                    let medium = !(wavelen < high_wl) && !(wavelen > low_wl);
                    *v = if medium { smoothed } else { llama };
                }
            }
            RopeScaling::Yarn {
                factor,
                original_max_position,
                beta_fast,
                beta_slow,
                truncate,
                ..
            } => {
                let betas = (beta_fast, beta_slow);
                let range = yarn_range(self.theta, rot, original_max_position, betas, truncate);
                yarn_inv_freq(&mut inv, &pows, factor, range);
            }
        }
        inv
    }

    /// `(cos, sin)` of the `rotary_dim / 2` angles at `pos` (YaRN: times its attention factor).
    pub fn cos_sin(&self, pos: usize) -> (Vec<f32>, Vec<f32>) {
        cos_sin_from(&self.inv_freq(), pos, self.attention_factor())
    }

    /// The factor YaRN multiplies `cos` and `sin` by (`None`: 1, no multiply).
    fn attention_factor(&self) -> Option<f32> {
        match self.scaling {
            RopeScaling::Yarn {
                attention_factor, ..
            } => Some(attention_factor),
            _ => None,
        }
    }

    /// Rotates one token: `x` is `[n_heads, head_dim]`, rotated at position `pos`.
    ///
    /// # Panics
    /// If `x.len() != n_heads * head_dim` or [`Rope::validate`] fails for `head_dim`
    /// (programming errors: validate the configuration once when loading it).
    pub fn apply(&self, x: &mut [f32], n_heads: usize, head_dim: usize, pos: usize) {
        self.apply_rows(x, 1, n_heads, head_dim, &[pos]);
    }

    /// Rotates `n_tokens` tokens: `x` is `[n_tokens, n_heads, head_dim]`, token `t` at
    /// `positions[t]`.
    ///
    /// # Panics
    /// If a length does not match or [`Rope::validate`] fails for `head_dim`.
    pub fn apply_rows(
        &self,
        x: &mut [f32],
        n_tokens: usize,
        n_heads: usize,
        head_dim: usize,
        positions: &[usize],
    ) {
        if let Err(e) = self.validate(head_dim) {
            panic!("Rope::apply: {e}");
        }
        assert_eq!(
            x.len(),
            n_tokens * n_heads * head_dim,
            "Rope::apply: x shape"
        );
        assert_eq!(
            positions.len(),
            n_tokens,
            "Rope::apply: one position per token"
        );
        if n_tokens == 0 {
            return;
        }
        let inv = self.inv_freq();
        let half = self.rotary_dim / 2;
        for (tok, &pos) in x.chunks_exact_mut(n_heads * head_dim).zip(positions) {
            let (cos, sin) = cos_sin_from(&inv, pos, self.attention_factor());
            for head in tok.chunks_exact_mut(head_dim) {
                for i in 0..half {
                    let (ia, ib) = match self.style {
                        RopeStyle::NeoX => (i, i + half),
                        RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    };
                    let (a, b) = (head[ia], head[ib]);
                    head[ia] = a * cos[i] - b * sin[i];
                    head[ib] = b * cos[i] + a * sin[i];
                }
            }
        }
    }
}

fn cos_sin_from(inv: &[f32], pos: usize, scale: Option<f32>) -> (Vec<f32>, Vec<f32>) {
    let p = pos as f32;
    inv.iter()
        .map(|&f| {
            let angle = f64::from(p * f);
            let (c, s) = (angle.cos() as f32, angle.sin() as f32);
            match scale {
                Some(a) => (c * a, s * a),
                None => (c, s),
            }
        })
        .unzip()
}

/// YaRN's correction range `(low, high)` (f64, as Python computes it).
fn yarn_range(
    theta: f32,
    rotary_dim: usize,
    orig: usize,
    (beta_fast, beta_slow): (f32, f32),
    truncate: bool,
) -> (f64, f64) {
    let dim = rotary_dim as f64;
    let base = f64::from(theta);
    let dim_of = |rotations: f64| {
        dim * (orig as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
    };
    let (mut low, mut high) = (dim_of(f64::from(beta_fast)), dim_of(f64::from(beta_slow)));
    if truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
    if low == high {
        high += 0.001;
    }
    (low, high)
}

/// YaRN's inverse frequencies from `pows` (`p_i` = theta^e_i) and the correction range.
fn yarn_inv_freq(inv: &mut [f32], pows: &[f32], factor: f32, (low, high): (f64, f64)) {
    let (low32, span) = (low as f32, (high - low) as f32);
    for (i, (v, &p)) in inv.iter_mut().zip(pows).enumerate() {
        let extrapolation = 1.0 / p;
        let interpolation = 1.0 / (factor * p);
        let ramp = ((i as f32 - low32) / span).clamp(0.0, 1.0);
        let extra = 1.0 - ramp;
        *v = interpolation * (1.0 - extra) + extrapolation * extra;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    fn rope(theta: f32, rotary_dim: usize, style: RopeStyle) -> Rope {
        Rope {
            theta,
            rotary_dim,
            style,
            scaling: RopeScaling::None,
        }
    }

    #[test]
    fn two_dim_by_hand() {
        // rotary_dim 2: inv_freq = [1 / theta^0] = [1], so the angle is pos radians.
        let r = rope(10_000.0, 2, RopeStyle::NeoX);
        assert_eq!(r.inv_freq(), vec![1.0]);
        let mut x = [1.0, 0.0];
        r.apply(&mut x, 1, 2, 1);
        assert!((x[0] - 1f32.cos()).abs() < 1e-7 && (x[1] - 1f32.sin()).abs() < 1e-7);
        let mut x = [0.0, 1.0];
        r.apply(&mut x, 1, 2, 2);
        assert!((x[0] + 2f32.sin()).abs() < 1e-7 && (x[1] - 2f32.cos()).abs() < 1e-7);
        // 4 dims, theta 100: inv_freq = [1, 100^-0.5 = 0.1].
        let r4 = rope(100.0, 4, RopeStyle::Interleaved);
        let inv = r4.inv_freq();
        assert_eq!(inv[0], 1.0);
        assert!((inv[1] - 0.1).abs() < 1e-8);
        let mut x = [0.0, 0.0, 1.0, 0.0];
        r4.apply(&mut x, 1, 4, 10);
        // second pair rotated by 10 * 0.1 = 1 rad
        assert!((x[2] - 1f32.cos()).abs() < 1e-6 && (x[3] - 1f32.sin()).abs() < 1e-6);
    }

    #[test]
    fn inv_freq_matches_formula() {
        for (theta, rot) in [(10_000.0f32, 64usize), (1_000_000.0, 128), (500_000.0, 6)] {
            let inv = rope(theta, rot, RopeStyle::NeoX).inv_freq();
            assert_eq!(inv.len(), rot / 2);
            for (i, &v) in inv.iter().enumerate() {
                // Like transformers, the exponent is an f32 quotient; the rest is exact here.
                let e32 = (2 * i) as f32 / rot as f32;
                let want = 1.0 / f64::from(theta).powf(f64::from(e32));
                assert!((f64::from(v) - want).abs() <= 1.2e-7 * want, "i={i}");
                let exact = 1.0 / f64::from(theta).powf(2.0 * i as f64 / rot as f64);
                assert!((f64::from(v) - exact).abs() <= 1e-6 * exact, "i={i}");
            }
        }
    }

    #[test]
    fn position_zero_is_identity_and_norms_are_kept() {
        let mut rng = Rng::new(21);
        let (heads, hd) = (3, 16);
        let x0 = rng.vec(heads * hd);
        for style in [RopeStyle::NeoX, RopeStyle::Interleaved] {
            let r = rope(10_000.0, hd, style);
            let mut x = x0.clone();
            r.apply(&mut x, heads, hd, 0);
            assert_eq!(x, x0);
            r.apply(&mut x, heads, hd, 12_345);
            let n0: f64 = x0.iter().map(|&v| f64::from(v).powi(2)).sum();
            let n1: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum();
            assert!((n0 - n1).abs() < 1e-5 * n0);
            assert_ne!(x, x0);
        }
    }

    #[test]
    fn neox_equals_interleaved_after_permutation() {
        let mut rng = Rng::new(22);
        let (heads, hd, rot) = (2, 12, 8);
        let x = rng.vec(heads * hd);
        // Interleaved dim 2i <-> NeoX dim i; 2i+1 <-> i + rot/2; the rest unchanged.
        let perm = |i: usize| -> usize {
            if i >= rot {
                i
            } else if i.is_multiple_of(2) {
                i / 2
            } else {
                i / 2 + rot / 2
            }
        };
        let mut xn = vec![0.0; x.len()];
        for h in 0..heads {
            for i in 0..hd {
                xn[h * hd + perm(i)] = x[h * hd + i];
            }
        }
        let mut xi = x.clone();
        rope(10_000.0, rot, RopeStyle::Interleaved).apply(&mut xi, heads, hd, 37);
        rope(10_000.0, rot, RopeStyle::NeoX).apply(&mut xn, heads, hd, 37);
        for h in 0..heads {
            for i in 0..hd {
                assert_eq!(xi[h * hd + i].to_bits(), xn[h * hd + perm(i)].to_bits());
            }
        }
    }

    #[test]
    fn partial_rotary_leaves_the_tail_alone() {
        let mut rng = Rng::new(23);
        let (heads, hd, rot) = (3, 10, 4);
        let x0 = rng.vec(heads * hd);
        let mut x = x0.clone();
        rope(10_000.0, rot, RopeStyle::NeoX).apply(&mut x, heads, hd, 5);
        for h in 0..heads {
            assert_eq!(
                x[h * hd + rot..(h + 1) * hd],
                x0[h * hd + rot..(h + 1) * hd]
            );
            assert_ne!(x[h * hd..h * hd + rot], x0[h * hd..h * hd + rot]);
        }
    }

    #[test]
    fn scores_depend_only_on_relative_position() {
        let mut rng = Rng::new(24);
        let hd = 32;
        let r = rope(10_000.0, hd, RopeStyle::NeoX);
        let (q0, k0) = (rng.vec(hd), rng.vec(hd));
        let score = |pq: usize, pk: usize| -> f64 {
            let (mut q, mut k) = (q0.clone(), k0.clone());
            r.apply(&mut q, 1, hd, pq);
            r.apply(&mut k, 1, hd, pk);
            q.iter()
                .zip(&k)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum()
        };
        assert!((score(5, 3) - score(12, 10)).abs() < 1e-4);
        assert!((score(5, 3) - score(3, 5)).abs() > 1e-4);
    }

    #[test]
    fn apply_rows_equals_per_token_apply() {
        let mut rng = Rng::new(25);
        let (n, heads, hd) = (4, 2, 8);
        let x0 = rng.vec(n * heads * hd);
        let pos = [0, 7, 3, 100];
        let r = rope(10_000.0, hd, RopeStyle::Interleaved);
        let mut rows = x0.clone();
        r.apply_rows(&mut rows, n, heads, hd, &pos);
        for t in 0..n {
            let mut one = x0[t * heads * hd..(t + 1) * heads * hd].to_vec();
            r.apply(&mut one, heads, hd, pos[t]);
            assert_eq!(one, rows[t * heads * hd..(t + 1) * heads * hd]);
        }
    }

    #[test]
    fn linear_scaling_divides_frequencies() {
        let mut r = rope(10_000.0, 16, RopeStyle::NeoX);
        let plain = r.inv_freq();
        r.scaling = RopeScaling::Linear { factor: 4.0 };
        let scaled = r.inv_freq();
        for (p, s) in plain.iter().zip(&scaled) {
            assert_eq!(*s, p / 4.0);
        }
        // Position 4p under factor 4 rotates like position p unscaled.
        let (c1, s1) = rope(10_000.0, 16, RopeStyle::NeoX).cos_sin(3);
        let (c4, s4) = r.cos_sin(12);
        for i in 0..8 {
            assert!((c1[i] - c4[i]).abs() < 1e-6 && (s1[i] - s4[i]).abs() < 1e-6);
        }
    }

    /// Llama 3.1 scaling recomputed in f64 straight from the published formula.
    fn llama3_f64(inv: f64, factor: f64, low: f64, high: f64, orig: f64) -> f64 {
        let wavelen = 2.0 * std::f64::consts::PI / inv;
        if wavelen < orig / high {
            inv
        } else if wavelen > orig / low {
            inv / factor
        } else {
            let s = (orig / wavelen - low) / (high - low);
            (1.0 - s) * inv / factor + s * inv
        }
    }

    #[test]
    fn llama3_scaling_matches_formula() {
        // Llama 3.2 1B: theta 500000, head_dim 64, factor 32, low 1, high 4, original 8192.
        let r = Rope {
            theta: 500_000.0,
            rotary_dim: 64,
            style: RopeStyle::NeoX,
            scaling: RopeScaling::Llama3 {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position: 8192,
            },
        };
        let plain = rope(500_000.0, 64, RopeStyle::NeoX).inv_freq();
        let got = r.inv_freq();
        let (mut n_high, mut n_low, mut n_mid) = (0, 0, 0);
        for i in 0..32 {
            let base = 1.0 / 500_000f64.powf(2.0 * i as f64 / 64.0);
            let want = llama3_f64(base, 32.0, 1.0, 4.0, 8192.0);
            let g = f64::from(got[i]);
            assert!((g - want).abs() <= 1e-6 * want, "i={i}: {g} vs {want}");
            let wl = 2.0 * std::f64::consts::PI / base;
            if wl < 2048.0 {
                n_high += 1;
                assert_eq!(got[i], plain[i]);
            } else if wl > 8192.0 {
                n_low += 1;
                assert_eq!(got[i], plain[i] / 32.0);
            } else {
                n_mid += 1;
            }
        }
        assert!(
            n_high > 0 && n_low > 0 && n_mid > 0,
            "{n_high} {n_low} {n_mid}"
        );
        // Hand check, i = 17: inv = 500000^(-34/64) = 9.38474e-4, wavelen = 6695.11,
        // smooth = (8192 / 6695.11 - 1) / 3 = 0.0745266,
        // result = inv * (0.9254734 / 32 + 0.0745266) = 9.70829e-5.
        assert!(
            (f64::from(got[17]) - 9.70829e-5).abs() < 1e-10,
            "{}",
            got[17]
        );
    }

    #[test]
    fn validate_rejects_bad_rotary_dims() {
        assert!(rope(1e4, 8, RopeStyle::NeoX).validate(8).is_ok());
        for (rot, hd) in [(0, 8), (7, 8), (10, 8)] {
            assert_eq!(
                rope(1e4, rot, RopeStyle::NeoX).validate(hd),
                Err(CpuError::InvalidRotaryDim {
                    rotary_dim: rot,
                    head_dim: hd
                })
            );
        }
    }

    /// YaRN with theta 10000, 128 rotary dims, 4096 original positions, betas 32 / 1: by hand,
    /// the correction range is [floor(128 ln(4096 / 64 pi) / 2 ln 10000), ceil(128 ln(4096 / 2
    /// pi) / 2 ln 10000)] = [floor(20.95), ceil(45.03)] = [20, 46]; frequencies 0..=20 stay as
    /// they are, 46.. are divided by the factor, the ones between mix the two (moving from one to
    /// the other as i grows), and cos / sin carry the attention factor.
    #[test]
    fn yarn_ramps_between_extrapolation_and_interpolation() {
        let plain = rope(10_000.0, 128, RopeStyle::NeoX);
        let yarn = Rope {
            scaling: RopeScaling::Yarn {
                factor: 8.0,
                original_max_position: 4096,
                beta_fast: 32.0,
                beta_slow: 1.0,
                attention_factor: 1.25,
                truncate: true,
            },
            ..plain
        };
        let (p, y) = (plain.inv_freq(), yarn.inv_freq());
        for i in 0..64 {
            let interp = 1.0 / (8.0 * (1.0 / p[i]));
            if i <= 20 {
                assert_eq!(y[i], p[i], "frequency {i}: extrapolated");
            } else if i >= 46 {
                assert!(
                    (y[i] - interp).abs() <= 1e-7 * interp,
                    "frequency {i}: interpolated"
                );
            } else {
                let w = (i as f32 - 20.0) / 26.0;
                let mix = interp * w + p[i] * (1.0 - w);
                assert!(
                    (y[i] - mix).abs() <= 1e-6 * mix,
                    "frequency {i}: {} vs {mix}",
                    y[i]
                );
                assert!(
                    y[i] < p[i] && y[i] > interp,
                    "frequency {i} between the two"
                );
            }
        }
        let (c, s) = yarn.cos_sin(5000);
        let (cp, sp) = cos_sin_from(&y, 5000, None);
        for i in 0..64 {
            assert_eq!((c[i], s[i]), (cp[i] * 1.25, sp[i] * 1.25));
        }
        // Without truncation the range is [20.95, 45.03]: frequency 21 mixes in a little.
        let untruncated = Rope {
            scaling: RopeScaling::Yarn {
                factor: 8.0,
                original_max_position: 4096,
                beta_fast: 32.0,
                beta_slow: 1.0,
                attention_factor: 1.0,
                truncate: false,
            },
            ..plain
        };
        let u = untruncated.inv_freq();
        assert_eq!(u[20], p[20]);
        assert!(
            u[21] < p[21] && u[21] > y[21],
            "21 is barely past the untruncated start"
        );
    }
}
