//! Diagnostic probe of `attn_prefill_cm2` (not a benchmark): a tiny causal case with one-hot
//! queries and keys and values v[j][d] = j + d / 100, each PROBE mode's first-step intermediate
//! printed beside the output, then the CPU attention.
//!
//! `cargo run --release -p vkllm-vk --example attn_probe -- [N_Q] [HD] [HEADS/KV_HEADS]`

use vkllm_vk::kernels::attention::AttnShape;
use vkllm_vk::kernels::attention_prefill_cm2::CmAttnTile;
use vkllm_vk::kernels::attention_prefill_coop::AttnPrefillCoop;
use vkllm_vk::kernels::kv_append::KvType;
use vkllm_vk::{Device, MemoryKind, Recorder};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n_q: usize = args.first().map(|s| s.parse()).transpose()?.unwrap_or(4);
    let hd: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(16);
    let (nh, nkv): (usize, usize) = match args.get(2) {
        Some(s) => {
            let (a, b) = s.split_once('/').ok_or("HEADS/KV")?;
            (a.parse()?, b.parse()?)
        }
        None => (1, 1),
    };
    let dev = Device::from_env()?;
    println!("coopmat2: {}", dev.coopmat2());
    let n_kv = n_q;
    let mut q = vec![0f32; n_q * nh * hd];
    for i in 0..n_q {
        for h in 0..nh {
            q[(i * nh + h) * hd + (i + h) % hd] = 1.0;
        }
    }
    let mut k = vec![half::f16::ZERO; n_kv * nkv * hd];
    let mut v = vec![half::f16::ZERO; n_kv * nkv * hd];
    for j in 0..n_kv {
        for h in 0..nkv {
            k[(j * nkv + h) * hd + j % hd] = half::f16::ONE;
            for d in 0..hd {
                v[(j * nkv + h) * hd + d] = half::f16::from_f32(j as f32 + d as f32 / 100.0);
            }
        }
    }
    let pack = |x: &[half::f16]| -> Vec<u32> {
        x.chunks(2)
            .map(|c| c[0].to_bits() as u32 | ((c[1].to_bits() as u32) << 16))
            .collect()
    };
    let shape = AttnShape {
        n_q,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        n_kv,
        scale: 1.0,
        softcap: None,
        window: None,
        kv: KvType::F16,
        kv_v: KvType::F16,
        rot_k: false,
        kv_stride: 0,
        ring: None,
    };
    let qb = dev.buffer_from("q", &q)?;
    let kb = dev.buffer_from("k", &pack(&k))?;
    let vb = dev.buffer_from("v", &pack(&v))?;
    let pos: Vec<u32> = (0..n_q as u32).collect();
    let pb = dev.buffer_from("pos", &pos)?;
    let out = dev.create_buffer("out", 4 * q.len() as u64, MemoryKind::Device)?;
    let t0 = CmAttnTile::for_shape(&shape).ok_or("shape")?;
    for probe in 0..=5 {
        let t = CmAttnTile { probe, ..t0 };
        let mut r = Recorder::new(&dev)?;
        r.fill(out.all(), 0x7fc0_0000)?;
        let a = AttnPrefillCoop {
            q: qb.all(),
            k: kb.all(),
            v: vb.all(),
            q_pos: pb.all(),
            out: out.all(),
        };
        r.dispatch(a.dispatch_cm2(&shape, 0, t, None, None)?)?;
        r.finish()?.submit()?;
        let o: Vec<f32> = dev.read_vec(&out, q.len())?;
        println!("probe {probe}:");
        for row in 0..(n_q * nh).min(8) {
            let x: Vec<String> = o[row * hd..row * hd + hd.min(8)]
                .iter()
                .map(|x| format!("{x:8.3}"))
                .collect();
            println!("  row {row}: {}", x.join(" "));
        }
    }
    println!("cpu:");
    for i in 0..n_q.min(8) {
        for h in 0..nh {
            let kvh = h / (nh / nkv);
            let s: Vec<f32> = (0..=i)
                .map(|j| if (i + h) % hd == j % hd { 1.0 } else { 0.0 })
                .collect();
            let m = s.iter().cloned().fold(f32::MIN, f32::max);
            let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
            let l: f32 = e.iter().sum();
            let x: Vec<String> = (0..hd.min(8))
                .map(|d| {
                    let acc: f32 = (0..=i)
                        .map(|j| e[j] * v[(j * nkv + kvh) * hd + d].to_f32())
                        .sum();
                    format!("{:8.3}", acc / l)
                })
                .collect();
            if i * nh + h < 8 {
                println!("  row {}: {}", i * nh + h, x.join(" "));
            }
        }
    }
    Ok(())
}
