//! What `run` and `chat` share: the model/device/context flags, the sampling flags, and loading
//! a model into a [`Session`] on the chosen backend (with progress bars on a terminal).

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{
    Decoder, EngineError, GenerateParams, Grammar, GrammarSpec, Grammars, PREFIX_BLOCK, Session,
    SlotSession, Usage,
};
use vkllm_models::{
    AnyModel, Backend, Checkpoint, CpuBackend, KvType, KvTypes, LoadProgress, QuantScheme,
    VulkanBackend,
};
use vkllm_tokenizer::Tokenizer;
use vkllm_vk::{Device, DeviceChoice, DeviceOptions, Tuning, Validation};

use super::model;

/// Which model, where, and how much context.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Model: a .gguf file, or a name fetched into the cache on first use: smollm2-135m
    /// (default), gemma3-270m, qwen2.5-coder-0.5b.
    #[arg(long, short, env = "VKLLM_MODEL")]
    pub model: Option<String>,

    /// Where to run: a Vulkan device index or name substring, or `cpu` for the reference path.
    #[arg(long, env = "VKLLM_DEVICE")]
    pub device: Option<String>,

    /// Kernel and launch choices, `key=value,...` (see docs/cli.md, "Tuning"); the developers'
    /// `VKLLM_TUNE` applies on top.
    #[arg(long)]
    pub tune: Option<String>,

    /// Context length (KV cache positions; at most the model's; 0: the model's whole context).
    #[arg(long, default_value_t = 2048)]
    pub ctx: usize,

    #[command(flatten)]
    pub kv: KvArgs,

    /// Quantize a safetensors checkpoint at load (llama.cpp's names: f16, bf16, q8_0, q4_0,
    /// q4_1, q5_0, q4_k, q6_k, q4_k_m). GGUF files are used as stored.
    #[arg(long)]
    pub quant: Option<QuantScheme>,

    /// How tokens are decoded: `slots` (the recorded multi-step decoder of `serve`, sampling on
    /// the device), `per-token` (one forward per token, sampled on the host), `auto` (slots on
    /// GPUs, per token on CPU Vulkan devices such as lavapipe; docs/cli.md).
    #[arg(long, default_value = "auto", value_parser = parse_decoder)]
    pub decoder: Decoder,

    /// The slots decoder's KV memory (dense models): `copy` (the whole context resident),
    /// `in-place` (paged), `on-demand` (paged, memory bound only for the positions the
    /// conversation reaches: a long --ctx costs nothing until used).
    #[arg(long, value_enum, default_value_t = KvSharingArg::Copy)]
    pub kv_sharing: KvSharingArg,
}

/// `--decoder` values.
fn parse_decoder(s: &str) -> Result<Decoder, String> {
    Decoder::parse(s).ok_or_else(|| format!("`{s}`: expected auto, slots or per-token"))
}

/// The KV cache's element types: `--kv-type`, or `--kv-type-k` / `--kv-type-v` apart.
#[derive(clap::Args, Debug, Clone)]
pub struct KvArgs {
    /// KV cache element type: f32, f16 (half the memory), q8_0 (53% of f16), q4_0 (28%) or tq4
    /// (28%, rotated units; heads a multiple of 64); the quantized types need heads that split
    /// into blocks of 32 (docs/quantization.md: 4-bit keys lose much more than 4-bit values).
    /// Default: f16 on GPUs, f32 on the CPU backend and CPU Vulkan devices (lavapipe).
    #[arg(long, value_parser = parse_kv_type)]
    pub kv_type: Option<KvType>,
    /// The keys' type when it differs from the values' (both quantized; e.g. `--kv-type-k q8_0
    /// --kv-type-v tq4`, 41% of f16). Defaults to --kv-type.
    #[arg(long, value_parser = parse_kv_type)]
    pub kv_type_k: Option<KvType>,
    /// The values' type. Defaults to --kv-type.
    #[arg(long, value_parser = parse_kv_type)]
    pub kv_type_v: Option<KvType>,
}

impl KvArgs {
    /// The keys' and values' types (`default` where --kv-type is not given), if the pair is
    /// one the kernels take.
    pub fn types(&self, default: KvType) -> Result<KvTypes> {
        let kv = self.kv_type.unwrap_or(default);
        let k = self.kv_type_k.unwrap_or(kv);
        let v = self.kv_type_v.unwrap_or(kv);
        KvTypes::new(k, v).map_err(anyhow::Error::msg)
    }
}

/// `--kv-type` values.
pub fn parse_kv_type(s: &str) -> Result<KvType, String> {
    KvType::parse(s).ok_or_else(|| format!("`{s}`: expected f32, f16, q8_0, q4_0 or tq4"))
}

/// How tokens are chosen and when generation stops.
#[derive(Debug, Clone, clap::Args)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,

    /// Keep the k most likely tokens (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,

    /// Nucleus sampling threshold (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,

    /// Drop tokens below this fraction of the best token's probability (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,

    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,

    /// Random seed (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,

    /// Most tokens to generate (per answer).
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,

    /// Stop string (repeatable); not printed.
    #[arg(long)]
    pub stop: Vec<String>,

    /// Structured output: the answer is JSON matching the JSON Schema in this file.
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    pub json_schema: Option<std::path::PathBuf>,

    /// Structured output: the answer matches the grammar in this file (llguidance's Lark
    /// syntax, see docs/server.md).
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<std::path::PathBuf>,
}

impl SamplingArgs {
    /// The generation parameters, with at most `max_tokens` new tokens.
    pub fn params(&self, max_tokens: usize) -> GenerateParams {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        GenerateParams {
            sampling: SamplingParams {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repetition_penalty: self.repeat_penalty,
                seed,
                ..SamplingParams::default()
            },
            max_tokens,
            stop: self.stop.clone(),
            grammar: None,
        }
    }

    /// `--json-schema` / `--grammar` compiled for `engine`'s model.
    pub fn grammar(&self, engine: &dyn Engine) -> Result<Option<Arc<Grammar>>> {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        let spec = match (&self.json_schema, &self.grammar) {
            (Some(p), _) => {
                let schema = serde_json::from_str(&read(p)?)
                    .with_context(|| format!("{} is not JSON", p.display()))?;
                GrammarSpec::JsonSchema(schema)
            }
            (None, Some(p)) => GrammarSpec::Lark(read(p)?),
            (None, None) => return Ok(None),
        };
        let g = Grammars::new(engine.tokenizer(), engine.vocab())?.compile(&spec)?;
        Ok(Some(g))
    }
}

/// A [`Session`] on any backend, as one type the commands can hold.
pub trait Engine {
    fn tokenizer(&self) -> &Tokenizer;
    /// Logits per token.
    fn vocab(&self) -> usize;
    /// Context length in tokens.
    fn context(&self) -> usize;
    /// Tokens whose keys and values are cached.
    fn cached(&self) -> usize;
    fn reset(&mut self);
    fn generate(
        &mut self,
        context: &[u32],
        p: &GenerateParams,
        cancel: &AtomicBool,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Usage, EngineError>;
}

impl<B: Backend> Engine for Session<B> {
    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn vocab(&self) -> usize {
        Session::vocab(self)
    }

    fn context(&self) -> usize {
        Session::context(self)
    }

    fn cached(&self) -> usize {
        self.history().len()
    }

    fn reset(&mut self) {
        Session::reset(self)
    }

    fn generate(
        &mut self,
        context: &[u32],
        p: &GenerateParams,
        cancel: &AtomicBool,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Usage, EngineError> {
        self.generate_with(context, p, cancel, on_text)
    }
}

impl Engine for SlotSession {
    fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn vocab(&self) -> usize {
        SlotSession::vocab(self)
    }

    fn context(&self) -> usize {
        SlotSession::context(self)
    }

    fn cached(&self) -> usize {
        self.history().len()
    }

    fn reset(&mut self) {
        SlotSession::reset(self)
    }

    fn generate(
        &mut self,
        context: &[u32],
        p: &GenerateParams,
        cancel: &AtomicBool,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Usage, EngineError> {
        self.generate_with(context, p, cancel, on_text)
    }
}

/// A loaded model, ready to generate.
pub struct Loaded {
    pub engine: Box<dyn Engine>,
    /// From the start of loading to a ready session.
    pub load_time: Duration,
}

/// Resolves (fetching if needed) and loads the model on the chosen device, with a session of
/// `min(--ctx, the model's context)` positions. Prints `vkllm: PATH on DEVICE` to stderr.
pub fn load(args: &ModelArgs) -> Result<Loaded> {
    load_with_store(args, 0)
}

/// [`load`] with a prefix store of `store_mb` MiB on the batched GPU decoder (`vkllm chat
/// --prefix-cache-mb`): conversations that come back are copied back, not computed again.
pub fn load_with_store(args: &ModelArgs, store_mb: u64) -> Result<Loaded> {
    let path = model::resolve(args.model.as_deref())?;
    let t0 = Instant::now();
    let ck = Checkpoint::open(&path).with_context(|| format!("loading {}", path.display()))?;
    if args.quant.is_some() && matches!(ck, Checkpoint::Gguf(_)) {
        anyhow::bail!("--quant applies to safetensors checkpoints; a GGUF file is used as stored");
    }
    let tokenizer =
        Tokenizer::from_path(&path).with_context(|| format!("tokenizer of {}", path.display()))?;
    let engine: Box<dyn Engine> = if args.device.as_deref() == Some("cpu") {
        if args.decoder == Decoder::Slots {
            anyhow::bail!("--decoder slots needs a Vulkan device (not --device cpu)");
        }
        eprintln!("vkllm: {} on the CPU reference backend", path.display());
        if store_mb > 0 {
            eprintln!(
                "vkllm: --prefix-cache-mb applies to the batched GPU decoder (not --device cpu)"
            );
        }
        let b = cpu_backend(args.tune.as_deref())?;
        Box::new(session(b, ck, tokenizer, args, "loading")?)
    } else {
        let dev = Device::new(&device_options(
            args.device.as_deref(),
            args.tune.as_deref(),
        )?)
        .context("opening the Vulkan device (use --device cpu for the CPU reference path)")?;
        eprintln!("vkllm: {} on {}", path.display(), dev.info().summary());
        let decoder = match args.decoder {
            Decoder::Auto => Decoder::for_device(dev.info().kind),
            d => d,
        };
        let mut b = VulkanBackend::new(dev);
        if decoder == Decoder::Slots {
            let (model, ctx, kv) = load_model(&mut b, ck, args, "uploading")?;
            let sharing = args.kv_sharing.into();
            let s = SlotSession::new_sharing(b, model, tokenizer, ctx, kv, sharing)?
                .with_prefix_store(store_mb << 20)?;
            if store_mb > 0 {
                let (rows, block) = s.prefix_store_rows();
                match s.prefix_store() {
                    _ if rows > 0 => eprintln!(
                        "vkllm: prefix store: {rows} positions in blocks of {PREFIX_BLOCK} ({} MiB)",
                        ((rows / PREFIX_BLOCK) as u64 * block) >> 20
                    ),
                    (0, 0) => eprintln!(
                        "vkllm: --prefix-cache-mb: no room for this hybrid model's marks (no store)"
                    ),
                    (0, each) => eprintln!(
                        "vkllm: --prefix-cache-mb {store_mb} holds no conversation (one takes {} MiB)",
                        each.div_ceil(1 << 20)
                    ),
                    (n, each) => eprintln!(
                        "vkllm: prefix store: {n} conversations of {ctx} positions ({} MiB each)",
                        each.div_ceil(1 << 20)
                    ),
                }
            }
            Box::new(s)
        } else {
            if store_mb > 0 {
                eprintln!(
                    "vkllm: --prefix-cache-mb applies to the batched GPU decoder (--decoder slots)"
                );
            }
            if args.kv_sharing != KvSharingArg::Copy {
                eprintln!(
                    "vkllm: --kv-sharing applies to the batched GPU decoder (--decoder slots)"
                );
            }
            Box::new(session(b, ck, tokenizer, args, "uploading")?)
        }
    };
    Ok(Loaded {
        engine,
        load_time: t0.elapsed(),
    })
}

fn session<B: Backend>(
    mut b: B,
    ck: Checkpoint,
    tokenizer: Tokenizer,
    args: &ModelArgs,
    verb: &str,
) -> Result<Session<B>> {
    let (model, ctx, kv) = load_model(&mut b, ck, args, verb)?;
    Ok(Session::with_kv_type(b, model, tokenizer, ctx, kv)?)
}

/// The model on `b` (with a progress bar), its context (`--ctx`, at most the model's) and KV
/// type (f32 for hybrid and MoE models).
fn load_model<B: Backend>(
    b: &mut B,
    ck: Checkpoint,
    args: &ModelArgs,
    verb: &str,
) -> Result<(AnyModel, usize, KvTypes)> {
    let bar = progress_bar(verb);
    let mut progress = |p: &LoadProgress| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
    };
    let chunk = b.prefill_chunk();
    let model = AnyModel::load_checkpoint(&ck, args.quant, b, chunk, &mut progress);
    bar.finish_and_clear();
    let model = model?;
    drop(ck);
    let ctx = context_len(args.ctx, model.cfg().max_position);
    Ok((model, ctx, args.kv.types(b.default_kv())?))
}

/// The KV positions `--ctx asked` gives a model of `model_max` positions: at most those, and
/// all of them for 0 (as llama.cpp's `-c 0`).
pub fn context_len(asked: usize, model_max: usize) -> usize {
    match asked {
        0 => model_max,
        n => n.min(model_max),
    }
    .max(1)
}

/// A bar on stderr when it is a terminal, hidden otherwise.
fn progress_bar(verb: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(0), target);
    let style = ProgressStyle::with_template(&format!(
        "{verb} weights [{{bar:40}}] {{pos}}/{{len}} tensors ({{elapsed}})"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar
}

/// A command's device options: `--device` (clap reads `VKLLM_DEVICE` too), `VKLLM_VALIDATE`,
/// and the tuning: the defaults, then `--tune`, then the developers' `VKLLM_TUNE`.
/// The CPU reference backend with the `--tune` keys that apply to it (`kv_centre`, `kv_sink`,
/// `kv_rot_v`).
pub fn cpu_backend(tune: Option<&str>) -> Result<CpuBackend> {
    let tuning = device_options(None, tune)?.tuning;
    let mut b = CpuBackend::new();
    b.uncentred_keys = !tuning.kv_centre;
    b.no_sink_offset = !tuning.kv_sink;
    b.plain_values = !tuning.kv_rot_v;
    Ok(b)
}

pub fn device_options(device: Option<&str>, tune: Option<&str>) -> Result<DeviceOptions> {
    let mut tuning = Tuning::default();
    if let Some(t) = tune {
        tuning.apply(t).context("--tune")?;
    }
    if let Ok(t) = std::env::var("VKLLM_TUNE") {
        tuning.apply(&t).context("VKLLM_TUNE")?;
    }
    Ok(DeviceOptions {
        choice: device.map_or(DeviceChoice::Auto, DeviceChoice::parse),
        validation: Validation::from_env(),
        tuning,
        ..Default::default()
    })
}

/// `--kv-sharing` (serve, bench).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KvSharingArg {
    Copy,
    InPlace,
    OnDemand,
}

impl From<KvSharingArg> for vkllm_models::KvSharing {
    fn from(a: KvSharingArg) -> Self {
        match a {
            KvSharingArg::Copy => vkllm_models::KvSharing::Copy,
            KvSharingArg::InPlace => vkllm_models::KvSharing::InPlace,
            KvSharingArg::OnDemand => vkllm_models::KvSharing::OnDemand,
        }
    }
}
