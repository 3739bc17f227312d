//! `vkllm info`: the Vulkan devices and their capabilities; with `--model`, the model's
//! architecture, parameter count, tensor types and memory needs.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use vkllm_models::{Checkpoint, DEFAULT_CHUNK, KvCache, KvType};
use vkllm_vk::{Instance, Validation, list_devices};

use super::model;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Also describe this model: a .gguf file, a safetensors checkpoint directory, or
    /// smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b (fetched into the cache on first use).
    #[arg(long, short)]
    model: Option<String>,
}

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

pub fn run(args: Args) -> Result<()> {
    print_devices();
    if let Some(m) = args.model.as_deref() {
        print_model(m)?;
    }
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// `xs` displayed, comma separated.
fn joined<T: std::fmt::Display>(xs: &[T]) -> String {
    xs.iter().map(T::to_string).collect::<Vec<_>>().join(", ")
}

fn print_devices() {
    let devices = Instance::new(Validation::Off).and_then(|i| list_devices(&i));
    match devices {
        Err(e) => {
            println!("Vulkan: unavailable ({e}); install a Vulkan driver, or use --device cpu")
        }
        Ok(ds) if ds.is_empty() => {
            println!("Vulkan: no devices (install a driver, e.g. mesa-vulkan-drivers)")
        }
        Ok(ds) => {
            println!("Vulkan devices (select with --device INDEX|NAME or VKLLM_DEVICE):");
            for d in ds {
                println!("  {}", d.summary());
                println!(
                    "     subgroup {}..{}, f16 {}, int8 {}, int8 dot {}, cooperative matrix {} \
                     (NV matrix 2 {}), timestamps {}",
                    d.min_subgroup_size,
                    d.max_subgroup_size,
                    yes(d.shader_f16),
                    yes(d.shader_int8),
                    yes(d.int8_dot_product),
                    yes(d.cooperative_matrix),
                    yes(d.cooperative_matrix2),
                    yes(d.timestamps)
                );
                if !d.cooperative_matrix_shapes.is_empty() {
                    println!(
                        "     cooperative matrix shapes (MxNxK A*B+C->R): {}; prefill kernel {}",
                        joined(&d.cooperative_matrix_shapes),
                        if d.supports_coopmat_f16() {
                            "matmul_coop"
                        } else {
                            "portable (no usable f16 16x16x16)"
                        }
                    );
                }
                if !d.cooperative_matrix2_flexible.is_empty() {
                    println!(
                        "     NV matrix 2 flexible granularities (MxNxK A*B+C->R /invocations): {}",
                        joined(&d.cooperative_matrix2_flexible)
                    );
                }
                let local: u64 = d
                    .heaps
                    .iter()
                    .filter(|h| h.device_local)
                    .map(|h| h.size)
                    .sum();
                println!(
                    "     device-local memory {:.1} GiB, max storage buffer {:.0} MiB, shared memory {} KiB",
                    local as f64 / GIB,
                    d.limits.max_storage_buffer_range as f64 / MIB,
                    d.limits.max_shared_memory / 1024
                );
            }
        }
    }
}

fn print_model(arg: &str) -> Result<()> {
    let path = model::resolve(Some(arg))?;
    let ck = Checkpoint::open(&path).with_context(|| format!("reading {}", path.display()))?;
    let c = ck.config();
    let mut params = 0u64;
    let mut bytes = 0u64;
    let mut by_type: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    let mut add = |ty: String, n: u64, b: u64| {
        params += n;
        bytes += b;
        let e = by_type.entry(ty).or_default();
        e.0 += 1;
        e.1 += b;
    };
    match &ck {
        Checkpoint::Gguf(m) => {
            for t in m.file.tensors() {
                add(
                    t.ggml_type().name().to_string(),
                    t.n_elements(),
                    t.n_bytes(),
                );
            }
        }
        Checkpoint::Safetensors(s) => {
            for t in s.weights.tensors() {
                let ty = format!("{:?}", t.dtype()).to_lowercase();
                add(ty, t.n_elements() as u64, t.bytes().len() as u64);
            }
        }
    }
    println!("\nModel {}", path.display());
    println!(
        "  family {}, {} layers, hidden {}, heads {} (kv {}), head dim {}, ffn {}, vocab {}",
        c.family.name(),
        c.n_layers,
        c.hidden_size,
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.intermediate_size,
        c.vocab_size
    );
    let windows: Vec<String> = c
        .layers
        .iter()
        .filter_map(|l| l.window)
        .map(|w| w.to_string())
        .collect();
    println!(
        "  context {} tokens, sliding-window layers {}/{}{}",
        c.max_position,
        windows.len(),
        c.n_layers,
        windows
            .first()
            .map_or(String::new(), |w| format!(" (window {w})"))
    );
    println!(
        "  parameters {:.1} M, weights {:.1} MiB",
        params as f64 / 1e6,
        bytes as f64 / MIB
    );
    for (ty, (n, b)) in &by_type {
        println!("    {ty:>6}: {n:>4} tensors, {:.1} MiB", *b as f64 / MIB);
    }
    // f32 keys and values (the engine's default KV type), one sequence, the default prefill
    // chunk: sliding-window layers keep only a ring of window + chunk positions.
    let windows: Vec<Option<usize>> = c.layers.iter().map(|l| l.window).collect();
    let kv = |ctx: usize| {
        KvCache::bytes_for(&windows, c.kv_dim(), ctx, DEFAULT_CHUNK, 1, KvType::F32) as f64
    };
    let kv_per_token = 2 * c.n_layers * c.kv_dim() * 4;
    let n_full = windows.iter().filter(|w| w.is_none()).count();
    println!(
        "  KV cache (f32): {:.1} KiB per token (the {n_full} full-attention layers), {:.1} MiB at \
         2048 tokens, {:.1} MiB at the full context{}",
        (2 * n_full * c.kv_dim() * 4) as f64 / 1024.0,
        kv(2048) / MIB,
        kv(c.max_position) / MIB,
        if windows.iter().any(Option::is_some) {
            let all_full = (kv_per_token * c.max_position) as f64;
            format!(
                " (sliding layers as rings; {:.1} MiB if every layer kept the context)",
                all_full / MIB
            )
        } else {
            String::new()
        }
    );
    Ok(())
}
