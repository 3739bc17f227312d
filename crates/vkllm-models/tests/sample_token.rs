//! `Backend::sample_token` on the Vulkan backend (one row sampled on the device, only the token
//! read back) draws what `vkllm_cpu::sampler::sample` draws on the same logits, settings, counts,
//! sequence and step: greedy, the defaults, top-p or min-p alone, a logit bias, penalties from
//! counts, an odd vocabulary. Needs a Vulkan device (lavapipe in CI).

mod common;

use vkllm_cpu::sampler::{SamplingParams, sample};
use vkllm_models::{Backend, VulkanBackend};

#[test]
fn device_draws_match_the_cpu_sampler() {
    let dev = common::device();
    let mut b = VulkanBackend::new(dev.clone());
    let vocab = 3001;
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let logits: Vec<f32> = (0..vocab)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
        })
        .collect();
    let t = b.upload_f32(&logits).expect("logits");
    let counts: Vec<u32> = (0..vocab as u32).map(|i| (i * 7919) % 5 / 3).collect();
    let base = SamplingParams {
        seed: 42,
        ..Default::default()
    };
    let cases = [
        SamplingParams {
            temperature: 0.0,
            ..base.clone()
        },
        base.clone(),
        SamplingParams {
            top_k: 0,
            top_p: 0.9,
            min_p: 0.0,
            temperature: 1.0,
            ..base.clone()
        },
        SamplingParams {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.1,
            ..base.clone()
        },
        SamplingParams {
            logit_bias: vec![(7, 30.0), (11, f32::NEG_INFINITY)],
            ..base.clone()
        },
        SamplingParams {
            repetition_penalty: 1.3,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..base.clone()
        },
    ];
    let mut differ = 0;
    for (i, p) in cases.iter().enumerate() {
        for step in 0..6u64 {
            let want = sample(&logits, p, &counts, 3, step);
            let got = b
                .sample_token(t, vocab, p, &counts, 3, step)
                .expect("sample_token")
                .expect("the Vulkan backend samples on the device");
            assert_eq!(got, want, "case {i} step {step}");
            differ += usize::from(want != sample(&logits, p, &counts, 3, step + 100));
        }
    }
    // The draws depend on the step (the test is not comparing constants).
    assert!(differ > 0);
    // The bias case: token 7 (+30) always wins.
    assert_eq!(
        b.sample_token(t, vocab, &cases[4], &counts, 3, 0).unwrap(),
        Some(7)
    );
    dev.check_validation().expect("validation");
}
