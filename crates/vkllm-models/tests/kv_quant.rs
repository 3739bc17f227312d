//! Quantized KV caches (q8_0, q4_0) through whole models, dense, MoE and hybrid: the CPU backend
//! stores what a quantized cache reads back (vkllm_cpu::kv_quant round trip), the GPU stores the
//! blocks (quantized on append, read in place by prefill and decode attention). The GPU's logits
//! differ from the CPU's by no more than quantization itself moves them (plus the f32 GPU-vs-CPU
//! tolerance: the GPU's keys differ in the last f32 bits, so a value near a rounding boundary
//! can take the neighbouring code), and fed the CPU's greedy tokens the GPU picks the same ones
//! except at near ties (the CPU's margin within twice the step's GPU-vs-CPU difference). A
//! model whose heads do not split into blocks of 32 gets a typed error. Under the validation
//! layer.

mod common;

use common::device;
use vkllm_models::fixtures::Fixture;
use vkllm_models::parity::{GPU_VS_CPU_MAX_ABS, argmax};
use vkllm_models::{
    AnyModel, Backend, CpuBackend, DEFAULT_CHUNK, KvType, KvTypes, Logits, ModelError,
    VulkanBackend,
};

/// Prefill logits (every position) then each decode step's, and the `n` tokens fed after the
/// prompt: `forced`'s, or each step's greedy token.
fn run<B: Backend>(
    b: &mut B,
    m: &AnyModel,
    ids: &[u32],
    kv: impl Into<KvTypes>,
    n: usize,
    forced: Option<&[u32]>,
) -> (Vec<f32>, Vec<u32>) {
    let st = m.new_state(b, ids.len() + n, kv).expect("state");
    let mut logits = m.forward(b, &st, ids, 0, Logits::All).expect("prefill");
    let vocab = m.cfg().vocab_size;
    let pick = |l: &[f32], i: usize| forced.map_or_else(|| argmax(l), |f| f[i]);
    let mut toks = vec![pick(&logits[logits.len() - vocab..], 0)];
    while toks.len() < n {
        let pos = ids.len() + toks.len() - 1;
        let l = m
            .forward(b, &st, &[toks[toks.len() - 1]], pos, Logits::Last)
            .expect("decode");
        toks.push(pick(&l, toks.len()));
        logits.extend_from_slice(&l);
    }
    (logits, toks)
}

/// The GPU's greedy choice at each of the CPU's steps (`got`, `want`: [`run`]'s logits of the
/// same fed tokens, `n` steps after `prompt` positions) is the CPU's, unless the two were a
/// near tie: the CPU's margin of its token over the GPU's at most twice that step's measured
/// GPU-vs-CPU difference.
fn same_choices(got: &[f32], want: &[f32], toks: &[u32], prompt: usize, vocab: usize, what: &str) {
    for (i, &t) in toks.iter().enumerate() {
        let r = (prompt - 1 + i) * vocab;
        let (g, w) = (&got[r..r + vocab], &want[r..r + vocab]);
        let pick = argmax(g);
        if pick == t {
            continue;
        }
        let margin = f64::from(w[t as usize] - w[pick as usize]);
        let step = vkllm_cpu::compare::diff(g, w).max_abs;
        assert!(
            margin <= 2.0 * step,
            "{what}: step {i} picks {pick} where the CPU's {t} leads by {margin} (step difference {step})"
        );
        eprintln!("{what}: step {i}: near tie {t} / {pick} ({margin:.2e} <= 2 x {step:.2e})");
    }
}

fn load<B: Backend>(fx: &Fixture, b: &mut B) -> AnyModel {
    AnyModel::load(
        fx.config.clone(),
        &fx.weights,
        b,
        DEFAULT_CHUNK,
        &mut |_| {},
    )
    .expect("load")
}

#[test]
fn quantized_kv_matches_the_cpu() {
    let dev = device();
    for family in ["qwen3", "gemma3", "qwen3_moe", "qwen3_5", "qwen3_next"] {
        let fx = Fixture::load(family).expect("fixture");
        let ids = fx
            .prompt("long")
            .or_else(|_| fx.prompt("short"))
            .expect("prompt")
            .ids;
        let mut cpu = CpuBackend::new();
        let cm = load(&fx, &mut cpu);
        let mut gpu = VulkanBackend::new(dev.clone());
        let gm = load(&fx, &mut gpu);
        let mixed = KvTypes {
            k: KvType::Q8_0,
            v: KvType::Q4_0,
        };
        for kv in [KvType::Q8_0.into(), KvType::Q4_0.into(), mixed] {
            // The CPU's greedy tokens, fed to the f32 run and the GPU alike.
            let (want, want_toks) = run(&mut cpu, &cm, &ids, kv, 8, None);
            let (f32_logits, _) = run(&mut cpu, &cm, &ids, KvType::F32, 8, Some(&want_toks));
            let rounding = vkllm_cpu::compare::diff(&want, &f32_logits);
            let (got, _) = run(&mut gpu, &gm, &ids, kv, 8, Some(&want_toks));
            let d = vkllm_cpu::compare::diff(&got, &want);
            eprintln!(
                "{family} {}: quantization moves the logits {:.3e}, gpu vs cpu {:.3e}",
                kv.name(),
                rounding.max_abs,
                d.max_abs
            );
            assert!(
                rounding.max_abs > 0.0,
                "{family} {}: the cache did not quantize",
                kv.name()
            );
            let tol = GPU_VS_CPU_MAX_ABS + rounding.max_abs;
            assert!(
                d.max_abs <= tol,
                "{family} {}: logits max abs {} > {tol}",
                kv.name(),
                d.max_abs
            );
            let what = format!("{family} {}", kv.name());
            let vocab = cm.cfg().vocab_size;
            same_choices(&got, &want, &want_toks, ids.len(), vocab, &what);
        }
    }
}

/// Heads of 16 values (the llama fixture) cannot hold blocks of 32, heads of 32 (qwen3) not
/// tq4's rotated units of 64: typed errors.
#[test]
fn heads_that_do_not_split_into_blocks_are_refused() {
    let fx = Fixture::load("qwen3").expect("fixture");
    let mut cpu = CpuBackend::new();
    let m = load(&fx, &mut cpu);
    let tq4_v = KvTypes {
        k: KvType::Q8_0,
        v: KvType::Tq4,
    };
    for kv in [KvType::Tq4.into(), tq4_v] {
        match m.new_state(&mut cpu, 64, kv) {
            Err(ModelError::Config { field, msg }) => {
                assert_eq!(field, "kv dtype");
                assert!(msg.contains("tq4") && msg.contains("64"), "{msg}");
            }
            Err(e) => panic!("{}: {e}", kv.name()),
            Ok(_) => panic!("{}: a tq4 cache of 32-value heads was made", kv.name()),
        }
    }
    let fx = Fixture::load("llama").expect("fixture");
    let mut cpu = CpuBackend::new();
    let m = load(&fx, &mut cpu);
    for kv in [KvType::Q8_0, KvType::Q4_0] {
        match m.new_state(&mut cpu, 64, kv) {
            Err(ModelError::Config { field, msg }) => {
                assert_eq!(field, "kv dtype");
                assert!(msg.contains(kv.name()) && msg.contains("32"), "{msg}");
            }
            Err(e) => panic!("{}: {e}", kv.name()),
            Ok(_) => panic!("{}: a cache of 16-value heads was made", kv.name()),
        }
    }
}

/// The device as `vkllm run` opens it: where it has cooperative matrices, prefill attention
/// reads an f16 copy of the quantized rows (kv_to_f16) with the coop kernels, whose projections
/// also round activations to f16; elsewhere (lavapipe) the portable kernels read the blocks.
/// Tolerance: gpu_coopmat.rs's bound for f16 rounding (nmse 1e-4, compounding through the
/// layers) plus what quantizing the cache itself moves the logits (nmse against the f32 cache on
/// the CPU): the f16-rounded keys and values cross code boundaries the CPU's do not, each such
/// value moving a whole step (the H200 measured qwen3 q4_0 at 1.9e-4). A wrong copy or tile gives
/// nmse of order 1.
#[test]
fn quantized_kv_on_the_users_device() {
    let opts = vkllm_vk::DeviceOptions {
        choice: vkllm_vk::DeviceChoice::from_env(),
        validation: match std::env::var("VKLLM_TEST_NO_VALIDATION") {
            Ok(v) if v == "1" => vkllm_vk::Validation::Off,
            _ => vkllm_vk::Validation::On,
        },
        tuning: vkllm_vk::tuning_from_env().unwrap_or_else(|e| panic!("VKLLM_TUNE: {e}")),
        ..Default::default()
    };
    let dev = vkllm_vk::Device::new(&opts).expect("device");
    eprintln!("cooperative matrices: {}", dev.coopmat());
    for family in ["qwen3", "gemma3"] {
        let fx = Fixture::load(family).expect("fixture");
        let ids = fx.prompt("long").expect("prompt").ids;
        let mut cpu = CpuBackend::new();
        let cm = load(&fx, &mut cpu);
        let mut gpu = VulkanBackend::new(dev.clone());
        let gm = load(&fx, &mut gpu);
        for kv in [KvType::Q8_0, KvType::Q4_0] {
            let (want, toks) = run(&mut cpu, &cm, &ids, kv, 2, None);
            let (f32_logits, _) = run(&mut cpu, &cm, &ids, KvType::F32, 2, Some(&toks));
            let quantization = vkllm_cpu::compare::diff(&want, &f32_logits).nmse;
            let (got, _) = run(&mut gpu, &gm, &ids, kv, 2, Some(&toks));
            let d = vkllm_cpu::compare::diff(&got, &want);
            let tol = 1e-4 + quantization;
            eprintln!(
                "{family} {}: nmse {:.3e} (quantization {quantization:.3e})",
                kv.name(),
                d.nmse
            );
            assert!(
                d.within(f64::INFINITY, tol),
                "{family} {}: nmse {:.3e} (non-finite {})",
                kv.name(),
                d.nmse,
                d.non_finite
            );
        }
    }
}

/// K and V types apart: two quantized types are a cache; a float type with a quantized one, or
/// f32 with f16, is a typed error (the kernels take one float type, or any two quantized ones).
#[test]
fn kv_type_pairs() {
    let fx = Fixture::load("qwen3").expect("fixture");
    let mut cpu = CpuBackend::new();
    let m = load(&fx, &mut cpu);
    let ok = KvTypes {
        k: KvType::Q4_0,
        v: KvType::Q8_0,
    };
    let st = m
        .new_state(&mut cpu, 64, ok)
        .expect("q4_0 keys, q8_0 values");
    match st {
        vkllm_models::AnyState::Kv(kv) => {
            assert_eq!((kv.dtype, kv.v_dtype), (KvType::Q4_0, KvType::Q8_0));
        }
        _ => panic!("a dense model's state"),
    }
    for (k, v) in [
        (KvType::F16, KvType::Q8_0),
        (KvType::Q8_0, KvType::F32),
        (KvType::F32, KvType::F16),
    ] {
        match m.new_state(&mut cpu, 64, KvTypes { k, v }) {
            Err(ModelError::Config { field, msg }) => {
                assert_eq!(field, "kv dtype");
                assert!(msg.contains(k.name()) && msg.contains(v.name()), "{msg}");
            }
            Err(e) => panic!("{k:?}/{v:?}: {e}"),
            Ok(_) => panic!("{k:?}/{v:?} was accepted"),
        }
    }
}

/// The logits of `n` decode steps after prefilling `ids` (concatenated), and the n + 1 tokens
/// fed: `forced`'s, or each step's greedy token.
fn decode_steps<B: Backend>(
    b: &mut B,
    m: &AnyModel,
    ids: &[u32],
    kv: KvTypes,
    forced: Option<&[u32]>,
    n: usize,
) -> (Vec<f32>, Vec<u32>) {
    let st = m.new_state(b, ids.len() + n + 1, kv).expect("state");
    let first = m.forward(b, &st, ids, 0, Logits::Last).expect("prefill");
    let pick = |l: &[f32], i: usize| forced.map_or_else(|| argmax(l), |f| f[i]);
    let mut toks = vec![pick(&first, 0)];
    let mut logits = Vec::new();
    for step in 0..n {
        let l = m
            .forward(b, &st, &[toks[step]], ids.len() + step, Logits::Last)
            .expect("decode");
        toks.push(pick(&l, step + 1));
        logits.extend_from_slice(&l);
    }
    (logits, toks)
}

/// A real model's heads through the wide quantized decode split (the default, tuning
/// `attn_wide`), which the fixtures' 32-value heads never reach, and the grouped split it
/// replaces: SmolLM2-135M (heads of 64, 3 query heads per kv head), q8_0 (rotated keys), q4_0
/// (rotated values), tq4 and q8_0 K + q4_0 V caches. Each decode step's logits, all fed the
/// CPU's greedy tokens, are held to quantized_kv_matches_the_cpu's bound against the CPU storing
/// what the blocks read back: a rounding difference can move a later layer's value across a
/// code boundary (a whole step, either path against the CPU or each other), so the bound is the
/// GPU-vs-CPU tolerance plus what quantizing moves the logits; a wrong scale, code or row moves
/// them far past it.
#[test]
fn wide_split_on_real_heads() {
    let _one_at_a_time = device();
    let golden = vkllm_models::fixtures::fixtures_dir()
        .join("real")
        .join("smollm2-135m.json");
    let text = std::fs::read_to_string(&golden).expect("golden");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("golden JSON");
    let path = vkllm_models::fixtures::cache_dir()
        .join("models")
        .join(doc["file"].as_str().expect("file"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    let gguf = vkllm_models::gguf::GgufModel::open(&path).expect("open");
    let ids: Vec<u32> = doc["cases"][0]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect();
    let kinds = [
        KvType::Q8_0.into(),
        KvType::Q4_0.into(),
        KvType::Tq4.into(),
        KvTypes {
            k: KvType::Q8_0,
            v: KvType::Q4_0,
        },
    ];
    let mut cpu = CpuBackend::new();
    let cm = AnyModel::load(
        gguf.config.clone(),
        &gguf,
        &mut cpu,
        DEFAULT_CHUNK,
        &mut |_| {},
    )
    .expect("load");
    let (f32_logits, toks) = decode_steps(&mut cpu, &cm, &ids, KvType::F32.into(), None, 6);
    let want: Vec<Vec<f32>> = kinds
        .iter()
        .map(|kv| decode_steps(&mut cpu, &cm, &ids, *kv, Some(&toks), 6).0)
        .collect();
    for wide in [false, true] {
        let mut opts = common::options();
        opts.tuning.attn_wide = wide;
        let dev = common::open(&opts);
        let mut gpu = VulkanBackend::new(dev.clone());
        let m = AnyModel::load(
            gguf.config.clone(),
            &gguf,
            &mut gpu,
            DEFAULT_CHUNK,
            &mut |_| {},
        )
        .expect("load");
        for (kv, want) in kinds.iter().zip(&want) {
            let (got, _) = decode_steps(&mut gpu, &m, &ids, *kv, Some(&toks), 6);
            let rounding = vkllm_cpu::compare::diff(want, &f32_logits);
            let d = vkllm_cpu::compare::diff(&got, want);
            eprintln!(
                "{} (attn_wide {wide}): gpu vs cpu max abs {:.3e} nmse {:.3e}; quantization moves \
                 max abs {:.3e} nmse {:.3e}",
                kv.name(),
                d.max_abs,
                d.nmse,
                rounding.max_abs,
                rounding.nmse
            );
            assert!(
                rounding.max_abs > 0.0,
                "{}: the cache did not quantize",
                kv.name()
            );
            let tol = GPU_VS_CPU_MAX_ABS + rounding.max_abs;
            assert!(
                d.within(tol, f64::INFINITY),
                "{} (attn_wide {wide}): logits max abs {:.3e} > {tol:.3e} (non-finite {})",
                kv.name(),
                d.max_abs,
                d.non_finite
            );
        }
        // The path asked for is the one that ran (the grouped split runs either way: the key
        // centring's one-token calibration forwards decode over f32 caches; the reference
        // split never).
        assert_eq!(dev.has_pipeline("attn_decode_split_wide_quant"), wide);
        assert!(dev.has_pipeline("attn_decode_split_gqa"));
        assert!(!dev.has_pipeline("attn_decode_split"));
    }
}
