//! Tokenizers from the vocabulary embedded in a GGUF file (llama.cpp's `tokenizer.ggml.*` keys).
//!
//! The vocabulary is rebuilt as a `tokenizers` pipeline the way transformers' GGUF loader builds
//! it (`integrations/gguf/gguf_tokenizer_mapping.py`), with three corrections where that loader
//! departs from the model's published tokenizer (and from llama.cpp):
//!
//! - `smollm`: digits are split one by one before byte-level splitting (SmolLM2's
//!   `tokenizer.json` has a `Digits` pre-tokenizer; llama.cpp splits on `\p{N}` first);
//! - `qwen2` / `qwen35`: text is NFC-normalized first (Qwen's `tokenizer.json`);
//! - SentencePiece user-defined tokens made of spaces (Gemma 3's runs of 2..31 spaces) are
//!   matched whole, as llama.cpp matches user-defined tokens and as Gemma 3's `tokenizer.json`
//!   tokenizes such runs.

pub(crate) mod bpe;
mod file;
mod spm;

use std::collections::BTreeSet;

use crate::chat::{ChatTemplate, TemplateOrigin, builtin_template};
use crate::error::{Result, TokenizerError};
use crate::tokenizer::{Backend, HfBackend, SpecialIds, Tokenizer, TokenizerSource};

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// The tokenizer metadata of a GGUF file, as plain data (what `tokenizer.ggml.*` and
/// `general.architecture` hold). [`Tokenizer::from_gguf_vocab`] builds a tokenizer from it.
#[derive(Debug, Clone, Default)]
pub struct GgufVocab {
    /// `general.architecture` (`llama`, `qwen2`, `gemma3`, ...).
    pub architecture: String,
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer name (`qwen2`, `llama-bpe`, `smollm`, ...).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Option<Vec<f32>>,
    pub token_types: Option<Vec<i32>>,
    /// `"a b"` pairs, best first.
    pub merges: Option<Vec<String>>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` / `eom_token_id`: more end-of-generation ids.
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
    /// For messages: the file the vocabulary came from.
    pub path: String,
}

impl GgufVocab {
    pub(crate) fn token_type(&self, id: usize) -> i32 {
        self.token_types
            .as_ref()
            .and_then(|t| t.get(id).copied())
            .unwrap_or(token_type::NORMAL)
    }

    fn check_id(&self, key: &str, id: Option<u32>) -> Result<Option<u32>> {
        match id {
            Some(i) if i as usize >= self.tokens.len() => Err(TokenizerError::BadKey {
                what: self.path.clone(),
                key: key.to_string(),
                message: format!("id {i} is outside the vocabulary ({})", self.tokens.len()),
            }),
            other => Ok(other),
        }
    }
}

impl Tokenizer {
    /// A tokenizer from the vocabulary inside a GGUF file.
    pub fn from_gguf_file(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let vocab = GgufVocab::from_file(path.as_ref())?;
        Self::from_gguf_vocab(&vocab)
    }

    /// A tokenizer from GGUF vocabulary metadata (see [`GgufVocab`]).
    pub fn from_gguf_vocab(v: &GgufVocab) -> Result<Self> {
        if v.tokens.is_empty() {
            return Err(TokenizerError::MissingKey {
                what: v.path.clone(),
                key: "tokenizer.ggml.tokens".into(),
            });
        }
        for (key, len) in [
            ("tokenizer.ggml.scores", v.scores.as_ref().map(Vec::len)),
            (
                "tokenizer.ggml.token_type",
                v.token_types.as_ref().map(Vec::len),
            ),
        ] {
            if let Some(n) = len.filter(|&n| n != v.tokens.len()) {
                return Err(TokenizerError::BadKey {
                    what: v.path.clone(),
                    key: key.into(),
                    message: format!("{n} entries for {} tokens", v.tokens.len()),
                });
            }
        }
        let special = SpecialIds {
            bos: v.check_id("tokenizer.ggml.bos_token_id", v.bos)?,
            eos: v.check_id("tokenizer.ggml.eos_token_id", v.eos)?,
            unk: v.check_id("tokenizer.ggml.unknown_token_id", v.unk)?,
            pad: v.check_id("tokenizer.ggml.padding_token_id", v.pad)?,
        };
        let eot = v.check_id("tokenizer.ggml.eot_token_id", v.eot)?;
        let eom = v.check_id("tokenizer.ggml.eom_token_id", v.eom)?;
        let hf = match v.model.as_str() {
            "gpt2" => bpe::build(v, &special)?,
            "llama" => spm::build(v, &special)?,
            other => {
                return Err(TokenizerError::Unsupported {
                    what: v.path.clone(),
                    kind: "tokenizer.ggml.model",
                    name: other.to_string(),
                });
            }
        };

        // The template variables transformers' GGUF loader sets.
        let mut special_map = Vec::new();
        for (name, id) in [
            ("bos_token", special.bos),
            ("eos_token", special.eos),
            ("unk_token", special.unk),
            ("pad_token", special.pad),
        ] {
            if let Some(id) = id {
                special_map.push((name.to_string(), v.tokens[id as usize].clone()));
            }
        }
        let chat_template = match &v.chat_template {
            Some(src) => Some(ChatTemplate::new(
                "default",
                src,
                TemplateOrigin::Model("GGUF tokenizer.chat_template".into()),
                special_map,
            )?),
            None => match builtin_template(&v.architecture) {
                Some((name, src)) => Some(ChatTemplate::new(
                    name,
                    src,
                    TemplateOrigin::Builtin {
                        family: name.to_string(),
                    },
                    special_map,
                )?),
                None => None,
            },
        };

        let mut tok = Tokenizer {
            backend: Backend::Hf(Box::new(HfBackend::with_vocab_size(hf, v.tokens.len()))),
            source: TokenizerSource::Gguf {
                path: v.path.clone(),
                model: v.model.clone(),
                pre: v.pre.clone().unwrap_or_else(|| "default".into()),
            },
            special,
            eog: BTreeSet::new(),
            chat_template,
            tool_use_template: None,
            family: Some(v.architecture.clone()),
        };
        let extra: Vec<u32> = [eot, eom].into_iter().flatten().collect();
        tok.eog = crate::eog::eog_set(&tok, &extra);
        Ok(tok)
    }
}

/// The post-processor: BOS and/or EOS around a single sequence, as the flags say.
pub(crate) fn post_processor(
    v: &GgufVocab,
    special: &SpecialIds,
    add_bos_default: bool,
) -> Result<tokenizers::processors::template::TemplateProcessing> {
    use tokenizers::processors::template::TemplateProcessing;
    let add_bos = v.add_bos.unwrap_or(add_bos_default);
    let add_eos = v.add_eos.unwrap_or(false);
    let mut single = Vec::new();
    let mut specials = Vec::new();
    if let (true, Some(b)) = (add_bos, special.bos) {
        let t = v.tokens[b as usize].clone();
        single.push(t.clone());
        specials.push((t, b));
    }
    single.push("$A".to_string());
    if let (true, Some(e)) = (add_eos, special.eos) {
        let t = v.tokens[e as usize].clone();
        single.push(t.clone());
        if !specials.iter().any(|(s, _)| *s == t) {
            specials.push((t, e));
        }
    }
    let mut pair = single.clone();
    pair.extend(single.iter().map(|s| {
        if s == "$A" {
            "$B:1".to_string()
        } else {
            format!("{s}:1")
        }
    }));
    TemplateProcessing::builder()
        .try_single(single.join(" "))
        .and_then(|b| b.try_pair(pair.join(" ")))
        .map_err(|e| TokenizerError::BadKey {
            what: v.path.clone(),
            key: "tokenizer.ggml.bos_token_id".into(),
            message: e.to_string(),
        })?
        .special_tokens(specials)
        .build()
        .map_err(|e| TokenizerError::BadKey {
            what: v.path.clone(),
            key: "tokenizer.ggml.bos_token_id".into(),
            message: e.to_string(),
        })
}
