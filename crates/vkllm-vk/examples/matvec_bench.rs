//! Matvec micro-benchmark: prints a markdown table of GPU time (timestamp queries), GB/s of
//! bytes moved (weights as stored, plus x and y) and the share of the copy kernel's bandwidth.
//!
//! `cargo run --release -p vkllm-vk --example matvec_bench -- [--iters N] [--n COLUMNS] [--cold MB]
//! [--types f16,q8_0,q4_K,...] [--impl fast|ref|both] [--fusion plain,norm,qkv,gate_up]
//! [--tuning WGxLANESxROWS | --sweep] [--matmul] [ROWSxCOLS ...]`
//!
//! - Default shapes: the Qwen3-0.6B decode set (1024x1024, 2048x1024, 3072x1024, 1024x3072) plus
//!   4096x4096, 16384x4096 (128 MiB in F16) and 151936x1024 (its LM head; 311 MB in F16, 165 MB
//!   in Q8_0). Default types F16, Q8_0, Q4_K.
//! - `--types` takes ggml names (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K,
//!   q4_K, q5_K, q6_K, iq4_nl, iq4_xs; case-insensitive) or `quant` for the real models' five.
//! - `--impl`: the fast kernel (`matvec_fused.wgsl`, default), the reference (`matvec.wgsl` /
//!   `mat_quant.wgsl`; plain, one column only), both, `int8` (`matvec_q8a.wgsl`: int8 dot
//!   products over quantized activations, where the type and device allow; the fast kernel
//!   elsewhere) or `fast,int8`.
//! - `--fusion`: `plain` (y = W x), `norm` (RMSNorm prologue), `qkv` (three parts 2:1:1 of ROWS
//!   into one output, with the norm), `gate_up` (gate and up of ROWS rows each + silu, with the
//!   norm). Comma-separated for several.
//! - `--n`: activation columns (1..=8) for the fast kernel; `--matmul` times the tiled matmul
//!   with `--n` tokens instead (the prefill kernel).
//! - `--q8a-wgs N`: the workgroups the int8 kernel's grid aims for (each walks more row groups
//!   when the matrix has more; default: 4096 for large K-quant matrices, else 1024).
//! - `--cold MB`: each row rotates over enough weight copies to pass MB (the GPU's last-level
//!   cache, e.g. 50 on an H100 or H200) twice, so weights stream from memory as in a decode step
//!   instead of staying cached across the repeats (default 0: one copy).
//! - `--tuning 128x32x1[,256x16x1...]`: workgroup size x lanes per row x rows per team, one
//!   row per tuning (default: the kernel's choice per shape); `--sweep` runs each fast row over workgroups 64/128/256 x
//!   lanes 8/16/32 x 1/2/4 rows per team (the last column names the tuning).
//!
//! - `--product-only`: time only each call's last dispatch (with tuning `q8a_xg1`, the product on
//!   quantized x without the `quantize_act_q8` launch before it).
//!
//! The copy roof is measured first (the `copy` kernel on 1 GiB, or the largest buffer). The device comes from
//! `VKLLM_DEVICE`; `VKLLM_VALIDATE=1` adds the validation layer.

use vkllm_vk::bench::{self, MatvecBench, MatvecFusion};
use vkllm_vk::kernels::WeightType;
use vkllm_vk::kernels::matvec_fused::{MatvecImpl, MatvecTuning};
use vkllm_vk::{Device, Error};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut iters = 20u32;
    let mut n = 1usize;
    let mut shapes = Vec::new();
    let mut types = vec![WeightType::F16, WeightType::Q8_0, WeightType::Q4_K];
    let mut imps = vec![MatvecImpl::Fast];
    let mut fusions = vec![MatvecFusion::Plain];
    let mut tunings = vec![None];
    let mut sweep = false;
    let mut matmul = false;
    let mut q8a_wgs: Option<u32> = None;
    let mut cold_mb = 0u64;
    let mut last_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--iters" => iters = value()?.parse()?,
            "--n" => n = value()?.parse()?,
            "--types" => types = parse_types(&value()?)?,
            "--impl" => {
                imps = match value()?.as_str() {
                    "fast" => vec![MatvecImpl::Fast],
                    "ref" | "reference" => vec![MatvecImpl::Reference],
                    "both" => vec![MatvecImpl::Reference, MatvecImpl::Fast],
                    "int8" => vec![MatvecImpl::Int8],
                    "fast,int8" => vec![MatvecImpl::Fast, MatvecImpl::Int8],
                    s => {
                        return Err(format!(
                            "--impl {s}: expected fast, ref, both, int8 or fast,int8"
                        )
                        .into());
                    }
                }
            }
            "--fusion" => fusions = parse_fusions(&value()?)?,
            "--tuning" => {
                tunings = value()?
                    .split(',')
                    .map(|t| parse_tuning(t.trim()).map(Some))
                    .collect::<Result<_, _>>()?
            }
            "--sweep" => sweep = true,
            "--q8a-wgs" => q8a_wgs = Some(value()?.parse()?),
            "--matmul" => matmul = true,
            "--cold" => cold_mb = value()?.parse()?,
            "--product-only" => last_only = true,
            s => {
                let (r, c) = s
                    .split_once('x')
                    .ok_or(format!("shape {s}: expected ROWSxCOLS"))?;
                shapes.push((r.parse::<usize>()?, c.parse::<usize>()?));
            }
        }
    }
    if shapes.is_empty() {
        shapes = vec![
            (1024, 1024),
            (2048, 1024),
            (3072, 1024),
            (1024, 3072),
            (4096, 4096),
            (16384, 4096),
            (151_936, 1024),
        ];
    }
    if sweep {
        tunings = Vec::new();
        for wg in [64, 128, 256] {
            for lanes in [8, 16, 32] {
                for rows_per_team in [1, 2, 4] {
                    tunings.push(Some(MatvecTuning {
                        wg,
                        lanes,
                        rows_per_team,
                    }));
                }
            }
        }
    }
    // The tuning from VKLLM_TUNE, with --q8a-wgs on top.
    let mut opts = vkllm_vk::DeviceOptions::from_env()?;
    if let Some(n) = q8a_wgs {
        opts.tuning.q8a_workgroups = n;
    }
    let dev = Device::new(&opts)?;
    println!("device: {}", dev.info().summary());
    if imps.contains(&MatvecImpl::Int8) && !dev.int8_dot() {
        println!("(no integer dot products on this device: int8 rows run the fast kernel)");
    }
    let copy_bytes = (1u64 << 30).min(dev.max_buffer_bytes() / 16 * 16);
    let roof = bench::bench_copy(&dev, copy_bytes, iters)?;
    println!(
        "copy kernel ({} MiB, read + write): {roof:.1} GB/s\n",
        copy_bytes >> 20
    );
    println!("| op | weights | shape | time (us) | GB/s | GFLOP/s | % copy | tuning |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for &(rows, cols) in &shapes {
        for &dtype in &types {
            if matmul {
                let r = bench::bench_matmul(&dev, dtype, rows, cols, n, iters)?;
                println!("{} {:.0} | |", r.markdown_row(), 100.0 * r.gb_per_s / roof);
                continue;
            }
            for &fusion in &fusions {
                for &imp in &imps {
                    let ts: &[Option<MatvecTuning>] = if imp == MatvecImpl::Reference {
                        &[None]
                    } else {
                        &tunings
                    };
                    for &tuning in ts {
                        let b = MatvecBench {
                            last_only,
                            dtype,
                            rows,
                            cols,
                            n,
                            imp,
                            fusion,
                            tuning,
                            iters,
                            copies: match cold_mb {
                                0 => 1,
                                mb => bench::cold_copies(
                                    dtype.storage_bytes((rows * cols) as u64),
                                    mb.saturating_mul(1 << 20),
                                ),
                            },
                        };
                        let tag = match tuning {
                            Some(t) => format!("{}x{}x{}", t.wg, t.lanes, t.rows_per_team),
                            None => "default".to_string(),
                        };
                        match bench::bench_matvec(&dev, &b) {
                            Ok(r) => println!(
                                "{} {:.0} | {tag} |",
                                r.markdown_row(),
                                100.0 * r.gb_per_s / roof
                            ),
                            // A shape or variant a kernel does not take: say so, keep going.
                            Err(
                                e @ (Error::Shape(_) | Error::Unfusable { .. } | Error::Kernel(_)),
                            ) => println!(
                                "| {} {} | {} | {rows}x{cols} (n={n}) | skipped: {e} | | | | {tag} |",
                                fusion.name(),
                                match imp {
                                    MatvecImpl::Reference => "ref",
                                    MatvecImpl::Int8 => "int8",
                                    MatvecImpl::Fast => "fast",
                                },
                                dtype.name()
                            ),
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
        }
    }
    dev.check_validation()?;
    Ok(())
}

fn parse_tuning(s: &str) -> Result<MatvecTuning, String> {
    let v: Vec<u32> = s
        .split('x')
        .map(|p| p.parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tuning {s}: {e}"))?;
    match v[..] {
        [wg, lanes, rows_per_team] => Ok(MatvecTuning {
            wg,
            lanes,
            rows_per_team,
        }),
        _ => Err(format!("--tuning {s}: expected WGxLANESxROWS")),
    }
}

fn parse_fusions(list: &str) -> Result<Vec<MatvecFusion>, String> {
    list.split(',')
        .map(|f| match f {
            "plain" => Ok(MatvecFusion::Plain),
            "norm" => Ok(MatvecFusion::Norm),
            "qkv" => Ok(MatvecFusion::Qkv),
            "gate_up" => Ok(MatvecFusion::GateUp),
            _ => Err(format!(
                "unknown fusion {f}: expected plain, norm, qkv, gate_up"
            )),
        })
        .collect()
}

fn parse_types(list: &str) -> Result<Vec<WeightType>, String> {
    let all = [WeightType::F32, WeightType::F16, WeightType::Bf16]
        .into_iter()
        .chain(WeightType::QUANTIZED);
    let all: Vec<WeightType> = all.collect();
    let mut out = Vec::new();
    for name in list.split(',') {
        if name.eq_ignore_ascii_case("quant") {
            out.extend([
                WeightType::Q8_0,
                WeightType::Q4_1,
                WeightType::Q5_0,
                WeightType::Q4_K,
                WeightType::Q6_K,
            ]);
            continue;
        }
        let t = all
            .iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
            .ok_or(format!("unknown weight type {name}"))?;
        out.push(*t);
    }
    Ok(out)
}
