//! `cargo xtask spirv-val`: every kernel module through SPIRV-Tools' validator for Vulkan 1.3.

use anyhow::{Result, anyhow, bail};
use vkllm_kernels::matmul_coop::SplitScratch;
use vkllm_kernels::matmul_narrow::{MatmulNarrow, NarrowConfig};
use vkllm_kernels::matvec::MatShape;
use vkllm_kernels::{
    KernelBuffer, KernelSpec, Overrides, SpirvOptions, WeightType, all_kernels, compile_spirv,
};

/// The validator: `$SPIRV_VAL`, the one `scripts/spirv-tools.sh` unpacks, or `spirv-val`.
fn command() -> String {
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

/// A buffer of some size, for building dispatches without a device.
#[derive(Clone, Copy)]
struct Sized(u64);

impl KernelBuffer for Sized {
    fn byte_len(&self) -> u64 {
        self.0
    }
}

/// The modules checked: every kernel with its default overrides, and the few-token product's
/// launches as the runtime specialises them (Q4_K and Q6_K, both Q6_K paths, 1 and 4 token
/// tiles, split and not, f16 and f32 X), whose override-sized code differs most.
fn cases() -> Result<Vec<(&'static KernelSpec, Overrides, String)>> {
    let mut out: Vec<_> = all_kernels()
        .into_iter()
        .map(|k| (k, Overrides::default(), "defaults".to_string()))
        .collect();
    let big = Sized(1 << 30);
    for (dtype, q6k_direct) in [
        (WeightType::Q4_K, false),
        (WeightType::Q6_K, false),
        (WeightType::Q6_K, true),
    ] {
        for (n, split, x_f16) in [(16, 1, true), (64, 3, false), (5, 2, true)] {
            let shape = MatShape {
                dtype,
                rows: 1000,
                cols: 4096,
                row_offset: 0,
                accumulate: false,
            };
            let cfg = NarrowConfig {
                split,
                x_f16,
                q6k_direct,
            };
            let scratch = SplitScratch {
                part: big,
                counters: big,
            };
            let d = MatmulNarrow {
                w: big,
                x: big,
                y: big,
            }
            .dispatch(&shape, n, 1000, 32, &cfg, scratch)?;
            let label = format!("{} n {n} split {split} x16 {x_f16}", dtype.name());
            out.push((d.kernel, d.overrides, label));
        }
    }
    Ok(out)
}

pub fn run() -> Result<()> {
    let val = command();
    let dir = std::env::temp_dir().join(format!("vkllm-spirv-val-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut failed = Vec::new();
    let mut modules = 0;
    for (k, overrides, label) in cases()? {
        for (prune, all) in [(false, false), (true, false), (false, true), (true, true)] {
            let opts = SpirvOptions {
                prune_dead_branches: prune,
                workgroup_coherent_all: all,
                ..SpirvOptions::default()
            };
            let words = compile_spirv(k, &overrides, opts)?;
            let path = dir.join(format!("{modules}-{}.spv", k.name));
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            std::fs::write(&path, bytes)?;
            let out = std::process::Command::new(&val)
                .args(["--target-env", "vulkan1.3"])
                .arg(&path)
                .output()
                .map_err(|e| {
                    anyhow!("cannot run {val} ({e}): run scripts/spirv-tools.sh or set SPIRV_VAL")
                })?;
            modules += 1;
            if !out.status.success() {
                let msg = String::from_utf8_lossy(&out.stderr);
                failed.push(format!(
                    "{} ({}, {label}, prune {prune}, wg_coherent_all {all}): {}",
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
