//! The MoE feed-forward block as one op (`Backend::moe_ffn`): on the Vulkan backend with the
//! int8 matvec (tuning `matvec=int8`, what GPUs run by default) the norm goes into the router's
//! and the experts' gate/up products and the residual add into down's; with `fused=0` the same
//! op runs as its separate ops. Both must give the CPU reference's `x + experts(norm(x))`
//! within the int8 kernels' error (x and the activations quantized per 32 to 8 bits: about 1%
//! RMS on these random weights; bound NMSE 1e-3, max 3% of the largest output), and each other
//! to f32 rounding (the same int8 products, the norm's scale applied before or after them), for
//! Q8_0 and Q4_K experts, a stacked shared expert, one token and three. Under the validation
//! layer.

mod common;

use vkllm_cpu::quant::{QuantType, dequantize_row, quantize_row};
use vkllm_models::backend::{Backend, Experts, Linear, MoeFfn, moe_scratch_words};
use vkllm_models::family::Activation;
use vkllm_models::{CpuBackend, VulkanBackend};

const H: usize = 256;
const FF: usize = 256;
const E: usize = 6;
const K: usize = 2;

struct Inputs {
    x: Vec<f32>,
    norm: Vec<f32>,
    router: Vec<f32>,
    blocks: [Vec<u8>; 3],
    ty: QuantType,
}

fn inputs(n: usize, ty: QuantType, seed: u64) -> Inputs {
    let mut s = seed;
    // Stacked: E routed experts and the shared one (E + 1), router rows E + the shared gate.
    let ne = E + 1;
    let q = |s: &mut u64, rows: usize, cols: usize| {
        quantize_row(ty, &common::rand(s, rows * cols, 0.1)).expect("quantize")
    };
    Inputs {
        x: common::rand(&mut s, n * H, 1.0),
        norm: common::norm_weight(&mut s, H),
        router: common::rand(&mut s, (E + 1) * H, 0.2),
        blocks: [
            q(&mut s, ne * FF, H),
            q(&mut s, ne * FF, H),
            q(&mut s, ne * H, FF),
        ],
        ty,
    }
}

/// `x + moe(norm(x))` on backend `b` (quantized expert blocks where `raw`, else f32).
fn run<B: Backend>(b: &mut B, inp: &Inputs, n: usize, raw: bool) -> Vec<f32> {
    let ne = E + 1;
    let shapes = [(ne * FF, H), (ne * FF, H), (ne * H, FF)];
    let mut mats = Vec::new();
    for (bytes, (rows, cols)) in inp.blocks.iter().zip(shapes) {
        let t = if raw {
            b.upload_matrix_raw(inp.ty, bytes, rows, cols)
                .expect("upload")
                .expect("the backend keeps the blocks")
        } else {
            let mut f = vec![0f32; rows * cols];
            dequantize_row(inp.ty, bytes, &mut f).expect("dequantize");
            b.upload_matrix(&f, rows, cols).expect("upload")
        };
        mats.push(t);
    }
    let experts = Experts {
        gate: mats[0],
        up: mats[1],
        down: mats[2],
        n_experts: ne,
        hidden: H,
        ff: FF,
    };
    let router = Linear {
        weight: b.upload_matrix(&inp.router, E + 1, H).expect("router"),
        bias: None,
        rows: E + 1,
        cols: H,
    };
    let x = b.upload_f32(&inp.x).expect("x");
    let norm = b.upload_f32(&inp.norm).expect("norm");
    let words = moe_scratch_words(n, K + 1, H, FF, ne);
    let a = MoeFfn {
        x,
        norm,
        eps: 1e-6,
        norm_offset: 0.0,
        n,
        h: b.alloc_f32(n * H).expect("h"),
        router: &router,
        logits: b.alloc_f32(n * (E + 1)).expect("logits"),
        n_experts: E,
        top_k: K,
        renormalize: true,
        shared: true,
        experts: &experts,
        act: Activation::Silu,
        ids: b.alloc_u32((n * (K + 1)).next_multiple_of(4)).expect("ids"),
        weights: b.alloc_f32((n * (K + 1)).next_multiple_of(4)).expect("w"),
        scratch: b.alloc_f32(words).expect("scratch"),
        out: b.alloc_f32(n * H).expect("out"),
    };
    b.moe_ffn(&a).expect("moe_ffn");
    let mut out = vec![0f32; n * H];
    b.read_f32(x, 0, &mut out).expect("read");
    out
}

#[test]
fn int8_moe_ffn_matches_cpu() {
    let fused_dev = common::int8_device(|t| t.fused = true);
    let unfused_dev = common::int8_device(|t| t.fused = false);
    for (ty, n, seed) in [
        (QuantType::Q8_0, 1, 1u64),
        (QuantType::Q4_K, 1, 2),
        (QuantType::Q8_0, 3, 3),
    ] {
        let inp = inputs(n, ty, seed);
        // The experts' sums (x itself cancels).
        let delta =
            |v: Vec<f32>| -> Vec<f32> { v.iter().zip(&inp.x).map(|(a, b)| a - b).collect() };
        let want = delta(run(&mut CpuBackend::new(), &inp, n, false));
        let fused = delta(run(
            &mut VulkanBackend::new(fused_dev.clone()),
            &inp,
            n,
            true,
        ));
        let unfused = delta(run(
            &mut VulkanBackend::new(unfused_dev.clone()),
            &inp,
            n,
            true,
        ));
        // (The norm's scale applied before or after the same int8 products.)
        let nmse = common::assert_int8_pair(
            &format!("{ty:?} n {n}"),
            ("fused", &fused),
            ("unfused", &unfused),
            &want,
        );
        eprintln!("{ty:?} n {n}: fused vs unfused nmse {nmse:.2e}");
    }
}
