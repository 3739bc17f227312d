//! Quantize at load (`QuantizingSource`, `--quant`):
//! - every tensor of three fixture checkpoints, every scheme: type and bytes equal to the `gguf`
//!   package's quantizer under llama.cpp's type rules (fixtures/quant/model_quant.json, made by
//!   make_model_quant_goldens.py, which restates the rules independently);
//! - the type rules against the real GGUF files llama.cpp's `llama-quantize` wrote;
//! - hand-computed Q4_K_M layers for a 28-layer model, fallbacks for odd row lengths;
//! - K-quant round trips through the source within ggml's total-error bounds;
//! - fixture models loaded with q8_0 on the CPU against transformers running the same Q8_0
//!   weights (fixtures/quant/q8_0_*.safetensors): logits within 1e-4, the same greedy tokens.

use std::collections::HashMap;

use vkllm_cpu::QuantType;
use vkllm_cpu::compare::diff;
use vkllm_cpu::quant::dequantize_to_vec;
use vkllm_gguf::GgufFile;
use vkllm_gguf::safetensors::SafetensorsModel;
use vkllm_models::fixtures::{Fixture, cache_dir, fixtures_dir};
use vkllm_models::parity::{CPU_VS_HF_MAX_ABS, argmax};
use vkllm_models::quantize::mix::{self, Category, MixModel, TensorDesc};
use vkllm_models::{
    Checkpoint, CpuBackend, HostTensor, Logits, ModelError, QuantScheme, QuantizingSource,
    TensorSource,
};

fn fnv1a64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn scheme_names_parse_and_unknown_is_typed() {
    for q in QuantScheme::ALL {
        assert_eq!(q.name().parse::<QuantScheme>().unwrap(), q);
        assert_eq!(q.name().to_uppercase().parse::<QuantScheme>().unwrap(), q);
    }
    match "q3_k_xl".parse::<QuantScheme>() {
        Err(ModelError::UnknownQuantScheme { name, known }) => {
            assert_eq!(name, "q3_k_xl");
            assert!(known.contains("q4_k_m"), "{known}");
        }
        other => panic!("expected UnknownQuantScheme, got {other:?}"),
    }
    // llama.cpp's llama_ftype values.
    assert_eq!(QuantScheme::Q4_K_M.file_type(), 15);
    assert_eq!(QuantScheme::Q8_0.file_type(), 7);
    assert_eq!(QuantScheme::Q5_0.file_type(), 8);
    assert_eq!(QuantScheme::BF16.file_type(), 32);
}

#[test]
fn fixture_checkpoints_match_gguf_py_quantizer() {
    let path = fixtures_dir().join("quant").join("model_quant.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for (family, schemes) in doc.as_object().unwrap() {
        let fx = Fixture::load(family).unwrap();
        for (scheme, tensors) in schemes.as_object().unwrap() {
            let q: QuantScheme = scheme.parse().unwrap();
            let tied = !fx.weights.contains("lm_head.weight");
            let src = QuantizingSource::new(&fx.weights, &fx.config, q).tied(tied);
            for (name, want) in tensors.as_object().unwrap() {
                let want = want.as_array().unwrap();
                let got = src.quantize(name).unwrap().unwrap();
                let ctx = format!("{family} {scheme} {name}");
                assert_eq!(
                    got.ty.name().to_ascii_uppercase(),
                    want[0].as_str().unwrap().to_ascii_uppercase(),
                    "{ctx}: type"
                );
                assert_eq!(got.bytes.len() as u64, want[1].as_u64().unwrap(), "{ctx}");
                assert_eq!(
                    format!("{:016x}", fnv1a64(&got.bytes)),
                    want[2].as_str().unwrap(),
                    "{ctx}: bytes differ from gguf.quants.quantize"
                );
                // What the f32 path hands out is exactly those blocks dequantized.
                let f = src.tensor_f32(name).unwrap().unwrap();
                let deq = dequantize_to_vec(got.ty, &got.bytes, f.data.len()).unwrap();
                assert!(
                    f.data
                        .iter()
                        .zip(&deq)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{ctx}: tensor_f32 is not the dequantized blocks"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 300, "only {checked} tensors checked");
}

/// The scheme a real file was quantized with, from its `general.file_type`.
fn scheme_of_file(f: &GgufFile) -> QuantScheme {
    match f.get_u32("general.file_type").unwrap() {
        3 => QuantScheme::Q4_1,
        15 => QuantScheme::Q4_K_M,
        other => panic!("file type {other} not in this test"),
    }
}

#[test]
fn type_rules_reproduce_real_llama_quantize_files() {
    for file in [
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-instruct-q4.gguf",
    ] {
        let path = cache_dir().join("models").join(file);
        assert!(
            path.exists(),
            "{} is missing: run scripts/fetch-models.sh",
            path.display()
        );
        let f = GgufFile::open(&path).unwrap();
        let scheme = scheme_of_file(&f);
        let arch = f.get_str("general.architecture").unwrap().to_string();
        let model = MixModel {
            n_layers: f.get_u32(&format!("{arch}.block_count")).unwrap() as usize,
            tied: f.tensor("output.weight").is_none(),
        };
        // These files were written by llama-quantize builds that counted attn_v / ffn_down
        // tensors in file order (current llama.cpp sorts by layer first; for the Gemma file the
        // two orders agree): count the same way.
        let mut counters: HashMap<&str, usize> = HashMap::new();
        let mut n = 0;
        for t in f.tensors() {
            let cat = Category::of(t.name());
            let kind = if cat.is_attn_v() {
                "attn_v"
            } else if cat == Category::FfnDown {
                "ffn_down"
            } else {
                "other"
            };
            let c = counters.entry(kind).or_default();
            let desc = TensorDesc {
                name: t.name(),
                cols: t.dims()[0] as usize,
                n_dims: t.n_dims(),
                counter: *c,
            };
            *c += 1;
            let want = QuantType::from_ggml_id(t.ggml_type().id()).unwrap();
            assert_eq!(
                mix::tensor_type(scheme, &desc, &model),
                want,
                "{file}: {}",
                t.name()
            );
            n += 1;
        }
        eprintln!("{file}: {n} tensor types reproduced ({scheme})");
    }
}

#[test]
fn q4_k_m_layers_for_a_28_layer_model() {
    // use_more_bits(i, 28): i < 3, i >= 24, or (i - 3) % 3 == 2, worked out by hand.
    let more = [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27];
    let m = MixModel {
        n_layers: 28,
        tied: true,
    };
    for i in 0..28 {
        for (kind, cols) in [("attn_v", 1024), ("ffn_down", 3072)] {
            let name = format!("blk.{i}.{kind}.weight");
            let t = TensorDesc {
                name: &name,
                cols,
                n_dims: 2,
                counter: i,
            };
            let want = if more.contains(&i) {
                QuantType::Q6_K
            } else {
                QuantType::Q4_K
            };
            assert_eq!(
                mix::tensor_type(QuantScheme::Q4_K_M, &t, &m),
                want,
                "{name}"
            );
        }
        let name = format!("blk.{i}.attn_q.weight");
        let t = TensorDesc {
            name: &name,
            cols: 1024,
            n_dims: 2,
            counter: i,
        };
        assert_eq!(
            mix::tensor_type(QuantScheme::Q4_K_M, &t, &m),
            QuantType::Q4_K
        );
    }
    let desc = |name: &'static str, cols, n_dims| TensorDesc {
        name,
        cols,
        n_dims,
        counter: 0,
    };
    let q = |s: QuantScheme, t: TensorDesc<'_>, tied| {
        mix::tensor_type(s, &t, &MixModel { n_layers: 28, tied })
    };
    use QuantScheme as S;
    use QuantType as T;
    // Tied embedding = output: Q6_K; untied embedding keeps the scheme's type.
    assert_eq!(
        q(S::Q4_K_M, desc("token_embd.weight", 1024, 2), true),
        T::Q6_K
    );
    assert_eq!(
        q(S::Q4_K_M, desc("token_embd.weight", 1024, 2), false),
        T::Q4_K
    );
    assert_eq!(q(S::Q4_0, desc("output.weight", 1024, 2), false), T::Q6_K);
    assert_eq!(q(S::Q8_0, desc("output.weight", 1024, 2), false), T::Q8_0);
    // Row length not a multiple of 256 (Gemma 3 270M's 640): Q8_0 output, Q5_0 for Q4_K.
    assert_eq!(q(S::Q4_K_M, desc("output.weight", 640, 2), false), T::Q8_0);
    assert_eq!(
        q(S::Q4_K_M, desc("blk.3.attn_q.weight", 640, 2), true),
        T::Q5_0
    );
    assert_eq!(
        q(S::Q6_K, desc("blk.3.attn_q.weight", 640, 2), true),
        T::Q8_0
    );
    // Not a multiple of 32 either: F16 (K and legacy alike).
    assert_eq!(q(S::Q4_K, desc("blk.3.attn_q.weight", 48, 2), true), T::F16);
    assert_eq!(q(S::Q8_0, desc("blk.3.attn_q.weight", 48, 2), true), T::F16);
    // Never quantized: norms, 1-D tensors, biases.
    assert_eq!(
        q(S::Q8_0, desc("blk.0.attn_norm.weight", 1024, 1), true),
        T::F32
    );
    assert_eq!(
        q(S::Q8_0, desc("blk.0.attn_q_norm.weight", 128, 1), true),
        T::F32
    );
    assert_eq!(q(S::Q8_0, desc("blk.0.attn_q.bias", 1024, 1), true), T::F32);
    assert_eq!(
        q(S::F16, desc("blk.0.ffn_norm.weight", 1024, 1), true),
        T::F32
    );
    assert_eq!(q(S::BF16, desc("output.weight", 1000, 2), false), T::BF16);
}

/// A one-matrix source for round-trip tests.
struct One(HostTensor);

impl TensorSource for One {
    fn tensor_f32(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        Ok((name == "model.layers.3.mlp.up_proj.weight").then(|| self.0.clone()))
    }
}

#[test]
fn k_quant_round_trip_within_ggml_bounds() {
    // ggml's test-quantize-fns data (0.1 + 2 cos(i)) and metric (sqrt(sum d^2) / n); bound
    // 0.002 for 4 bits and up.
    let (rows, cols) = (16, 512);
    let data: Vec<f32> = (0..rows * cols)
        .map(|i| 0.1 + 2.0 * (i as f32).cos())
        .collect();
    let src = One(HostTensor {
        shape: vec![rows, cols],
        data: data.clone(),
    });
    let cfg = Fixture::load("llama").unwrap().config;
    for (scheme, want) in [
        (QuantScheme::Q4_K, QuantType::Q4_K),
        (QuantScheme::Q6_K, QuantType::Q6_K),
        (QuantScheme::Q4_K_M, QuantType::Q4_K),
        (QuantScheme::Q8_0, QuantType::Q8_0),
    ] {
        let q = QuantizingSource::new(&src, &cfg, scheme);
        let name = "model.layers.3.mlp.up_proj.weight";
        let raw = q.tensor_raw(name).unwrap().unwrap();
        assert_eq!(raw.ty, want, "{scheme}");
        assert_eq!(raw.bytes.len(), rows * want.row_bytes(cols).unwrap());
        let back = q.tensor_f32(name).unwrap().unwrap().data;
        let err = data
            .iter()
            .zip(&back)
            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
            .sum::<f64>()
            .sqrt()
            / data.len() as f64;
        eprintln!("{scheme}: ggml total error {err:.3e}");
        assert!(err < 0.002, "{scheme}: {err}");
    }
}

/// Greedy tokens and all-position logits of a fixture model loaded with `quant`.
fn run(
    family: &str,
    quant: Option<QuantScheme>,
    ids: &[u32],
    n_gen: usize,
) -> (Vec<f32>, Vec<u32>) {
    let ck = Checkpoint::open(fixtures_dir().join(family)).unwrap();
    let mut b = CpuBackend::new();
    let model = ck.load(quant, &mut b, 64).unwrap();
    let kv = model.new_kv(&mut b, ids.len() + n_gen).unwrap();
    let logits = model.forward(&mut b, &kv, ids, 0, Logits::All).unwrap();
    let vocab = model.cfg.vocab_size;
    let mut toks = vec![argmax(&logits[logits.len() - vocab..])];
    while toks.len() < n_gen {
        let pos = ids.len() + toks.len() - 1;
        let last = *toks.last().unwrap();
        let l = model
            .forward(&mut b, &kv, &[last], pos, Logits::Last)
            .unwrap();
        toks.push(argmax(&l));
    }
    (logits, toks)
}

fn golden_floats(g: &SafetensorsModel, name: &str) -> Vec<f32> {
    g.tensor(name).unwrap().to_f32_vec().unwrap()
}

fn golden_ints(g: &SafetensorsModel, name: &str) -> Vec<u32> {
    let v = g.tensor(name).unwrap();
    v.bytes()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
        .collect()
}

/// Steps whose top-2 margin in the golden run is below this are where checking stops (the
/// CPU forward is within 1e-4 of transformers' fp64 logits, so only closer calls can flip).
const MIN_MARGIN: f32 = 1e-3;

#[test]
fn q8_0_at_load_matches_transformers_on_the_same_weights() {
    // fixtures/quant/q8_0_<family>.safetensors: transformers (fp64) running the fixture with
    // every quantized weight replaced by the gguf package's Q8_0 round trip.
    for family in ["llama", "qwen2", "gemma3"] {
        let fx = Fixture::load(family).unwrap();
        let g = SafetensorsModel::open(
            fixtures_dir()
                .join("quant")
                .join(format!("q8_0_{family}.safetensors")),
        )
        .unwrap();
        for prompt in ["short", "long"] {
            let f32_golden = fx.prompt(prompt).unwrap();
            let want = golden_ints(&g, &format!("{prompt}.greedy"));
            let margins = golden_floats(&g, &format!("{prompt}.margins"));
            let checked = margins
                .iter()
                .position(|&m| m < MIN_MARGIN)
                .map_or(want.len(), |i| i + 1);
            let n = want.len();
            let (lq, tq) = run(family, Some(QuantScheme::Q8_0), &f32_golden.ids, n);
            if checked > 0 && margins[checked - 1] < MIN_MARGIN {
                assert_eq!(tq[..checked - 1], want[..checked - 1], "{family} {prompt}");
            } else {
                assert_eq!(tq[..checked], want[..checked], "{family} {prompt}");
            }
            if prompt == "short" {
                let hf = golden_floats(&g, "short.logits");
                let d = diff(&lq, &hf);
                eprintln!(
                    "{family} short: q8_0 vs transformers-q8_0 max |diff| {:.2e}",
                    d.max_abs
                );
                assert!(
                    d.within(CPU_VS_HF_MAX_ABS, f64::INFINITY),
                    "{family}: {d:?}"
                );
            }
            // How far Q8_0 moves this (deliberately chaotic, logit std ~4) model from f32.
            let (lf, tf) = run(family, None, &f32_golden.ids, n);
            let same = tq.iter().zip(&tf).take_while(|(a, b)| a == b).count();
            let d = diff(&lq, &lf);
            eprintln!(
                "{family} {prompt}: q8_0 vs f32: max |logit diff| {:.3} over the prompt, greedy \
                 equal for {same}/{n} steps (f32 margin at the first difference: {})",
                d.max_abs,
                f32_golden
                    .margins
                    .get(same)
                    .map_or("-".into(), |m| format!("{m:.3}"))
            );
            assert_eq!(tf, f32_golden.greedy, "{family} {prompt}: f32 greedy");
        }
    }
}
