//! Models in a local Hugging Face hub cache, named by repo id (`--model ORG/NAME[@REVISION]`):
//! `models--ORG--NAME/snapshots/<commit>/` under the hub directory, the revision from
//! `refs/<REVISION>` (default `main`), as the Python libraries lay it out. Nothing is
//! downloaded.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The hub directory: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`,
/// else `~/.cache/huggingface/hub` (the Python libraries' order).
pub fn hub_dir() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("HF_HUB_CACHE") {
        return d;
    }
    if let Some(d) = var("HF_HOME") {
        return d.join("hub");
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        return d.join("huggingface").join("hub");
    }
    var("HOME")
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".cache")
        .join("huggingface")
        .join("hub")
}

/// `(org, name, revision)` when `arg` has the shape of a repo id: `ORG/NAME` or
/// `ORG/NAME@REVISION`, each part of letters, digits, `-`, `_` and `.` (not `.` or `..`).
pub fn parse_repo_id(arg: &str) -> Option<(&str, &str, &str)> {
    let (id, rev) = match arg.split_once('@') {
        Some((id, rev)) => (id, rev),
        None => (arg, "main"),
    };
    let (org, name) = id.split_once('/')?;
    let part = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (part(org) && part(name) && part(rev)).then_some((org, name, rev))
}

/// The snapshot directory (or its one `.gguf` file) of `org/name` at `rev` under `hub`; an error
/// saying where it looked when it is not there.
pub fn resolve_in(hub: &Path, org: &str, name: &str, rev: &str) -> Result<PathBuf> {
    let repo = hub.join(format!("models--{org}--{name}"));
    let snapshots = repo.join("snapshots");
    // A revision is a ref (refs/main) or a commit hash (a snapshot directory's name).
    let commit = match std::fs::read_to_string(repo.join("refs").join(rev)) {
        Ok(c) => c.trim().to_string(),
        Err(_) => rev.to_string(),
    };
    let snap = snapshots.join(&commit);
    if parse_repo_id(&format!("a/b@{commit}")).is_none() || !snap.is_dir() {
        bail!(
            "model `{org}/{name}` (revision {rev}): not in the local Hugging Face hub cache \
             (looked for {}); download it first (for example `huggingface-cli download \
             {org}/{name}`), set HF_HOME or HF_HUB_CACHE, or pass a file or directory",
            snap.display()
        );
    }
    let mut ggufs: Vec<PathBuf> = std::fs::read_dir(&snap)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    ggufs.sort();
    match ggufs.len() {
        0 => Ok(snap),
        1 => Ok(ggufs.remove(0)),
        _ => bail!(
            "model `{org}/{name}`: its snapshot {} holds {} GGUF files; pass one of them: {}",
            snap.display(),
            ggufs.len(),
            ggufs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_and_not() {
        assert_eq!(
            parse_repo_id("HuggingFaceTB/SmolLM2-135M-Instruct"),
            Some(("HuggingFaceTB", "SmolLM2-135M-Instruct", "main"))
        );
        assert_eq!(
            parse_repo_id("Qwen/Qwen3-0.6B@v1.2"),
            Some(("Qwen", "Qwen3-0.6B", "v1.2"))
        );
        for not in [
            "smollm2",
            "a/b/c",
            "/abs/path",
            "../x",
            "org/..",
            "org/name@",
            "org/na me",
            "org/name@../../etc",
        ] {
            assert_eq!(parse_repo_id(not), None, "{not}");
        }
    }

    #[test]
    fn snapshots_by_ref_and_by_commit() {
        let hub = std::env::temp_dir().join(format!("vkllm-hub-unit-{}", std::process::id()));
        let repo = hub.join("models--Org--Model");
        std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots/def456")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        std::fs::write(repo.join("snapshots/def456/m.gguf"), b"x").unwrap();
        assert_eq!(
            resolve_in(&hub, "Org", "Model", "main").unwrap(),
            repo.join("snapshots/abc123")
        );
        assert_eq!(
            resolve_in(&hub, "Org", "Model", "def456").unwrap(),
            repo.join("snapshots/def456/m.gguf")
        );
        let e = resolve_in(&hub, "Org", "Other", "main").unwrap_err();
        assert!(
            e.to_string().contains(
                &hub.join("models--Org--Other/snapshots/main")
                    .display()
                    .to_string()
            ),
            "{e}"
        );
        std::fs::write(repo.join("snapshots/def456/n.gguf"), b"x").unwrap();
        let e = resolve_in(&hub, "Org", "Model", "def456").unwrap_err();
        assert!(e.to_string().contains("2 GGUF files"), "{e}");
        std::fs::remove_dir_all(&hub).unwrap();
    }
}
