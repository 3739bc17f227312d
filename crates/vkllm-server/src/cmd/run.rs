//! `vkllm run "prompt"`: one answer from a model, streamed to stdout. Only the generated text
//! goes to stdout; loading messages and `--stats` go to stderr.

use std::io::Write;
use std::sync::atomic::AtomicBool;

use anyhow::{Result, bail};
use vkllm_tokenizer::{EncodeOptions, RenderOptions};

use super::common::{self, ModelArgs, SamplingArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The prompt.
    prompt: String,

    #[command(flatten)]
    model: ModelArgs,

    #[command(flatten)]
    sampling: SamplingArgs,

    /// Feed the prompt as is (no chat template).
    #[arg(long)]
    raw: bool,

    /// System message (chat mode).
    #[arg(long)]
    system: Option<String>,

    /// Print time to first token and tokens per second to stderr.
    #[arg(long)]
    stats: bool,
}

pub fn run(args: Args) -> Result<()> {
    let common::Loaded {
        mut engine,
        load_time,
        ..
    } = common::load(&args.model)?;
    let tokenizer = engine.tokenizer();
    let ids = if args.raw {
        tokenizer.encode(&args.prompt, EncodeOptions::text())?
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
    let ctx = engine.context();
    if ids.len() >= ctx {
        bail!(
            "the prompt has {} tokens; the context is {ctx} (raise --ctx)",
            ids.len()
        );
    }
    let mut params = args
        .sampling
        .params(args.sampling.max_tokens.min(ctx - ids.len()));
    params.grammar = args.sampling.grammar(engine.as_ref())?;
    let mut out = std::io::stdout().lock();
    let usage = engine.generate(&ids, &params, &AtomicBool::new(false), &mut |text| {
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    })?;
    let _ = writeln!(out);
    if args.stats {
        eprintln!(
            "load {:.2} s | prompt {} tokens, time to first token {:.3} s ({:.1} tok/s) | {} tokens at {:.1} tok/s | finish: {:?}",
            load_time.as_secs_f64(),
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
