//! Where fetched models and tokenizer files live: `scripts/fetch-models.sh` puts them in
//! `${VKLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vkllm}`; tests and the CLI look there.

use std::path::PathBuf;

pub use vkllm_gguf::cache_dir;

/// A file `scripts/fetch-models.sh` fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    /// Short name (`--model smollm2`).
    pub name: &'static str,
    /// Path under the cache directory.
    pub rel_path: &'static str,
    /// The fetch script's item that brings it.
    pub fetch_item: &'static str,
    /// What it is.
    pub what: &'static str,
}

/// Everything the fetch script brings, by short name.
pub const KNOWN: &[Known] = &[
    Known {
        name: "smollm2",
        rel_path: "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        fetch_item: "smollm2",
        what: "SmolLM2-135M-Instruct, GGUF Q4_1 (the default model)",
    },
    Known {
        name: "gemma3",
        rel_path: "models/gemma-3-270m-q4_k_m.gguf",
        fetch_item: "gemma3",
        what: "Gemma 3 270M (base), GGUF Q4_K_M",
    },
    Known {
        name: "qwen25coder",
        rel_path: "models/qwen2.5-coder-0.5b-instruct-q4.gguf",
        fetch_item: "qwen25coder",
        what: "Qwen2.5-Coder-0.5B-Instruct, GGUF",
    },
    Known {
        name: "gemma3-tok",
        rel_path: "tokenizers/gemma3",
        fetch_item: "gemma3-tok",
        what: "Gemma 3 tokenizer.json + tokenizer_config.json",
    },
    Known {
        name: "qwen3-tok",
        rel_path: "tokenizers/qwen3",
        fetch_item: "qwen3-tok",
        what: "Qwen3 tokenizer.json + tokenizer_config.json",
    },
    Known {
        name: "qwen3.6-tok",
        rel_path: "tokenizers/qwen-tiktoken/qwen3_6.tiktoken",
        fetch_item: "qwen-tiktoken",
        what: "Qwen3.5/3.6 vocabulary (tiktoken ranks)",
    },
];

/// The known file called `name`, with its full path.
pub fn known(name: &str) -> Option<(Known, PathBuf)> {
    KNOWN
        .iter()
        .find(|k| k.name == name)
        .map(|k| (*k, cache_dir().join(k.rel_path)))
}

/// The message for a missing fetched file.
pub fn missing_message(k: &Known, path: &std::path::Path) -> String {
    format!(
        "{} ({}) is not at {}: run `scripts/fetch-models.sh {}` (cache: $VKLLM_CACHE, else \
         $XDG_CACHE_HOME/vkllm, else ~/.cache/vkllm)",
        k.name,
        k.what,
        path.display(),
        k.fetch_item
    )
}
