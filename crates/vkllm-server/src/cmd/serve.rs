//! `vkllm serve`: the OpenAI- and Anthropic-compatible HTTP server (see docs/server.md).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use vkllm_engine::{
    InferenceRunner, KV_GROW_ROWS, PREFIX_BLOCK, RunnerConfig, SimpleGenerator, SlotGenerator,
};
use vkllm_models::{AnyModel, Backend, Checkpoint, KvSharing, QuantScheme, VulkanBackend};
use vkllm_tokenizer::{Tokenizer, cache};
use vkllm_vk::Device;

use super::common::KvSharingArg;
use super::model;
use vkllm_server::server::{self, AppState};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: a .gguf file, a safetensors checkpoint directory (config.json, weights,
    /// tokenizer.json) or a fetched model's name (smollm2 (default), gemma3, qwen25coder).
    #[arg(long, short, env = "VKLLM_MODEL")]
    model: Option<String>,

    /// Where to run: a Vulkan device index or name substring, or `cpu` for the reference path.
    #[arg(long, env = "VKLLM_DEVICE")]
    device: Option<String>,

    /// Kernel and launch choices, `key=value,...` (see docs/cli.md, "Tuning"); the developers'
    /// `VKLLM_TUNE` applies on top.
    #[arg(long)]
    tune: Option<String>,

    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,

    /// Port to listen on (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,

    /// Sequences generated at once (each has its own KV cache of --ctx positions).
    #[arg(long, default_value_t = 4)]
    slots: usize,

    /// Context length per sequence (prompt plus generated tokens; at most the model's; 0: the
    /// model's whole context).
    #[arg(long, default_value_t = 2048)]
    ctx: usize,

    /// Device memory (MiB) for conversations kept past their slots: a prompt that starts with a
    /// stored conversation copies its cached rows instead of recomputing them (the batched GPU
    /// decoder; each conversation takes one slot's KV cache, a hybrid's also its recurrent
    /// state; 0: off).
    #[arg(long, default_value_t = 0)]
    prefix_cache_mb: u64,

    /// Hybrid models (the batched GPU decoder): recurrent-state snapshots each slot keeps, at
    /// the end of its prompts and where a prompt leaves a prefix another conversation shares
    /// (each one slot's recurrent state in size; 0: reuse only whole-history continuations).
    #[arg(long, default_value_t = vkllm_engine::DEFAULT_MARKS_PER_SLOT)]
    recurrent_marks: usize,

    /// Hybrid models: a prompt nothing else marks is also marked this many tokens before its
    /// end, so that a resent conversation whose text re-tokenizes the end differently starts
    /// there (0: off; the prompt is prefilled in two pieces, the second this long).
    #[arg(long, default_value_t = vkllm_engine::TAIL_MARK)]
    tail_mark: usize,

    /// Requests that may wait for a free slot; more are answered 429.
    #[arg(long, default_value_t = 64)]
    queue: usize,

    /// Time limit of a request in seconds, queueing included (0: none).
    #[arg(long, default_value_t = 600)]
    timeout: u64,

    /// Chunked prefill: a new prompt is computed at most this many tokens at a time, with a
    /// decode step of the running requests between pieces (0: whole prompts, the running
    /// requests waiting; the CPU backend always prefills whole prompts).
    #[arg(long, default_value_t = vkllm_engine::runner::DEFAULT_PREFILL_CHUNK)]
    prefill_chunk: usize,

    /// Prefill at most one prompt's piece between two decode steps (the reference scheduling);
    /// by default a prompt that ends with some of the `--prefill-chunk` tokens left hands them
    /// to the next queued prompts, so several short prompts start per step.
    #[arg(long)]
    one_prompt_per_step: bool,

    /// Require this key (`Authorization: Bearer KEY` or `x-api-key: KEY`) on every route but
    /// /health.
    #[arg(long, env = "VKLLM_API_KEY", hide_env_values = true)]
    api_key: Option<String>,

    /// Largest request body in bytes; larger ones are answered 413.
    #[arg(long, default_value_t = 4 << 20)]
    max_body_bytes: usize,

    /// Seconds a client has to send a request's headers (also how long an idle keep-alive
    /// connection stays open).
    #[arg(long, default_value_t = 30)]
    header_timeout: u64,

    /// Seconds a client has to send a request's body (408 after).
    #[arg(long, default_value_t = 60)]
    body_timeout: u64,

    /// Open connections at most; more are answered 503 and closed.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,

    /// Answer browsers from other origins: `--cors` allows any origin (no credentials),
    /// `--cors ORIGIN[,ORIGIN...]` those.
    #[arg(long, num_args = 0..=1, default_missing_value = "*")]
    cors: Option<String>,

    /// Without an API key, requests must name this server by an IP address, `localhost` or a
    /// host name given here (repeatable), else 403: pages of other sites cannot reach it by
    /// DNS rebinding.
    #[arg(long = "allowed-host")]
    allowed_host: Vec<String>,

    /// Serve /metrics without the API key (for scrapers that cannot send one).
    #[arg(long)]
    metrics_public: bool,

    /// The model id clients use (repeatable: aliases); default: the model's short name or file
    /// name.
    #[arg(long = "served-model-name")]
    served_model_name: Vec<String>,

    /// Accept any model id in requests (for clients that send their own).
    #[arg(long)]
    any_model: bool,

    /// No log line per request.
    #[arg(long)]
    quiet: bool,

    #[command(flatten)]
    kv: super::common::KvArgs,

    /// Quantize a safetensors checkpoint at load (llama.cpp's names: f16, bf16, q8_0, q4_0,
    /// q4_1, q5_0, q4_k, q6_k, q4_k_m). GGUF files are used as stored.
    #[arg(long)]
    quant: Option<QuantScheme>,

    /// On a Vulkan device, decode each slot on its own (the reference generator) instead of
    /// the batched slot decoder.
    #[arg(long)]
    simple_generator: bool,

    /// Throwaway requests before listening (a long prompt, then four short sampled ones
    /// together), so the pipelines the driver compiles on first use are built at start, not in
    /// the first users' time to first token. `auto`: on GPUs, off on CPU devices (lavapipe and
    /// `--device cpu`, where compiles are quick and the requests slow).
    #[arg(long, value_enum, default_value_t = WarmUp::Auto)]
    warm_up: WarmUp,

    /// How a request gets the KV rows of a prefix another slot holds (dense models): `copy`,
    /// a copy into its slot; `in-place`, the prefix's whole blocks shared (one copy in memory,
    /// read where they are; the rows past the last whole block copied), on the CPU backend and
    /// where the device has sparse, aliased buffers (else `copy`);
    /// `on-demand`, in place and each slot's KV memory bound only as its positions need it
    /// (idle slots give theirs back when it runs out: --kv-memory-mb).
    #[arg(long, value_enum, default_value_t = KvSharingArg::Copy)]
    kv_sharing: KvSharingArg,

    /// With --kv-sharing on-demand: device memory (MiB) the slots' KV blocks may take in all
    /// (0: as much as the device has).
    #[arg(long, default_value_t = 0)]
    kv_memory_mb: u64,
}

/// `--warm-up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum WarmUp {
    Auto,
    On,
    Off,
}

/// The id a model is served under when none is given.
fn default_name(arg: Option<&str>, path: &Path) -> String {
    match arg {
        None => vkllm::fetch::default_model().name.to_string(),
        Some(a) if vkllm::fetch::find(a).is_some() || cache::known(a).is_some() => a.to_string(),
        Some(_) => path
            .file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
    }
}

/// The shortest `--ctx` served: a chat turn's template alone takes tens of tokens.
const MIN_CTX: usize = 16;

/// Refuses `--ctx` below [`MIN_CTX`] and, on the CPU backend, `--slots x --ctx` KV caches (f32)
/// larger than the memory the system has available (`MemAvailable`; the Vulkan backend checks
/// its own heaps when it allocates).
fn admit(args: &Args, cfg: &vkllm_models::ModelConfig, cpu: bool) -> Result<()> {
    if args.ctx != 0 && args.ctx < MIN_CTX {
        anyhow::bail!(
            "--ctx {}: at least {MIN_CTX} positions are needed (0: the model's context)",
            args.ctx
        );
    }
    let ctx = super::common::context_len(args.ctx, cfg.max_position);
    if !cpu {
        return Ok(());
    }
    let ctx = ctx as u128;
    let per_pos = (2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 4) as u128;
    let need = args.slots.max(1) as u128 * ctx * per_pos;
    if let Some(avail) = mem_available()
        && need > avail as u128
    {
        anyhow::bail!(
            "--slots {} x --ctx {ctx}: the KV caches need {:.1} GiB, more than the {:.1} GiB of \
             memory available; use fewer slots or a shorter context",
            args.slots,
            need as f64 / (1u64 << 30) as f64,
            avail as f64 / (1u64 << 30) as f64
        );
    }
    Ok(())
}

/// Bytes of memory the system has available (Linux: `MemAvailable` in /proc/meminfo).
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

fn start_runner<B: Backend + Send + 'static>(
    mut b: B,
    ck: Checkpoint,
    tokenizer: Arc<Tokenizer>,
    args: &Args,
) -> Result<InferenceRunner> {
    admit(args, ck.config(), b.name() == "cpu")?;
    let chunk = b.prefill_chunk();
    let model = AnyModel::load_checkpoint(&ck, args.quant, &mut b, chunk, &mut |_| {})?;
    drop(ck);
    let ctx = super::common::context_len(args.ctx, model.cfg().max_position).max(2);
    let sharing: KvSharing = args.kv_sharing.into();
    let generator = SimpleGenerator::new_sharing(b, model, args.slots.max(1), ctx, sharing)?;
    if args.prefix_cache_mb > 0 {
        eprintln!(
            "vkllm: --prefix-cache-mb applies to the batched GPU decoder; this one keeps \
             prefixes per slot"
        );
    }
    if sharing != KvSharing::Copy {
        match generator.kv_sharing() {
            KvSharing::Copy => eprintln!(
                "vkllm: --kv-sharing: prefixes are copied (a hybrid model, a backend without \
                 paged KV, or blocks longer than the context)"
            ),
            _ => eprintln!("vkllm: KV blocks shared in place between slots"),
        }
    }
    if args.kv_memory_mb > 0 || sharing == KvSharing::OnDemand {
        eprintln!(
            "vkllm: KV memory on demand (--kv-sharing on-demand, --kv-memory-mb) applies to \
             the batched GPU decoder; this one holds every slot's"
        );
    }
    Ok(InferenceRunner::threaded(
        Box::new(generator),
        tokenizer,
        RunnerConfig {
            queue_capacity: args.queue,
            timeout: (args.timeout > 0).then(|| Duration::from_secs(args.timeout)),
            prefill_chunk: args.prefill_chunk,
            pack_prompts: !args.one_prompt_per_step,
            ..RunnerConfig::default()
        },
    ))
}

/// The batched GPU generator: all slots advance together, several steps per submit.
fn start_slot_runner(
    mut b: VulkanBackend,
    ck: Checkpoint,
    tokenizer: Arc<Tokenizer>,
    args: &Args,
) -> Result<InferenceRunner> {
    admit(args, ck.config(), false)?;
    let slots = args.slots.max(1);
    let chunk = b.prefill_chunk();
    let model = AnyModel::load_checkpoint(&ck, args.quant, &mut b, chunk, &mut |_| {})?;
    drop(ck);
    let ctx = super::common::context_len(args.ctx, model.cfg().max_position).max(2);
    let kv = args.kv.types(b.default_kv())?;
    eprintln!("vkllm: KV cache {}", kv.name());
    let generator = match model {
        AnyModel::Dense(m) => {
            let sharing: KvSharing = args.kv_sharing.into();
            let g = SlotGenerator::new_sharing(b, m, slots, ctx, kv, 4, sharing)?;
            if sharing != g.kv_sharing() {
                eprintln!(
                    "vkllm: --kv-sharing: this device has no sparse, aliased buffers (or the \
                     blocks would exceed the context); prefixes are copied"
                );
            } else if sharing != KvSharing::Copy {
                eprintln!(
                    "vkllm: KV blocks of {} positions shared in place{}",
                    g.kv_block(),
                    if sharing == KvSharing::OnDemand {
                        ", memory bound on demand"
                    } else {
                        ""
                    }
                );
            }
            g
        }
        AnyModel::Hybrid(m) => {
            if args.kv_sharing != KvSharingArg::Copy {
                eprintln!(
                    "vkllm: --kv-sharing applies to dense models; this hybrid model copies \
                     (its recurrent marks carry the shared prefixes)"
                );
            }
            let marks = args.recurrent_marks;
            SlotGenerator::new_hybrid_marks(b, m, slots, ctx, kv, 4, marks)?
        }
    };
    let generator = generator
        .with_tail_mark(args.tail_mark)
        .with_prefix_store(args.prefix_cache_mb << 20)?;
    // Last: the budget counts from the pages held now (the store's pool included).
    let budget = (args.kv_memory_mb > 0).then_some(args.kv_memory_mb << 20);
    if budget.is_some() && generator.kv_sharing() != KvSharing::OnDemand {
        eprintln!("vkllm: --kv-memory-mb applies to --kv-sharing on-demand only");
    }
    let generator = generator.with_kv_memory(budget, KV_GROW_ROWS);
    if args.prefix_cache_mb > 0 {
        let rows = generator.prefix_store_rows();
        match generator.prefix_store_entries() {
            _ if rows > 0 => eprintln!(
                "vkllm: prefix store: {rows} positions in blocks of {PREFIX_BLOCK} ({} MiB; {} \
                 conversations of {ctx} positions at least)",
                ((rows / PREFIX_BLOCK) as u64 * generator.prefix_block_bytes()) >> 20,
                generator.prefix_store_entries()
            ),
            0 if generator.prefix_entry_bytes() == 0 => eprintln!(
                "vkllm: --prefix-cache-mb: no room for this hybrid model's marks (no store)"
            ),
            0 => eprintln!(
                "vkllm: --prefix-cache-mb {} holds no conversation (one takes {} MiB)",
                args.prefix_cache_mb,
                generator.prefix_entry_bytes().div_ceil(1 << 20)
            ),
            n => eprintln!(
                "vkllm: prefix store: {n} conversations of {ctx} positions ({} MiB each)",
                generator.prefix_entry_bytes().div_ceil(1 << 20)
            ),
        }
    }
    Ok(InferenceRunner::threaded(
        Box::new(generator),
        tokenizer,
        RunnerConfig {
            queue_capacity: args.queue,
            timeout: (args.timeout > 0).then(|| Duration::from_secs(args.timeout)),
            prefill_chunk: args.prefill_chunk,
            pack_prompts: !args.one_prompt_per_step,
            ..RunnerConfig::default()
        },
    ))
}

pub fn run(args: Args) -> Result<()> {
    let path = model::resolve(args.model.as_deref())?;
    let ck = Checkpoint::open(&path).with_context(|| format!("loading {}", path.display()))?;
    if args.quant.is_some() && matches!(ck, Checkpoint::Gguf(_)) {
        anyhow::bail!("--quant applies to safetensors checkpoints; a GGUF file is used as stored");
    }
    let tokenizer = Arc::new(
        Tokenizer::from_path(&path).with_context(|| format!("tokenizer of {}", path.display()))?,
    );
    let (runner, backend) = if args.device.as_deref() == Some("cpu") {
        eprintln!("vkllm: {} on the CPU reference backend", path.display());
        let b = super::common::cpu_backend(args.tune.as_deref())?;
        let r = start_runner(b, ck, tokenizer.clone(), &args)?;
        (r, "cpu")
    } else {
        let dev = Device::new(&super::common::device_options(
            args.device.as_deref(),
            args.tune.as_deref(),
        )?)
        .context("opening the Vulkan device (use --device cpu for the CPU reference path)")?;
        eprintln!("vkllm: {} on {}", path.display(), dev.info().summary());
        let gpu = dev.info().kind != vkllm_vk::DeviceKind::Cpu;
        let r = if args.simple_generator {
            start_runner(
                VulkanBackend::new(dev.clone()),
                ck,
                tokenizer.clone(),
                &args,
            )?
        } else {
            start_slot_runner(
                VulkanBackend::new(dev.clone()),
                ck,
                tokenizer.clone(),
                &args,
            )?
        };
        if args.warm_up == WarmUp::On || (args.warm_up == WarmUp::Auto && gpu) {
            let (t, built) = (std::time::Instant::now(), dev.pipelines_created());
            let w = vkllm_engine::warm_up(&r.handle(), args.prefill_chunk)
                .context("warm-up requests (--warm-up off skips them)")?;
            eprintln!(
                "vkllm: warm-up: {} requests ({} prompt tokens) in {:.2} s, {} pipelines built",
                w.requests,
                w.prompt_tokens,
                t.elapsed().as_secs_f64(),
                dev.pipelines_created().saturating_sub(built)
            );
        }
        (r, "vulkan")
    };
    if args.device.as_deref() == Some("cpu") && args.warm_up == WarmUp::On {
        eprintln!("vkllm: --warm-up on: the CPU reference backend compiles nothing; skipped");
    }
    let mut names = args.served_model_name.clone();
    if names.is_empty() {
        names.push(default_name(args.model.as_deref(), &path));
    }
    let stats = runner.stats();
    eprintln!(
        "vkllm: serving `{}`: {} slots of {} positions, queue {}",
        names[0], stats.slots, stats.context, args.queue
    );
    let mut state = AppState::new(runner.handle(), tokenizer, names[0].clone());
    state.names = names;
    state.any_model = args.any_model;
    state.fingerprint = format!("fp_vkllm_{}_{backend}", env!("CARGO_PKG_VERSION"));
    state.api_key = args.api_key.clone().filter(|k| !k.is_empty());
    state.metrics_public = args.metrics_public;
    state.allowed_hosts = args.allowed_host.clone();
    state.cors = args.cors.as_ref().map(|c| {
        c.split(',')
            .map(|o| o.trim().to_string())
            .filter(|o| !o.is_empty())
            .collect()
    });
    state.log = !args.quiet;
    let state = Arc::new(state);
    let addr = SocketAddr::new(args.host, args.port);
    // Request preparation (rendering, tokenization) runs on the blocking pool: bounded, so a
    // flood of huge prompts queues instead of spawning a thread each.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(16)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let limits = server::ConnLimits {
        header_timeout: std::time::Duration::from_secs(args.header_timeout.max(1)),
        body_timeout: std::time::Duration::from_secs(args.body_timeout.max(1)),
        max_connections: args.max_connections.max(1),
    };
    rt.block_on(server::serve(state, addr, args.max_body_bytes, limits))
        .with_context(|| format!("serving on {addr}"))?;
    runner.shutdown();
    Ok(())
}
