//! Matvec/matmul micro-benchmark: prints a markdown table of GPU time (timestamp queries),
//! GB/s of weights read and GFLOP/s.
//!
//! `cargo run --release -p vkllm-vk --example matvec_bench -- [--iters N] [--n TOKENS] [ROWSxCOLS ...]`
//! Default shapes: 4096x4096 and 151936x1024 (the LM head of Qwen3-0.6B), F16 and F32 (BF16 too).
//! The device comes from `VKLLM_DEVICE`; `VKLLM_VALIDATE=1` adds the validation layer.

use vkllm_vk::kernels::WeightType;
use vkllm_vk::{Device, bench};

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
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => iters = args.next().ok_or("--iters needs a value")?.parse()?,
            "--n" => n = args.next().ok_or("--n needs a value")?.parse()?,
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
    println!("device: {}\n", dev.info().summary());
    println!("{}", bench::MARKDOWN_HEADER);
    for &(rows, cols) in &shapes {
        for dtype in [WeightType::F16, WeightType::F32, WeightType::Bf16] {
            let r = bench::bench_matmul(&dev, dtype, rows, cols, n, iters)?;
            println!("{}", r.markdown_row());
        }
    }
    dev.check_validation()?;
    Ok(())
}
