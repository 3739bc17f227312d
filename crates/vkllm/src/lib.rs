//! # vkllm — the facade: LLM inference on Vulkan compute in a few lines
//!
//! Opens a model (a GGUF file, a Hugging Face checkpoint directory, or a model name such as
//! `smollm2-135m`, fetched into vkllm's cache on first use: [`fetch`]), picks a device (the best Vulkan GPU, or the CPU reference
//! backend), and generates: raw text continuations, chats through the model's own template,
//! streamed piece by piece, with sampling settings and structured outputs. The layers below
//! are re-exported for everything else ([`engine`], [`models`], [`tokenizer`], [`vk`], [`cpu`]).
//!
//! ```no_run
//! use vkllm::{Llm, Message, Options, Params};
//!
//! fn main() -> Result<(), vkllm::Error> {
//!     let mut llm = Llm::open("smollm2", &Options::default())?;
//!     let answer = llm.chat(
//!         &[Message::user("What is the capital of France?")],
//!         &Params::default(),
//!         |piece| print!("{piece}"),
//!     )?;
//!     println!("\n({} tokens)", answer.usage.generated_tokens);
//!     Ok(())
//! }
//! ```

pub mod fetch;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub use vkllm_cpu as cpu;
pub use vkllm_engine as engine;
pub use vkllm_models as models;
pub use vkllm_tokenizer as tokenizer;
pub use vkllm_vk as vk;

pub use vkllm_cpu::SamplingParams;
pub use vkllm_engine::{FinishReason, GrammarSpec, Usage};

use vkllm_engine::{Decoder, EngineError, GenerateParams, Grammars, Session, SlotSession};
use vkllm_models::{AnyModel, Backend, Checkpoint, CpuBackend, KvType, ModelError, VulkanBackend};
use vkllm_tokenizer::{EncodeOptions, RenderOptions, Tokenizer, TokenizerError};
use vkllm_vk::{Device, DeviceChoice, DeviceOptions};

/// What can go wrong, by layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("model `{name}`: {why}")]
    NotFound { name: String, why: String },
    #[error(transparent)]
    Fetch(#[from] fetch::FetchError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("the Vulkan device: {0} (Device::Cpu runs the CPU reference backend)")]
    Vulkan(#[from] vkllm_vk::Error),
    #[error("the prompt has {prompt} tokens; the context is {ctx}")]
    PromptTooLong { prompt: usize, ctx: usize },
}

/// Where the model runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Where {
    /// The best Vulkan device (discrete > integrated > virtual > CPU driver).
    #[default]
    Gpu,
    /// A Vulkan device by enumeration index.
    GpuIndex(usize),
    /// The CPU reference backend (no Vulkan needed).
    Cpu,
}

/// How a model is opened.
#[derive(Clone, Debug)]
pub struct Options {
    pub device: Where,
    /// Context positions (capped by the model's own).
    pub ctx: usize,
    /// KV cache element type (for hybrid and MoE models, of their attention layers).
    pub kv: KvType,
    /// The Python whose pip fetches a named model missing from the cache (`python3`).
    pub python: OsString,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            device: Where::Gpu,
            ctx: 4096,
            kv: KvType::F16,
            python: "python3".into(),
        }
    }
}

/// How to generate: sampling, the token limit, stop strings, an optional structured output.
#[derive(Clone, Debug)]
pub struct Params {
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// The output must match this (JSON mode, a JSON Schema, a Lark grammar, a regex).
    pub format: Option<GrammarSpec>,
}

impl Default for Params {
    /// vkllm's chat defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, 256 tokens.
    fn default() -> Self {
        Params {
            sampling: SamplingParams {
                temperature: 0.8,
                top_k: 40,
                top_p: 0.95,
                min_p: 0.05,
                ..SamplingParams::default()
            },
            max_tokens: 256,
            stop: Vec::new(),
            format: None,
        }
    }
}

impl Params {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        Params {
            sampling: SamplingParams::default(),
            max_tokens,
            ..Params::default()
        }
    }
}

/// A chat message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Message {
            role: "system".into(),
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Message {
            role: "user".into(),
            content: content.into(),
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Message {
            role: "assistant".into(),
            content: content.into(),
        }
    }
}

/// A finished generation: its text and usage (token counts, timings, why it ended).
#[derive(Clone, Debug)]
pub struct Answer {
    pub text: String,
    pub usage: Usage,
}

/// The session behind an [`Llm`]: per-token on the CPU (and on CPU Vulkan drivers), the
/// recorded multi-step decoder on GPUs.
enum Inner {
    Cpu(Box<Session<CpuBackend>>),
    PerToken(Box<Session<VulkanBackend>>),
    Slots(Box<SlotSession>),
}

/// A model on a device with its tokenizer and a session (the KV cache keeps the longest
/// common prefix between calls).
pub struct Llm {
    inner: Inner,
    path: PathBuf,
    grammars: Option<Arc<Grammars>>,
}

/// `name` as a path, a model vkllm fetches by name ([`fetch::MODELS`]: fetched into the cache
/// with `python`'s pip on first use), or a tokenizer-only cache entry.
pub fn resolve(name: &str, python: &std::ffi::OsStr) -> Result<PathBuf, Error> {
    let p = PathBuf::from(name);
    if p.exists() {
        return Ok(p);
    }
    if let Some(m) = fetch::find(name) {
        let dir = vkllm_tokenizer::cache::cache_dir();
        return Ok(fetch::fetch(m, &dir, python, false)?);
    }
    match vkllm_tokenizer::cache::known(name) {
        Some((_, path)) if path.exists() => Ok(path),
        Some((known, path)) => Err(Error::NotFound {
            name: name.into(),
            why: vkllm_tokenizer::cache::missing_message(&known, &path),
        }),
        None => Err(Error::NotFound {
            name: name.into(),
            why: "no such file, and not a model name vkllm knows".into(),
        }),
    }
}

impl Llm {
    /// Opens `model` (a path, or a model name: `smollm2-135m`, `gemma3-270m`,
    /// `qwen2.5-coder-0.5b`, fetched on first use) as `opts` say.
    pub fn open(model: impl AsRef<str>, opts: &Options) -> Result<Llm, Error> {
        let path = resolve(model.as_ref(), &opts.python)?;
        let ck = Checkpoint::open(&path)?;
        let tok = Tokenizer::from_path(&path)?;
        let inner = match opts.device {
            Where::Cpu => Inner::Cpu(Box::new(session(CpuBackend::new(), &ck, tok, opts)?)),
            ref w => {
                let choice = match w {
                    Where::GpuIndex(i) => DeviceChoice::Index(*i),
                    _ => DeviceChoice::Auto,
                };
                let dev = Device::new(&DeviceOptions {
                    choice,
                    ..DeviceOptions::default()
                })?;
                let kind = dev.info().kind;
                let mut b = VulkanBackend::new(dev);
                match Decoder::for_device(kind) {
                    Decoder::Slots => {
                        let (model, ctx, kv) = load(&mut b, &ck, opts)?;
                        Inner::Slots(Box::new(SlotSession::new(b, model, tok, ctx, kv)?))
                    }
                    _ => Inner::PerToken(Box::new(session(b, &ck, tok, opts)?)),
                }
            }
        };
        Ok(Llm {
            inner,
            path,
            grammars: None,
        })
    }

    /// The file or directory the model came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        match &self.inner {
            Inner::Cpu(s) => &s.tokenizer,
            Inner::PerToken(s) => &s.tokenizer,
            Inner::Slots(s) => &s.tokenizer,
        }
    }

    /// Context positions.
    pub fn context(&self) -> usize {
        match &self.inner {
            Inner::Cpu(s) => s.context(),
            Inner::PerToken(s) => s.context(),
            Inner::Slots(s) => s.context(),
        }
    }

    fn vocab(&self) -> usize {
        match &self.inner {
            Inner::Cpu(s) => s.vocab(),
            Inner::PerToken(s) => s.vocab(),
            Inner::Slots(s) => s.vocab(),
        }
    }

    /// Continues `prompt` as plain text (BOS where the model's tokenizer asks for one), calling
    /// `on_text` with each new piece.
    pub fn generate(
        &mut self,
        prompt: &str,
        p: &Params,
        on_text: impl FnMut(&str),
    ) -> Result<Answer, Error> {
        let ids = self.tokenizer().encode(prompt, EncodeOptions::text())?;
        self.run(&ids, p, on_text)
    }

    /// Answers `messages` through the model's chat template.
    pub fn chat(
        &mut self,
        messages: &[Message],
        p: &Params,
        on_text: impl FnMut(&str),
    ) -> Result<Answer, Error> {
        let msgs: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
            .collect();
        let ids = self.tokenizer().encode_chat(
            &serde_json::Value::Array(msgs),
            &RenderOptions::generation(true),
        )?;
        self.run(&ids, p, on_text)
    }

    fn run(
        &mut self,
        ids: &[u32],
        p: &Params,
        mut on_text: impl FnMut(&str),
    ) -> Result<Answer, Error> {
        let ctx = self.context();
        if ids.len() >= ctx {
            return Err(Error::PromptTooLong {
                prompt: ids.len(),
                ctx,
            });
        }
        let grammar = match &p.format {
            None => None,
            Some(spec) => {
                let g = match &self.grammars {
                    Some(g) => g.clone(),
                    None => {
                        let g = Arc::new(Grammars::new(self.tokenizer(), self.vocab())?);
                        self.grammars = Some(g.clone());
                        g
                    }
                };
                Some(g.compile(spec)?)
            }
        };
        let gp = GenerateParams {
            sampling: p.sampling.clone(),
            max_tokens: p.max_tokens.min(ctx - ids.len()),
            stop: p.stop.clone(),
            grammar,
        };
        let mut text = String::new();
        let mut sink = |t: &str| {
            text.push_str(t);
            on_text(t);
        };
        let cancel = AtomicBool::new(false);
        let usage = match &mut self.inner {
            Inner::Cpu(s) => s.generate_with(ids, &gp, &cancel, &mut sink)?,
            Inner::PerToken(s) => s.generate_with(ids, &gp, &cancel, &mut sink)?,
            Inner::Slots(s) => s.generate_with(ids, &gp, &cancel, &mut sink)?,
        };
        Ok(Answer { text, usage })
    }
}

fn session<B: Backend>(
    mut b: B,
    ck: &Checkpoint,
    tok: Tokenizer,
    opts: &Options,
) -> Result<Session<B>, Error> {
    let (model, ctx, kv) = load(&mut b, ck, opts)?;
    Ok(Session::with_kv_type(b, model, tok, ctx, kv)?)
}

/// The model on `b`, its context and KV type (f32 for hybrid and MoE models).
fn load<B: Backend>(
    b: &mut B,
    ck: &Checkpoint,
    opts: &Options,
) -> Result<(AnyModel, usize, KvType), Error> {
    let chunk = b.prefill_chunk();
    let model = AnyModel::load_checkpoint(ck, None, b, chunk, &mut |_| {})?;
    let ctx = opts.ctx.min(model.cfg().max_position).max(2);
    let kv = match &model {
        AnyModel::Hybrid(_) => KvType::F32,
        _ => opts.kv,
    };
    Ok((model, ctx, kv))
}
