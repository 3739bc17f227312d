//! `cargo xtask <command>`: project automation.
//!
//! - `bench [flags]`: `vkllm bench` from a release build (see `vkllm bench --help`).
//! - `parity [--json]`: the parity ladder as one table (computed in-process through the
//!   libraries, the same code a `vkllm parity` subcommand runs); exits non-zero if a row fails.
//! - `spirv-val`: every kernel's SPIR-V (default overrides, and the few-token product's
//!   launches as the runtime specialises them; with and without dead-branch pruning and the
//!   workgroup pass on every cooperative kernel, `wg_coherent_all`) through SPIRV-Tools'
//!   validator for Vulkan 1.3 (`$SPIRV_VAL`, else `.cache/spirv-tools/spirv-val` from
//!   `scripts/spirv-tools.sh`, else `spirv-val` on PATH: a release from 2024 on, which knows the
//!   cooperative-matrix extension).

use anyhow::{Result, bail};
use vkllm_models::parity;

mod spirv_val;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("parity") => run_parity(args[1..].iter().any(|a| a == "--json")),
        Some("bench") => run_bench(&args[1..]),
        Some("spirv-val") => spirv_val::run(),
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
