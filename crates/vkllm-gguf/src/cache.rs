//! Where vkllm keeps fetched weight files and what it derives from them (pipeline caches).

use std::path::PathBuf;

/// vkllm's cache directory, the rule `scripts/fetch-models.sh` follows: `$VKLLM_CACHE`, else
/// `$XDG_CACHE_HOME/vkllm`, else `$HOME/.cache/vkllm`, else `./.cache/vkllm`.
pub fn cache_dir() -> PathBuf {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = nonempty("VKLLM_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = nonempty("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("vkllm");
    }
    let home = nonempty("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("vkllm")
}
