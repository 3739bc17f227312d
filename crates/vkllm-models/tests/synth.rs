//! `vkllm synth` files: the tiny shapes written in every synth quantization load with
//! `GgufModel::open` and give finite logits on the CPU; the real-size shapes' plans carry exactly
//! the metadata keys, tensor names, shapes (and, where a real file of that quantization
//! exists, the tensor types) of the real GGUF files of the same models; Llama 3's
//! `rope_freqs.weight` is read back as its llama3 scaling; the file depends only on the seed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use vkllm_cpu::RopeScaling;
use vkllm_gguf::GgufFile;
use vkllm_models::fixtures::cache_dir;
use vkllm_models::gguf::GgufModel;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::hybrid::config::Mixer;
use vkllm_models::synth::{self, SynthPlan};
use vkllm_models::{CpuBackend, Family, Logits, Model, QuantScheme};

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vkllm-synth-test-{}-{name}", std::process::id()))
}

fn write(shape: &str, q: QuantScheme, seed: u64) -> PathBuf {
    let plan = SynthPlan::new(synth::shape(shape).unwrap(), q, seed);
    let path = tmp(&format!("{shape}-{q}-{seed}.gguf"));
    let mut last = (0, 0);
    let n = plan.write(&path, &mut |d, t| last = (d, t)).unwrap();
    assert_eq!(last.0, last.1, "progress reaches the total");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), n);
    path
}

/// Every position's logits of `ids` from position 0 on the CPU (dense or hybrid).
fn cpu_logits(g: &GgufModel, ids: &[u32]) -> Vec<f32> {
    let mut b = CpuBackend::new();
    if g.config.family.is_hybrid() {
        let model = HybridModel::load(g.config.clone(), g, &mut b, 16).unwrap();
        let st = model.new_state(&mut b, 32).unwrap();
        model.forward(&mut b, &st, ids, 0, Logits::All).unwrap()
    } else {
        let model = Model::load(g.config.clone(), g, &mut b, 16).unwrap();
        let kv = model.new_kv(&mut b, 32).unwrap();
        model.forward(&mut b, &kv, ids, 0, Logits::All).unwrap()
    }
}

#[test]
fn tiny_shapes_load_and_run_in_every_synth_quant() {
    for shape in [
        "tiny-qwen3",
        "tiny-llama",
        "tiny-qwen2",
        "tiny-smollm2",
        "tiny-gemma3",
        "tiny-qwen3.5",
        "tiny-mistral",
        "tiny-gemma3-scaled",
    ] {
        for q in [
            QuantScheme::F16,
            QuantScheme::Q8_0,
            QuantScheme::Q4_0,
            QuantScheme::Q4_K_M,
        ] {
            let path = write(shape, q, 7);
            let plan = SynthPlan::new(synth::shape(shape).unwrap(), q, 7);
            let g = GgufModel::open(&path).unwrap_or_else(|e| panic!("{shape} {q}: {e}"));
            // The file holds the plan's tensors with the plan's types.
            assert_eq!(g.file.tensors().len(), plan.tensors.len());
            for t in &plan.tensors {
                let info = g.file.tensor(&t.name).unwrap();
                assert_eq!(
                    info.ggml_type().id(),
                    t.ty.ggml_id(),
                    "{shape} {q} {}",
                    t.name
                );
                assert_eq!(info.dims(), &t.dims[..], "{}", t.name);
            }
            let types: BTreeSet<&str> = plan.tensors.iter().map(|t| t.ty.name()).collect();
            if q == QuantScheme::Q4_K_M {
                assert!(
                    types.contains("q4_K") && types.contains("q6_K"),
                    "{types:?}"
                );
            }
            let ids: Vec<u32> = (0..20).map(|i| (i * 37 + 5) % 1000).collect();
            let logits = cpu_logits(&g, &ids);
            assert_eq!(logits.len(), ids.len() * 1024);
            assert!(
                logits.iter().all(|x| x.is_finite()),
                "{shape} {q}: non-finite logits"
            );
            let spread = logits.iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!(spread > 0.0, "{shape} {q}: all-zero logits");
            eprintln!("{shape} {q}: ok, max |logit| {spread:.3}, types {types:?}");
            std::fs::remove_file(&path).ok();
        }
    }
}

#[test]
fn llama3_rope_freqs_are_read_back_as_llama3_scaling() {
    let path = write("tiny-llama", QuantScheme::Q8_0, 1);
    let g = GgufModel::open(&path).unwrap();
    assert!(g.file.tensor("rope_freqs.weight").is_some());
    for l in &g.config.layers {
        assert_eq!(
            l.rope.scaling,
            RopeScaling::Llama3 {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position: 8192
            }
        );
    }
    std::fs::remove_file(&path).ok();
}

/// Whether prompts start with BOS reaches the config from the file's flag (Llama 3 adds it,
/// Qwen3 does not): the key centring's sink offset is measured from BOS only where it is added.
#[test]
fn add_bos_is_read_back() {
    for (shape, add) in [("tiny-llama", true), ("tiny-qwen3", false)] {
        let path = write(shape, QuantScheme::Q8_0, 3);
        let g = GgufModel::open(&path).unwrap();
        assert_eq!(g.config.add_bos, add, "{shape}");
        assert!(g.config.bos_token_id.is_some(), "{shape}");
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn same_seed_same_file_other_seed_other_weights() {
    let a = std::fs::read(write("tiny-qwen3", QuantScheme::Q4_K_M, 3)).unwrap();
    let b = std::fs::read(write("tiny-qwen3", QuantScheme::Q4_K_M, 3)).unwrap();
    let c = std::fs::read(write("tiny-qwen3", QuantScheme::Q4_K_M, 4)).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.len(), c.len());
    assert_ne!(a, c);
    for seed in [3, 4] {
        let p = tmp(&format!("tiny-qwen3-q4_k_m-{seed}.gguf"));
        std::fs::remove_file(p).ok();
    }
}

/// Tensors by name: (dims, ggml type id).
type TensorMap = BTreeMap<String, (Vec<u64>, u32)>;

/// Keys and tensors of a real model file.
fn real(file: &str) -> (BTreeSet<String>, TensorMap) {
    let path = cache_dir().join("models").join(file);
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    let f = GgufFile::open(&path).unwrap();
    let keys = f.metadata().map(|(k, _)| k.to_string()).collect();
    let tensors = f
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name().to_string(),
                (t.dims().to_vec(), t.ggml_type().id()),
            )
        })
        .collect();
    (keys, tensors)
}

#[test]
fn plans_match_the_real_files_of_the_same_models() {
    // (shape, real file, scheme of that file, tensor names only the real file has)
    let cases: [(&str, &str, QuantScheme, &[&str]); 3] = [
        (
            "smollm2-135m",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            QuantScheme::Q4_1,
            &[],
        ),
        (
            "gemma3-270m",
            "gemma-3-270m-q4_k_m.gguf",
            QuantScheme::Q4_K_M,
            &[],
        ),
        // That file is of an AWQ fine-tune whose conversion kept a separate output matrix;
        // Qwen2.5-0.5B ties it. Its layer types were also counted in file order (older
        // llama-quantize), so only names and shapes are compared.
        (
            "qwen2.5-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4.gguf",
            QuantScheme::Q4_K_M,
            &["output.weight"],
        ),
    ];
    for (shape, file, q, only_real) in cases {
        let (keys, tensors) = real(file);
        let plan = SynthPlan::new(synth::shape(shape).unwrap(), q, 0);
        let plan_keys: BTreeSet<String> = plan.metadata.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(plan_keys, keys, "{shape}: metadata keys");
        let mut want = tensors.clone();
        for n in only_real {
            want.remove(*n);
        }
        let got: TensorMap = plan
            .tensors
            .iter()
            .map(|t| (t.name.clone(), (t.dims.clone(), t.ty.ggml_id())))
            .collect();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{shape}: tensor names"
        );
        for (name, (dims, ty)) in &want {
            assert_eq!(&got[name].0, dims, "{shape} {name}: dims");
            if shape != "qwen2.5-0.5b" {
                assert_eq!(got[name].1, *ty, "{shape} {name}: type");
            }
        }
        let vocab = plan
            .metadata
            .iter()
            .find(|(k, _)| k == "tokenizer.ggml.tokens")
            .map(|(_, v)| match v {
                vkllm_gguf::MetaValue::Array(vkllm_gguf::MetaArray::String(t)) => t.len(),
                _ => 0,
            });
        assert_eq!(vocab, Some(synth::shape(shape).unwrap().vocab), "{shape}");
        eprintln!(
            "{shape}: {} keys, {} tensors as in {file}",
            keys.len(),
            want.len()
        );
    }
}

#[test]
fn unknown_shape_is_a_typed_error() {
    match synth::shape("qwen9-1t") {
        Err(vkllm_models::ModelError::UnknownShape { name, known }) => {
            assert_eq!(name, "qwen9-1t");
            assert!(known.contains("llama-3.2-1b"));
        }
        other => panic!("{:?}", other.map(|s| s.name)),
    }
}

#[test]
fn tiny_qwen35_reads_back_as_a_tiled_hybrid() {
    let path = write("tiny-qwen3.5", QuantScheme::Q8_0, 2);
    let g = GgufModel::open(&path).unwrap();
    let c = &g.config;
    assert_eq!(c.family, Family::Qwen35);
    let hy = c.hybrid.as_ref().expect("hybrid config");
    let full: Vec<usize> = (0..c.n_layers)
        .filter(|&i| hy.mixers[i] == Mixer::Attention)
        .collect();
    assert_eq!(full, vec![3], "every fourth layer is full attention");
    assert_eq!((hy.delta.n_k_heads, hy.delta.n_v_heads), (2, 4));
    assert_eq!((hy.delta.k_dim, hy.delta.v_dim), (64, 64));
    assert!(
        hy.delta.tiled_v_heads,
        "fewer key than value heads: tiled order"
    );
    assert_eq!(hy.conv_kernel, 4);
    assert_eq!(
        c.layers[3].rope.rotary_dim, 16,
        "a quarter of the 64-wide heads"
    );
    std::fs::remove_file(&path).ok();
}

/// Qwen3.5-0.8B's `config.json` (`text_config`), restated from the published file.
#[test]
fn qwen35_0_8b_plan_has_the_published_shapes() {
    let plan = SynthPlan::new(synth::shape("qwen3.5-0.8b").unwrap(), QuantScheme::Q8_0, 0);
    let meta: BTreeMap<&str, &vkllm_gguf::MetaValue> =
        plan.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let u = |k: &str| match meta.get(k) {
        Some(vkllm_gguf::MetaValue::U32(x)) => *x as usize,
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(u("qwen35.block_count"), 24);
    assert_eq!(u("qwen35.embedding_length"), 1024);
    assert_eq!(u("qwen35.feed_forward_length"), 3584);
    assert_eq!(u("qwen35.attention.head_count"), 8);
    assert_eq!(u("qwen35.attention.head_count_kv"), 2);
    assert_eq!(u("qwen35.attention.key_length"), 256);
    assert_eq!(
        u("qwen35.rope.dimension_count"),
        64,
        "partial_rotary_factor 0.25"
    );
    assert_eq!(u("qwen35.ssm.group_count"), 16, "linear_num_key_heads");
    assert_eq!(u("qwen35.ssm.time_step_rank"), 16, "linear_num_value_heads");
    assert_eq!(u("qwen35.ssm.state_size"), 128, "linear_key_head_dim");
    assert_eq!(u("qwen35.ssm.inner_size"), 16 * 128);
    assert_eq!(u("qwen35.ssm.conv_kernel"), 4);
    assert_eq!(u("qwen35.full_attention_interval"), 4);
    assert_eq!(u("qwen35.context_length"), 262144);
    let dims: BTreeMap<&str, &[u64]> = plan
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), &t.dims[..]))
        .collect();
    assert_eq!(dims["token_embd.weight"], &[1024, 248320]);
    assert!(!dims.contains_key("output.weight"), "tied embeddings");
    // Layer 0 is a Gated DeltaNet layer: q, k (16 x 128 each) and v (16 x 128) packed.
    assert_eq!(dims["blk.0.attn_qkv.weight"], &[1024, 6144]);
    assert_eq!(dims["blk.0.attn_gate.weight"], &[1024, 2048]);
    assert_eq!(dims["blk.0.ssm_conv1d.weight"], &[4, 6144]);
    assert_eq!(dims["blk.0.ssm_out.weight"], &[2048, 1024]);
    assert_eq!(dims["blk.0.ssm_a"], &[16]);
    // Layer 3 is gated full attention: query and gate together (2 x 8 x 256).
    assert_eq!(dims["blk.3.attn_q.weight"], &[1024, 4096]);
    assert_eq!(dims["blk.3.attn_k.weight"], &[1024, 512]);
    assert_eq!(dims["blk.3.attn_output.weight"], &[2048, 1024]);
    assert!(!dims.contains_key("blk.3.attn_qkv.weight"));
    assert_eq!(dims["blk.23.attn_q_norm.weight"], &[256]);
    // ~0.75B text parameters (the published 0.8B counts the vision tower and MTP head).
    let p = plan.n_params();
    assert!((700_000_000..800_000_000).contains(&p), "{p}");
    // The conv kernel and 1-D tensors stay F32 in quantized files.
    let ty = |n: &str| plan.tensors.iter().find(|t| t.name == n).unwrap().ty;
    assert_eq!(ty("blk.0.ssm_conv1d.weight"), vkllm_cpu::QuantType::F32);
    assert_eq!(ty("blk.0.attn_qkv.weight"), vkllm_cpu::QuantType::Q8_0);
}

/// `Fill::Pool` (`vkllm synth --fill pool`): the same tensors, types and shapes as the exact
/// file, float tensors byte-identical to it, every quantized tensor made of at most
/// `POOL_BLOCKS` distinct blocks whose values have the exact file's spread, the same file for
/// the same seed; the model loads and gives finite logits (hybrid and dense).
#[test]
fn pooled_files_have_the_exact_layout_and_spread() {
    use vkllm_cpu::QuantType;
    for (shape, q) in [
        ("tiny-qwen3", QuantScheme::Q4_K_M),
        ("tiny-qwen3.5", QuantScheme::Q8_0),
    ] {
        let exact = write(shape, q, 11);
        let plan = SynthPlan::new(synth::shape(shape).unwrap(), q, 11).with_fill(synth::Fill::Pool);
        let pooled = tmp(&format!("{shape}-{q}-pool.gguf"));
        plan.write(&pooled, &mut |_, _| {}).unwrap();
        let again = tmp(&format!("{shape}-{q}-pool-again.gguf"));
        plan.write(&again, &mut |_, _| {}).unwrap();
        assert_eq!(
            std::fs::read(&pooled).unwrap(),
            std::fs::read(&again).unwrap()
        );
        let (ge, gp) = (
            GgufFile::open(&exact).unwrap(),
            GgufFile::open(&pooled).unwrap(),
        );
        let mut pooled_tensors = 0;
        for t in &plan.tensors {
            let (be, bp) = (
                ge.tensor_data(&t.name).unwrap(),
                gp.tensor_data(&t.name).unwrap(),
            );
            assert_eq!(be.len(), bp.len(), "{}", t.name);
            if matches!(t.ty, QuantType::F32 | QuantType::F16 | QuantType::BF16) {
                assert_eq!(be, bp, "{}: float tensors are exact", t.name);
                continue;
            }
            let ts = t.ty.type_size();
            let distinct: BTreeSet<&[u8]> = bp.chunks_exact(ts).collect();
            let blocks = bp.len() / ts;
            assert!(distinct.len() <= synth::POOL_BLOCKS, "{}", t.name);
            if blocks >= 16 {
                // Picks spread over the pool: near the expected number of distinct blocks of
                // `blocks` uniform draws.
                pooled_tensors += 1;
                let p = synth::POOL_BLOCKS as f64;
                let want = p * (1.0 - (1.0 - 1.0 / p).powi(blocks as i32));
                assert!(
                    distinct.len() as f64 > 0.8 * want,
                    "{}: {} of {want:.0}",
                    t.name,
                    distinct.len()
                );
            }
            let rms = |b: &[u8]| {
                let v =
                    vkllm_cpu::quant::dequantize_to_vec(t.ty, b, b.len() / ts * t.ty.block_size())
                        .unwrap();
                assert!(v.iter().all(|x| x.is_finite()));
                let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
                (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
            };
            let (re, rp) = (rms(be), rms(bp));
            assert!(
                (rp / re - 1.0).abs() < 0.1,
                "{}: spread {rp} vs {re}",
                t.name
            );
        }
        assert!(
            pooled_tensors > 0,
            "{shape}: no tensor large enough to check"
        );
        let g = GgufModel::open(&pooled).unwrap();
        let ids: Vec<u32> = (0..12).map(|i| (i * 41 + 3) % 1000).collect();
        let logits = cpu_logits(&g, &ids);
        assert!(logits.iter().all(|x| x.is_finite()) && logits.iter().any(|&x| x != 0.0));
        for p in [exact, pooled, again] {
            std::fs::remove_file(p).ok();
        }
    }
}

/// The 8B-32B shapes people run: parameter counts as published on the model cards (the
/// safetensors totals; Gemma 3 12B's text model without its vision tower), key metadata as
/// llama.cpp's converter writes it.
#[test]
fn large_dense_plans_have_the_published_sizes() {
    for (shape, params) in [
        ("qwen3-8b", 8_190_735_360u64),
        ("qwen3-14b", 14_768_307_200),
        ("qwen3-32b", 32_762_123_264),
        ("mistral-7b", 7_248_023_552),
    ] {
        let plan = SynthPlan::new(synth::shape(shape).unwrap(), QuantScheme::Q4_K_M, 0);
        assert_eq!(plan.n_params(), params, "{shape}");
    }
    let plan = SynthPlan::new(synth::shape("gemma3-12b").unwrap(), QuantScheme::Q4_K_M, 0);
    let p = plan.n_params();
    assert!((11_700_000_000..11_800_000_000).contains(&p), "{p}");
    let meta: BTreeMap<&str, &vkllm_gguf::MetaValue> =
        plan.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    assert_eq!(
        meta["gemma3.rope.scaling.type"],
        &vkllm_gguf::MetaValue::String("linear".into())
    );
    assert_eq!(
        meta["gemma3.rope.scaling.factor"],
        &vkllm_gguf::MetaValue::F32(8.0)
    );
    assert_eq!(
        meta["gemma3.attention.sliding_window"],
        &vkllm_gguf::MetaValue::U32(1024)
    );
}

/// Gemma 3's linear RoPE scaling reads back on the global layers only (the sliding ones keep
/// their local base unscaled), and Mistral's SentencePiece vocabulary carries its control
/// tokens before the bytes.
#[test]
fn scaled_gemma3_and_mistral_vocab_read_back() {
    let path = write("tiny-gemma3-scaled", QuantScheme::Q8_0, 5);
    let g = GgufModel::open(&path).unwrap();
    let scaled: Vec<bool> = g
        .config
        .layers
        .iter()
        .map(|l| l.rope.scaling == RopeScaling::Linear { factor: 8.0 })
        .collect();
    let global: Vec<bool> = g.config.layers.iter().map(|l| l.window.is_none()).collect();
    assert_eq!(
        scaled, global,
        "linear scaling on exactly the global layers"
    );
    assert!(scaled.iter().any(|&s| s) && !scaled.iter().all(|&s| s));
    std::fs::remove_file(&path).ok();

    let path = write("tiny-mistral", QuantScheme::Q8_0, 5);
    let f = GgufFile::open(&path).unwrap();
    let tokens: Vec<String> = f
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .and_then(|a| a.as_strs())
        .unwrap()
        .iter()
        .map(String::from)
        .collect();
    assert_eq!(&tokens[..4], &["<unk>", "<s>", "</s>", "[INST]"]);
    assert_eq!(tokens[63], "[control_63]");
    assert_eq!(tokens[64], "<0x00>");
    assert_eq!(tokens.len(), 1024);
    std::fs::remove_file(&path).ok();
}
