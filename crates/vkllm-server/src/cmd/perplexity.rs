//! `vkllm perplexity`: perplexity of a model over a text file, by llama.cpp's method (chunks of
//! `--ctx` tokens, the second half of each scored; see `vkllm_models::perplexity`).

use std::io::Write;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use vkllm_models::perplexity::{divergence_kv, perplexity_kv};
use vkllm_models::{AnyModel, Backend, Checkpoint, QuantScheme, VulkanBackend};
use vkllm_tokenizer::{EncodeOptions, Tokenizer};
use vkllm_vk::{Device, DeviceOptions};

use super::model;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: a .gguf file, a safetensors checkpoint directory, or a fetched model's name.
    #[arg(long, short, env = "VKLLM_MODEL")]
    model: Option<String>,

    /// The text to score.
    #[arg(long, short)]
    file: std::path::PathBuf,

    /// Tokens per chunk (the second half of each chunk is scored).
    #[arg(long, default_value_t = 512)]
    ctx: usize,

    /// Where to run: a Vulkan device index or name substring, or `cpu` for the reference path.
    #[arg(long, env = "VKLLM_DEVICE")]
    device: Option<String>,

    /// Kernel and launch choices, `key=value,...` (see docs/cli.md, "Tuning"); the developers'
    /// `VKLLM_TUNE` applies on top.
    #[arg(long)]
    tune: Option<String>,

    /// Quantize the weights at load (f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_k, q6_k, q4_k_m).
    #[arg(long)]
    quant: Option<String>,

    /// Token ids are the text's bytes, no tokenizer (the 256-token test fixtures).
    #[arg(long)]
    byte_tokens: bool,

    #[command(flatten)]
    kv: super::common::KvArgs,

    /// Also run every chunk with the KV cache stored as this type (e.g. `f16`) and report how
    /// far the `--kv-type` distributions are from it: mean KL divergence per token and how
    /// often both pick the same top token (far steadier than the difference of the two
    /// perplexities).
    #[arg(long, value_parser = super::common::parse_kv_type)]
    kl_against: Option<vkllm_models::KvType>,
}

pub fn run(args: Args) -> Result<()> {
    let path = model::resolve(args.model.as_deref())?;
    let quant: Option<QuantScheme> = args.quant.as_deref().map(str::parse).transpose()?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let ck = Checkpoint::open(&path).with_context(|| format!("loading {}", path.display()))?;
    let (tokens, bos) = if args.byte_tokens {
        (text.bytes().map(u32::from).collect::<Vec<_>>(), None)
    } else {
        let tok = Tokenizer::from_path(&path)
            .with_context(|| format!("tokenizer of {}", path.display()))?;
        // llama.cpp's common_tokenize(text, add_special = true, parse_special = false).
        let opts = EncodeOptions {
            add_special_tokens: true,
            parse_special: false,
        };
        let ids = tok.encode(&text, opts)?;
        let bos = tok.special_ids().bos.filter(|b| ids.first() == Some(b));
        (ids, bos)
    };
    if tokens.len() < args.ctx {
        bail!(
            "{} tokenizes to {} tokens, fewer than one chunk of --ctx {}",
            args.file.display(),
            tokens.len(),
            args.ctx
        );
    }
    if args.device.as_deref() == Some("cpu") {
        eprintln!("vkllm: {} on the CPU reference backend", path.display());
        let b = super::common::cpu_backend(args.tune.as_deref())?;
        return score(b, &ck, quant, &tokens, bos, &args);
    }
    let dev = Device::new(&DeviceOptions {
        // Batch work: a software device on a busy machine may take minutes per forward.
        fence_timeout: std::time::Duration::from_secs(3600),
        ..super::common::device_options(args.device.as_deref(), args.tune.as_deref())?
    })
    .context("opening the Vulkan device (use --device cpu for the CPU reference path)")?;
    eprintln!("vkllm: {} on {}", path.display(), dev.info().summary());
    score(VulkanBackend::new(dev), &ck, quant, &tokens, bos, &args)
}

fn score<B: Backend>(
    mut b: B,
    ck: &Checkpoint,
    quant: Option<QuantScheme>,
    tokens: &[u32],
    bos: Option<u32>,
    args: &Args,
) -> Result<()> {
    let t0 = Instant::now();
    let chunk = b.prefill_chunk();
    let model = AnyModel::load_checkpoint(ck, quant, &mut b, chunk, &mut |_| {})?;
    let ctx = args.ctx.min(model.cfg().max_position);
    eprintln!(
        "loaded in {:.1} s; {} tokens, {} chunks of {ctx}",
        t0.elapsed().as_secs_f64(),
        tokens.len(),
        tokens.len() / ctx
    );
    let t1 = Instant::now();
    let mut err = std::io::stderr();
    let mut progress = |i: usize, _: usize, ppl: f64| {
        let _ = write!(err, "[{}]{ppl:.4},", i + 1);
        let _ = err.flush();
    };
    let line = |r: &vkllm_models::perplexity::Perplexity| {
        format!(
            "PPL = {:.4} +/- {:.5} ({} tokens scored in {} chunks of {ctx}; mean NLL {:.5} nats",
            r.ppl, r.stderr, r.count, r.chunks, r.mean_nll
        )
    };
    let types = args.kv.types(b.default_kv())?;
    if let Some(reference) = args.kl_against {
        let d = divergence_kv(
            &model,
            &mut b,
            tokens,
            ctx,
            bos,
            types,
            reference.into(),
            &mut progress,
        )?;
        eprintln!();
        println!("{}; {:.1} s)", line(&d.test), t1.elapsed().as_secs_f64());
        println!(
            "reference ({}) {}); PPL ratio {:+.3}%",
            reference.name(),
            line(&d.reference),
            (d.test.ppl / d.reference.ppl - 1.0) * 100.0
        );
        println!(
            "KLD = {:.6} +/- {:.6} nats per token; same top token {:.2}%",
            d.mean_kl,
            d.kl_stderr,
            d.same_top * 100.0
        );
        return Ok(());
    }
    let r = perplexity_kv(&model, &mut b, tokens, ctx, bos, types, &mut progress)?;
    eprintln!();
    println!("{}; {:.1} s)", line(&r), t1.elapsed().as_secs_f64());
    Ok(())
}
