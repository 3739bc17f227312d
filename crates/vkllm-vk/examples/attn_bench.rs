//! Prefill-attention micro-benchmark: `attn_prefill_coop2` alone on chunks deep in a cache, by
//! timestamp queries. Prints a markdown table of the median GPU time of one launch and its
//! TFLOP/s (4 x head_dim per visible (query head, key) pair: Q K^T and P V).
//!
//! `cargo run --release -p vkllm-vk --example attn_bench -- [--chunks 512@32768,256@8192]
//! [--heads 32/8] [--hd 128] [--kv f16|f32] [--nsg 4,2] [--split auto,1,2] [--skip 0,15]
//! [--bk 32,64] [--vahead 1,0] [--kernel coop2,cm2] [--cm2-tile 64x64,128x32]
//! [--cm2-sum reduce,mma] [--cm2-prefetch 0,1] [--cm2-qscale 0,1] [--cm2-unclamped 0,1]
//! [--cm2-stats16 0,1] [--cm2-ohalf 0,1]
//! [--iters N]`
//!
//! `--kernel cm2` adds rows for the workgroup-scope kernel (`attn_prefill_cm2`, f16 K/V on
//! devices with VK_NV_cooperative_matrix2), one per tile, row-sum form, prefetch, folded scale
//! and `--split`.
//!
//! A chunk `N@P` is N queries at positions P..P + N over a cache of P + N keys (causal, no
//! window). Inputs are uniform in [-1, 1] (q, k) and [-1, 1] (v). `--skip` takes the kernel's
//! timing-diagnostic masks (1 exp, 2 K/V loads, 4 Q K^T, 8 P V; the output is then wrong).
//! The device comes from `VKLLM_DEVICE`.

use vkllm_vk::kernels::attention::AttnShape;
use vkllm_vk::kernels::attention_prefill_cm2::CmAttnTile;
use vkllm_vk::kernels::attention_prefill_coop::AttnPrefillCoop;
use vkllm_vk::kernels::attention_prefill_coop2::{CoopAttn2Scratch, CoopAttn2Tile};
use vkllm_vk::kernels::kv_append::KvType;
use vkllm_vk::{Device, MemoryKind, Recorder};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, String> {
    s.split(',')
        .map(|x| x.parse::<T>().map_err(|_| format!("bad list entry {x}")))
        .collect()
}

/// A comma-separated list of 0 / 1 switches.
fn flags(s: &str) -> Result<Vec<bool>, String> {
    Ok(list::<u8>(s)?.into_iter().map(|x| x != 0).collect())
}

/// Uniform values in [-1, 1) from a 64-bit LCG, rounded to f16 and packed in pairs.
fn halves(n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let u = ((s >> 40) as f32) / (1u64 << 24) as f32;
        half::f16::from_f32(2.0 * u - 1.0).to_bits() as u32
    };
    (0..n.div_ceil(2))
        .map(|_| next() | (next() << 16))
        .collect()
}

struct Args {
    chunks: Vec<(usize, usize)>,
    heads: (usize, usize),
    hd: usize,
    kv: KvType,
    nsg: Vec<u32>,
    split: Vec<Option<u32>>,
    skip: Vec<u32>,
    bk: Vec<u32>,
    vahead: Vec<bool>,
    kernels: Vec<String>,
    cm2_tiles: Vec<(u32, u32)>,
    cm2_sum: Vec<bool>,
    cm2_prefetch: Vec<bool>,
    cm2_qscale: Vec<bool>,
    cm2_unclamped: Vec<bool>,
    cm2_stats16: Vec<bool>,
    cm2_ohalf: Vec<bool>,
    iters: u32,
}

fn parse() -> Result<Args, Box<dyn std::error::Error>> {
    let mut a = Args {
        chunks: vec![(512, 32768), (256, 8192), (64, 8192)],
        heads: (32, 8),
        hd: 128,
        kv: KvType::F16,
        nsg: vec![4],
        split: vec![None],
        skip: vec![0],
        bk: vec![32],
        vahead: vec![true],
        kernels: vec!["coop2".into()],
        cm2_tiles: Vec::new(),
        cm2_sum: vec![false],
        cm2_prefetch: vec![false],
        cm2_qscale: vec![true],
        cm2_unclamped: vec![true],
        cm2_stats16: vec![true],
        cm2_ohalf: vec![false],
        iters: 5,
    };
    let mut args = std::env::args().skip(1);
    while let Some(k) = args.next() {
        let v = args.next().ok_or(format!("{k} needs a value"))?;
        match k.as_str() {
            "--chunks" => {
                a.chunks = v
                    .split(',')
                    .map(|c| {
                        let (n, p) = c.split_once('@').ok_or(format!("chunk {c}: N@POS"))?;
                        Ok::<_, String>((
                            n.parse().map_err(|_| format!("chunk {c}"))?,
                            p.parse().map_err(|_| format!("chunk {c}"))?,
                        ))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--heads" => {
                let (h, kvh) = v.split_once('/').ok_or("--heads H/KVH")?;
                a.heads = (h.parse()?, kvh.parse()?);
            }
            "--hd" => a.hd = v.parse()?,
            "--kv" => {
                a.kv = match v.as_str() {
                    "f16" => KvType::F16,
                    "f32" => KvType::F32,
                    _ => return Err("--kv f16|f32".into()),
                }
            }
            "--nsg" => a.nsg = list(&v)?,
            "--split" => {
                a.split = v
                    .split(',')
                    .map(|s| match s {
                        "auto" => Ok(None),
                        s => s.parse().map(Some).map_err(|_| format!("split {s}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--skip" => a.skip = list(&v)?,
            "--bk" => a.bk = list(&v)?,
            "--vahead" => a.vahead = flags(&v)?,
            "--kernel" => a.kernels = v.split(',').map(str::to_string).collect(),
            "--cm2-prefetch" => a.cm2_prefetch = flags(&v)?,
            "--cm2-qscale" => a.cm2_qscale = flags(&v)?,
            "--cm2-unclamped" => a.cm2_unclamped = flags(&v)?,
            "--cm2-stats16" => a.cm2_stats16 = flags(&v)?,
            "--cm2-ohalf" => a.cm2_ohalf = flags(&v)?,
            "--cm2-sum" => {
                a.cm2_sum = v
                    .split(',')
                    .map(|x| match x {
                        "reduce" => Ok(false),
                        "mma" => Ok(true),
                        _ => Err(format!("--cm2-sum reduce|mma, not {x}")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--cm2-tile" => {
                a.cm2_tiles = v
                    .split(',')
                    .map(|t| {
                        let (r, c) = t.split_once('x').ok_or(format!("tile {t}: ROWSxKEYS"))?;
                        Ok::<_, String>((
                            r.parse().map_err(|_| format!("tile {t}"))?,
                            c.parse().map_err(|_| format!("tile {t}"))?,
                        ))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--iters" => a.iters = v.parse()?,
            _ => return Err(format!("unknown option {k}").into()),
        }
    }
    Ok(a)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let a = parse()?;
    let dev = Device::from_env()?;
    println!("device: {}", dev.info().summary());
    if !dev.coopmat() {
        return Err("the kernel needs cooperative matrices".into());
    }
    let sg = dev.info().subgroup_size;
    let (n_heads, n_kv_heads) = a.heads;
    let hd = a.hd;
    println!("\n| chunk | heads | hd | kv | nsg | bk | v ahead | split | skip | us | TFLOP/s |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for &(n_q, pos0) in &a.chunks {
        let n_kv = pos0 + n_q;
        let kv_words = match a.kv {
            KvType::F32 => n_kv * n_kv_heads * hd,
            _ => n_kv * n_kv_heads * hd / 2,
        };
        let k_data: Vec<u32> = match a.kv {
            KvType::F32 => halves(2 * kv_words, 1)
                .iter()
                .flat_map(|w| [w & 0xffff, w >> 16])
                .map(|h| half::f16::from_bits(h as u16).to_f32().to_bits())
                .collect(),
            _ => halves(2 * kv_words, 1),
        };
        let q: Vec<f32> = halves(n_q * n_heads * hd, 3)
            .iter()
            .flat_map(|w| [w & 0xffff, w >> 16])
            .map(|h| half::f16::from_bits(h as u16).to_f32())
            .collect();
        let pos: Vec<u32> = (pos0..pos0 + n_q).map(|p| p as u32).collect();
        let qb = dev.buffer_from("bench-q", &q)?;
        let kb = dev.buffer_from("bench-k", &k_data)?;
        let vb = dev.buffer_from("bench-v", &k_data)?;
        let pb = dev.buffer_from("bench-pos", &pos)?;
        let out = dev.create_buffer(
            "bench-out",
            4 * (n_q * n_heads * hd) as u64,
            MemoryKind::Device,
        )?;
        drop(k_data);
        let shape = AttnShape {
            n_q,
            n_heads,
            n_kv_heads,
            head_dim: hd,
            n_kv,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap: None,
            window: None,
            kv: a.kv,
            kv_v: a.kv,
            rot_k: false,
            kv_stride: 0,
            ring: None,
        };
        let pairs: f64 = (0..n_q).map(|i| (pos0 + i + 1) as f64).sum();
        let flops = 4.0 * hd as f64 * n_heads as f64 * pairs;
        if a.kernels.iter().any(|k| k == "cm2") {
            let bufs = [&qb, &kb, &vb, &pb, &out];
            bench_cm2(&dev, &a, &shape, pos0, bufs, flops)?;
        }
        if !a.kernels.iter().any(|k| k == "coop2") {
            continue;
        }
        for &nsg in &a.nsg {
            for &bk in &a.bk {
                let group = n_heads / n_kv_heads;
                let Some(t0) = CoopAttn2Tile::with_nsg(nsg, hd, group, sg, a.kv) else {
                    println!("| {n_q}@{pos0} | nsg {nsg} does not fit |");
                    continue;
                };
                let t0 = CoopAttn2Tile { bk, ..t0 };
                for &split in &a.split {
                    let cu = dev.info().compute_units;
                    let want = split.unwrap_or_else(|| t0.auto_split(&shape, pos0, cu));
                    let t = t0.with_split(want, n_q, pos0);
                    let part = dev.create_buffer(
                        "bench-part",
                        t.part_bytes(&shape).max(4),
                        MemoryKind::Device,
                    )?;
                    let ctr = dev.create_buffer(
                        "bench-ctr",
                        t.counter_bytes(&shape).max(4),
                        MemoryKind::Device,
                    )?;
                    for (&skip, &v_ahead) in a
                        .skip
                        .iter()
                        .flat_map(|s| a.vahead.iter().map(move |v| (s, v)))
                    {
                        let t = CoopAttn2Tile { skip, v_ahead, ..t };
                        let mut r = Recorder::with_timestamps(&dev, a.iters)?;
                        r.fill(ctr.all(), 0)?;
                        for _ in 0..a.iters {
                            let d = AttnPrefillCoop {
                                q: qb.all(),
                                k: kb.all(),
                                v: vb.all(),
                                q_pos: pb.all(),
                                out: out.all(),
                            };
                            let scratch = (t.split > 1).then(|| CoopAttn2Scratch {
                                part: part.all(),
                                ctr: ctr.all(),
                            });
                            r.dispatch(d.dispatch_v2_full(&shape, pos0, sg, t, None, scratch)?)?;
                        }
                        let ns = vkllm_vk::bench::median_dispatch_ns(&r.finish()?)?;
                        println!(
                            "| {n_q}@{pos0} | {n_heads}/{n_kv_heads} | {hd} | {} | {nsg} | {} | {} | \
                             {} (from {}) | {skip} | {:.1} | {:.1} |",
                            a.kv.name(),
                            t.bk,
                            u8::from(v_ahead),
                            t.split,
                            t.split_min,
                            ns / 1e3,
                            flops / ns / 1e3
                        );
                    }
                }
            }
        }
    }
    dev.check_validation()?;
    Ok(())
}

/// Rows for the workgroup-scope kernel (`attn_prefill_cm2`), one per `--split`.
fn bench_cm2(
    dev: &Device,
    a: &Args,
    shape: &AttnShape,
    pos0: usize,
    [qb, kb, vb, pb, out]: [&vkllm_vk::Buffer; 5],
    flops: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let n_q = shape.n_q;
    let Some(fit) = CmAttnTile::for_shape(shape).filter(|_| dev.coopmat2()) else {
        println!("| {n_q}@{pos0} | cm2 does not run here |");
        return Ok(());
    };
    let tiles = match a.cm2_tiles.is_empty() {
        true => vec![(fit.br, fit.bc)],
        false => a.cm2_tiles.clone(),
    };
    for (br, bc) in tiles {
        let device_fits = |t: &CmAttnTile| dev.info().cm2_attn_fits(t, shape.head_dim);
        let Some(t0) = fit.with_tile(br, bc, shape).filter(device_fits) else {
            println!("| {n_q}@{pos0} | cm2 {br}x{bc} does not fit |");
            continue;
        };
        // Every combination of the listed options.
        let mut variants = vec![t0];
        let mut each = |set: fn(&mut CmAttnTile, bool), values: &[bool]| {
            variants = variants
                .iter()
                .flat_map(|t| {
                    values.iter().map(move |&x| {
                        let mut t = *t;
                        set(&mut t, x);
                        t
                    })
                })
                .collect();
        };
        each(|t, x| t.sum_mma = x, &a.cm2_sum);
        each(|t, x| t.prefetch = x, &a.cm2_prefetch);
        each(|t, x| t.qscale = x, &a.cm2_qscale);
        each(|t, x| t.unclamped = x, &a.cm2_unclamped);
        each(|t, x| t.stats16 = x, &a.cm2_stats16);
        each(|t, x| t.o_halves = x, &a.cm2_ohalf);
        for t in variants {
            bench_cm2_tile(dev, a, shape, pos0, [qb, kb, vb, pb, out], flops, t)?;
        }
    }
    Ok(())
}

/// [`bench_cm2`]'s rows for one tile.
#[allow(clippy::too_many_arguments)]
fn bench_cm2_tile(
    dev: &Device,
    a: &Args,
    shape: &AttnShape,
    pos0: usize,
    [qb, kb, vb, pb, out]: [&vkllm_vk::Buffer; 5],
    flops: f64,
    t0: CmAttnTile,
) -> Result<(), Box<dyn std::error::Error>> {
    let n_q = shape.n_q;
    for &split in &a.split {
        let cu = dev.info().compute_units;
        let want = split.unwrap_or_else(|| t0.auto_split(shape, pos0, cu));
        let t = t0.with_split(want, n_q, pos0);
        let part =
            dev.create_buffer("bench-part", t.part_bytes(shape).max(4), MemoryKind::Device)?;
        let ctr = dev.create_buffer(
            "bench-ctr",
            t.counter_bytes(shape).max(4),
            MemoryKind::Device,
        )?;
        let mut r = Recorder::with_timestamps(dev, a.iters)?;
        r.fill(ctr.all(), 0)?;
        for _ in 0..a.iters {
            let d = AttnPrefillCoop {
                q: qb.all(),
                k: kb.all(),
                v: vb.all(),
                q_pos: pb.all(),
                out: out.all(),
            };
            let scratch = (t.split > 1).then(|| CoopAttn2Scratch {
                part: part.all(),
                ctr: ctr.all(),
            });
            r.dispatch(d.dispatch_cm2(shape, pos0, t, None, scratch)?)?;
        }
        let ns = vkllm_vk::bench::median_dispatch_ns(&r.finish()?)?;
        println!(
            "| {n_q}@{pos0} | {}/{} | {} | {} | cm2 {}x{}{}{}{}{}{} | - | - | {} (from {}) | - | {:.1} | {:.1} |",
            shape.n_heads,
            shape.n_kv_heads,
            shape.head_dim,
            shape.kv.name(),
            t.br,
            t.bc,
            match (t.sum_mma, t.prefetch) {
                (false, false) => "",
                (true, false) => " mma sums",
                (false, true) => " prefetch",
                (true, true) => " mma sums, prefetch",
            },
            if t.qscale { ", qscale" } else { "" },
            if t.unclamped { ", unclamped" } else { "" },
            if t.stats16 { ", stats16" } else { "" },
            if t.o_halves { ", ohalf" } else { "" },
            t.split,
            t.split_min,
            ns / 1e3,
            flops / ns / 1e3
        );
    }
    Ok(())
}
