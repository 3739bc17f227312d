//! MoE experts kept in their block format on the GPU: a Qwen3-MoE model whose weights are
//! quantized to Q8_0 at load (`QuantizingSource`) runs on the Vulkan backend with the stacked
//! expert matrices still Q8_0 (the expert kernels dequantize only the selected experts' blocks)
//! and gives the CPU's logits (which computes with the same blocks dequantized to f32) within
//! the GPU-vs-CPU tolerance, and the same greedy tokens. Under the validation layer.
//!
//! The decode matvecs run the exact kernel (tuning `matvec=fast` on this test's device): GPUs
//! default to the int8 matvec for Q8_0 weights, whose activation rounding the
//! exact CPU reference does not model (it has its own oracle, the `matvec_q8a` parity rows, and
//! the real-model greedy checks); this test is about the expert kernels.

mod common;

use vkllm_kernels::WeightType;
use vkllm_kernels::moe_experts_grouped::MoeExpertsGrouped;
use vkllm_kernels::moe_experts_quant::MoeQuantShape;
use vkllm_models::backend::Backend;
use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::hybrid::weights::FfnWeights;
use vkllm_models::parity::{GPU_VS_CPU_MAX_ABS, argmax};
use vkllm_models::{
    CpuBackend, DEFAULT_CHUNK, Logits, QuantScheme, QuantizingSource, VulkanBackend,
};

fn run<B: Backend>(b: &mut B, m: &HybridModel, ids: &[u32], n_gen: usize) -> (Vec<f32>, Vec<u32>) {
    let st = m.new_state(b, ids.len() + n_gen).expect("state");
    let logits = m.forward(b, &st, ids, 0, Logits::All).expect("prefill");
    let vocab = m.cfg.vocab_size;
    let mut toks = vec![argmax(&logits[logits.len() - vocab..])];
    while toks.len() < n_gen {
        let pos = ids.len() + toks.len() - 1;
        let last = *toks.last().expect("non-empty");
        toks.push(argmax(
            &m.forward(b, &st, &[last], pos, Logits::Last).expect("step"),
        ));
    }
    (logits, toks)
}

/// The expert products of `n` tokens over `m`'s experts as Q8_0 (top 2, or fewer experts).
fn q8_0_shape(m: &vkllm_models::hybrid::weights::MoeWeights, n: usize) -> MoeQuantShape {
    MoeQuantShape {
        n,
        top_k: m.experts.n_experts.min(2),
        hidden: m.experts.hidden,
        ff: m.experts.ff,
        n_experts: m.experts.n_experts,
        gate: WeightType::Q8_0,
        up: WeightType::Q8_0,
        down: WeightType::Q8_0,
    }
}

#[test]
fn q8_0_experts_match_cpu() {
    // Per-row expert kernels for every product (the reference launch, then teams of 16 lanes),
    // then the grouped ones for every product (prompt and decode steps alike).
    for (grouped_min, lanes) in [(0, 0), (0, 16), (1, 16)] {
        q8_0_experts_match_cpu_with(grouped_min, lanes);
    }
}

fn q8_0_experts_match_cpu_with(grouped_min: u32, lanes: u32) {
    let mut opts = common::options();
    opts.tuning.matvec = Some(vkllm_vk::kernels::matvec_fused::MatvecImpl::Fast);
    opts.tuning.moe_grouped_min = grouped_min;
    opts.tuning.moe_grouped_min_f32 = grouped_min;
    opts.tuning.moe_lanes = lanes;
    let dev = common::open(&opts);
    let fx = Fixture::load("qwen3_moe").expect("fixture");
    let src = QuantizingSource::new(&fx.weights, &fx.config, QuantScheme::Q8_0);
    let ids = fx.prompt("short").expect("prompt").ids;
    let mut cpu = CpuBackend::new();
    let cm = HybridModel::load(fx.config.clone(), &src, &mut cpu, DEFAULT_CHUNK).expect("cpu");
    let (want, want_toks) = run(&mut cpu, &cm, &ids, 12);
    let mut gpu = VulkanBackend::new(dev.clone());
    let gm = HybridModel::load(fx.config.clone(), &src, &mut gpu, DEFAULT_CHUNK).expect("gpu");
    let mut checked = 0;
    for l in &gm.weights.layers {
        if let FfnWeights::Moe(m) = &l.ffn {
            for t in [m.experts.gate, m.experts.up, m.experts.down] {
                assert_eq!(
                    gpu.matrix_dtype(t),
                    Some(WeightType::Q8_0),
                    "expert storage"
                );
                checked += 1;
            }
            let shape = q8_0_shape(m, ids.len());
            assert!(
                MoeExpertsGrouped::<()>::supports(&shape),
                "the grouped kernels take the fixture's experts"
            );
        }
    }
    assert!(checked > 0, "the fixture has MoE layers");
    let (got, got_toks) = run(&mut gpu, &gm, &ids, 12);
    let d = vkllm_cpu::compare::diff(&got, &want);
    assert!(
        d.max_abs <= GPU_VS_CPU_MAX_ABS,
        "moe_grouped_min={grouped_min} moe_lanes={lanes}: logits max abs {} > {GPU_VS_CPU_MAX_ABS}",
        d.max_abs
    );
    assert_eq!(
        got_toks, want_toks,
        "moe_grouped_min={grouped_min} moe_lanes={lanes}: greedy tokens"
    );
}

/// The grouped int8 expert launches (tuning `moe_q8g_min`: each expert's slots a few at a time)
/// against the per-token int8 launches on the same device: the same quantized products summed
/// in another order, so the prompt's logits agree closely and the greedy tokens match, for
/// every slots-per-pass setting (prompt products of 1 to 8 tokens per pass, decode steps of one).
#[test]
fn grouped_int8_experts_match_per_token_int8() {
    let fx = Fixture::load("qwen3_moe").expect("fixture");
    let src = QuantizingSource::new(&fx.weights, &fx.config, QuantScheme::Q8_0);
    let ids = fx.prompt("short").expect("prompt").ids;
    let run_with = |q8g_min: u32, cols: u32| {
        let mut opts = common::options();
        // The int8 matvec (CPU devices such as lavapipe default to the float one).
        opts.tuning.matvec = Some(vkllm_vk::kernels::matvec_fused::MatvecImpl::Int8);
        opts.tuning.moe_grouped_min = 0;
        opts.tuning.moe_q8g_min = q8g_min;
        opts.tuning.moe_q8g_cols = cols;
        let dev = common::open(&opts);
        let mut gpu = VulkanBackend::new(dev.clone());
        let gm = HybridModel::load(fx.config.clone(), &src, &mut gpu, DEFAULT_CHUNK).expect("gpu");
        let shape = gm
            .weights
            .layers
            .iter()
            .find_map(|l| match &l.ffn {
                FfnWeights::Moe(m) => Some(q8_0_shape(m, ids.len())),
                _ => None,
            })
            .expect("the fixture has MoE layers");
        assert!(
            vkllm_vk::moe_q8a_runs(&dev, &shape)
                && MoeExpertsGrouped::<()>::supports_q8a(&shape, cols as usize),
            "the int8 expert launches run on this device and take the fixture's experts"
        );
        run(&mut gpu, &gm, &ids, 12)
    };
    let (want, want_toks) = run_with(0, 4);
    for cols in [1, 3, 4, 8] {
        let (got, got_toks) = run_with(1, cols);
        let d = vkllm_cpu::compare::diff(&got, &want);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(
            d.max_abs <= 1e-4 * f64::from(scale.max(1.0)),
            "moe_q8g_cols={cols}: logits max abs {} (largest logit {scale})",
            d.max_abs
        );
        assert_eq!(got_toks, want_toks, "moe_q8g_cols={cols}: greedy tokens");
    }
}
