//! `vkllm synth`: a random-weight GGUF of a real model's shape, with the names, metadata and
//! quantization layout llama.cpp would write, for benchmarking any engine on the same file.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use vkllm_models::QuantScheme;
use vkllm_models::synth::{self, SynthPlan};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Shapes: qwen3-0.6b, llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, smollm2-135m, qwen3.5-0.8b, \
gemma3-270m (and tiny-qwen3, tiny-llama, tiny-qwen2, tiny-smollm2, tiny-gemma3, tiny-qwen3.5 \
for tests). qwen3.5-0.8b is the hybrid (Gated DeltaNet + gated attention) text model, written \
without its MTP head.\n\n\
Weights are N(0, 0.02) (norm weights 1 + N(0, 0.02)); the vocabulary is synthetic (the real \
token count, made-up tokens). The same seed always gives the same file."
)]
pub struct Args {
    /// Model shape (see below).
    #[arg(long)]
    shape: String,

    /// Weight format, llama.cpp's names: f16, q8_0, q4_0, q4_k_m (also bf16, q4_1, q5_0, q4_k,
    /// q6_k).
    #[arg(long, default_value = "q8_0")]
    quant: String,

    /// Random seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,

    /// Output file.
    #[arg(long, short)]
    output: PathBuf,

    /// Keep only the first N blocks (a slice of the model with its per-layer shapes, for
    /// profiling one layer's kernels without writing the whole file).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    layers: Option<u32>,

    /// How quantized matrices are filled: `exact` draws and quantizes every row; `pool` builds
    /// each row from a seeded pool of 1024 blocks per tensor drawn and quantized the same way
    /// (same layout and per-block values, no per-row quantization: many times faster for
    /// large benchmark files).
    #[arg(long, value_enum, default_value_t = FillArg::Exact)]
    fill: FillArg,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum FillArg {
    Exact,
    Pool,
}

pub fn run(args: Args) -> Result<()> {
    let mut shape = *synth::shape(&args.shape)?;
    if let Some(n) = args.layers {
        shape.layers = n as usize;
    }
    let quant: QuantScheme = args.quant.parse()?;
    let fill = match args.fill {
        FillArg::Exact => synth::Fill::Exact,
        FillArg::Pool => synth::Fill::Pool,
    };
    let plan = SynthPlan::new(&shape, quant, args.seed).with_fill(fill);
    let total = plan.tensor_bytes();
    eprintln!(
        "vkllm synth: {} ({} parameters, {} layers) in {quant} ({fill:?} fill): {} tensors, {:.1} MiB of weights -> {}",
        shape.name,
        plan.n_params(),
        shape.layers,
        plan.tensors.len(),
        total as f64 / (1u64 << 20) as f64,
        args.output.display()
    );
    let t0 = Instant::now();
    let mut last_pct = u64::MAX;
    let mut err = std::io::stderr();
    let n = plan
        .write(&args.output, &mut |done, total| {
            let pct = done * 100 / total.max(1);
            if pct != last_pct {
                last_pct = pct;
                let _ = write!(err, "\r  {pct:3}%");
                let _ = err.flush();
            }
        })
        .with_context(|| format!("writing {}", args.output.display()))?;
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "\r  wrote {n} bytes in {secs:.1} s ({:.0} MiB/s)",
        n as f64 / (1u64 << 20) as f64 / secs.max(1e-9)
    );
    Ok(())
}
