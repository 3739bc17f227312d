//! The parity report: one row per (subject, tier, dtype), shared by `cargo xtask parity`, the
//! `vkllm parity` subcommand and the tests.
//!
//! Tiers of the ladder (design.md): "cpu vs transformers" (this crate's CPU forward against the
//! fixtures' goldens), "gpu op vs cpu op", "gpu model vs cpu model", quantized rows later.

use vkllm_cpu::compare::{Diff, diff};

use crate::backend::cpu::CpuBackend;
use crate::error::ModelError;
use crate::family::Family;
use crate::fixtures::Fixture;
use crate::forward::{DEFAULT_CHUNK, Logits, Model};

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
}

/// Runs the CPU forward of a fixture's model on one of its prompts and compares with the
/// transformers goldens: logits at every prompt position, then the greedy continuation.
pub fn cpu_vs_transformers(fx: &Fixture, prompt: &str) -> Result<ParityRow, ModelError> {
    let golden = fx.prompt(prompt)?;
    let mut b = CpuBackend::new();
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK)?;
    let n_gen = golden.greedy.len();
    let kv = model.new_kv(&mut b, golden.ids.len() + n_gen)?;
    let logits = model.forward(&mut b, &kv, &golden.ids, 0, Logits::All)?;
    let d = diff(&logits, &golden.logits);

    let vocab = fx.config.vocab_size;
    let mut next = argmax(&logits[logits.len() - vocab..]);
    let mut matched = 0;
    for (step, &want) in golden.greedy.iter().enumerate() {
        if next != want {
            break;
        }
        matched += 1;
        if step + 1 == n_gen {
            break;
        }
        let pos = golden.ids.len() + step;
        next = argmax(&model.forward(&mut b, &kv, &[next], pos, Logits::Last)?);
    }
    let pass = d.within(CPU_VS_HF_MAX_ABS, f64::INFINITY) && matched == n_gen;
    Ok(ParityRow {
        subject: format!("{} ({prompt})", fx.config.family.name()),
        tier: "cpu vs transformers".into(),
        dtype: "f32".into(),
        diff: d,
        greedy: Some((matched, n_gen)),
        max_abs_tol: CPU_VS_HF_MAX_ABS,
        pass,
    })
}

/// Every dense family on both prompts.
pub fn cpu_vs_transformers_all() -> Vec<Result<ParityRow, (String, ModelError)>> {
    let mut rows = Vec::new();
    for family in Family::ALL {
        let fx = match Fixture::load(family.name()) {
            Ok(fx) => fx,
            Err(e) => {
                rows.push(Err((family.name().to_string(), e)));
                continue;
            }
        };
        for prompt in ["short", "long"] {
            rows.push(
                cpu_vs_transformers(&fx, prompt)
                    .map_err(|e| (format!("{} ({prompt})", family.name()), e)),
            );
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
            if r.pass { "pass" } else { "FAIL" }
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
