//! [`sample`]: the token choice of the module-level specification, step by step.

use super::gumbel::{block_words, gumbel_of_word};
use crate::CpuError;
use std::cmp::Ordering;

/// Sampling options of one sequence. `Default` is greedy decoding.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// `<= 0` (or NaN): greedy argmax.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; `0` = off.
    pub top_k: usize,
    /// Nucleus: keep the shortest prefix with cumulative probability `>= top_p`; `1` = off.
    pub top_p: f32,
    /// Drop tokens with probability `< min_p * max_prob`; `0` = off.
    pub min_p: f32,
    /// Seen tokens: positive logits divided, negative multiplied; `1` = off.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every seen token.
    pub presence_penalty: f32,
    /// Subtracted per occurrence from the logit of every seen token.
    pub frequency_penalty: f32,
    /// `(token id, bias)` added to logits, in order.
    pub logit_bias: Vec<(u32, f32)>,
    /// Philox key.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Checks user-supplied values for a vocabulary of `vocab` tokens: `temperature` finite and
    /// `>= 0`; `top_p` and `min_p` in `[0, 1]`; `repetition_penalty` finite and `> 0`; presence
    /// and frequency penalties finite; every bias not NaN (`-inf` bans a token) with an id
    /// `< vocab`. [`sample`] never panics on bad values, but its results for them are only
    /// defined by the arithmetic of the specification.
    ///
    /// # Errors
    /// [`CpuError::InvalidSamplingParam`] or [`CpuError::LogitBiasOutOfRange`].
    pub fn validate(&self, vocab: usize) -> Result<(), CpuError> {
        let bad = |name, value, expected| {
            Err(CpuError::InvalidSamplingParam {
                name,
                value,
                expected,
            })
        };
        let t = self.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return bad("temperature", t, "a finite value >= 0");
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top_p", self.top_p, "a value in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p, "a value in [0, 1]");
        }
        let rp = self.repetition_penalty;
        if !(rp.is_finite() && rp > 0.0) {
            return bad("repetition_penalty", rp, "a finite value > 0");
        }
        if !self.presence_penalty.is_finite() {
            return bad("presence_penalty", self.presence_penalty, "a finite value");
        }
        if !self.frequency_penalty.is_finite() {
            return bad(
                "frequency_penalty",
                self.frequency_penalty,
                "a finite value",
            );
        }
        for &(id, b) in &self.logit_bias {
            if id as usize >= vocab {
                return Err(CpuError::LogitBiasOutOfRange { id, vocab });
            }
            if b.is_nan() {
                return bad("logit_bias", b, "a number (-inf bans the token)");
            }
        }
        Ok(())
    }
}

/// Bounds of every [`gumbel`] variate (it lies in about `[-2.82, 16.64]`).
const G_MIN: f32 = -2.9;
const G_MAX: f32 = 16.7;

/// Vocabularies must be smaller than this (the top-p sums are exact below `2^48`).
pub const MAX_VOCAB: usize = 1 << 24;

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4; // 0.693359375 exactly (0x3f318000)
const LN2_LO: f32 = -2.121_944_4e-4;
const C2: f32 = 1.0 / 2.0;
const C3: f32 = 1.0 / 6.0;
const C4: f32 = 1.0 / 24.0;
const C5: f32 = 1.0 / 120.0;
const C6: f32 = 1.0 / 720.0;
const C7: f32 = 1.0 / 5040.0;

/// The specification's `exp` for `x <= 0` (see the module docs): add/multiply-only polynomial,
/// bit-reproducible on any IEEE f32 device that does not fuse multiply-adds.
/// Its domain is `x <= 0`; positive `x` is clamped to 0 (result 1), NaN gives 0.
#[inline]
pub fn exp_s(x: f32) -> f32 {
    if x < -86.0 || x.is_nan() {
        return 0.0;
    }
    let x = x.min(0.0);
    let k = (x * LOG2E + 0.5).floor();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let mut p = C7 * r + C6;
    p = p * r + C5;
    p = p * r + C4;
    p = p * r + C3;
    p = p * r + C2;
    p = p * r + 1.0;
    p = p * r + 1.0;
    let ki = k as i32;
    let scale = f32::from_bits(((ki + 127) as u32) << 23);
    p * scale
}

/// Candidate order: logit descending (numeric, `-0 == +0`), then id ascending.
fn order(a: &(f32, u32), b: &(f32, u32)) -> Ordering {
    match b.0.partial_cmp(&a.0) {
        Some(Ordering::Equal) | None => a.1.cmp(&b.1),
        Some(o) => o,
    }
}

/// Candidate order as a total order, for a heap whose top is the worst kept candidate.
#[derive(PartialEq)]
struct Cand((f32, u32));

impl Eq for Cand {}

impl PartialOrd for Cand {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Cand {
    fn cmp(&self, other: &Self) -> Ordering {
        order(&self.0, &other.0)
    }
}

/// The first `k` candidates in candidate order (unsorted), for `0 < k < l.len()`. Small `k`: one
/// pass with a heap of the best so far (ids ascend, so a tie with the worst kept never enters);
/// else a selection over all candidates.
fn top_k_set(l: &[f32], k: usize) -> Vec<(f32, u32)> {
    if k > l.len() / 16 {
        let mut cand: Vec<(f32, u32)> = l.iter().enumerate().map(|(i, &x)| (x, i as u32)).collect();
        cand.select_nth_unstable_by(k - 1, order);
        cand.truncate(k);
        return cand;
    }
    let mut heap = std::collections::BinaryHeap::with_capacity(k + 1);
    for (i, &x) in l.iter().enumerate() {
        if heap.len() < k {
            heap.push(Cand((x, i as u32)));
        } else if let Some(mut worst) = heap.peek_mut()
            && x > worst.0.0
        {
            *worst = Cand((x, i as u32));
        }
    }
    heap.into_iter().map(|c| c.0).collect()
}

/// The specification's top-p weight of a candidate `d = l - l0` below the top logit:
/// `floor(exp_s(d) * 2^24)`, an integer in `[0, 2^24]`.
#[inline]
pub fn weight_q(d: f32) -> u32 {
    (exp_s(d) * 16_777_216.0) as u32
}

/// Whether bit `id % 32` of word `id / 32` of `mask` is set (ids past the mask: banned).
pub fn mask_allows(mask: &[u32], id: usize) -> bool {
    mask.get(id / 32).is_some_and(|w| (w >> (id % 32)) & 1 == 1)
}

/// Structured outputs: sets every logit whose token the allowed-token `mask` bans (bit `i % 32`
/// of word `i / 32` clear, or past the mask) to `-inf`.
pub fn apply_mask(logits: &mut [f32], mask: &[u32]) {
    for (i, x) in logits.iter_mut().enumerate() {
        if !mask_allows(mask, i) {
            *x = f32::NEG_INFINITY;
        }
    }
}

/// Chooses the next token of sequence `seq_id` at decode step `step`, following the module-level
/// specification exactly.
///
/// `token_counts` is either empty (no penalties) or one count per vocabulary entry.
///
/// # Panics
/// If `logits` is empty, has `2^24` or more entries, or `token_counts` is neither empty nor
/// `logits.len()` long (programming errors).
pub fn sample(
    logits: &[f32],
    params: &SamplingParams,
    token_counts: &[u32],
    seq_id: u64,
    step: u64,
) -> u32 {
    let v = logits.len();
    assert!(v > 0, "sample: empty logits");
    assert!(v < MAX_VOCAB, "sample: vocabulary of 2^24 or more");
    assert!(
        token_counts.is_empty() || token_counts.len() == v,
        "sample: token_counts must be empty or one per logit"
    );
    let mut l = logits.to_vec();

    // 1. penalties
    if !token_counts.is_empty() {
        let rp = params.repetition_penalty;
        let inv_rp = 1.0 / rp;
        for (x, &c) in l.iter_mut().zip(token_counts) {
            if c > 0 {
                *x = if *x > 0.0 { *x * inv_rp } else { *x * rp };
                *x -= params.presence_penalty;
                *x -= params.frequency_penalty * c as f32;
            }
        }
    }
    // 2. bias, then NaN -> -inf
    for &(id, b) in &params.logit_bias {
        if let Some(x) = l.get_mut(id as usize) {
            *x += b;
        }
    }
    for x in &mut l {
        if x.is_nan() {
            *x = f32::NEG_INFINITY;
        }
    }
    // 3. temperature (a NaN temperature is greedy, hence the negated comparison)
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    let greedy = !(params.temperature > 0.0);
    if !greedy {
        let inv_t = 1.0 / params.temperature;
        for x in &mut l {
            *x *= inv_t;
        }
    }
    // 4. the top candidate (greedy's answer)
    let mut i0 = 0usize;
    for (i, &x) in l.iter().enumerate() {
        if x > l[i0] {
            i0 = i;
        }
    }
    let l0 = l[i0];
    if greedy || !l0.is_finite() {
        return i0 as u32;
    }
    // 5-6. top-k and top-p on the sorted candidates (skipped when both are off)
    let top_k = params.top_k > 0 && params.top_k < v;
    let top_p = params.top_p < 1.0;
    let mut kept: Vec<u32> = if top_k || top_p {
        let mut cand: Vec<(f32, u32)> = if top_k {
            top_k_set(&l, params.top_k)
        } else {
            // Top-p alone: candidates with l - l0 < -17.5 weigh 0 (exp(-17.5) 2^24 = 0.42) and
            // come after every other, where the prefix already holds all of Z: never kept, so
            // they need not be sorted.
            l.iter()
                .enumerate()
                .filter(|&(_, &x)| x - l0 >= -17.5)
                .map(|(i, &x)| (x, i as u32))
                .collect()
        };
        cand.sort_unstable_by(order);
        if top_p {
            let z: u64 = cand.iter().map(|&(x, _)| u64::from(weight_q(x - l0))).sum();
            let thr = params.top_p * z as f32;
            let mut before = 0u64;
            let mut n = 0;
            for &(x, _) in &cand {
                if n > 0 && before as f32 >= thr {
                    break;
                }
                before += u64::from(weight_q(x - l0));
                n += 1;
            }
            cand.truncate(n);
        }
        cand.into_iter().map(|(_, i)| i).collect()
    } else {
        (0..v as u32).collect()
    };
    // 7. min-p
    if params.min_p > 0.0 {
        kept.retain(|&i| i as usize == i0 || exp_s(l[i as usize] - l0) >= params.min_p);
    }
    // 8. the draw: the largest l + gumbel over the kept tokens, ties to the lowest id. A token
    // with l + G_MAX < l0 + G_MIN cannot beat i0 (always kept): its variate is not computed.
    // Tokens come in ascending id order, so one Philox call serves each block of four.
    let floor = l0 + G_MIN;
    let mut best = (f32::NEG_INFINITY, u32::MAX);
    let mut block = (u32::MAX, [0u32; 4]);
    for i in kept {
        if l[i as usize] + G_MAX < floor {
            continue;
        }
        if block.0 != i >> 2 {
            block = (i >> 2, block_words(params.seed, seq_id, step, i));
        }
        let s = l[i as usize] + gumbel_of_word(block.1[(i & 3) as usize]);
        if s > best.0 || (s == best.0 && i < best.1) || best.1 == u32::MAX {
            best = (s, i);
        }
    }
    best.1
}
