//! Records the commit the binary is built from (`VKLLM_COMMIT`, reported in `vkllm bench`
//! metadata) unless the environment already sets it. Rebuilt when HEAD moves (its reflog
//! changes on every commit and checkout).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=VKLLM_COMMIT");
    if std::env::var_os("VKLLM_COMMIT").is_some() {
        return;
    }
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/logs/HEAD");
    }
    if let Some(c) = git(&["rev-parse", "--short", "HEAD"]) {
        println!("cargo:rustc-env=VKLLM_COMMIT={c}");
    }
}
