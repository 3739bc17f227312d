//! The draw of sampler v2: a per-token Gumbel variate from Philox, built from `+ - *` only, so a
//! GPU reproduces it bit for bit (see the module-level specification).

use super::philox::philox4x32_10;

const SQRT2: f32 = std::f32::consts::SQRT_2; // 0x3fb504f3
const LN2_HI: f32 = 0.693_359_4; // 0.693359375 exactly (0x3f318000)
const LN2_LO: f32 = -2.121_944_4e-4;
/// `f32((-1)^(n+1) / n)` for n = 16 down to 2 (Horner order).
const LOG1P: [f32; 15] = [
    -1.0 / 16.0,
    1.0 / 15.0,
    -1.0 / 14.0,
    1.0 / 13.0,
    -1.0 / 12.0,
    1.0 / 11.0,
    -1.0 / 10.0,
    1.0 / 9.0,
    -1.0 / 8.0,
    1.0 / 7.0,
    -1.0 / 6.0,
    1.0 / 5.0,
    -1.0 / 4.0,
    1.0 / 3.0,
    -1.0 / 2.0,
];

/// The specification's natural logarithm for positive normal `x` (the draw only ever passes
/// values in `[2^-24, 17]`): `x = 2^e m` with `m` in `(sqrt(2)/2, sqrt(2)]`, the degree-16 Taylor
/// polynomial of `ln(1 + f)` at `f = m - 1`, plus `e ln 2` in two parts. Relative error below
/// 1e-6 on its domain.
pub fn log_s(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 127;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    if m > SQRT2 {
        m *= 0.5;
        e += 1;
    }
    let f = m - 1.0;
    let mut p = LOG1P[0];
    for c in &LOG1P[1..] {
        p = p * f + c;
    }
    p = p * f + 1.0;
    p *= f;
    let ef = e as f32;
    let r = p + ef * LN2_LO;
    r + ef * LN2_HI
}

/// The four Philox words of token block `id >> 2` (tokens `4 b .. 4 b + 3`): counter
/// `[id >> 2, step lo, seq lo, seq hi ^ step hi]`, key `[seed lo, seed hi]`.
pub fn block_words(seed: u64, seq_id: u64, step: u64, id: u32) -> [u32; 4] {
    let ctr = [
        id >> 2,
        step as u32,
        seq_id as u32,
        (seq_id >> 32) as u32 ^ (step >> 32) as u32,
    ];
    philox4x32_10(ctr, [seed as u32, (seed >> 32) as u32])
}

/// The uniform of token `id`: word `id & 3` of its [`block_words`], as
/// `(2 (w >> 9) + 1) * 2^-24`, exactly representable, in `(0, 1)`.
pub fn token_uniform(seed: u64, seq_id: u64, step: u64, id: u32) -> f32 {
    word_uniform(block_words(seed, seq_id, step, id)[(id & 3) as usize])
}

fn word_uniform(w: u32) -> f32 {
    ((w >> 9) * 2 + 1) as f32 * (1.0 / 16_777_216.0)
}

/// The Gumbel variate of a token whose Philox word is `w`: `-log_s(-log_s(u))`.
pub fn gumbel_of_word(w: u32) -> f32 {
    -log_s(-log_s(word_uniform(w)))
}

/// The Gumbel variate of token `id`: `-log_s(-log_s(u))` for its [`token_uniform`] `u`, in
/// about `[-2.9, 16.7]`.
pub fn gumbel(seed: u64, seq_id: u64, step: u64, id: u32) -> f32 {
    gumbel_of_word(block_words(seed, seq_id, step, id)[(id & 3) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_s_is_accurate_on_its_domain() {
        let mut worst = 0.0f64;
        let mut x = 1.0f32 / 16_777_216.0;
        while x < 20.0 {
            let want = f64::from(x).ln();
            let got = f64::from(log_s(x));
            let err = if want.abs() > 1e-3 {
                (got - want).abs() / want.abs()
            } else {
                (got - want).abs()
            };
            worst = worst.max(err);
            x *= 1.000_37;
        }
        assert!(worst < 1e-6, "error {worst}");
        assert_eq!(log_s(1.0), 0.0);
        // Just below 1: the first-order term survives (no cancellation to 0).
        let u = 1.0 - 1.0 / 16_777_216.0;
        assert!(log_s(u) < 0.0 && (f64::from(log_s(u)) + 5.96e-8).abs() < 1e-9);
    }

    #[test]
    fn uniforms_are_open_interval_and_distinct_per_token() {
        let mut lo = 1.0f32;
        let mut hi = 0.0f32;
        let mut bins = [0u32; 16];
        for id in 0..64_000u32 {
            let u = token_uniform(7, 3, 11, id);
            assert!(u > 0.0 && u < 1.0);
            lo = lo.min(u);
            hi = hi.max(u);
            bins[(u * 16.0) as usize] += 1;
        }
        // 4000 per bin expected, sd ~61.
        assert!(bins.iter().all(|&b| (3700..4300).contains(&b)), "{bins:?}");
        assert_ne!(token_uniform(7, 3, 11, 5), token_uniform(7, 3, 12, 5));
        assert_ne!(token_uniform(7, 3, 11, 5), token_uniform(7, 4, 11, 5));
        assert_ne!(token_uniform(7, 3, 11, 5), token_uniform(8, 3, 11, 5));
        assert!(gumbel(1, 2, 3, 4).is_finite());
        // The extreme uniforms give the variate's bounds, which the sampler's skip relies on.
        let g = |u: f32| -log_s(-log_s(u));
        let (lo, hi) = (g(1.0 / 16_777_216.0), g(1.0 - 1.0 / 16_777_216.0));
        assert!(
            lo > -2.9 && lo < -2.8 && hi > 16.6 && hi < 16.7,
            "{lo} {hi}"
        );
    }

    #[test]
    fn gumbel_has_the_gumbel_mean_and_variance() {
        let n = 200_000u32;
        let g: Vec<f64> = (0..n).map(|i| f64::from(gumbel(3, 9, 1, i))).collect();
        let mean = g.iter().sum::<f64>() / f64::from(n);
        let var = g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / f64::from(n);
        // Euler-Mascheroni 0.5772 and pi^2 / 6 = 1.6449; sd of the mean ~0.0029.
        assert!((mean - 0.5772).abs() < 0.015, "mean {mean}");
        assert!((var - 1.6449).abs() < 0.03, "variance {var}");
    }
}
