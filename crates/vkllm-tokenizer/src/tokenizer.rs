//! The [`Tokenizer`] type: one front for every vocabulary form we load.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use crate::chat::{ChatTemplate, TemplateOrigin, builtin_template};
use crate::error::{Result, TokenizerError};
use crate::fast_bpe::FastBpe;
use crate::tiktoken::{TiktokenBpe, TiktokenSpec};

/// How [`Tokenizer::encode`] treats its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Add the tokens the model wants around a sequence (BOS and/or EOS), as transformers'
    /// `add_special_tokens=True` does.
    pub add_special_tokens: bool,
    /// Match special (control) tokens written in the text, as transformers does by default.
    /// With `false` they are tokenized as the plain text they are spelled with (transformers'
    /// `split_special_tokens=True`, llama.cpp's `parse_special=false`): use this for text that
    /// comes from a user, so it can never forge a turn boundary. Non-special added tokens
    /// (Qwen3's `<think>`, Gemma 3's runs of spaces) are matched whole either way.
    pub parse_special: bool,
}

impl Default for EncodeOptions {
    /// transformers' `tokenizer.encode(text)`: BOS/EOS added, specials parsed.
    fn default() -> Self {
        EncodeOptions {
            add_special_tokens: true,
            parse_special: true,
        }
    }
}

impl EncodeOptions {
    /// For rendered chat prompts: the template already wrote BOS, specials are parsed
    /// (transformers' `apply_chat_template(tokenize=True)`).
    pub fn prompt() -> Self {
        EncodeOptions {
            add_special_tokens: false,
            parse_special: true,
        }
    }

    /// For plain-text prompts (`vkllm run --raw`, `/v1/completions`): transformers'
    /// `tokenizer(text)`, BOS/EOS as the model's tokenizer config asks (Gemma's BOS), specials
    /// parsed. The same as `Default`.
    pub fn text() -> Self {
        EncodeOptions::default()
    }

    /// For untrusted text: no BOS/EOS, special tokens spelled out as plain text.
    pub fn plain() -> Self {
        EncodeOptions {
            add_special_tokens: false,
            parse_special: false,
        }
    }
}

/// Where a tokenizer came from; says what kind of vocabulary it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSource {
    /// A Hugging Face `tokenizer.json` (path given).
    TokenizerJson(String),
    /// The vocabulary embedded in a GGUF file, with its `tokenizer.ggml.model` and `.pre`.
    Gguf {
        path: String,
        model: String,
        pre: String,
    },
    /// A tiktoken ranks file.
    Tiktoken(String),
}

pub(crate) struct HfBackend {
    pub(crate) tok: tokenizers::Tokenizer,
    /// The same tokenizer with `encode_special_tokens` set, made on first use.
    plain: OnceLock<tokenizers::Tokenizer>,
    /// The byte-level BPE fast path, where the pipeline allows it; `fast_on` false keeps every
    /// encode on `tokenizers` (the reference).
    fast: Option<FastBpe>,
    fast_on: bool,
    /// Number of ids: the model vocabulary, or past it the highest added id + 1 (Gemma 3's
    /// image token sits past its vocabulary).
    vocab_size: usize,
}

impl HfBackend {
    pub(crate) fn new(tok: tokenizers::Tokenizer) -> Self {
        let max_added = tok
            .get_added_tokens_decoder()
            .keys()
            .max()
            .map_or(0, |&m| m as usize + 1);
        let vocab_size = tok.get_vocab_size(false).max(max_added);
        HfBackend {
            fast: FastBpe::for_tokenizer(&tok),
            fast_on: true,
            tok,
            plain: OnceLock::new(),
            vocab_size,
        }
    }

    /// For a model whose vocabulary map holds a second spelling of some ids (GGUF SentencePiece
    /// runs of spaces), so its length overstates the vocabulary.
    pub(crate) fn with_vocab_size(tok: tokenizers::Tokenizer, vocab_size: usize) -> Self {
        HfBackend {
            vocab_size,
            ..HfBackend::new(tok)
        }
    }

    /// `text`'s ids through [`FastBpe`]; `None` where the fast path is off, does not apply or
    /// failed.
    fn fast_encode(&self, text: &str, opts: EncodeOptions) -> Option<Vec<u32>> {
        let fast = self.fast.as_ref().filter(|_| self.fast_on)?;
        let t = &self.tok;
        fast.encode(t.get_model(), t.get_normalizer(), text, opts)
    }

    fn plain(&self) -> &tokenizers::Tokenizer {
        self.plain.get_or_init(|| {
            let mut t = self.tok.clone();
            t.set_encode_special_tokens(true);
            t
        })
    }
}

pub(crate) enum Backend {
    Hf(Box<HfBackend>),
    Tiktoken(Box<TiktokenBpe>),
}

/// Special token ids of a model (those it has).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
}

/// A tokenizer: encode, decode, special tokens, end-of-generation set and chat template.
///
/// Built from a `tokenizer.json` directory ([`Tokenizer::from_hf_dir`]), the vocabulary inside
/// a GGUF file ([`Tokenizer::from_gguf_file`]), or tiktoken ranks
/// ([`Tokenizer::from_tiktoken_file`]); [`Tokenizer::from_path`] picks by what the path is.
pub struct Tokenizer {
    pub(crate) backend: Backend,
    pub(crate) source: TokenizerSource,
    pub(crate) special: SpecialIds,
    pub(crate) eog: BTreeSet<u32>,
    pub(crate) chat_template: Option<ChatTemplate>,
    /// A second template for conversations with tools (tokenizer_config's `tool_use`).
    pub(crate) tool_use_template: Option<ChatTemplate>,
    /// The model family (GGUF `general.architecture`, or a guess from the tokenizer class).
    pub(crate) family: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("source", &self.source)
            .field("vocab_size", &self.vocab_size())
            .field("special", &self.special)
            .field("eog", &self.eog)
            .field("family", &self.family)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads whatever `path` is: a directory with `tokenizer.json`, a `tokenizer.json` file, a
    /// `.gguf` file, or a `.tiktoken` ranks file (taken as the Qwen3.5/3.6 vocabulary).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path.is_dir() {
            return Self::from_hf_dir(path);
        }
        match path.extension().and_then(|e| e.to_str()) {
            Some("gguf") => Self::from_gguf_file(path),
            Some("tiktoken") => Self::from_tiktoken_file(path, TiktokenSpec::qwen35()),
            Some("json") => {
                let dir = path.parent().unwrap_or(Path::new("."));
                crate::hf::load(path, dir)
            }
            _ => Err(TokenizerError::Unsupported {
                what: path.display().to_string(),
                kind: "file type",
                name: "(expected a directory, tokenizer.json, .gguf or .tiktoken)".into(),
            }),
        }
    }

    /// A Hugging Face tokenizer directory: `tokenizer.json`, and when present
    /// `tokenizer_config.json`, `chat_template.jinja` and `generation_config.json`.
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        crate::hf::load(&dir.join("tokenizer.json"), dir)
    }

    /// A tokenizer from the text of a `tokenizer.json` and optionally of its
    /// `tokenizer_config.json`; `what` names them in errors.
    pub fn from_hf_json(
        what: &str,
        tokenizer_json: &str,
        config_json: Option<&str>,
    ) -> Result<Self> {
        crate::hf::from_strs(what, tokenizer_json, config_json, None, None)
    }

    /// tiktoken ranks plus what `spec` says (regex, specials, NFC).
    pub fn from_tiktoken_file(path: impl AsRef<Path>, spec: TiktokenSpec) -> Result<Self> {
        let path = path.as_ref();
        let template = match spec.template_family.as_deref().and_then(builtin_template) {
            Some((name, src)) => Some(ChatTemplate::new(
                name,
                src,
                TemplateOrigin::Builtin {
                    family: name.to_string(),
                },
                vec![],
            )?),
            None => None,
        };
        let bpe = TiktokenBpe::from_file(path, spec)?;
        let eos = bpe.spec.eos.as_deref().and_then(|e| bpe.token_to_id(e));
        let mut tok = Tokenizer {
            backend: Backend::Tiktoken(Box::new(bpe)),
            source: TokenizerSource::Tiktoken(path.display().to_string()),
            special: SpecialIds {
                eos,
                ..SpecialIds::default()
            },
            eog: BTreeSet::new(),
            chat_template: template,
            tool_use_template: None,
            family: None,
        };
        tok.eog = crate::eog::eog_set(&tok, &[]);
        Ok(tok)
    }

    /// Whether [`Tokenizer::encode`] takes a fast path (the same ids, several times faster):
    /// `tokenizer.json` and GGUF `gpt2` vocabularies whose pre-tokenizer is regex splits then
    /// the byte map; tiktoken ranks whose split pattern runs on the `regex` crate.
    pub fn fast_encode(&self) -> bool {
        match &self.backend {
            Backend::Hf(hf) => hf.fast.is_some() && hf.fast_on,
            Backend::Tiktoken(t) => t.fast_split(),
        }
    }

    /// `false` sends every encode through the reference: the `tokenizers` crate's own pipeline,
    /// or for tiktoken ranks the split pattern on `fancy-regex`.
    pub fn set_fast_encode(&mut self, on: bool) {
        match &mut self.backend {
            Backend::Hf(hf) => hf.fast_on = on,
            Backend::Tiktoken(t) => t.ws_on = on,
        }
    }

    /// Token ids of `text`.
    pub fn encode(&self, text: &str, opts: EncodeOptions) -> Result<Vec<u32>> {
        match &self.backend {
            Backend::Hf(hf) => {
                if let Some(ids) = hf.fast_encode(text, opts) {
                    return Ok(ids);
                }
                let t = if opts.parse_special {
                    &hf.tok
                } else {
                    hf.plain()
                };
                let enc = t.encode_fast(text, opts.add_special_tokens).map_err(|e| {
                    TokenizerError::Backend {
                        op: "encode",
                        message: e.to_string(),
                    }
                })?;
                Ok(enc.get_ids().to_vec())
            }
            Backend::Tiktoken(t) => Ok(t.encode(text, opts.parse_special)),
        }
    }

    /// The text of `ids`, as transformers' `decode(ids, skip_special_tokens=skip_special)`.
    /// Bytes that do not form valid UTF-8 come out as U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let n = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= n) {
            return Err(TokenizerError::UnknownId { id, vocab_size: n });
        }
        match &self.backend {
            Backend::Hf(hf) => {
                hf.tok
                    .decode(ids, skip_special)
                    .map_err(|e| TokenizerError::Backend {
                        op: "decode",
                        message: e.to_string(),
                    })
            }
            Backend::Tiktoken(t) => {
                Ok(String::from_utf8_lossy(&t.decode_bytes(ids, skip_special)?).into_owned())
            }
        }
    }

    /// A streaming decoder over this tokenizer (see [`crate::IncrementalDecoder`]).
    pub fn incremental_decoder(&self, skip_special: bool) -> crate::IncrementalDecoder<'_> {
        crate::IncrementalDecoder::new(self, skip_special)
    }

    /// Number of ids (the model vocabulary plus added tokens).
    pub fn vocab_size(&self) -> usize {
        match &self.backend {
            Backend::Hf(hf) => hf.vocab_size,
            Backend::Tiktoken(t) => t.vocab_size(),
        }
    }

    /// The id of a token spelled as in the vocabulary (e.g. `<|im_end|>`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match &self.backend {
            Backend::Hf(hf) => hf.tok.token_to_id(token),
            Backend::Tiktoken(t) => t.token_to_id(token),
        }
    }

    /// The vocabulary spelling of `id` (byte-level or `▁` forms for BPE/SentencePiece tokens;
    /// for tiktoken, the bytes when they are valid UTF-8).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        match &self.backend {
            Backend::Hf(hf) => hf.tok.id_to_token(id),
            Backend::Tiktoken(t) => t
                .id_bytes(id)
                .and_then(|b| std::str::from_utf8(b).ok())
                .map(str::to_string),
        }
    }

    /// Whether `id` is a special (control) token: skipped by `decode(.., true)`.
    pub fn is_special(&self, id: u32) -> bool {
        match &self.backend {
            Backend::Hf(hf) => hf
                .tok
                .id_to_token(id)
                .is_some_and(|t| hf.tok.get_added_vocabulary().is_special_token(&t)),
            Backend::Tiktoken(t) => t.is_special(id),
        }
    }

    /// The spelling of every special (control) token, longest first.
    pub fn special_spellings(&self) -> Vec<String> {
        let mut v: Vec<String> = match &self.backend {
            Backend::Hf(hf) => hf
                .tok
                .get_added_tokens_decoder()
                .values()
                .filter(|t| t.special)
                .map(|t| t.content.clone())
                .collect(),
            Backend::Tiktoken(t) => t.special_spellings(),
        };
        v.retain(|s| !s.is_empty());
        v.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        v.dedup();
        v
    }

    /// BOS/EOS/UNK/PAD ids, those the model has.
    pub fn special_ids(&self) -> &SpecialIds {
        &self.special
    }

    /// Every token that ends generation: EOS plus the family's end-of-turn tokens
    /// (`<end_of_turn>`, `<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`, ...).
    pub fn eog_ids(&self) -> &BTreeSet<u32> {
        &self.eog
    }

    /// Whether generation stops at `id`.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The chat template: the model's own, or its family's from the built-in table
    /// ([`ChatTemplate::origin`] says which).
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// The chat template, or a [`TokenizerError::NoTemplate`] naming the model.
    pub fn require_chat_template(&self) -> Result<&ChatTemplate> {
        self.chat_template
            .as_ref()
            .ok_or_else(|| TokenizerError::NoTemplate {
                what: self.describe(),
                family: self.family.clone().unwrap_or_else(|| "unknown".into()),
            })
    }

    /// The template a render with `opts` uses: the `tool_use` template when tools are given
    /// and the model has one (as transformers picks it), else the default.
    pub fn chat_template_for(&self, opts: &crate::RenderOptions) -> Result<&ChatTemplate> {
        match (&opts.tools, &self.tool_use_template) {
            (Some(_), Some(t)) => Ok(t),
            _ => self.require_chat_template(),
        }
    }

    /// Renders `messages` with the chat template (see [`ChatTemplate::render`]).
    pub fn apply_chat_template(
        &self,
        messages: &serde_json::Value,
        opts: &crate::RenderOptions,
    ) -> Result<String> {
        self.chat_template_for(opts)?.render(messages, opts)
    }

    /// Renders `messages` and encodes the prompt as transformers'
    /// `apply_chat_template(tokenize=True)` does (no extra BOS, the template's specials
    /// parsed), except that special tokens spelled inside message strings stay plain text
    /// (`guard.rs`): a message cannot forge a turn.
    pub fn encode_chat(
        &self,
        messages: &serde_json::Value,
        opts: &crate::RenderOptions,
    ) -> Result<Vec<u32>> {
        let g = self.guard_messages(messages);
        let prompt = self.apply_chat_template(&g.messages, opts)?;
        self.encode_guarded(&prompt, &g)
    }

    /// [`Tokenizer::encode_chat`] as transformers does it exactly: special tokens are parsed
    /// wherever they appear, message text included.
    pub fn encode_chat_parsing_specials(
        &self,
        messages: &serde_json::Value,
        opts: &crate::RenderOptions,
    ) -> Result<Vec<u32>> {
        let prompt = self.apply_chat_template(messages, opts)?;
        self.encode(&prompt, EncodeOptions::prompt())
    }

    /// Replaces the chat template (e.g. with one the user gave).
    pub fn set_chat_template(&mut self, template: ChatTemplate) {
        self.chat_template = Some(template);
        self.tool_use_template = None;
    }

    /// The model family, when known (GGUF `general.architecture`).
    pub fn family(&self) -> Option<&str> {
        self.family.as_deref()
    }

    /// Where this tokenizer came from.
    pub fn source(&self) -> &TokenizerSource {
        &self.source
    }

    /// A one-line description for messages.
    pub fn describe(&self) -> String {
        match &self.source {
            TokenizerSource::TokenizerJson(p) => p.clone(),
            TokenizerSource::Gguf { path, model, pre } => {
                format!("{path} (GGUF vocabulary, {model}/{pre})")
            }
            TokenizerSource::Tiktoken(p) => format!("{p} (tiktoken ranks)"),
        }
    }
}
