//! Matvec/matmul micro-benchmark: prints a markdown table of GPU time (timestamp queries),
//! GB/s of weights read and GFLOP/s.
//!
//! `cargo run --release -p vkllm-vk --example matmul_bench -- [--iters N] [--n TOKENS]
//! [--types f16,q8_0,q4_K,...] [ROWSxCOLS ...]`
//! Default shapes: 4096x4096 and 151936x1024 (the LM head of Qwen3-0.6B); default types F16,
//! F32, BF16. `--types` takes ggml names (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K,
//! q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs; case-insensitive) or `quant` for the real models'
//! five (q8_0, q4_1, q5_0, q4_K, q6_K). GB/s counts the weight bytes as stored (the quantized
//! blocks) plus x and y.
//! With `--n` > 1 on a device with cooperative matrices, each shape runs the portable matmul and
//! `matmul_coop` with each tiling of `--tiles SGMxSGNxWMxWN,...` (default: the 128x128, 64x128
//! and 64x64 tilings the runtime picks from); `VKLLM_TUNE=coopmat=0` leaves only the portable kernel.
//! `--configs TILE:BK:SPLIT[:STAGES],...` adds launches with a K step and split-K factor (TILE: `tiny`,
//! `small`, `large` or SGMxSGNxWMxWN; SPLIT `auto`: the runtime's split for the shape) and
//! `--auto` the runtime's own choice ([`MatmulKernel::Auto`]); `--no-portable` and `--tiles ''`
//! leave out the portable kernel and the plain tilings. `--configs` launches read X as f16
//! unless `VKLLM_TUNE=coop_x_f16=0` (as `--auto`'s do); the one `to_f16` conversion per shape is not
//! in the time. With quantized weights and n >= 512 the runtime's launch (`--auto`) may first
//! copy a large weight to f16 (coop_dequant.rs): the copy is in the time
//! (`VKLLM_TUNE=dequant=off` leaves it out). `--dequant` adds a `dequant_f16` row (that copy alone,
//! GB/s of blocks read and halves written) for each quantized type and shape. `--accumulate`
//! times `Y += X W^T` (the residual projections' form) instead of `Y = X W^T`.
//! `--cm2 MxNxK[t],...` adds `matmul_cm2` launches of those tiles (weight rows x tokens x K step;
//! `t`: the grid walks the token tiles first)
//! on devices with VK_NV_cooperative_matrix2 (f16 weights, quantized ones through their f16
//! copy, which is in the time).
//! The device comes from `VKLLM_DEVICE`; `VKLLM_VALIDATE=1` adds the validation layer.

use vkllm_vk::kernels::WeightType;
use vkllm_vk::kernels::matmul_coop::{CoopConfig, CoopTile};
use vkllm_vk::{Device, MatmulKernel, bench};

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
    let mut types = vec![WeightType::F16, WeightType::F32, WeightType::Bf16];
    let mut tiles = vec![CoopTile::LARGE, CoopTile::SMALL, CoopTile::TINY];
    let mut configs: Vec<ConfigArg> = Vec::new();
    let (mut auto, mut portable, mut dequant, mut acc) = (false, true, false, false);
    let mut cm2: Vec<vkllm_vk::kernels::matmul_cm2::CmTile> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = args.next().ok_or("--iters needs a value")?.parse()?,
            "--n" => n = args.next().ok_or("--n needs a value")?.parse()?,
            "--types" => types = parse_types(&args.next().ok_or("--types needs a value")?)?,
            "--tiles" => tiles = parse_tiles(&args.next().ok_or("--tiles needs a value")?)?,
            "--configs" => configs = parse_configs(&args.next().ok_or("--configs needs a value")?)?,
            "--auto" => auto = true,
            "--no-portable" => portable = false,
            "--dequant" => dequant = true,
            "--accumulate" => acc = true,
            "--cm2" => cm2 = parse_cm2(&args.next().ok_or("--cm2 needs a value")?)?,
            s => {
                let (r, c) = s
                    .split_once('x')
                    .ok_or(format!("shape {s}: expected ROWSxCOLS"))?;
                shapes.push((r.parse::<usize>()?, c.parse::<usize>()?));
            }
        }
    }
    if shapes.is_empty() {
        shapes = vec![(4096, 4096), (151_936, 1024)];
    }
    let dev = Device::from_env()?;
    println!("device: {}", dev.info().summary());
    let coop_shapes: Vec<String> = dev
        .info()
        .cooperative_matrix_shapes
        .iter()
        .map(|s| s.to_string())
        .collect();
    println!(
        "cooperative matrices: {} (shapes: {})\n",
        if dev.coopmat() { "on" } else { "off" },
        if coop_shapes.is_empty() {
            "none".to_string()
        } else {
            coop_shapes.join(", ")
        }
    );
    println!("{}", bench::MARKDOWN_HEADER);
    let mut kernels = vec![MatmulKernel::Portable];
    if n > 1 && dev.coopmat() {
        kernels.extend(tiles.iter().map(|&t| MatmulKernel::Coop(t)));
    }
    if n == 1 {
        kernels.truncate(1);
    } else if !portable {
        kernels.remove(0);
    }
    if n > 1 && auto {
        kernels.push(MatmulKernel::Auto);
    }
    if n > 1 && dev.coopmat2() {
        kernels.extend(cm2.iter().map(|&t| MatmulKernel::Cm2(t)));
    } else if !cm2.is_empty() {
        println!("| cm2 launches left out: the device does not run the cm2 kernels |");
    }
    let sg = dev.info().subgroup_size;
    for &(rows, cols) in &shapes {
        let mut kernels = kernels.clone();
        if n > 1 && dev.coopmat() {
            for &(tile, bk, split, stages) in &configs {
                let c = CoopConfig {
                    tile,
                    bk,
                    split: 1,
                    stages,
                    prefetch_quant: false,
                    x_f16: dev.tuning().coop_x_f16 && cols % 8 == 0,
                    direct: false,
                };
                let c = match split {
                    Some(s) => CoopConfig { split: s, ..c },
                    None => vkllm_vk::coop_with_split(
                        c,
                        rows,
                        n,
                        cols,
                        vkllm_vk::coop_split_target(dev.tuning(), types[0]),
                    ),
                };
                // The runtime's choice of epilogue.
                let direct = vkllm_vk::coop_direct_wanted(dev.tuning(), acc, c.split);
                let c = CoopConfig { direct, ..c };
                if c.fits_for(sg, types[0]) {
                    kernels.push(MatmulKernel::CoopWith(c));
                } else {
                    println!("| {c:?} does not fit subgroups of {sg} |");
                }
            }
        }
        for &dtype in &types {
            if dequant && dtype.is_quantized() {
                let r = bench::bench_dequant(&dev, dtype, rows, cols, iters)?;
                println!("{}", r.markdown_row());
            }
            for &k in &kernels {
                let r = bench::bench_matmul_with(&dev, dtype, rows, cols, n, iters, k, acc)?;
                println!("{}", r.markdown_row());
            }
        }
    }
    dev.check_validation()?;
    Ok(())
}

/// A `--configs` entry: tiling, K step, split (`None`: the runtime's for the shape), stages.
type ConfigArg = (CoopTile, u32, Option<u32>, u32);

fn parse_configs(list: &str) -> Result<Vec<ConfigArg>, String> {
    list.split(',')
        .map(|c| {
            let v: Vec<&str> = c.split(':').collect();
            let (tile, bk, split, stages) = match v[..] {
                [t, b, s] => (t, b, s, "2"),
                [t, b, s, st] => (t, b, s, st),
                _ => return Err(format!("config {c}: expected TILE:BK:SPLIT[:STAGES]")),
            };
            let stages = stages
                .parse::<u32>()
                .map_err(|e| format!("config {c}: {e}"))?;
            let tile = match tile {
                "tiny" => CoopTile::TINY,
                "small" => CoopTile::SMALL,
                "large" => CoopTile::LARGE,
                "wide" => CoopTile::WIDE,
                "tall" => CoopTile::TALL,
                t => parse_tiles(t)?[0],
            };
            let bk = bk.parse::<u32>().map_err(|e| format!("config {c}: {e}"))?;
            let split = match split {
                "auto" => None,
                s => Some(s.parse::<u32>().map_err(|e| format!("config {c}: {e}"))?),
            };
            Ok((tile, bk, split, stages))
        })
        .collect()
}

fn parse_tiles(list: &str) -> Result<Vec<CoopTile>, String> {
    list.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let v: Vec<u32> = t
                .split('x')
                .map(|d| d.parse::<u32>().map_err(|e| format!("tile {t}: {e}")))
                .collect::<Result<_, _>>()?;
            match v[..] {
                [sgm, sgn, wm, wn] => Ok(CoopTile { sgm, sgn, wm, wn }),
                _ => Err(format!("tile {t}: expected SGMxSGNxWMxWN")),
            }
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

/// `MxNxK[t],...` cm2 tiles (`t`: the token tiles first in the grid).
fn parse_cm2(s: &str) -> Result<Vec<vkllm_vk::kernels::matmul_cm2::CmTile>, String> {
    s.split(',')
        .map(|t| {
            let (dims, tokens_first) = match t.strip_suffix('t') {
                Some(d) => (d, true),
                None => (t, false),
            };
            let v: Vec<u32> = dims.split('x').filter_map(|x| x.parse().ok()).collect();
            match v[..] {
                [bm, bn, bk] => Ok(vkllm_vk::kernels::matmul_cm2::CmTile {
                    bm,
                    bn,
                    bk,
                    tokens_first,
                }),
                _ => Err(format!("--cm2 {t}: expected MxNxK or MxNxKt")),
            }
        })
        .collect()
}
