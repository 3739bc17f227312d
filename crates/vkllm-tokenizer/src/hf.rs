//! Hugging Face tokenizers: `tokenizer.json` through the `tokenizers` crate, with what
//! transformers takes from `tokenizer_config.json` on top (special tokens, chat template),
//! `chat_template.jinja` and `generation_config.json`.

use std::collections::BTreeSet;
use std::path::Path;
use std::str::FromStr;

use serde_json::Value as Json;
use tokenizers::AddedToken;

use crate::chat::{ChatTemplate, TemplateOrigin};
use crate::error::{Result, TokenizerError};
use crate::tokenizer::{Backend, HfBackend, SpecialIds, Tokenizer, TokenizerSource};

/// The special-token attributes transformers reads from `tokenizer_config.json`, in the order of
/// its `special_tokens_map`.
const SPECIAL_ATTRS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

fn read_opt(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TokenizerError::io(path, e)),
    }
}

/// Loads `tokenizer_json` and the optional files beside it in `dir`.
pub(crate) fn load(tokenizer_json: &Path, dir: &Path) -> Result<Tokenizer> {
    let json = std::fs::read_to_string(tokenizer_json)
        .map_err(|e| TokenizerError::io(tokenizer_json, e))?;
    let config = read_opt(&dir.join("tokenizer_config.json"))?;
    let jinja = read_opt(&dir.join("chat_template.jinja"))?;
    let generation = read_opt(&dir.join("generation_config.json"))?;
    let mut tok = from_strs(
        &tokenizer_json.display().to_string(),
        &json,
        config.as_deref(),
        jinja.as_deref(),
        generation.as_deref(),
    )?;
    tok.source = TokenizerSource::TokenizerJson(tokenizer_json.display().to_string());
    Ok(tok)
}

/// Parses JSON keeping serde's line/column on failure.
pub(crate) fn parse_json(what: &str, text: &str) -> Result<Json> {
    serde_json::from_str(text).map_err(|e| TokenizerError::json(what, &e))
}

/// The text of a special-token entry: a string, or an AddedToken object with `content`.
fn token_text(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(Json::as_str).map(str::to_string),
        _ => None,
    }
}

pub(crate) fn from_strs(
    what: &str,
    tokenizer_json: &str,
    config_json: Option<&str>,
    chat_template_jinja: Option<&str>,
    generation_config: Option<&str>,
) -> Result<Tokenizer> {
    // serde_json errors (syntax or shape) keep their line and column.
    let mut tok = tokenizers::Tokenizer::from_str(tokenizer_json).map_err(|e| {
        match e.downcast_ref::<serde_json::Error>() {
            Some(je) => TokenizerError::json(what, je),
            None => TokenizerError::TokenizerJson {
                what: what.to_string(),
                message: e.to_string(),
            },
        }
    })?;
    let config_what = format!("{what}: tokenizer_config.json");
    let config = match config_json {
        Some(c) => parse_json(&config_what, c)?,
        None => Json::Object(Default::default()),
    };
    let Json::Object(config) = config else {
        return Err(TokenizerError::BadKey {
            what: config_what,
            key: "(top level)".into(),
            message: "expected a JSON object".into(),
        });
    };

    // Special tokens named by the config, as transformers' special_tokens_map: a key that is
    // absent takes the tokenizer class's default, one set to null stays unset.
    let class = config
        .get("tokenizer_class")
        .and_then(Json::as_str)
        .unwrap_or_default();
    let mut special_map: Vec<(String, String)> = Vec::new();
    for attr in SPECIAL_ATTRS {
        let text = match config.get(attr) {
            Some(v) => token_text(v),
            None => class_default(class, attr)
                .filter(|t| tok.token_to_id(t).is_some())
                .map(str::to_string),
        };
        if let Some(text) = text {
            special_map.push((attr.to_string(), text));
        }
    }
    let mut extra_specials: Vec<String> = Vec::new();
    if let Some(Json::Array(list)) = config.get("additional_special_tokens") {
        extra_specials.extend(list.iter().filter_map(token_text));
    }
    match config.get("extra_special_tokens") {
        Some(Json::Object(map)) => {
            for (k, v) in map {
                if let Some(text) = token_text(v) {
                    special_map.push((k.clone(), text.clone()));
                    extra_specials.push(text);
                }
            }
        }
        Some(Json::Array(list)) => extra_specials.extend(list.iter().filter_map(token_text)),
        _ => {}
    }
    // transformers marks these special in the backend, so `decode(skip_special_tokens=True)`
    // drops them; only tokens already in the added vocabulary, so encoding is unchanged.
    let added: BTreeSet<String> = tok
        .get_added_tokens_decoder()
        .values()
        .map(|t| t.content.clone())
        .collect();
    let mark: Vec<AddedToken> = special_map
        .iter()
        .map(|(_, t)| t)
        .chain(extra_specials.iter())
        .filter(|t| added.contains(*t))
        .map(|t| AddedToken::from(t.clone(), true))
        .collect();
    tok.add_special_tokens(&mark);

    let id_of = |attr: &str| {
        special_map
            .iter()
            .find(|(k, _)| k == attr)
            .and_then(|(_, t)| tok.token_to_id(t))
    };
    let special = SpecialIds {
        bos: id_of("bos_token"),
        eos: id_of("eos_token"),
        unk: id_of("unk_token"),
        pad: id_of("pad_token"),
    };

    // End-of-generation ids from generation_config.json (an int or a list).
    let mut eog_extra = Vec::new();
    if let Some(g) = generation_config {
        let g = parse_json(&format!("{what}: generation_config.json"), g)?;
        match g.get("eos_token_id") {
            Some(Json::Number(n)) => eog_extra.extend(n.as_u64().map(|n| n as u32)),
            Some(Json::Array(list)) => {
                eog_extra.extend(list.iter().filter_map(Json::as_u64).map(|n| n as u32))
            }
            _ => {}
        }
    }

    let family = config
        .get("tokenizer_class")
        .and_then(Json::as_str)
        .map(family_from_class);

    let (config_default, tool_use_template) =
        template_from_config(&config, &config_what, &special_map)?;
    // transformers prefers chat_template.jinja over the config's template.
    let chat_template = match chat_template_jinja {
        Some(src) => Some(ChatTemplate::new(
            "default",
            src,
            TemplateOrigin::Model("chat_template.jinja".into()),
            special_map.clone(),
        )?),
        None => config_default,
    };

    let mut t = Tokenizer {
        backend: Backend::Hf(Box::new(HfBackend::new(tok))),
        source: TokenizerSource::TokenizerJson(what.to_string()),
        special,
        eog: BTreeSet::new(),
        chat_template,
        tool_use_template,
        family,
    };
    t.eog = crate::eog::eog_set(&t, &eog_extra);
    Ok(t)
}

/// `chat_template` in tokenizer_config.json: a string, or a list of `{name, template}` from
/// which `default` and `tool_use` are taken. Returns (default, tool_use).
fn template_from_config(
    config: &serde_json::Map<String, Json>,
    what: &str,
    special_map: &[(String, String)],
) -> Result<(Option<ChatTemplate>, Option<ChatTemplate>)> {
    let origin = TemplateOrigin::Model("tokenizer_config.json".into());
    let compile =
        |name: &str, src: &str| ChatTemplate::new(name, src, origin.clone(), special_map.to_vec());
    match config.get("chat_template") {
        None | Some(Json::Null) => Ok((None, None)),
        Some(Json::String(src)) => Ok((Some(compile("default", src)?), None)),
        Some(Json::Array(list)) => {
            let named = |want: &str| {
                list.iter().find_map(|item| {
                    let name = item.get("name")?.as_str()?;
                    let src = item.get("template")?.as_str()?;
                    (name == want).then_some(src)
                })
            };
            let default = named("default")
                .map(|s| compile("default", s))
                .transpose()?;
            let tool_use = named("tool_use")
                .map(|s| compile("tool_use", s))
                .transpose()?;
            Ok((default, tool_use))
        }
        Some(_) => Err(TokenizerError::BadKey {
            what: what.to_string(),
            key: "chat_template".into(),
            message: "expected a string or a list of {name, template}".into(),
        }),
    }
}

/// The special tokens a transformers tokenizer class defaults to when the config is silent.
fn class_default(class: &str, attr: &str) -> Option<&'static str> {
    let class = class.trim_end_matches("Fast");
    let table: &[(&str, &str)] = match class {
        "GemmaTokenizer" => &[
            ("unk_token", "<unk>"),
            ("bos_token", "<bos>"),
            ("eos_token", "<eos>"),
            ("pad_token", "<pad>"),
            ("mask_token", "<mask>"),
        ],
        "Qwen2Tokenizer" => &[
            ("unk_token", "<|endoftext|>"),
            ("eos_token", "<|endoftext|>"),
            ("pad_token", "<|endoftext|>"),
        ],
        "LlamaTokenizer" => &[
            ("unk_token", "<unk>"),
            ("bos_token", "<s>"),
            ("eos_token", "</s>"),
        ],
        "GPT2Tokenizer" => &[
            ("unk_token", "<|endoftext|>"),
            ("bos_token", "<|endoftext|>"),
            ("eos_token", "<|endoftext|>"),
        ],
        _ => &[],
    };
    table.iter().find(|(a, _)| *a == attr).map(|(_, t)| *t)
}

/// A family name from a transformers tokenizer class (`GemmaTokenizer` -> `gemma`).
fn family_from_class(class: &str) -> String {
    let base = class
        .trim_end_matches("Fast")
        .trim_end_matches("TokenizerFast")
        .trim_end_matches("Tokenizer");
    base.to_ascii_lowercase()
}
