//! GGUF files of the hybrid and MoE families, written the way llama.cpp's
//! `convert_hf_to_gguf.py` writes them (names from gguf-py's tensor map; `Qwen3NextModel` /
//! `_LinearAttentionVReorderBase` / `Qwen2MoeModel` transforms), from the transformers fixtures'
//! weights: loaded back through `GgufModel`, the model must give the logits of the safetensors
//! checkpoint it came from. A file with Q8_0 stacked experts also runs on the Vulkan device
//! (lavapipe in CI) with the experts kept in their blocks.
//!
//! The converter here is written from llama.cpp's rules, independently of the loader:
//! `1 + w` norms (except the gated DeltaNet norm), `ssm_a = -exp(A_log)`, `ssm_dt.bias`, the conv
//! squeezed, Qwen3-Next's `in_proj_qkvz` split into `attn_qkv` + `attn_gate`, Qwen3.5's value
//! heads reordered from grouped to tiled, experts stacked into `[experts, rows, cols]`.

use std::collections::BTreeMap;

mod common;

use vkllm_cpu::quant::{QuantType, quantize_rows};
use vkllm_gguf::writer::GgufWriter;
use vkllm_gguf::{GgmlType, GgufFile};
use vkllm_models::fixtures::Fixture;
use vkllm_models::gguf::GgufModel;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::hybrid::weights::FfnWeights;
use vkllm_models::parity::GPU_VS_CPU_MAX_ABS;
use vkllm_models::{CpuBackend, Family, Logits, ModelConfig, VulkanBackend};

/// One tensor in Hugging Face layout (outermost dimension first).
#[derive(Clone)]
struct T {
    shape: Vec<usize>,
    data: Vec<f32>,
}

fn hf_tensors(fx: &Fixture) -> BTreeMap<String, T> {
    fx.weights
        .tensors()
        .map(|v| {
            let t = T {
                shape: v.shape().to_vec(),
                data: v.to_f32_vec().expect("f32"),
            };
            (v.name().to_string(), t)
        })
        .collect()
}

/// Moves blocks of `head_dim` along `axis` (0: rows, 1: columns) from grouped order
/// (`kh * r + j`) to tiled order (`j * hk + kh`), as `_reorder_v_heads`.
fn tile(t: &T, axis: usize, row0: usize, hk: usize, r: usize, head_dim: usize) -> T {
    let mut out = t.clone();
    let (rows, cols) = (t.shape[0], t.data.len() / t.shape[0]);
    let pos = |g: usize| (g % r) * hk + g / r;
    for g in 0..hk * r {
        for d in 0..head_dim {
            let (src, dst) = (g * head_dim + d, pos(g) * head_dim + d);
            if axis == 0 {
                let (s, o) = ((row0 + src) * cols, (row0 + dst) * cols);
                out.data[o..o + cols].copy_from_slice(&t.data[s..s + cols]);
            } else {
                for row in 0..rows {
                    out.data[row * cols + dst] = t.data[row * cols + src];
                }
            }
        }
    }
    out
}

fn plus_one(t: &T) -> T {
    T {
        shape: t.shape.clone(),
        data: t.data.iter().map(|x| x + 1.0).collect(),
    }
}

/// The GGUF tensors llama.cpp's converter would write for this fixture.
fn convert(cfg: &ModelConfig, hf: &BTreeMap<String, T>) -> BTreeMap<String, T> {
    let family = cfg.family;
    let hybrid = family.is_hybrid();
    let norm = |t: &T| if hybrid { plus_one(t) } else { t.clone() };
    let mut out = BTreeMap::new();
    let mut experts: BTreeMap<(usize, String), Vec<(usize, T)>> = BTreeMap::new();
    let (hk, hv, dk, dv) = match &cfg.hybrid {
        Some(h) => (
            h.delta.n_k_heads,
            h.delta.n_v_heads,
            h.delta.k_dim,
            h.delta.v_dim,
        ),
        None => (1, 1, 0, 0),
    };
    let r = hv / hk;
    let reorder = matches!(family, Family::Qwen35 | Family::Qwen35Moe) && hk != hv;
    let v_rows = |t: &T, row0: usize, head: usize| {
        if reorder {
            tile(t, 0, row0, hk, r, head)
        } else {
            t.clone()
        }
    };
    for (name, t) in hf {
        let mut put = |n: String, t: T| {
            out.insert(n, t);
        };
        match name.as_str() {
            "model.embed_tokens.weight" => put("token_embd.weight".into(), t.clone()),
            "model.norm.weight" => put("output_norm.weight".into(), norm(t)),
            "lm_head.weight" => put("output.weight".into(), t.clone()),
            _ => {}
        }
        let Some(rest) = name.strip_prefix("model.layers.") else {
            continue;
        };
        let (i, part) = rest.split_once('.').expect("layer name");
        let blk = |s: &str| format!("blk.{i}.{s}");
        let simple: Option<(&str, bool)> = match part {
            "input_layernorm.weight" => Some(("attn_norm.weight", true)),
            "post_attention_layernorm.weight" if hybrid => {
                Some(("post_attention_norm.weight", true))
            }
            "post_attention_layernorm.weight" => Some(("ffn_norm.weight", false)),
            "self_attn.q_proj.weight" => Some(("attn_q.weight", false)),
            "self_attn.k_proj.weight" => Some(("attn_k.weight", false)),
            "self_attn.v_proj.weight" => Some(("attn_v.weight", false)),
            "self_attn.o_proj.weight" => Some(("attn_output.weight", false)),
            "self_attn.q_norm.weight" => Some(("attn_q_norm.weight", true)),
            "self_attn.k_norm.weight" => Some(("attn_k_norm.weight", true)),
            "linear_attn.in_proj_ba.weight" => Some(("ssm_ba.weight", false)),
            "linear_attn.norm.weight" => Some(("ssm_norm.weight", false)),
            "mlp.gate.weight" => Some(("ffn_gate_inp.weight", false)),
            "mlp.shared_expert.gate_proj.weight" => Some(("ffn_gate_shexp.weight", false)),
            "mlp.shared_expert.up_proj.weight" => Some(("ffn_up_shexp.weight", false)),
            "mlp.shared_expert.down_proj.weight" => Some(("ffn_down_shexp.weight", false)),
            "mlp.shared_expert_gate.weight" => Some(("ffn_gate_inp_shexp.weight", false)),
            "mlp.gate_proj.weight" => Some(("ffn_gate.weight", false)),
            "mlp.up_proj.weight" => Some(("ffn_up.weight", false)),
            "mlp.down_proj.weight" => Some(("ffn_down.weight", false)),
            _ => None,
        };
        if let Some((g, is_norm)) = simple {
            put(blk(g), if is_norm { norm(t) } else { t.clone() });
            continue;
        }
        let h = cfg.hidden_size;
        match part {
            "linear_attn.in_proj_qkvz.weight" => {
                // Per key head [q, k, v (r), z (r)] -> all q, all k, all v; z.
                let blkw = 2 * dk + 2 * r * dv;
                let rows = |off: usize, len: usize| -> Vec<f32> {
                    (0..hk)
                        .flat_map(|kh| {
                            let s = (kh * blkw + off) * h;
                            t.data[s..s + len * h].to_vec()
                        })
                        .collect()
                };
                let mut qkv = rows(0, dk);
                qkv.extend(rows(dk, dk));
                qkv.extend(rows(2 * dk, r * dv));
                let z = rows(2 * dk + r * dv, r * dv);
                put(
                    blk("attn_qkv.weight"),
                    T {
                        shape: vec![2 * hk * dk + hv * dv, h],
                        data: qkv,
                    },
                );
                put(
                    blk("attn_gate.weight"),
                    T {
                        shape: vec![hv * dv, h],
                        data: z,
                    },
                );
            }
            "linear_attn.in_proj_qkv.weight" => {
                put(blk("attn_qkv.weight"), v_rows(t, 2 * hk * dk, dv))
            }
            "linear_attn.in_proj_z.weight" => put(blk("attn_gate.weight"), v_rows(t, 0, dv)),
            "linear_attn.in_proj_b.weight" => put(blk("ssm_beta.weight"), v_rows(t, 0, 1)),
            "linear_attn.in_proj_a.weight" => put(blk("ssm_alpha.weight"), v_rows(t, 0, 1)),
            "linear_attn.out_proj.weight" => {
                let o = if reorder {
                    tile(t, 1, 0, hk, r, dv)
                } else {
                    t.clone()
                };
                put(blk("ssm_out.weight"), o);
            }
            "linear_attn.conv1d.weight" => {
                let sq = T {
                    shape: vec![t.shape[0], t.shape[2]],
                    data: t.data.clone(),
                };
                put(blk("ssm_conv1d.weight"), v_rows(&sq, 2 * hk * dk, dv));
            }
            "linear_attn.A_log" | "linear_attn.dt_bias" => {
                let col = T {
                    shape: vec![hv, 1],
                    data: t.data.clone(),
                };
                let mut v = v_rows(&col, 0, 1);
                v.shape = vec![hv];
                if part.ends_with("A_log") {
                    v.data.iter_mut().for_each(|x| *x = -x.exp());
                    put(blk("ssm_a"), v);
                } else {
                    put(blk("ssm_dt.bias"), v);
                }
            }
            _ => {
                // mlp.experts.{e}.{kind}.weight -> stacked.
                let rest = part
                    .strip_prefix("mlp.experts.")
                    .unwrap_or_else(|| panic!("unmapped {name}"));
                let (e, kind) = rest.split_once('.').expect("expert name");
                let kind = kind.trim_end_matches(".weight").to_string();
                let key = (i.parse().expect("layer"), kind);
                experts
                    .entry(key)
                    .or_default()
                    .push((e.parse().expect("expert"), t.clone()));
            }
        }
    }
    for ((i, kind), mut list) in experts {
        list.sort_by_key(|(e, _)| *e);
        let g = match kind.as_str() {
            "gate_proj" => "ffn_gate_exps",
            "up_proj" => "ffn_up_exps",
            "down_proj" => "ffn_down_exps",
            k => panic!("expert tensor {k}"),
        };
        let shape = [vec![list.len()], list[0].1.shape.clone()].concat();
        let data = list.into_iter().flat_map(|(_, t)| t.data).collect();
        out.insert(format!("blk.{i}.{g}.weight"), T { shape, data });
    }
    out
}

fn arch(f: Family) -> &'static str {
    match f {
        Family::Qwen35 => "qwen35",
        Family::Qwen35Moe => "qwen35moe",
        Family::Qwen3Next => "qwen3next",
        Family::Qwen3Moe => "qwen3moe",
        other => panic!("not a hybrid family: {other:?}"),
    }
}

fn write_gguf(cfg: &ModelConfig, tensors: &BTreeMap<String, T>) -> Vec<u8> {
    write_gguf_with(cfg, tensors, |_| false)
}

/// [`write_gguf`] storing the tensors `q8` selects as Q8_0 (rows quantized by vkllm-cpu).
fn write_gguf_with(
    cfg: &ModelConfig,
    tensors: &BTreeMap<String, T>,
    q8: impl Fn(&str) -> bool,
) -> Vec<u8> {
    let a = arch(cfg.family);
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("{a}.{s}");
    w.add_metadata("general.architecture", a).expect("meta");
    let u =
        |w: &mut GgufWriter, key: &str, v: usize| w.add_metadata(k(key), v as u32).expect("meta");
    u(&mut w, "block_count", cfg.n_layers);
    u(&mut w, "context_length", cfg.max_position);
    u(&mut w, "embedding_length", cfg.hidden_size);
    if cfg.intermediate_size > 0 {
        u(&mut w, "feed_forward_length", cfg.intermediate_size);
    }
    u(&mut w, "attention.head_count", cfg.n_heads);
    u(&mut w, "attention.head_count_kv", cfg.n_kv_heads);
    u(&mut w, "attention.key_length", cfg.head_dim);
    u(&mut w, "attention.value_length", cfg.head_dim);
    u(
        &mut w,
        "rope.dimension_count",
        cfg.layers[0].rope.rotary_dim,
    );
    w.add_metadata(k("rope.freq_base"), cfg.layers[0].rope.theta)
        .expect("meta");
    w.add_metadata(k("attention.layer_norm_rms_epsilon"), cfg.rms_eps)
        .expect("meta");
    if let Some(h) = &cfg.hybrid {
        let d = h.delta;
        u(&mut w, "ssm.conv_kernel", h.conv_kernel);
        u(&mut w, "ssm.state_size", d.k_dim);
        u(&mut w, "ssm.group_count", d.n_k_heads);
        u(&mut w, "ssm.time_step_rank", d.n_v_heads);
        u(&mut w, "ssm.inner_size", d.v_width());
        u(&mut w, "full_attention_interval", 4);
    }
    if let Some(m) = &cfg.moe {
        u(&mut w, "expert_count", m.n_experts);
        u(&mut w, "expert_used_count", m.top_k);
        u(&mut w, "expert_feed_forward_length", m.expert_ff);
        if let Some(s) = m.shared_ff {
            u(&mut w, "expert_shared_feed_forward_length", s);
        }
        w.add_metadata(k("expert_weights_norm"), m.renormalize)
            .expect("meta");
    }
    for (name, t) in tensors {
        let dims: Vec<u64> = t.shape.iter().rev().map(|&d| d as u64).collect();
        if q8(name) {
            let cols = *t.shape.last().expect("dims");
            let bytes = quantize_rows(QuantType::Q8_0, &t.data, cols).expect("q8_0");
            w.add_tensor(name.clone(), GgmlType::Q8_0, &dims, bytes)
                .expect("tensor");
            continue;
        }
        let bytes: Vec<u8> = bytemuck_bytes(&t.data);
        w.add_tensor(name.clone(), GgmlType::F32, &dims, bytes)
            .expect("tensor");
    }
    w.to_bytes().expect("gguf bytes")
}

fn bytemuck_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `--fuse-gate-up-exps`: gate and up experts in one `[experts, 2 * ff, hidden]` tensor.
fn fuse_gate_up(t: &mut BTreeMap<String, T>) {
    let layers: Vec<String> = t
        .keys()
        .filter_map(|k| k.strip_suffix(".ffn_gate_exps.weight").map(str::to_string))
        .collect();
    for l in layers {
        let g = t
            .remove(&format!("{l}.ffn_gate_exps.weight"))
            .expect("gate");
        let u = t.remove(&format!("{l}.ffn_up_exps.weight")).expect("up");
        let (e, ff, h) = (g.shape[0], g.shape[1], g.shape[2]);
        let mut data = Vec::with_capacity(2 * g.data.len());
        for x in 0..e {
            data.extend_from_slice(&g.data[x * ff * h..(x + 1) * ff * h]);
            data.extend_from_slice(&u.data[x * ff * h..(x + 1) * ff * h]);
        }
        t.insert(
            format!("{l}.ffn_gate_up_exps.weight"),
            T {
                shape: vec![e, 2 * ff, h],
                data,
            },
        );
    }
}

#[test]
fn gguf_files_give_the_checkpoints_logits() {
    let cases = Family::HYBRID_MOE
        .into_iter()
        .map(|f| (f, false))
        .chain([(Family::Qwen35Moe, true)]);
    for (family, fused) in cases {
        let fx = Fixture::load(family.name()).expect("fixture");
        let cfg = &fx.config;
        let mut tensors = convert(cfg, &hf_tensors(&fx));
        if fused {
            fuse_gate_up(&mut tensors);
            assert!(tensors.contains_key("blk.0.ffn_gate_up_exps.weight"));
        }
        let gguf = write_gguf(cfg, &tensors);
        let file = GgufFile::from_bytes(gguf).expect("parse gguf");
        let model = GgufModel::from_file(file).expect("gguf model");
        let g = &model.config;
        // What the file says about the model, read back.
        assert_eq!(g.family, family);
        assert_eq!(g.norm_offset, 0.0, "{family:?}: llama.cpp stores 1 + w");
        assert_eq!(
            g.moe.as_ref().map(|m| &m.sparse),
            cfg.moe.as_ref().map(|m| &m.sparse)
        );
        if let (Some(a), Some(b)) = (&g.hybrid, &cfg.hybrid) {
            assert_eq!(a.mixers, b.mixers);
            assert_eq!(a.delta.tiled_v_heads, family != Family::Qwen3Next);
        }
        let ids = fx.prompt("long").expect("prompt").ids[..150].to_vec();
        let run = |m: &HybridModel, b: &mut CpuBackend| {
            let st = m.new_state(b, ids.len()).expect("state");
            m.forward(b, &st, &ids, 0, Logits::All).expect("forward")
        };
        let mut b = CpuBackend::new();
        let from_hf = HybridModel::load(cfg.clone(), &fx.weights, &mut b, 64).expect("hf");
        let want = run(&from_hf, &mut b);
        let from_gguf = HybridModel::load(g.clone(), &model, &mut b, 64).expect("gguf");
        let got = run(&from_gguf, &mut b);
        let d = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let label = if fused { " (fused gate_up_exps)" } else { "" };
        eprintln!(
            "{}{label}: max |gguf - safetensors| = {d:.3e}",
            family.name()
        );
        assert!(d < 2e-5, "{}: {d}", family.name());
    }
}

#[test]
fn gguf_names_follow_llama_cpp() {
    let fx = Fixture::load("qwen3_5_moe").expect("fixture");
    let names: Vec<String> = convert(&fx.config, &hf_tensors(&fx)).into_keys().collect();
    for n in [
        "blk.0.attn_qkv.weight",
        "blk.0.attn_gate.weight",
        "blk.0.ssm_a",
        "blk.0.ssm_dt.bias",
        "blk.0.ssm_conv1d.weight",
        "blk.0.ssm_beta.weight",
        "blk.0.ssm_alpha.weight",
        "blk.0.ssm_norm.weight",
        "blk.0.ssm_out.weight",
        "blk.0.post_attention_norm.weight",
        "blk.0.ffn_gate_inp.weight",
        "blk.0.ffn_gate_exps.weight",
        "blk.0.ffn_down_exps.weight",
        "blk.0.ffn_gate_inp_shexp.weight",
        "blk.0.ffn_up_shexp.weight",
        "blk.3.attn_q.weight",
        "blk.3.attn_q_norm.weight",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
    }
    // Every name the loader asks for resolves to one of these.
    for hf in fx.weights.names() {
        let mapped = vkllm_models::gguf::gguf_name(hf, fx.config.family);
        if let Some(m) = mapped {
            assert!(names.contains(&m), "{hf} -> {m}");
        }
    }
}

/// A file whose stacked experts (`ffn_{gate,up,down}_exps`, `[experts, rows, cols]`) are Q8_0:
/// on the GPU the experts stay Q8_0 (the expert kernels read the file's blocks), and the logits
/// equal the CPU's (which dequantizes the same blocks) within the GPU-vs-CPU tolerance.
#[test]
fn q8_0_gguf_experts_stay_quantized_on_the_gpu() {
    let dev = common::device();
    let fx = Fixture::load("qwen3_moe").expect("fixture");
    let cfg = &fx.config;
    let tensors = convert(cfg, &hf_tensors(&fx));
    let gguf = write_gguf_with(cfg, &tensors, |n| n.ends_with("_exps.weight"));
    let model = GgufModel::from_file(GgufFile::from_bytes(gguf).expect("parse")).expect("model");
    let ids = fx.prompt("short").expect("prompt").ids;
    let mut cpu = CpuBackend::new();
    let cm = HybridModel::load(model.config.clone(), &model, &mut cpu, 64).expect("cpu");
    let st = cm.new_state(&mut cpu, ids.len()).expect("state");
    let want = cm
        .forward(&mut cpu, &st, &ids, 0, Logits::All)
        .expect("cpu forward");
    let mut gpu = VulkanBackend::new(dev.clone());
    let gm = HybridModel::load(model.config.clone(), &model, &mut gpu, 64).expect("gpu");
    let mut experts = 0;
    for l in &gm.weights.layers {
        if let FfnWeights::Moe(m) = &l.ffn {
            for t in [m.experts.gate, m.experts.up, m.experts.down] {
                let dt = gpu.matrix_dtype(t);
                assert_eq!(
                    dt,
                    Some(vkllm_kernels::WeightType::Q8_0),
                    "experts as stored"
                );
                experts += 1;
            }
        }
    }
    assert!(experts > 0);
    let st = gm.new_state(&mut gpu, ids.len()).expect("state");
    let got = gm
        .forward(&mut gpu, &st, &ids, 0, Logits::All)
        .expect("gpu forward");
    let d = vkllm_cpu::compare::diff(&got, &want);
    assert!(d.max_abs <= GPU_VS_CPU_MAX_ABS, "max abs {}", d.max_abs);
}
