//! Tests of the sampler specification. Expected distributions are recomputed in f64 from the
//! logits; token expectations are worked out by hand in the comments.

use super::*;
use crate::CpuError;
use crate::testutil::Rng;

fn greedy() -> SamplingParams {
    SamplingParams::default()
}

fn temp(t: f32) -> SamplingParams {
    SamplingParams {
        temperature: t,
        ..SamplingParams::default()
    }
}

/// Logits whose softmax is `probs`.
fn logits_of(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

/// Frequencies of `n` draws (steps `0..n`, seq 0).
fn freqs(logits: &[f32], params: &SamplingParams, n: u64) -> Vec<f64> {
    let mut counts = vec![0u64; logits.len()];
    for step in 0..n {
        counts[sample(logits, params, &[], 0, step) as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / n as f64).collect()
}

#[test]
fn temperature_zero_is_argmax_lowest_id_on_ties() {
    assert_eq!(sample(&[0.1, 0.9, 0.3], &greedy(), &[], 0, 0), 1);
    assert_eq!(sample(&[0.5, 2.0, 2.0, 1.0], &greedy(), &[], 0, 0), 1);
    assert_eq!(sample(&[-0.0, 0.0], &greedy(), &[], 0, 0), 0);
    assert_eq!(sample(&[f32::NAN, -5.0], &greedy(), &[], 0, 0), 1);
    assert_eq!(sample(&[f32::NEG_INFINITY; 3], &greedy(), &[], 0, 0), 0);
    // Negative temperature and NaN temperature are greedy too.
    let mut rng = Rng::new(50);
    let l = rng.vec(300);
    let argmax = l
        .iter()
        .enumerate()
        .fold(0, |b, (i, &x)| if x > l[b] { i } else { b }) as u32;
    for t in [0.0, -1.0, f32::NAN] {
        for step in 0..20 {
            assert_eq!(sample(&l, &temp(t), &[], 3, step), argmax);
        }
    }
}

#[test]
fn top_k_never_leaves_the_k_best() {
    let mut rng = Rng::new(51);
    let l: Vec<f32> = rng.vec(64).iter().map(|x| x * 2.0).collect();
    let mut order: Vec<usize> = (0..64).collect();
    order.sort_by(|&a, &b| l[b].partial_cmp(&l[a]).unwrap());
    let best: Vec<u32> = order[..5].iter().map(|&i| i as u32).collect();
    let p = SamplingParams {
        temperature: 3.0,
        top_k: 5,
        ..SamplingParams::default()
    };
    let mut seen = [false; 64];
    for seed in 0..200u64 {
        let params = SamplingParams { seed, ..p.clone() };
        for step in 0..20 {
            let t = sample(&l, &params, &[], seed * 7, step);
            assert!(best.contains(&t), "token {t} outside top-5 {best:?}");
            seen[t as usize] = true;
        }
    }
    assert!(
        best.iter().all(|&t| seen[t as usize]),
        "some top-5 token never drawn"
    );
}

#[test]
fn seeds_and_counters_are_reproducible() {
    let l = vec![0.0f32; 1000];
    let draw = |seed: u64, seq: u64| -> Vec<u32> {
        let p = SamplingParams { seed, ..temp(1.0) };
        (0..50).map(|step| sample(&l, &p, &[], seq, step)).collect()
    };
    assert_eq!(draw(1, 0), draw(1, 0));
    assert_ne!(draw(1, 0), draw(2, 0));
    assert_ne!(draw(1, 0), draw(1, 1));
    // The draw is a pure function of (seed, seq, step): step 7 alone equals step 7 in a run.
    let p = SamplingParams {
        seed: 1,
        ..temp(1.0)
    };
    assert_eq!(sample(&l, &p, &[], 0, 7), draw(1, 0)[7]);
    // Uniform logits and no filters: the draw is the Gumbel race alone, the token with the
    // largest variate.
    let race = (0..1000u32)
        .max_by(|&a, &b| {
            gumbel(1, 0, 7, a)
                .total_cmp(&gumbel(1, 0, 7, b))
                .then(b.cmp(&a))
        })
        .unwrap();
    assert_eq!(draw(1, 0)[7], race);
}

#[test]
fn empirical_distribution_matches_softmax() {
    let l = [1.0f32, 0.5, -0.3, 2.0, 0.0, -1.5, 1.2, 0.7];
    let t = 0.8f32;
    let z: f64 = l.iter().map(|&x| (f64::from(x) / f64::from(t)).exp()).sum();
    let want: Vec<f64> = l
        .iter()
        .map(|&x| (f64::from(x) / f64::from(t)).exp() / z)
        .collect();
    let n = 20_000;
    let got = freqs(&l, &temp(t), n);
    // Binomial sd is at most sqrt(0.25 / 20000) = 0.0035; allow 4.3 sd.
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 0.015, "{got:?} vs {want:?}");
    }
    // Chi-square with 7 degrees of freedom: 99.9% quantile is 24.3.
    let chi: f64 = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).powi(2) * n as f64 / w)
        .sum();
    assert!(chi < 24.3, "chi-square {chi}");
}

#[test]
fn top_p_keeps_the_shortest_prefix() {
    let l = logits_of(&[0.1, 0.4, 0.2, 0.3]);
    // Sorted probs 0.4 (id 1), 0.3 (id 3), 0.2 (id 2), 0.1 (id 0); cumulative 0.4, 0.7, 0.9.
    // top_p 0.75 keeps ids 1, 3, 2 renormalised: 4/9, 3/9, 2/9.
    let p = SamplingParams {
        top_p: 0.75,
        ..temp(1.0)
    };
    let got = freqs(&l, &p, 20_000);
    let want = [0.0, 4.0 / 9.0, 2.0 / 9.0, 3.0 / 9.0];
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 0.015, "{got:?}");
    }
    assert_eq!(got[0], 0.0);
    // top_p 0 keeps only the most likely token.
    let p0 = SamplingParams { top_p: 0.0, ..p };
    assert!(
        freqs(&l, &p0, 500)
            .iter()
            .zip([0.0, 1.0, 0.0, 0.0])
            .all(|(g, w)| *g == w)
    );
}

#[test]
fn filters_compose_in_the_specified_order() {
    let l = logits_of(&[0.4, 0.3, 0.2, 0.1]);
    // top-k 2 first: renormalised [4/7, 3/7]; then top_p 0.5 keeps id 0 alone (0.571 >= 0.5).
    // (top-p first over all four would keep ids 0 and 1.)
    let kp = SamplingParams {
        top_k: 2,
        top_p: 0.5,
        ..temp(1.0)
    };
    assert!(
        freqs(&l, &kp, 2000)
            .iter()
            .zip([1.0, 0.0, 0.0, 0.0])
            .all(|(g, w)| *g == w)
    );
    let p_only = SamplingParams {
        top_p: 0.5,
        ..temp(1.0)
    };
    let f = freqs(&l, &p_only, 20_000);
    assert!(
        (f[0] - 4.0 / 7.0).abs() < 0.015 && (f[1] - 3.0 / 7.0).abs() < 0.015,
        "{f:?}"
    );
    // top-p 0.55 then min-p 0.6: top-p keeps ids 0, 1 (cumulative 0.4 < 0.55 <= 0.7); min-p
    // (threshold 0.6 * 0.4 = 0.24) keeps both, so id 1 is drawn 3/7 of the time. Min-p first
    // would renormalise to [4/7, 3/7] and top-p 0.55 would then keep id 0 alone.
    let pm = SamplingParams {
        top_p: 0.55,
        min_p: 0.6,
        ..temp(1.0)
    };
    let f = freqs(&l, &pm, 20_000);
    assert!(
        (f[1] - 3.0 / 7.0).abs() < 0.015 && f[2] == 0.0 && f[3] == 0.0,
        "{f:?}"
    );
    // min-p alone: keeps p >= 0.24, ids 0 and 1.
    let m = SamplingParams {
        min_p: 0.6,
        ..temp(1.0)
    };
    let f = freqs(&l, &m, 20_000);
    assert!(
        (f[0] - 4.0 / 7.0).abs() < 0.015 && f[2] == 0.0 && f[3] == 0.0,
        "{f:?}"
    );
    // min_p 1: only the top token survives.
    let m1 = SamplingParams {
        min_p: 1.0,
        ..temp(1.0)
    };
    assert!(freqs(&l, &m1, 500)[0] == 1.0);
}

#[test]
fn penalties_apply_to_seen_tokens_in_order() {
    let rp = |r: f32| SamplingParams {
        repetition_penalty: r,
        ..greedy()
    };
    // Positive logit divided: 2.0 / 1.1 = 1.82 < 1.9.
    assert_eq!(sample(&[2.0, 1.9], &rp(1.1), &[1, 0], 0, 0), 1);
    assert_eq!(sample(&[2.0, 1.9], &rp(1.1), &[0, 0], 0, 0), 0);
    assert_eq!(sample(&[2.0, 1.9], &rp(1.1), &[], 0, 0), 0);
    // Negative logit multiplied: -1.0 * 1.1 = -1.1 < -1.05.
    assert_eq!(sample(&[-1.0, -1.05], &rp(1.1), &[2, 0], 0, 0), 1);
    let pres = |x: f32| SamplingParams {
        presence_penalty: x,
        ..greedy()
    };
    assert_eq!(sample(&[1.0, 0.5], &pres(0.6), &[3, 0], 0, 0), 1);
    assert_eq!(sample(&[1.0, 0.5], &pres(0.4), &[3, 0], 0, 0), 0);
    let freq = |x: f32| SamplingParams {
        frequency_penalty: x,
        ..greedy()
    };
    // 1.0 - 0.2 * 3 = 0.4 < 0.5; 1.0 - 0.1 * 3 = 0.7 > 0.5.
    assert_eq!(sample(&[1.0, 0.5], &freq(0.2), &[3, 0], 0, 0), 1);
    assert_eq!(sample(&[1.0, 0.5], &freq(0.1), &[3, 0], 0, 0), 0);
    // Repetition before presence: 1.0 / 2 - 0.5 = 0.0 < 0.1 (the other order gives 0.25).
    let both = SamplingParams {
        repetition_penalty: 2.0,
        presence_penalty: 0.5,
        ..greedy()
    };
    assert_eq!(sample(&[1.0, 0.1], &both, &[1, 0], 0, 0), 1);
}

#[test]
fn logit_bias_after_penalties() {
    let bias = |b: Vec<(u32, f32)>| SamplingParams {
        logit_bias: b,
        ..greedy()
    };
    assert_eq!(sample(&[1.0, 0.0], &bias(vec![(1, 2.0)]), &[], 0, 0), 1);
    // Applied in list order, duplicates add up: 0 + 0.6 + 0.6 = 1.2 > 1.
    assert_eq!(
        sample(&[1.0, 0.0], &bias(vec![(1, 0.6), (1, 0.6)]), &[], 0, 0),
        1
    );
    // Out-of-range ids are skipped, not a panic.
    assert_eq!(sample(&[1.0, 0.0], &bias(vec![(9, 5.0)]), &[], 0, 0), 0);
    // Bias after penalty: 1.0 * 0.5 + 0.5 = 1.0 > 0.9 (bias first: 1.5 / 2 = 0.75 < 0.9).
    let p = SamplingParams {
        repetition_penalty: 2.0,
        logit_bias: vec![(0, 0.5)],
        ..greedy()
    };
    assert_eq!(sample(&[1.0, 0.9], &p, &[1, 0], 0, 0), 0);
    // -inf bans a token under sampling too.
    let ban = SamplingParams {
        logit_bias: vec![(2, f32::NEG_INFINITY)],
        ..temp(1.0)
    };
    let l = [0.0, 0.0, 5.0];
    assert_eq!(freqs(&l, &ban, 2000)[2], 0.0);
}

#[test]
fn degenerate_logits_do_not_panic() {
    let t = temp(1.0);
    assert_eq!(sample(&[f32::NEG_INFINITY; 4], &t, &[], 0, 0), 0);
    assert_eq!(
        sample(&[0.0, f32::INFINITY, f32::INFINITY], &t, &[], 0, 0),
        1
    );
    for step in 0..100 {
        let x = sample(&[f32::NAN, 0.0, f32::NEG_INFINITY], &t, &[], 0, step);
        assert_eq!(x, 1);
    }
    assert_eq!(sample(&[3.0], &t, &[], 0, 0), 0);
    // A tiny temperature behaves as argmax; one that overflows the scaled logits to +inf
    // returns the lowest id among them.
    for step in 0..50 {
        assert_eq!(sample(&[1.0, 2.0, 0.0], &temp(1e-37), &[], 0, step), 1);
    }
    assert_eq!(sample(&[1e30, 2e30, 0.0], &temp(1e-30), &[], 0, 0), 0);
}

#[test]
fn exp_s_is_accurate_and_exact_at_zero() {
    assert_eq!(exp_s(0.0), 1.0);
    assert_eq!(exp_s(-0.0), 1.0);
    assert_eq!(exp_s(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_s(-86.5), 0.0);
    assert_eq!(exp_s(f32::NAN), 0.0);
    assert_eq!(exp_s(f32::INFINITY), 1.0);
    let mut worst = 0.0f64;
    let mut x = 0.0f32;
    while x > -86.0 {
        let want = f64::from(x).exp();
        let got = f64::from(exp_s(x));
        worst = worst.max((got - want).abs() / want);
        assert!(exp_s(x).is_normal());
        x -= 0.001_37;
    }
    assert!(worst < 3e-7, "relative error {worst}");
}

#[test]
fn validate_reports_bad_parameters() {
    assert!(SamplingParams::default().validate(10).is_ok());
    let ok = SamplingParams {
        temperature: 0.7,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.05,
        repetition_penalty: 1.1,
        presence_penalty: -0.5,
        frequency_penalty: 0.5,
        logit_bias: vec![(9, f32::NEG_INFINITY)],
        seed: 1,
    };
    assert!(ok.validate(10).is_ok());
    let bad = |p: SamplingParams, name: &str| match p.validate(10) {
        Err(CpuError::InvalidSamplingParam { name: n, .. }) => assert_eq!(n, name),
        other => panic!("{name}: {other:?}"),
    };
    bad(
        SamplingParams {
            temperature: -1.0,
            ..ok.clone()
        },
        "temperature",
    );
    bad(
        SamplingParams {
            temperature: f32::INFINITY,
            ..ok.clone()
        },
        "temperature",
    );
    bad(
        SamplingParams {
            top_p: 1.5,
            ..ok.clone()
        },
        "top_p",
    );
    bad(
        SamplingParams {
            top_p: f32::NAN,
            ..ok.clone()
        },
        "top_p",
    );
    bad(
        SamplingParams {
            min_p: -0.1,
            ..ok.clone()
        },
        "min_p",
    );
    bad(
        SamplingParams {
            repetition_penalty: 0.0,
            ..ok.clone()
        },
        "repetition_penalty",
    );
    bad(
        SamplingParams {
            presence_penalty: f32::NAN,
            ..ok.clone()
        },
        "presence_penalty",
    );
    bad(
        SamplingParams {
            frequency_penalty: f32::INFINITY,
            ..ok.clone()
        },
        "frequency_penalty",
    );
    bad(
        SamplingParams {
            logit_bias: vec![(1, f32::NAN)],
            ..ok.clone()
        },
        "logit_bias",
    );
    assert_eq!(
        SamplingParams {
            logit_bias: vec![(10, 1.0)],
            ..ok
        }
        .validate(10),
        Err(CpuError::LogitBiasOutOfRange { id: 10, vocab: 10 })
    );
}

#[test]
fn top_p_sums_are_exact_integers() {
    // 3000 equal tokens: each weight is 2^24, so top_p 0.5 keeps exactly 1500 (prefix sums are
    // exact; sequential f32 sums would drift). Only ids 0..1500 can be drawn.
    let l = vec![0.25f32; 3000];
    let p = SamplingParams {
        top_p: 0.5,
        seed: 9,
        ..temp(1.0)
    };
    let mut hi = 0;
    for step in 0..4000 {
        hi = hi.max(sample(&l, &p, &[], 0, step));
    }
    assert!((1400..1500).contains(&hi), "largest id drawn {hi}");
    assert_eq!(weight_q(0.0), 1 << 24);
    assert_eq!(weight_q(-90.0), 0);
}

#[test]
fn min_p_is_a_per_token_test() {
    // p = [0.5, 0.3, 0.2]; min_p 0.5 keeps p >= 0.25: ids 0 and 1 (5/8 and 3/8).
    let l = logits_of(&[0.5, 0.3, 0.2]);
    let m = SamplingParams {
        min_p: 0.5,
        ..temp(1.0)
    };
    let f = freqs(&l, &m, 20_000);
    assert!((f[0] - 0.625).abs() < 0.015 && f[2] == 0.0, "{f:?}");
}

#[test]
fn masks_ban_tokens_before_the_draw() {
    // Bits 1 and 33 allowed; everything past the mask banned.
    let mask = [0b10u32, 0b10];
    assert!(mask_allows(&mask, 1) && mask_allows(&mask, 33));
    assert!(!mask_allows(&mask, 0) && !mask_allows(&mask, 32) && !mask_allows(&mask, 64));
    let mut l: Vec<f32> = (0..70).map(|i| i as f32).collect();
    apply_mask(&mut l, &mask);
    let kept: Vec<usize> = (0..70).filter(|&i| l[i].is_finite()).collect();
    assert_eq!(kept, vec![1, 33]);
    // Greedy takes the best allowed token; sampling never leaves the mask.
    assert_eq!(sample(&l, &SamplingParams::default(), &[], 0, 0), 33);
    let p = SamplingParams {
        temperature: 5.0,
        seed: 3,
        ..SamplingParams::default()
    };
    for step in 0..50 {
        let t = sample(&l, &p, &[], 0, step);
        assert!(t == 1 || t == 33, "{t}");
    }
    // A +inf bias on a banned token stays banned (-inf + inf is NaN, then -inf).
    let mut l = vec![0.0f32; 8];
    apply_mask(&mut l, &[0b1]);
    let p = SamplingParams {
        logit_bias: vec![(5, f32::INFINITY)],
        ..SamplingParams::default()
    };
    assert_eq!(sample(&l, &p, &[], 0, 0), 0);
}
