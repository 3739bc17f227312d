//! A MoE block's shared expert stacked with the routed experts (tuning `moe_shared`, default
//! on): the Vulkan backend routes it as one more expert in every token's last slot, the CPU
//! backend runs it as its own gated MLP (the reference). The Qwen3.5-MoE and Qwen3-Next
//! fixtures' shared experts are twice as wide as the routed ones (not stackable), so here they
//! are cut to the routed width (the first `ff` rows of gate and up, columns of down): a model
//! of its own, run the same way on both backends. Greedy tokens and logits must agree, in f32
//! and with the weights quantized to Q8_0 at load (the stacked blocks), with the stacking
//! checked to have happened, and again with `moe_shared=0` (the shared MLP on the GPU).

mod common;

use vkllm_models::backend::Backend;
use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::hybrid::weights::FfnWeights;
use vkllm_models::parity::{GPU_VS_CPU_MAX_ABS, argmax};
use vkllm_models::weights::{HostTensor, TensorSource};
use vkllm_models::{
    CpuBackend, DEFAULT_CHUNK, Logits, ModelConfig, ModelError, QuantScheme, QuantizingSource,
    VulkanBackend,
};

/// The fixture's tensors with each shared expert cut to `ff` wide.
struct NarrowShared<'a> {
    inner: &'a dyn TensorSource,
    ff: usize,
}

impl TensorSource for NarrowShared<'_> {
    fn tensor_f32(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        let Some(t) = self.inner.tensor_f32(name)? else {
            return Ok(None);
        };
        let ff = self.ff;
        if name.ends_with("shared_expert.gate_proj.weight")
            || name.ends_with("shared_expert.up_proj.weight")
        {
            let cols = t.shape[1];
            return Ok(Some(HostTensor {
                shape: vec![ff, cols],
                data: t.data[..ff * cols].to_vec(),
            }));
        }
        if name.ends_with("shared_expert.down_proj.weight") {
            let (rows, cols) = (t.shape[0], t.shape[1]);
            let data = (0..rows)
                .flat_map(|r| t.data[r * cols..r * cols + ff].to_vec())
                .collect();
            return Ok(Some(HostTensor {
                shape: vec![rows, ff],
                data,
            }));
        }
        Ok(Some(t))
    }
}

fn run<B: Backend>(b: &mut B, m: &HybridModel, ids: &[u32], n_gen: usize) -> (Vec<f32>, Vec<u32>) {
    let st = m.new_state(b, ids.len() + n_gen).expect("state");
    let mut logits = m.forward(b, &st, ids, 0, Logits::All).expect("prefill");
    let vocab = m.cfg.vocab_size;
    let mut toks = vec![argmax(&logits[logits.len() - vocab..])];
    while toks.len() < n_gen {
        let pos = ids.len() + toks.len() - 1;
        let last = *toks.last().expect("non-empty");
        let step = m.forward(b, &st, &[last], pos, Logits::Last).expect("step");
        toks.push(argmax(&step));
        logits.extend(step);
    }
    (logits, toks)
}

fn stacked_layers(m: &HybridModel) -> (usize, usize) {
    let moe: Vec<bool> = m
        .weights
        .layers
        .iter()
        .filter_map(|l| match &l.ffn {
            FfnWeights::Moe(w) => Some(w.shared_stacked),
            FfnWeights::Dense(_) => None,
        })
        .collect();
    (moe.iter().filter(|&&s| s).count(), moe.len())
}

fn check(family: &str, quant: Option<QuantScheme>, stack: bool) {
    let fx = Fixture::load(family).expect("fixture");
    let mut cfg: ModelConfig = fx.config.clone();
    let moe = cfg.moe.as_mut().expect("a MoE fixture");
    let ff = moe.expert_ff;
    assert!(
        moe.shared_ff.is_some_and(|s| s > ff),
        "{family}: a wider shared expert"
    );
    moe.shared_ff = Some(ff);
    let narrow = NarrowShared {
        inner: &fx.weights,
        ff,
    };
    let quantized = quant.map(|q| QuantizingSource::new(&narrow, &cfg, q));
    let src: &dyn TensorSource = match &quantized {
        Some(q) => q,
        None => &narrow,
    };
    let ids = fx.prompt("short").expect("prompt").ids;
    let mut cpu = CpuBackend::new();
    let cm = HybridModel::load(cfg.clone(), src, &mut cpu, DEFAULT_CHUNK).expect("cpu");
    assert_eq!(
        stacked_layers(&cm).0,
        0,
        "the CPU reference keeps the shared MLP"
    );
    let (want, want_toks) = run(&mut cpu, &cm, &ids, 8);

    let mut opts = common::options();
    // The exact decode matvec: this test is about the expert layout, not int8 rounding.
    opts.tuning.matvec = Some(vkllm_vk::kernels::matvec_fused::MatvecImpl::Fast);
    opts.tuning.moe_shared = stack;
    let dev = common::open(&opts);
    let mut gpu = VulkanBackend::new(dev);
    let gm = HybridModel::load(cfg, src, &mut gpu, DEFAULT_CHUNK).expect("gpu");
    let (stacked, total) = stacked_layers(&gm);
    assert!(total > 0, "{family}: MoE layers");
    assert_eq!(
        stacked,
        if stack { total } else { 0 },
        "{family}: stacked layers"
    );
    let (got, got_toks) = run(&mut gpu, &gm, &ids, 8);
    let d = vkllm_cpu::compare::diff(&got, &want);
    let what = format!("{family} {quant:?} moe_shared={stack}");
    assert!(
        d.max_abs <= GPU_VS_CPU_MAX_ABS,
        "{what}: logits max abs {} > {GPU_VS_CPU_MAX_ABS}",
        d.max_abs
    );
    assert_eq!(got_toks, want_toks, "{what}: greedy tokens");
}

#[test]
fn stacked_shared_expert_matches_the_shared_mlp() {
    for family in ["qwen3_5_moe", "qwen3_next"] {
        check(family, None, true);
        check(family, Some(QuantScheme::Q8_0), true);
    }
    check("qwen3_5_moe", None, false);
}
