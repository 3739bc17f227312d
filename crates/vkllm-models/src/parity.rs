//! The parity report: one row per (subject, tier, dtype), shared by `cargo xtask parity`, the
//! `vkllm parity` subcommand and the tests.
//!
//! Tiers of the ladder (design.md): "cpu vs transformers" (this crate's CPU forward against the
//! fixtures' goldens), "gpu op vs cpu op", "gpu model vs cpu model", quantized rows later.

use vkllm_cpu::compare::{Diff, diff};

use vkllm_vk::Device;

use crate::backend::Backend;
use crate::backend::cpu::CpuBackend;
use crate::backend::vulkan::VulkanBackend;
use crate::error::ModelError;
use crate::family::Family;
use crate::fixtures::{Fixture, PromptGolden};
use crate::forward::{DEFAULT_CHUNK, Logits, Model};
use crate::hybrid::HybridModel;

/// Tolerance of the "cpu vs transformers" tier: f32 logits, max |diff|.
pub const CPU_VS_HF_MAX_ABS: f64 = 1e-4;

/// One line of the parity table.
#[derive(Clone, Debug)]
pub struct ParityRow {
    /// Family (or kernel) name, with the prompt when there are several.
    pub subject: String,
    pub tier: String,
    pub dtype: String,
    pub diff: Diff,
    /// Greedy tokens that matched, out of how many (model tiers only).
    pub greedy: Option<(usize, usize)>,
    /// The bound `diff.max_abs` was held to.
    pub max_abs_tol: f64,
    pub pass: bool,
    /// Why the row could not be computed on this device (e.g. a kernel variant the device lacks):
    /// neither passed nor failed, counted apart.
    pub not_applicable: Option<String>,
}

impl ParityRow {
    /// Computed and out of tolerance (not-applicable rows are not failures).
    pub fn failed(&self) -> bool {
        !self.pass && self.not_applicable.is_none()
    }
}

/// Tolerance of the "gpu model vs cpu model" tier (f32 weights and activations; the kernels sum
/// in a different order than the CPU's f64-accumulated dots).
pub const GPU_VS_CPU_MAX_ABS: f64 = 2e-4;

/// Logits at every prompt position and the greedy continuation (as long as the golden's), from
/// one backend: prefill of the whole prompt (in chunks), then one token at a time.
pub fn run_prompt<B: Backend>(
    b: &mut B,
    fx: &Fixture,
    golden: &PromptGolden,
) -> Result<(Vec<f32>, Vec<u32>), ModelError> {
    run_ids(b, fx, &golden.ids, golden.greedy.len())
}

/// Logits at every position of `ids`, then `n_gen` greedy tokens, on one backend.
pub fn run_ids<B: Backend>(
    b: &mut B,
    fx: &Fixture,
    ids: &[u32],
    n_gen: usize,
) -> Result<(Vec<f32>, Vec<u32>), ModelError> {
    if fx.config.family.is_hybrid_or_moe() {
        return run_ids_hybrid(b, fx, ids, n_gen);
    }
    let model = Model::load(fx.config.clone(), &fx.weights, b, DEFAULT_CHUNK)?;
    let kv = model.new_kv(b, ids.len() + n_gen)?;
    let logits = model.forward(b, &kv, ids, 0, Logits::All)?;
    let vocab = fx.config.vocab_size;
    let mut tokens = vec![argmax(&logits[logits.len() - vocab..])];
    while tokens.len() < n_gen {
        let pos = ids.len() + tokens.len() - 1;
        let last = *tokens.last().expect("non-empty");
        tokens.push(argmax(&model.forward(
            b,
            &kv,
            &[last],
            pos,
            Logits::Last,
        )?));
    }
    Ok((logits, tokens))
}

/// [`run_ids`] for the hybrid and MoE families ([`HybridModel`]).
pub fn run_ids_hybrid<B: Backend>(
    b: &mut B,
    fx: &Fixture,
    ids: &[u32],
    n_gen: usize,
) -> Result<(Vec<f32>, Vec<u32>), ModelError> {
    let model = HybridModel::load(fx.config.clone(), &fx.weights, b, DEFAULT_CHUNK)?;
    let st = model.new_state(b, ids.len() + n_gen)?;
    let logits = model.forward(b, &st, ids, 0, Logits::All)?;
    let vocab = fx.config.vocab_size;
    let mut tokens = vec![argmax(&logits[logits.len() - vocab..])];
    while tokens.len() < n_gen {
        let pos = ids.len() + tokens.len() - 1;
        let last = *tokens.last().expect("non-empty");
        tokens.push(argmax(&model.forward(
            b,
            &st,
            &[last],
            pos,
            Logits::Last,
        )?));
    }
    Ok((logits, tokens))
}

fn matched(got: &[u32], want: &[u32]) -> usize {
    got.iter().zip(want).take_while(|(a, b)| a == b).count()
}

/// Runs the CPU forward of a fixture's model on one of its prompts and compares with the
/// transformers goldens: logits at every prompt position, then the greedy continuation.
pub fn cpu_vs_transformers(fx: &Fixture, prompt: &str) -> Result<ParityRow, ModelError> {
    let golden = fx.prompt(prompt)?;
    let (logits, tokens) = run_prompt(&mut CpuBackend::new(), fx, &golden)?;
    let d = diff(&logits, &golden.logits);
    let m = matched(&tokens, &golden.greedy);
    let n = golden.greedy.len();
    Ok(ParityRow {
        subject: format!("{} ({prompt})", fx.config.family.name()),
        tier: "cpu vs transformers".into(),
        dtype: "f32".into(),
        diff: d,
        greedy: Some((m, n)),
        max_abs_tol: CPU_VS_HF_MAX_ABS,
        pass: d.within(CPU_VS_HF_MAX_ABS, f64::INFINITY) && m == n,
        not_applicable: None,
    })
}

/// The Vulkan forward against the CPU forward on a fixture prompt: logits at every prompt
/// position within `GPU_VS_CPU_MAX_ABS`, greedy tokens identical to the CPU's and to the
/// transformers goldens.
pub fn gpu_vs_cpu(dev: &Device, fx: &Fixture, prompt: &str) -> Result<ParityRow, ModelError> {
    gpu_vs_cpu_with(dev, fx, prompt, |b| b)
}

/// [`gpu_vs_cpu`] with the Vulkan backend configured by `setup` (e.g. a non-default kernel
/// choice such as [`VulkanBackend::with_folded_attention`]).
pub fn gpu_vs_cpu_with(
    dev: &Device,
    fx: &Fixture,
    prompt: &str,
    setup: impl FnOnce(VulkanBackend) -> VulkanBackend,
) -> Result<ParityRow, ModelError> {
    let golden = fx.prompt(prompt)?;
    let (cpu_logits, cpu_tokens) = run_prompt(&mut CpuBackend::new(), fx, &golden)?;
    let mut gpu = setup(VulkanBackend::new(dev.clone()));
    let (gpu_logits, gpu_tokens) = run_prompt(&mut gpu, fx, &golden)?;
    let d = diff(&gpu_logits, &cpu_logits);
    let m = matched(&gpu_tokens, &cpu_tokens).min(matched(&gpu_tokens, &golden.greedy));
    let n = golden.greedy.len();
    Ok(ParityRow {
        subject: format!("{} ({prompt})", fx.config.family.name()),
        tier: "gpu model vs cpu model".into(),
        dtype: "f32".into(),
        diff: d,
        greedy: Some((m, n)),
        max_abs_tol: GPU_VS_CPU_MAX_ABS,
        pass: d.within(GPU_VS_CPU_MAX_ABS, f64::INFINITY) && m == n,
        not_applicable: None,
    })
}

pub use vkllm_parity::seed_from_env;

/// The kernel suite of `vkllm-vk` (tier "gpu op vs cpu op") as rows of this table.
pub fn gpu_kernels(dev: &Device, seed: u64) -> Result<Vec<ParityRow>, ModelError> {
    Ok(vkllm_parity::run_kernel_parity(dev, seed)?
        .into_iter()
        .map(|k| ParityRow {
            subject: format!("{} {} [{}]", k.kernel, k.variant, k.shape),
            tier: "gpu op vs cpu op".into(),
            dtype: "f32".into(),
            diff: k.diff,
            greedy: None,
            max_abs_tol: k.tol_max_abs,
            pass: k.pass,
            not_applicable: k.not_applicable,
        })
        .collect())
}

/// A parity row, or why it could not be computed.
pub type RowResult = Result<ParityRow, (String, ModelError)>;

/// Every family (dense, then hybrid and MoE) on both prompts, through `check` (one of the model
/// tiers above).
pub fn all_families(
    mut check: impl FnMut(&Fixture, &str) -> Result<ParityRow, ModelError>,
) -> Vec<RowResult> {
    let mut rows = Vec::new();
    for family in Family::ALL.into_iter().chain(Family::HYBRID_MOE) {
        let fx = match Fixture::load(family.name()) {
            Ok(fx) => fx,
            Err(e) => {
                rows.push(Err((family.name().to_string(), e)));
                continue;
            }
        };
        for prompt in ["short", "long"] {
            rows.push(check(&fx, prompt).map_err(|e| (format!("{} ({prompt})", family.name()), e)));
        }
    }
    rows
}

/// Index of the largest value; ties go to the lowest index (as torch.argmax on CPU does).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// The rows as a markdown table.
pub fn render_table(rows: &[ParityRow]) -> String {
    let mut s = String::from(
        "| subject | tier | dtype | max abs | max rel | nmse | greedy | tol (abs) | result |\n\
         | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    for r in rows {
        let greedy = r
            .greedy
            .map_or("-".to_string(), |(m, n)| format!("{m}/{n}"));
        s.push_str(&format!(
            "| {} | {} | {} | {:.3e} | {:.3e} | {:.3e} | {} | {:.0e} | {} |\n",
            r.subject,
            r.tier,
            r.dtype,
            r.diff.max_abs,
            r.diff.max_rel,
            r.diff.nmse,
            greedy,
            r.max_abs_tol,
            match (&r.not_applicable, r.pass) {
                (Some(why), _) => format!("n/a: {why}"),
                (None, true) => "pass".into(),
                (None, false) => "FAIL".into(),
            }
        ));
    }
    s
}

/// The rows as a JSON array (for machines).
pub fn render_json(rows: &[ParityRow]) -> String {
    let v: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "subject": r.subject,
                "tier": r.tier,
                "dtype": r.dtype,
                "max_abs": finite_or_null(r.diff.max_abs),
                "max_rel": finite_or_null(r.diff.max_rel),
                "nmse": finite_or_null(r.diff.nmse),
                "non_finite": r.diff.non_finite,
                "greedy_matched": r.greedy.map(|g| g.0),
                "greedy_total": r.greedy.map(|g| g.1),
                "max_abs_tol": r.max_abs_tol,
                "pass": r.pass,
                "not_applicable": r.not_applicable,
            })
        })
        .collect();
    serde_json::to_string_pretty(&v).unwrap_or_else(|_| "[]".into())
}

fn finite_or_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::json!(x)
    } else {
        serde_json::Value::Null
    }
}

/// The whole ladder as one report: every row that could be computed, and every failure to
/// compute one (a missing fixture, no Vulkan device, ...) as a message. Used by
/// `cargo xtask parity` and `vkllm parity`.
pub fn full_report() -> (Vec<ParityRow>, Vec<String>) {
    full_report_seeded(vkllm_parity::seed_from_env())
}

/// [`full_report`] with the kernel tier's random inputs drawn from `seed` (print it: a failing
/// row is reproduced with `VKLLM_SEED=seed`).
pub fn full_report_seeded(seed: u64) -> (Vec<ParityRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    let mut take = |rs: Vec<RowResult>| {
        for r in rs {
            match r {
                Ok(row) => rows.push(row),
                Err((subject, e)) => errors.push(format!("{subject}: {e}")),
            }
        }
    };
    take(all_families(cpu_vs_transformers));
    match Device::from_env() {
        Ok(dev) => {
            match gpu_kernels(&dev, seed) {
                Ok(k) => take(k.into_iter().map(Ok).collect()),
                Err(e) => take(vec![Err((format!("gpu kernels (seed {seed})"), e))]),
            }
            // The model tier compares f32 forwards tightly: prefill on the portable f32
            // matmuls (cooperative matrices round activations to f16; their kernel is a row
            // of the kernel tier above).
            let f32_dev = if dev.coopmat() {
                vkllm_vk::DeviceOptions::from_env().and_then(|o| {
                    Device::new(&vkllm_vk::DeviceOptions {
                        tuning: vkllm_vk::Tuning {
                            coopmat: false,
                            ..o.tuning.clone()
                        },
                        ..o
                    })
                })
            } else {
                Ok(dev.clone())
            };
            match f32_dev {
                Ok(d) => take(all_families(|fx, p| gpu_vs_cpu(&d, fx, p))),
                Err(e) => errors.push(format!("gpu model tier: {e}")),
            }
        }
        Err(e) => errors.push(format!("gpu tiers: no Vulkan device: {e}")),
    }
    (rows, errors)
}
