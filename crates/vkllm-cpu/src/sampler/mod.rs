//! Token sampling, specified exactly so that a GPU kernel reproduces it token for token.
//!
//! # Specification (sampler v2)
//!
//! v2 replaced v1 (2026-12) so that no step needs a sequential pass over the vocabulary: the
//! draw is a Gumbel race (a parallel argmax) instead of an inverse-CDF walk over sequential f32
//! running sums, top-p sums are exact integers (any summation order gives the same value), and
//! min-p is a per-token test. Penalties, bias, temperature, greedy and top-k are unchanged.
//!
//! **Arithmetic.** Every value is IEEE-754 binary32. Each `+`, `-`, `*` is one operation rounded
//! to nearest-even; there is **no fused multiply-add** (a shader must forbid contraction, e.g.
//! SPIR-V `NoContraction`) and **no division, `exp` or `log` from a math library** on the
//! per-token path (Vulkan only guarantees `+ - *` to be correctly rounded). The reciprocals
//! `inv_t = 1 / temperature` and `inv_rp = 1 / repetition_penalty` are computed once per request
//! (f32 division on the host) and passed in. Comparisons are numeric (`-0 == +0`). `exp` and `log`
//! are the polynomials [`exp_s`] and [`log_s`], built from `+ - *`, `floor` and exponent bits.
//! Vocabularies have fewer than `2^24` entries ([`MAX_VOCAB`]).
//!
//! **Steps** on logits `l[0..V]`, token counts `c[0..V]` (an empty slice: no penalties):
//! 1. *Penalties*, for each token with `c[i] > 0`, in this order:
//!    `l = l > 0 ? l * inv_rp : l * repetition_penalty`; `l = l - presence_penalty`;
//!    `l = l - frequency_penalty * (c[i] as f32)`.
//! 2. *Logit bias*: for each `(id, b)` of `logit_bias` in list order, `l[id] = l[id] + b`
//!    (ids `>= V` are skipped; [`SamplingParams::validate`] reports them). Then every NaN logit
//!    becomes `-inf`.
//!    With an allowed-token mask (structured outputs), every banned token's `l` then becomes
//!    `-inf` too ([`apply_mask`] on the raw logits gives the same values: penalties and finite
//!    bias keep `-inf`, and `-inf + inf` is NaN, hence `-inf`).
//! 3. *Temperature*: if `temperature > 0`, `l = l * inv_t` (else the call is greedy).
//! 4. *Top candidate*: `i0` = the largest `l` (ties to the lowest id; all `-inf` gives 0),
//!    `l0 = l[i0]`. Greedy calls, and calls where `l0` is not finite, return `i0`.
//! 5. *Order and top-k*: candidates sorted by (`l` descending, id ascending); if
//!    `0 < top_k < V` only the first `top_k` are kept (the set T), else T is every token.
//! 6. *Top-p*, if `top_p < 1`: each candidate `j` of T (in order) has the integer weight
//!    `q_j = floor(exp_s(l_j - l0) * 2^24)` ([`weight_q`]); with `P_j` the exact sum of the weights
//!    before `j` and `Z` the sum over T, candidate `j` is kept iff `j == 0` or
//!    `f32(P_j) < top_p * f32(Z)` (`f32(n)`: `n` rounded to nearest-even, exact arithmetic
//!    otherwise; the sums are below `2^48`). The kept candidates are a prefix of T.
//! 7. *Min-p*, if `min_p > 0`: a kept token `i` stays iff `i == i0` or
//!    `exp_s(l_i - l0) >= min_p` (that is `p_i >= min_p * p_max`).
//! 8. *Draw*: the kept token with the largest `l_i + g_i` (ties to the lowest id), where
//!    `g_i` = [`gumbel`]`(seed, seq_id, step, i)` = `-log_s(-log_s(u_i))` and `u_i` =
//!    [`token_uniform`]: word `i & 3` of Philox4x32-10 ([`philox4x32_10`], checked against the
//!    Random123 known-answer vectors) with counter `[i >> 2, step lo32, seq_id lo32,
//!    seq_id hi32 ^ step hi32]` and key `[seed lo32, seed hi32]`, mapped to
//!    `(2 (w >> 9) + 1) * 2^-24` in `(0, 1)`. The maximum of `l_i + g_i` over a set is a draw from
//!    the softmax of `l` restricted to that set (the Gumbel-max trick); every token's variate is
//!    independent of the others, so a GPU takes the argmax in any order.
//!
//! `exp_s(x)`, for `x <= 0` (including `-inf`): `0` if `x < -86`; else
//! `k = floor(x * LOG2E + 0.5)` (integer in `[-124, 0]`),
//! `r = (x - k * LN2_HI) - k * LN2_LO` with `LN2_HI = 0.693359375`, `LN2_LO = -2.12194440e-4`,
//! `p = (((((((C7*r + C6)*r + C5)*r + C4)*r + C3)*r + C2)*r + 1)*r + 1` with
//! `C_n = f32(1/n!)` (Horner, left to right), result `p * 2^k`
//! with `2^k` assembled from exponent bits `(k + 127) << 23`. Relative error below 3e-7; never
//! subnormal; `exp_s(0) == 1`.
//!
//! `log_s(x)`, for positive normal `x`: `e` = the unbiased exponent of `x`, `m` = `x`'s
//! significand in `[1, 2)`; if `m > f32(sqrt 2)`, `m = m * 0.5` and `e = e + 1`; `f = m - 1`;
//! `p = (...((D16*f + D15)*f + D14)*f ... + D2)*f + 1)*f` with `D_n = f32((-1)^(n+1)/n)`; result
//! `(p + e * LN2_LO) + e * LN2_HI` (`e` as f32). Relative error below 1e-6.
//!
//! [`log_softmax`] and [`top_logprobs`] give log-probabilities for API output; they are plain f64
//! reference math, not part of the token choice.

mod gumbel;
mod logprobs;
mod philox;
#[allow(clippy::module_inception)]
mod sampler;
#[cfg(test)]
mod tests;

pub use gumbel::{block_words, gumbel, gumbel_of_word, log_s, token_uniform};
pub use logprobs::{log_softmax, top_logprobs};
pub use philox::{PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, philox_draw, philox4x32_10, uniform};
pub use sampler::{MAX_VOCAB, SamplingParams, apply_mask, exp_s, mask_allows, sample, weight_q};
