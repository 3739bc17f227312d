//! `vkllm run "prompt"`: one answer from a model, streamed to stdout. Only the generated text
//! goes to stdout; loading messages and `--stats` go to stderr.

use std::io::Write;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{GenerateParams, Session};
use vkllm_models::gguf::GgufModel;
use vkllm_models::{Backend, CpuBackend, DEFAULT_CHUNK, Model, VulkanBackend};
use vkllm_tokenizer::{EncodeOptions, RenderOptions, Tokenizer};
use vkllm_vk::{Device, DeviceChoice, DeviceOptions, Validation};

use super::model;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The prompt.
    prompt: String,

    /// Model: a .gguf file or a fetched model's name (smollm2 (default), gemma3, qwen25coder).
    #[arg(long, short, env = "VKLLM_MODEL")]
    model: Option<String>,

    /// Feed the prompt as is (no chat template).
    #[arg(long)]
    raw: bool,

    /// System message (chat mode).
    #[arg(long)]
    system: Option<String>,

    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,

    /// Keep the k most likely tokens (0: off).
    #[arg(long, default_value_t = 40)]
    top_k: usize,

    /// Nucleus sampling threshold (1: off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,

    /// Drop tokens below this fraction of the best token's probability (0: off).
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,

    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,

    /// Random seed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,

    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,

    /// Stop string (repeatable); not printed.
    #[arg(long)]
    stop: Vec<String>,

    /// Context length (KV cache positions).
    #[arg(long, default_value_t = 2048)]
    ctx: usize,

    /// Where to run: a Vulkan device index or name substring, or `cpu` for the reference path.
    #[arg(long, env = "VKLLM_DEVICE")]
    device: Option<String>,

    /// Print time to first token and tokens per second to stderr.
    #[arg(long)]
    stats: bool,
}

pub fn run(args: Args) -> Result<()> {
    let path = model::resolve(args.model.as_deref())?;
    let t0 = Instant::now();
    let gguf = GgufModel::open(&path).with_context(|| format!("loading {}", path.display()))?;
    let tokenizer =
        Tokenizer::from_path(&path).with_context(|| format!("tokenizer of {}", path.display()))?;
    if args.device.as_deref() == Some("cpu") {
        eprintln!("vkllm: {} on the CPU reference backend", path.display());
        return generate(CpuBackend::new(), gguf, tokenizer, &args, t0);
    }
    let choice = match args.device.as_deref() {
        Some(d) => DeviceChoice::parse(d),
        None => DeviceChoice::from_env(),
    };
    let dev = Device::new(&DeviceOptions {
        choice,
        validation: Validation::from_env(),
        ..Default::default()
    })
    .context("opening the Vulkan device (use --device cpu for the CPU reference path)")?;
    eprintln!("vkllm: {} on {}", path.display(), dev.info().summary());
    generate(VulkanBackend::new(dev), gguf, tokenizer, &args, t0)
}

fn generate<B: Backend>(
    mut b: B,
    gguf: GgufModel,
    tokenizer: Tokenizer,
    args: &Args,
    t0: Instant,
) -> Result<()> {
    let model = Model::load(gguf.config.clone(), &gguf, &mut b, DEFAULT_CHUNK)?;
    drop(gguf);
    let ids = if args.raw {
        tokenizer.encode(&args.prompt, EncodeOptions::prompt())?
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(serde_json::json!({"role": "system", "content": s}));
        }
        messages.push(serde_json::json!({"role": "user", "content": args.prompt}));
        tokenizer.encode_chat(
            &serde_json::Value::Array(messages),
            &RenderOptions::generation(true),
        )?
    };
    let ctx = args.ctx.min(model.cfg.max_position);
    if ids.len() >= ctx {
        bail!(
            "the prompt has {} tokens; the context is {ctx} (raise --ctx)",
            ids.len()
        );
    }
    let max_tokens = args.max_tokens.min(ctx - ids.len());
    let mut session = Session::new(b, model, tokenizer, ctx)?;
    let load = t0.elapsed();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let params = GenerateParams {
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            repetition_penalty: args.repeat_penalty,
            seed,
            ..SamplingParams::default()
        },
        max_tokens,
        stop: args.stop.clone(),
    };
    let mut out = std::io::stdout().lock();
    let usage = session.generate(&ids, &params, |text| {
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    })?;
    let _ = writeln!(out);
    if args.stats {
        eprintln!(
            "load {:.2} s | prompt {} tokens, time to first token {:.3} s ({:.1} tok/s) | {} tokens at {:.1} tok/s | finish: {:?}",
            load.as_secs_f64(),
            usage.prompt_tokens,
            usage.time_to_first_token.as_secs_f64(),
            usage.prefill_tokens_per_s,
            usage.generated_tokens,
            usage.decode_tokens_per_s,
            usage.finish
        );
    }
    Ok(())
}
