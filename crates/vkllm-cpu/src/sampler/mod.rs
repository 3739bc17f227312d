//! Token sampling, specified exactly so that a GPU kernel reproduces it token for token.
//!
//! # Specification (sampler v1)
//!
//! **Arithmetic.** Every value is IEEE-754 binary32. Each `+`, `-`, `*` is one operation rounded
//! to nearest-even; there is **no fused multiply-add** (a shader must forbid contraction, e.g.
//! SPIR-V `NoContraction`) and **no division, `exp` or `log` from a math library** on the
//! per-token path (Vulkan only guarantees `+ - *` to be correctly rounded). The reciprocals
//! `inv_t = 1 / temperature` and `inv_rp = 1 / repetition_penalty` are computed once per request
//! (f32 division on the host) and passed in. Comparisons are numeric (`-0 == +0`). `exp` is the
//! polynomial [`exp_s`] below, built from `+ - *`, `floor` and exponent-bit assembly only.
//!
//! **Random number.** Philox4x32-10 ([`philox4x32_10`], checked against the Random123
//! known-answer vectors) with key `[seed lo32, seed hi32]` and counter
//! `[seq_id lo32, seq_id hi32, step lo32, step hi32]`; the first output word `w0` gives
//! `u = (w0 >> 8) as f32 * 2^-24`, exactly representable, in `[0, 1)`.
//!
//! **Steps** on logits `l[0..V]`, token counts `c[0..V]` (an empty slice: no penalties):
//! 1. *Penalties*, for each token with `c[i] > 0`, in this order:
//!    `l = l > 0 ? l * inv_rp : l * repetition_penalty`; `l = l - presence_penalty`;
//!    `l = l - frequency_penalty * (c[i] as f32)`.
//! 2. *Logit bias*: for each `(id, b)` of `logit_bias` in list order, `l[id] = l[id] + b`
//!    (ids `>= V` are skipped; [`SamplingParams::validate`] reports them). Then every NaN logit
//!    becomes `-inf`.
//! 3. *Greedy*: if `!(temperature > 0)`, return the argmax (largest `l`, ties to the lowest id;
//!    all `-inf` gives id 0). Otherwise `l = l * inv_t`.
//! 4. *Order and top-k*: candidates sorted by (`l` descending, id ascending); if
//!    `0 < top_k < V` only the first `top_k` are kept. If the first logit `l0` is not finite
//!    (`+inf`, or every candidate `-inf`) return the first candidate.
//! 5. *Weights*: `e_k = exp_s(l_k - l0)` in sorted order (so `e_0 = 1` exactly) and running sums
//!    `S_k = S_{k-1} + e_k` with `S_{-1} = 0`, strictly sequential in sorted order; `Z = S_last`.
//! 6. *Top-p*, if `top_p < 1`: keep candidates `0..=k` for the smallest `k` with
//!    `S_k >= top_p * Z` (one f32 multiply; `k = 0` qualifies whenever `top_p <= 0`).
//! 7. *Min-p*, if `min_p > 0`: walking from candidate 1, stop at the first kept candidate with
//!    `e_k < min_p` (that is `p_k < min_p * p_max`, since `e_0 = 1`) and drop it and all after it.
//!    Candidate 0 is always kept.
//! 8. *Draw*: `K = S_m` for the last kept candidate `m` (the same running sums, nothing is
//!    recomputed), `target = u * K`; return the first kept candidate with `S_k > target`, or, when
//!    rounding made `target == K`, the first with `S_k >= K`.
//!
//! `exp_s(x)`, for `x <= 0` (including `-inf`): `0` if `x < -86`; else
//! `k = floor(x * LOG2E + 0.5)` (integer in `[-124, 0]`),
//! `r = (x - k * LN2_HI) - k * LN2_LO` with `LN2_HI = 0.693359375`, `LN2_LO = -2.12194440e-4`,
//! `p = (((((((C7*r + C6)*r + C5)*r + C4)*r + C3)*r + C2)*r + 1)*r + 1` with
//! `C_n = f32(1/n!)` (Horner, left to right), result `p * 2^k`
//! with `2^k` assembled from exponent bits `(k + 127) << 23`. Relative error below 3e-7; never
//! subnormal; `exp_s(0) == 1`.
//!
//! Rounding choices, collected: penalties and temperature use host reciprocals (no device
//! division); one exp per candidate relative to the top logit (no max search: the sorted first
//! is the max); sums are sequential f32 in sorted order (a parallel GPU reduction would round
//! differently, so a kernel must sum the same way to match bit for bit); top-p compares unnormalised
//! sums (`S_k >= top_p * Z` instead of `S_k / Z >= top_p`); min-p compares against the max weight
//! 1; the draw scales `u` by the kept sum instead of renormalising every weight.
//!
//! [`log_softmax`] and [`top_logprobs`] give log-probabilities for API output; they are plain f64
//! reference math, not part of the token choice.

mod logprobs;
mod philox;
#[allow(clippy::module_inception)]
mod sampler;
#[cfg(test)]
mod tests;

pub use logprobs::{log_softmax, top_logprobs};
pub use philox::{PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, philox_draw, philox4x32_10, uniform};
pub use sampler::{SamplingParams, exp_s, sample};
