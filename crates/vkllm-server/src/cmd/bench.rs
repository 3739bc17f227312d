//! `vkllm bench`: prefill (ppN), decode (tgN at several batch sizes) and pp+tg speed of a model
//! on a Vulkan device, with metadata, as a markdown table (stdout) and optionally JSON; with
//! `--profile`, one decode step broken down per graph region from GPU timestamps.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use vkllm_engine::bench::{self, BenchOptions, BenchSampling};
use vkllm_models::gguf::GgufModel;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::{Backend, KvType, KvTypes, Model, VulkanBackend};
use vkllm_vk::Device;

use super::common::KvSharingArg;
use super::model;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: a .gguf file (e.g. from `vkllm synth`) or a fetched model's name.
    #[arg(long, short, env = "VKLLM_MODEL")]
    model: Option<String>,

    /// Prompt lengths of the prefill tests, comma separated.
    #[arg(long, default_value = "512", value_delimiter = ',')]
    pp: Vec<usize>,

    /// Tokens generated per sequence in the decode tests (0: none).
    #[arg(long, default_value_t = 128)]
    tg: usize,

    /// Tokens already in the cache before each test, comma-separated (llama-bench's `-d`):
    /// prefill and decode measured at that depth.
    #[arg(long, default_value = "0", value_delimiter = ',')]
    depth: Vec<usize>,

    /// Concurrent sequences of the decode tests, comma separated.
    #[arg(long, default_value = "1", value_delimiter = ',')]
    batch: Vec<usize>,

    /// Timed repetitions per test (after an untimed warm-up of at least 0.3 s; 3 s before the
    /// first test).
    #[arg(long, default_value_t = 3)]
    reps: usize,

    /// Decode steps per submit (the recorded multi-step decode; `vkllm serve` takes 4 for
    /// streaming latency).
    #[arg(long, default_value_t = 16)]
    steps: usize,

    /// KV cache type: f32, f16, q8_0, q4_0 or tq4. Default: f16 (llama-bench's default cache
    /// type, so figures compare with the anchors; hybrid/MoE models: their attention layers').
    #[arg(long)]
    kv_type: Option<String>,

    /// The keys' cache type when it differs from the values' (both quantized). Default: --kv-type.
    #[arg(long)]
    kv_type_k: Option<String>,

    /// The values' cache type. Default: --kv-type.
    #[arg(long)]
    kv_type_v: Option<String>,

    /// `in-place`: dense KV caches are paged (as `serve --kv-sharing in-place`), and in the
    /// decode tests at a depth the sequences after the first take its depth rows in place
    /// (one prefix read by all) instead of prefilling their own; `copy`: contiguous caches.
    #[arg(long, value_enum, default_value_t = KvSharingArg::Copy)]
    kv_sharing: KvSharingArg,

    /// Prefill chunk (tokens per forward); 0: the device's choice (512 with cooperative
    /// matrices, else 128).
    #[arg(long, default_value_t = 0)]
    chunk: usize,

    /// Also profile one prefill chunk and one decode step per graph region (GPU timestamps;
    /// the chunk alone with `--tg 0`; the step with the last
    /// `--sampling` setting and as many live rows as the largest `--batch`).
    #[arg(long)]
    profile: bool,

    /// With --profile: one row per kernel instead of per graph region.
    #[arg(long)]
    profile_by_kernel: bool,

    /// Sampling settings of the decode tests, comma separated, one row each: greedy, default
    /// (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, as `run` and `serve`), pure
    /// (temperature 1, no filter), top-p (temperature 1, top-p 0.9), min-p (0.8, min-p 0.05).
    #[arg(long, default_value = "greedy,default", value_delimiter = ',', value_parser = parse_sampling)]
    sampling: Vec<BenchSampling>,

    /// Write the results (with metadata) as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,

    /// Vulkan device index or name substring.
    #[arg(long, env = "VKLLM_DEVICE")]
    device: Option<String>,

    /// Kernel and launch choices, `key=value,...` (see docs/cli.md, "Tuning"); the developers'
    /// `VKLLM_TUNE` applies on top.
    #[arg(long)]
    tune: Option<String>,
}

fn parse_sampling(s: &str) -> Result<BenchSampling, String> {
    BenchSampling::parse(s)
        .ok_or_else(|| format!("`{s}`: expected greedy, default, pure, top-p or min-p"))
}

/// The commit this binary was built from, when known.
fn commit() -> String {
    if let Some(c) = option_env!("VKLLM_COMMIT") {
        return c.to_string();
    }
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

pub fn run(args: Args) -> Result<()> {
    let kv_arg = args.kv_type.as_deref();
    let parse = |flag: &str, t: &str| {
        KvType::parse(t)
            .with_context(|| format!("{flag} {t}: expected f32, f16, q8_0, q4_0 or tq4"))
    };
    let kv = match kv_arg {
        Some(t) => parse("--kv-type", t)?,
        None => KvType::F16,
    };
    let kv = KvTypes::new(
        match &args.kv_type_k {
            Some(t) => parse("--kv-type-k", t)?,
            None => kv,
        },
        match &args.kv_type_v {
            Some(t) => parse("--kv-type-v", t)?,
            None => kv,
        },
    )
    .map_err(anyhow::Error::msg)?;
    if args.batch.contains(&0) || args.pp.contains(&0) {
        bail!("--batch and --pp values must be > 0");
    }
    let path = model::resolve(args.model.as_deref())?;
    let gguf = GgufModel::open(&path).with_context(|| format!("loading {}", path.display()))?;
    let mut types: BTreeMap<String, u64> = BTreeMap::new();
    for t in gguf.file.tensors() {
        *types.entry(t.ggml_type().name().to_string()).or_default() += t.n_bytes();
    }
    let dev = Device::new(&super::common::device_options(
        args.device.as_deref(),
        args.tune.as_deref(),
    )?)
    .context("opening the Vulkan device")?;
    let tuning = dev.tuning().clone();
    let info = dev.info().clone();
    eprintln!("vkllm bench: {} on {}", path.display(), info.summary());
    let mut b = VulkanBackend::new(dev);
    let chunk = if args.chunk == 0 {
        b.prefill_chunk()
    } else {
        args.chunk
    };
    let chunk = chunk.max(args.batch.iter().copied().max().unwrap_or(1));
    let cfg = gguf.config.clone();
    let hybrid = cfg.family.is_hybrid_or_moe();
    let opts = BenchOptions {
        pp: args.pp.clone(),
        tg: args.tg,
        batches: args.batch.clone(),
        reps: args.reps,
        steps_per_submit: args.steps,
        kv,
        profile: args.profile || args.profile_by_kernel,
        profile_by_kernel: args.profile_by_kernel,
        sampling: args.sampling.clone(),
        depths: args.depth.clone(),
        kv_sharing: args.kv_sharing.into(),
    };
    let report = if hybrid {
        let model = HybridModel::load(cfg.clone(), &gguf, &mut b, chunk)?;
        drop(gguf);
        bench::run_hybrid(&mut b, &model, &opts)?
    } else {
        let model = Model::load(cfg.clone(), &gguf, &mut b, chunk)?;
        drop(gguf);
        bench::run(&mut b, &model, &opts)?
    };
    if opts.kv_sharing != report.kv_sharing {
        eprintln!(
            "vkllm: --kv-sharing in-place: this cache is not paged (no sparse, aliased buffers, \
             a hybrid model, or blocks past the context); prefixes were prefilled"
        );
    }
    let c = &cfg;
    let settings = vkllm_settings(std::env::vars());
    let meta = serde_json::json!({
        "gpu": info.name,
        "driver": info.driver,
        "vulkan": format!("{}.{}.{}", info.api_version.0, info.api_version.1, info.api_version.2),
        "vkllm_commit": commit(),
        "model": path.display().to_string(),
        "family": c.family.name(),
        "layers": c.n_layers,
        "hidden": c.hidden_size,
        "weight_types_bytes": types,
        "kv_type": kv.name(),
        "context": (opts.depths.iter().copied().max().unwrap_or(0)
            + opts.pp.iter().copied().max().unwrap_or(0)
            + opts.tg
            + 1)
            .max(bench::decode_ctx(&opts)),
        "decode_context": bench::decode_ctx(&opts),
        "batches": opts.batches,
        "depths": opts.depths,
        "kv_sharing": format!("{:?}", report.kv_sharing),
        "steps_per_submit": opts.steps_per_submit,
        "prefill_chunk": chunk,
        "reps": opts.reps,
        "sampling": opts.sampling.iter().map(|m| {
            let p = m.params();
            serde_json::json!({"name": m.name(), "temperature": p.temperature,
                "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p})
        }).collect::<Vec<_>>(),
        "env": settings,
        "tuning": tuning.to_string(),
        "tuning_changes": tuning.changes(),
    });
    println!(
        "{} | {} | driver {} | vkllm {} | kv {} | {} steps/submit | reps {} (after >= 0.3 s of warm-up, 3 s before the first test)\n",
        path.file_name().map_or("?".into(), |f| f.to_string_lossy()),
        info.name,
        info.driver,
        meta["vkllm_commit"].as_str().unwrap_or("?"),
        kv.name(),
        opts.steps_per_submit,
        opts.reps
    );
    match tuning.changes().as_str() {
        "" => println!("tuning: defaults\n"),
        c => println!("tuning: {c} (the rest default)\n"),
    }
    if !settings.is_empty() {
        let list: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("settings: {}\n", list.join(" "));
    }
    println!("{}", report.markdown());
    if let Some(p) = &args.json {
        let text = serde_json::to_string_pretty(&report.json(meta))?;
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// The `VKLLM_*` variables among `vars` (the tuning and reference-path switches a result was
/// measured with), by name.
fn vkllm_settings(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.filter(|(k, _)| k.starts_with("VKLLM_") && k != "VKLLM_MODEL")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::vkllm_settings;

    #[test]
    fn settings_keep_only_vkllm_switches_in_name_order() {
        let vars = [
            ("PATH", "/bin"),
            ("VKLLM_RECYCLE", "0"),
            ("VKLLM_MODEL", "m.gguf"),
            ("VKLLM_ATTN_SKIP", "15"),
            ("XVKLLM_X", "1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let s = vkllm_settings(vars.into_iter());
        let got: Vec<(&str, &str)> = s.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, [("VKLLM_ATTN_SKIP", "15"), ("VKLLM_RECYCLE", "0")]);
    }
}
