//! RMSNorm + q/k/v (`Backend::norm_qkv`) over weights of different block types, as Q4_K_M
//! files hold them (V in Q6_K on some layers): on the Vulkan backend with the int8 matvec
//! (tuning `matvec=int8`, what GPUs run by default) the three products are one launch whose
//! parts decode their own types (the backend reports the packed output); with `q8a_mixed=0`
//! the norm and one product per weight (the reference). Both must give the CPU reference within
//! the int8 kernels' error (activations quantized per 32 to 8 bits: bound NMSE 1e-3, max 3% of
//! the largest output), and each other to f32 rounding (the same int8 products, the norm's
//! scale applied before or after them), for one token and three. And a whole model's decode:
//! a tiny Llama-shape Q4_K_M `vkllm synth` file (V in Q6_K on its last two layers) gives the
//! same logits at every step with and without the mixed launch. Under the validation layer.

mod common;

use vkllm_cpu::quant::{QuantType, dequantize_row, quantize_row};
use vkllm_models::backend::{Backend, Linear, NormQkv};
use vkllm_models::gguf::GgufModel;
use vkllm_models::synth::{self, SynthPlan};
use vkllm_models::{CpuBackend, Logits, Model, QuantScheme, VulkanBackend};

const H: usize = 512;
const HEAD: usize = 64;
/// q, k and v rows: 8 query heads, 2 kv heads.
const ROWS: [usize; 3] = [8 * HEAD, 2 * HEAD, 2 * HEAD];

struct Inputs {
    x: Vec<f32>,
    norm: Vec<f32>,
    types: [QuantType; 3],
    blocks: Vec<Vec<u8>>,
}

fn inputs(n: usize, types: [QuantType; 3], seed: u64) -> Inputs {
    let mut s = seed;
    let blocks = types
        .iter()
        .zip(ROWS)
        .map(|(&ty, rows)| {
            quantize_row(ty, &common::rand(&mut s, rows * H, 0.1)).expect("quantize")
        })
        .collect();
    Inputs {
        x: common::rand(&mut s, n * H, 1.0),
        norm: common::norm_weight(&mut s, H),
        types,
        blocks,
    }
}

/// q, k and v of each token, concatenated (`[n, q + k + v]`), and whether the backend packed
/// them.
fn run<B: Backend>(b: &mut B, inp: &Inputs, n: usize, raw: bool) -> (Vec<f32>, bool) {
    let mut lin = Vec::new();
    for ((bytes, &ty), rows) in inp.blocks.iter().zip(&inp.types).zip(ROWS) {
        let weight = if raw {
            b.upload_matrix_raw(ty, bytes, rows, H)
                .expect("upload")
                .expect("the backend keeps the blocks")
        } else {
            let mut f = vec![0f32; rows * H];
            dequantize_row(ty, bytes, &mut f).expect("dequantize");
            b.upload_matrix(&f, rows, H).expect("upload")
        };
        lin.push(Linear {
            weight,
            bias: None,
            rows,
            cols: H,
        });
    }
    let width: usize = ROWS.iter().sum();
    let a = NormQkv {
        x: b.upload_f32(&inp.x).expect("x"),
        norm: b.upload_f32(&inp.norm).expect("norm"),
        eps: 1e-6,
        norm_offset: 0.0,
        n,
        head_dim: HEAD,
        h: b.alloc_f32(n * H).expect("h"),
        q: &lin[0],
        k: &lin[1],
        v: &lin[2],
        q_out: b.alloc_f32(n * ROWS[0]).expect("q"),
        k_out: b.alloc_f32(n * ROWS[1]).expect("k"),
        v_out: b.alloc_f32(n * ROWS[2]).expect("v"),
        packed: b.alloc_f32(n * width).expect("packed"),
    };
    let packed = b.norm_qkv(&a).expect("norm_qkv");
    let mut out = vec![0f32; n * width];
    if packed {
        b.read_f32(a.packed, 0, &mut out).expect("read");
    } else {
        for (i, (t, rows)) in [a.q_out, a.k_out, a.v_out]
            .into_iter()
            .zip(ROWS)
            .enumerate()
        {
            let mut part = vec![0f32; n * rows];
            b.read_f32(t, 0, &mut part).expect("read");
            let off: usize = ROWS[..i].iter().sum();
            for tk in 0..n {
                out[tk * width + off..][..rows].copy_from_slice(&part[tk * rows..][..rows]);
            }
        }
    }
    (out, packed)
}

#[test]
fn mixed_type_qkv_is_one_int8_launch_and_matches_cpu() {
    let mixed_dev = common::int8_device(|t| t.q8a_mixed = true);
    let separate_dev = common::int8_device(|t| t.q8a_mixed = false);
    use QuantType::{Q4_0, Q4_K, Q6_K, Q8_0};
    for (types, n, seed) in [
        ([Q4_K, Q4_K, Q6_K], 1, 1u64),
        ([Q4_K, Q4_K, Q6_K], 3, 2),
        ([Q8_0, Q4_0, Q6_K], 1, 3),
    ] {
        let inp = inputs(n, types, seed);
        let (want, _) = run(&mut CpuBackend::new(), &inp, n, false);
        let (mixed, packed) = run(&mut VulkanBackend::new(mixed_dev.clone()), &inp, n, true);
        let (separate, separate_packed) =
            run(&mut VulkanBackend::new(separate_dev.clone()), &inp, n, true);
        assert!(
            packed,
            "{types:?} n {n}: one mixed-type launch (packed output)"
        );
        assert!(
            !separate_packed,
            "{types:?} n {n}: q8a_mixed=0 runs one product per weight"
        );
        let nmse = common::assert_int8_pair(
            &format!("{types:?} n {n}"),
            ("mixed", &mixed),
            ("separate", &separate),
            &want,
        );
        eprintln!("{types:?} n {n}: mixed vs separate nmse {nmse:.2e}");
    }
}

#[test]
fn q4_k_m_decode_is_the_same_with_the_mixed_launch() {
    let plan = SynthPlan::new(synth::shape("tiny-llama").unwrap(), QuantScheme::Q4_K_M, 5);
    let v_types: Vec<&str> = plan
        .tensors
        .iter()
        .filter(|t| t.name.ends_with("attn_v.weight"))
        .map(|t| t.ty.name())
        .collect();
    assert!(
        v_types.contains(&"q6_K") && v_types.contains(&"q4_K"),
        "some layers' V in Q6_K, some in Q4_K: {v_types:?}"
    );
    let path = std::env::temp_dir().join(format!("vkllm-mixed-qkv-{}.gguf", std::process::id()));
    plan.write(&path, &mut |_, _| {}).unwrap();
    let g = GgufModel::open(&path).unwrap();
    // Logits of an 8-token prompt, then of 4 decode steps (one token each), per device.
    let logits = |dev: vkllm_vk::Device| -> Vec<Vec<f32>> {
        let mut b = VulkanBackend::new(dev);
        let model = Model::load(g.config.clone(), &g, &mut b, 16).unwrap();
        let kv = model.new_kv(&mut b, 16).unwrap();
        let mut ids: Vec<u32> = (0..8).map(|i| (i * 37 + 5) % 1000).collect();
        let mut out = vec![model.forward(&mut b, &kv, &ids, 0, Logits::Last).unwrap()];
        for step in 0..4 {
            let next = (step * 101 + 7) % 1000;
            let l = model
                .forward(&mut b, &kv, &[next], ids.len(), Logits::Last)
                .unwrap();
            ids.push(next);
            out.push(l);
        }
        out
    };
    let mixed = logits(common::int8_device(|t| t.q8a_mixed = true));
    let separate = logits(common::int8_device(|t| t.q8a_mixed = false));
    std::fs::remove_file(&path).ok();
    assert_same_steps(("mixed", &mixed), ("separate", &separate), 1e-10);
}

/// Two runs' logits step by step: finite, not all zero, within `nmse` of each other.
fn assert_same_steps(a: (&str, &[Vec<f32>]), b: (&str, &[Vec<f32>]), nmse: f64) {
    assert_eq!(a.1.len(), b.1.len(), "steps of {} and {}", a.0, b.0);
    for (step, (x, y)) in a.1.iter().zip(b.1).enumerate() {
        let d = vkllm_cpu::compare::diff(x, y);
        let energy = y.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>();
        assert!(energy > 0.0, "step {step}: all-zero logits");
        assert!(
            d.non_finite == 0 && d.nmse <= nmse,
            "step {step}: {} vs {} max abs {}, nmse {}",
            a.0,
            b.0,
            d.max_abs,
            d.nmse
        );
        eprintln!("step {step}: {} vs {} nmse {:.2e}", a.0, b.0, d.nmse);
    }
}

/// Tuning `q8a_xg1_norm` (single-token products with a norm prologue over rows of at least that
/// many elements on activations quantized once by `quantize_act_q8`) against the shared-memory
/// launch, on the paths that take it: a whole model's recorded decode steps give the same logits
/// (the quantization's launches recorded), and q/k/v recorded outside a decode step stay on the
/// shared launch (bit-identical) within the int8 pair bound of the CPU.
#[test]
fn norm_products_on_quantized_x_match_the_shared_launch() {
    let xg_dev = common::int8_device(|t| {
        t.q8a_xg1_norm = 64;
        t.q8a_xg1_produce = false;
    });
    let shared_dev = common::int8_device(|t| t.q8a_xg1_norm = 0);
    use QuantType::{Q4_K, Q6_K, Q8_0};
    for (types, seed) in [([Q4_K, Q4_K, Q6_K], 11u64), ([Q8_0, Q8_0, Q8_0], 12)] {
        let inp = inputs(1, types, seed);
        let (want, _) = run(&mut CpuBackend::new(), &inp, 1, false);
        let (xg, _) = run(&mut VulkanBackend::new(xg_dev.clone()), &inp, 1, true);
        let (shared, _) = run(&mut VulkanBackend::new(shared_dev.clone()), &inp, 1, true);
        let nmse = common::assert_int8_pair(
            &format!("{types:?}"),
            ("quantized x", &xg),
            ("shared", &shared),
            &want,
        );
        assert!(
            xg == shared,
            "{types:?}: outside a decode step, the shared launch"
        );
        eprintln!("{types:?}: quantized x vs shared nmse {nmse:.2e}");
    }

    // A whole model's recorded decode steps (where decode products take quantized x): the
    // step's launches and the logits of 4 steps per device.
    let (xg, xg_dispatches, layers) = tiny_llama_steps(&[xg_dev, shared_dev]);
    let (shared, shared_dispatches) = (&xg[1], xg_dispatches[1]);
    // One quantize_act_q8 launch per norm product of a layer (q/k/v, gate/up; the LM head has
    // its own launch rules; products quantizing their output are off here).
    assert_eq!(
        xg_dispatches[0],
        shared_dispatches + 2 * layers,
        "a decode step's launches with q8a_xg1_norm against without"
    );
    // The same int8 codes; only the norm's sum of squares is added in another order.
    assert_same_steps(("quantized x", &xg[0]), ("shared", shared), 1e-6);
}

/// For each device, a tiny Llama (Q4_K_M) after a 5-token prompt: the logits of 4 recorded
/// decode steps and the step's launches; and the model's layer count.
fn tiny_llama_steps(devs: &[vkllm_vk::Device]) -> (Vec<Vec<Vec<f32>>>, Vec<usize>, usize) {
    let plan = SynthPlan::new(synth::shape("tiny-llama").unwrap(), QuantScheme::Q4_K_M, 6);
    let path = std::env::temp_dir().join(format!("vkllm-xg-norm-{}.gguf", std::process::id()));
    plan.write(&path, &mut |_, _| {}).unwrap();
    let g = GgufModel::open(&path).unwrap();
    let (mut logits, mut launches) = (Vec::new(), Vec::new());
    for dev in devs {
        let mut b = VulkanBackend::new(dev.clone());
        let model = Model::load(g.config.clone(), &g, &mut b, 16).unwrap();
        let kv = model.new_kv(&mut b, 16).unwrap();
        let ids: Vec<u32> = (0..5).map(|i| (i * 53 + 11) % 1000).collect();
        model.forward(&mut b, &kv, &ids, 0, Logits::Last).unwrap();
        let step = b.record_decode(&model, &kv).unwrap();
        let out = (0..4)
            .map(|k| {
                let id = (k * 89 + 5) % 1000;
                b.replay_decode(&step, &model, id, ids.len() + k as usize)
                    .unwrap()
            })
            .collect();
        logits.push(out);
        launches.push(step.dispatches());
    }
    std::fs::remove_file(&path).ok();
    (logits, launches, g.config.n_layers)
}

/// Tuning `q8a_xg1_produce`: o_proj and down quantize their output for the norm product after
/// them (gate/up; the next layer's q/k/v) in their own launch, so a decode step has 2 layers - 1
/// quantize launches fewer (layer 0's q/k/v reads the embedding), and the same logits (the same
/// codes; the norm's sums of squares added in another order).
#[test]
fn products_quantizing_their_output_match_the_quantize_launch() {
    let produce = common::int8_device(|t| {
        t.q8a_xg1_norm = 64;
        t.q8a_xg1_produce = true;
    });
    let launch = common::int8_device(|t| {
        t.q8a_xg1_norm = 64;
        t.q8a_xg1_produce = false;
    });
    let (steps, dispatches, layers) = tiny_llama_steps(&[produce, launch]);
    assert_eq!(
        dispatches[0] + 2 * layers - 1,
        dispatches[1],
        "a decode step's launches with q8a_xg1_produce against without"
    );
    assert_same_steps(
        ("produced", &steps[0]),
        ("quantize launch", &steps[1]),
        1e-6,
    );
}
