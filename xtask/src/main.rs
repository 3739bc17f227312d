//! `cargo xtask <command>`: project automation.
//!
//! - `bench [flags]`: `vkllm bench` from a release build (see `vkllm bench --help`).
//! - `parity [--json]`: the parity ladder as one table (computed in-process through the
//!   libraries, the same code a `vkllm parity` subcommand runs); exits non-zero if a row fails.
//! - `spirv-val`: every kernel's SPIR-V (default overrides; with and without dead-branch
//!   pruning and the workgroup pass on every cooperative kernel, `wg_coherent_all`) through SPIRV-Tools' validator for Vulkan 1.3 (`$SPIRV_VAL`, else
//!   `.cache/spirv-tools/spirv-val` from `scripts/spirv-tools.sh`, else `spirv-val` on PATH:
//!   a release from 2024 on, which knows the cooperative-matrix extension).

use anyhow::{Result, bail};
use vkllm_models::parity;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("parity") => run_parity(args[1..].iter().any(|a| a == "--json")),
        Some("bench") => run_bench(&args[1..]),
        Some("spirv-val") => run_spirv_val(),
        _ => bail!(
            "usage: cargo xtask parity [--json] | cargo xtask bench [vkllm bench flags] | \
             cargo xtask spirv-val"
        ),
    }
}

/// `vkllm bench` from a release build (a thin wrapper: the flags pass through).
fn run_bench(args: &[String]) -> Result<()> {
    let status = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
        .args([
            "run",
            "--release",
            "--quiet",
            "-p",
            "vkllm-server",
            "--",
            "bench",
        ])
        .args(args)
        .status()?;
    if !status.success() {
        bail!("vkllm bench failed ({status})");
    }
    Ok(())
}

fn run_parity(json: bool) -> Result<()> {
    let seed = parity::seed_from_env();
    eprintln!("parity: kernel inputs from seed {seed} (VKLLM_SEED={seed} draws them again)");
    let (rows, errors) = parity::full_report_seeded(seed);
    if json {
        println!("{}", parity::render_json(&rows));
    } else {
        print!("{}", parity::render_table(&rows));
    }
    for e in &errors {
        eprintln!("error: {e}");
    }
    let failed = rows.iter().filter(|r| r.failed()).count();
    let not_applicable = rows.iter().filter(|r| r.not_applicable.is_some()).count();
    if failed > 0 || !errors.is_empty() {
        bail!(
            "{failed} parity row(s) failed, {} could not run, {not_applicable} not applicable \
             on this device (seed {seed})",
            errors.len()
        );
    }
    eprintln!(
        "all {} parity rows pass ({not_applicable} more not applicable on this device)",
        rows.len() - not_applicable
    );
    Ok(())
}

/// The validator: `$SPIRV_VAL`, the one `scripts/spirv-tools.sh` unpacks, or `spirv-val`.
fn spirv_val_command() -> String {
    if let Ok(v) = std::env::var("SPIRV_VAL") {
        return v;
    }
    let local =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/spirv-tools/spirv-val");
    if local.exists() {
        return local.to_string_lossy().into_owned();
    }
    "spirv-val".into()
}

fn run_spirv_val() -> Result<()> {
    use vkllm_kernels::{Overrides, SpirvOptions, all_kernels, compile_spirv};
    let val = spirv_val_command();
    let dir = std::env::temp_dir().join(format!("vkllm-spirv-val-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut failed = Vec::new();
    let mut modules = 0;
    for k in all_kernels() {
        for (prune, all) in [(false, false), (true, false), (false, true), (true, true)] {
            let opts = SpirvOptions {
                prune_dead_branches: prune,
                workgroup_coherent_all: all,
                ..SpirvOptions::default()
            };
            let words = compile_spirv(k, &Overrides::default(), opts)?;
            let path = dir.join(format!("{}-{}-{prune}-{all}.spv", k.name, k.entry));
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            std::fs::write(&path, bytes)?;
            let out = std::process::Command::new(&val)
                .args(["--target-env", "vulkan1.3"])
                .arg(&path)
                .output()
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot run {val} ({e}): run scripts/spirv-tools.sh or set SPIRV_VAL"
                    )
                })?;
            modules += 1;
            if !out.status.success() {
                let msg = String::from_utf8_lossy(&out.stderr);
                failed.push(format!(
                    "{} ({}, prune {prune}, wg_coherent_all {all}): {}",
                    k.name,
                    k.entry,
                    msg.trim()
                ));
            }
        }
    }
    std::fs::remove_dir_all(&dir)?;
    for f in &failed {
        eprintln!("error: {f}");
    }
    if !failed.is_empty() {
        bail!(
            "{} of {modules} kernel modules fail spirv-val",
            failed.len()
        );
    }
    eprintln!("spirv-val: {modules} kernel modules valid for Vulkan 1.3 ({val})");
    Ok(())
}
