//! `--model`: a path (GGUF file, tokenizer directory or tokenizer.json, .tiktoken) or the short
//! name of a file `scripts/fetch-models.sh` fetches (`smollm2`, `gemma3`, ...). No model means
//! the default, SmolLM2-135M-Instruct.

use std::path::PathBuf;

use anyhow::{Result, bail};
use vkllm_tokenizer::cache;

/// The model used when `--model` is not given.
pub const DEFAULT_MODEL: &str = "smollm2";

/// The path `--model` names; an error says how to fetch a known model that is missing.
pub fn resolve(arg: Option<&str>) -> Result<PathBuf> {
    let arg = arg.unwrap_or(DEFAULT_MODEL);
    let as_path = PathBuf::from(arg);
    if as_path.exists() {
        return Ok(as_path);
    }
    if let Some((known, path)) = cache::known(arg) {
        if path.exists() {
            return Ok(path);
        }
        bail!("{}", cache::missing_message(&known, &path));
    }
    let names: Vec<&str> = cache::KNOWN.iter().map(|k| k.name).collect();
    bail!(
        "model `{arg}`: no such file, and not a known model name ({})",
        names.join(", ")
    )
}
