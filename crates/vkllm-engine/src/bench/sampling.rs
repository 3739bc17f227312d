//! The named sampling settings `vkllm bench --sampling` measures decode with.

use vkllm_cpu::sampler::SamplingParams;

/// A named sampling setting of the decode tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchSampling {
    /// Temperature 0: the argmax.
    Greedy,
    /// `vkllm run`'s and `serve`'s defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05.
    Default,
    /// Temperature 1, no filter (the OpenAI API's default).
    Pure,
    /// Temperature 1, top-p 0.9, no top-k.
    TopP,
    /// Temperature 0.8, min-p 0.05 only.
    MinP,
}

impl BenchSampling {
    pub const ALL: [BenchSampling; 5] = [
        BenchSampling::Greedy,
        BenchSampling::Default,
        BenchSampling::Pure,
        BenchSampling::TopP,
        BenchSampling::MinP,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BenchSampling::Greedy => "greedy",
            BenchSampling::Default => "default",
            BenchSampling::Pure => "pure",
            BenchSampling::TopP => "top-p",
            BenchSampling::MinP => "min-p",
        }
    }

    pub fn parse(s: &str) -> Option<BenchSampling> {
        Self::ALL.into_iter().find(|b| b.name() == s)
    }

    pub fn params(self) -> SamplingParams {
        let t = |temperature, top_k, top_p, min_p| SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            seed: 42,
            ..SamplingParams::default()
        };
        match self {
            BenchSampling::Greedy => SamplingParams::default(),
            BenchSampling::Default => t(0.8, 40, 0.95, 0.05),
            BenchSampling::Pure => t(1.0, 0, 1.0, 0.0),
            BenchSampling::TopP => t(1.0, 0, 0.9, 0.0),
            BenchSampling::MinP => t(0.8, 0, 1.0, 0.05),
        }
    }
}
