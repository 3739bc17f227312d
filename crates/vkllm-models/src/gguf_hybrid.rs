//! GGUF files of the hybrid and MoE families as llama.cpp's converter writes them: `qwen35`,
//! `qwen35moe`, `qwen3next`, `qwen3moe` (`convert_hf_to_gguf.py`'s `Qwen3NextModel`,
//! `_LinearAttentionVReorderBase`, `Qwen2MoeModel`; names from gguf-py's tensor map).
//!
//! What the converter changes, and how it is undone here:
//! - every RMSNorm weight except the gated DeltaNet norm is stored as `1 + w` (the `(1 + w)` norms
//!   of these families): the config's `norm_offset` becomes 0;
//! - `A_log` is stored as `ssm_a = -exp(A_log)`: read back as `ln(-ssm_a)`;
//! - `dt_bias` is `ssm_dt.bias`; the depthwise conv is squeezed to `[channels, kernel]`;
//! - Qwen3-Next's `in_proj_qkvz` is split into `attn_qkv` (all q, all k, all v) and `attn_gate`
//!   (z) while `in_proj_ba` stays packed (`ssm_ba`);
//! - Qwen3.5 with fewer key than value heads: every per-value-head tensor (the v rows of
//!   `attn_qkv` and of the conv, `attn_gate`, `ssm_beta`, `ssm_alpha`, `ssm_a`, `ssm_dt`, the
//!   columns of `ssm_out`) is reordered from grouped to tiled head order; the model reads it
//!   as is with `DeltaShape::tiled_v_heads`;
//! - experts are stacked: `ffn_{gate,up,down}_exps` `[experts, rows, cols]` (or a fused
//!   `ffn_gate_up_exps`, gate rows first), the shared expert is `ffn_*_shexp` and its gate
//!   `ffn_gate_inp_shexp`, the router `ffn_gate_inp`.
//!
//! Hyperparameters: `ssm.group_count` (key heads), `ssm.time_step_rank` (value heads),
//! `ssm.state_size` (key head size), `ssm.inner_size` (value heads * value head size),
//! `ssm.conv_kernel`, `full_attention_interval`, `expert_count`, `expert_used_count`,
//! `expert_feed_forward_length`, `expert_shared_feed_forward_length`. llama.cpp always
//! renormalises the top-k weights of these families (`expert_weights_norm` is honoured when
//! present); a layer is a MoE layer when its `ffn_gate_inp` exists.

use serde_json::{Map, Value, json};
use vkllm_gguf::{GgufFile, MetaValueRef};

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::family::Family;
use crate::gguf::GgufModel;
use crate::weights::{HostTensor, RawTensor};

fn num(f: &GgufFile, key: &str) -> Option<Value> {
    f.get(key).and_then(|v| match v {
        MetaValueRef::F32(x) => Some(json!(x as f64)),
        MetaValueRef::F64(x) => Some(json!(x)),
        other => other.as_u64().map(|x| json!(x)),
    })
}

fn missing(key: &str) -> ModelError {
    ModelError::Config {
        field: key.to_string(),
        msg: "missing from the GGUF metadata".into(),
    }
}

/// Adds the hybrid / MoE keys of a Hugging Face config read from the GGUF metadata.
pub(crate) fn add_keys(
    f: &GgufFile,
    arch: &str,
    family: Family,
    c: &mut Map<String, Value>,
) -> Result<(), ModelError> {
    let key = |k: &str| format!("{arch}.{k}");
    let need = |k: &str| num(f, &key(k)).ok_or_else(|| missing(&key(k)));
    if family.is_hybrid() {
        let hv = need("ssm.time_step_rank")?;
        let inner = need("ssm.inner_size")?;
        let (hv_n, inner_n) = (hv.as_u64().unwrap_or(0), inner.as_u64().unwrap_or(0));
        if hv_n == 0 || !inner_n.is_multiple_of(hv_n) {
            return Err(ModelError::Config {
                field: key("ssm.inner_size"),
                msg: format!("{inner_n} is not a multiple of ssm.time_step_rank {hv_n}"),
            });
        }
        c.insert("linear_num_key_heads".into(), need("ssm.group_count")?);
        c.insert("linear_num_value_heads".into(), hv);
        c.insert("linear_key_head_dim".into(), need("ssm.state_size")?);
        c.insert("linear_value_head_dim".into(), json!(inner_n / hv_n));
        c.insert("linear_conv_kernel_dim".into(), need("ssm.conv_kernel")?);
        c.insert(
            "full_attention_interval".into(),
            num(f, &key("full_attention_interval")).unwrap_or(json!(4)),
        );
        // llama.cpp rotates rope.dimension_count dims (all of the head when absent); the
        // transformers default of these families (0.25) must not apply.
        c.entry("partial_rotary_factor").or_insert(json!(1.0));
    }
    if family.is_moe() {
        c.insert("num_experts".into(), need("expert_count")?);
        c.insert("num_experts_per_tok".into(), need("expert_used_count")?);
        c.insert(
            "moe_intermediate_size".into(),
            need("expert_feed_forward_length")?,
        );
        let renorm = f
            .get(&key("expert_weights_norm"))
            .and_then(|v| v.as_bool())
            .unwrap_or(true);
        c.insert("norm_topk_prob".into(), json!(renorm));
        if family != Family::Qwen3Moe {
            let shared = match num(f, &key("expert_shared_feed_forward_length")) {
                Some(v) => v,
                None => {
                    // The shared expert's gate projection is [shared_ff, hidden].
                    let t = f
                        .tensor("blk.0.ffn_gate_shexp.weight")
                        .ok_or_else(|| missing(&key("expert_shared_feed_forward_length")))?;
                    json!(t.dims().get(1).copied().unwrap_or(0))
                }
            };
            c.insert("shared_expert_intermediate_size".into(), shared);
        }
    }
    Ok(())
}

/// What the converter did that the parsed config must reflect (see the module docs).
pub(crate) fn fix_config(f: &GgufFile, cfg: &mut ModelConfig) {
    let family = cfg.family;
    if family.is_hybrid() {
        cfg.norm_offset = 0.0;
    }
    if let Some(hy) = &mut cfg.hybrid {
        hy.packed_qkvz = false;
        hy.packed_ba = family == Family::Qwen3Next;
        hy.delta.tiled_v_heads = matches!(family, Family::Qwen35 | Family::Qwen35Moe)
            && hy.delta.n_k_heads != hy.delta.n_v_heads;
    }
    if let Some(moe) = &mut cfg.moe {
        for (i, s) in moe.sparse.iter_mut().enumerate() {
            *s = f.tensor(&format!("blk.{i}.ffn_gate_inp.weight")).is_some();
        }
    }
}

/// How one Hugging Face tensor is found in the file.
enum Source {
    /// The GGUF tensor as stored.
    Plain(String),
    /// `ssm_a = -exp(A_log)`: read `ln(-x)`.
    ALog(String),
    /// `[channels, kernel]`: viewed as `[channels, 1, kernel]`.
    Conv(String),
    /// A `[hidden]` or `[1, hidden]` row, viewed as `[1, hidden]`.
    Row(String),
    /// One half of a fused `[experts, 2 * ff, hidden]` gate/up tensor (`up`: the second).
    GateUpHalf { name: String, up: bool },
}

/// Where `hf` is in a file of `family` (`f`: the file, to see which expert layout it has; without
/// it, the separate `ffn_{gate,up}_exps`).
fn source(hf: &str, family: Family, f: Option<&GgufFile>) -> Option<Source> {
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, name) = rest.split_once('.')?;
    let blk = |s: &str| format!("blk.{layer}.{s}");
    let plain = |s: &str| Some(Source::Plain(blk(s)));
    match name {
        "post_attention_layernorm.weight" if family.is_hybrid() => {
            plain("post_attention_norm.weight")
        }
        "linear_attn.in_proj_qkv.weight" => plain("attn_qkv.weight"),
        "linear_attn.in_proj_z.weight" => plain("attn_gate.weight"),
        "linear_attn.in_proj_b.weight" => plain("ssm_beta.weight"),
        "linear_attn.in_proj_a.weight" => plain("ssm_alpha.weight"),
        "linear_attn.in_proj_ba.weight" => plain("ssm_ba.weight"),
        "linear_attn.out_proj.weight" => plain("ssm_out.weight"),
        "linear_attn.norm.weight" => plain("ssm_norm.weight"),
        "linear_attn.dt_bias" => plain("ssm_dt.bias"),
        "linear_attn.A_log" => Some(Source::ALog(blk("ssm_a"))),
        "linear_attn.conv1d.weight" => Some(Source::Conv(blk("ssm_conv1d.weight"))),
        "mlp.gate.weight" => plain("ffn_gate_inp.weight"),
        "mlp.shared_expert_gate.weight" => Some(Source::Row(blk("ffn_gate_inp_shexp.weight"))),
        "mlp.shared_expert.gate_proj.weight" => plain("ffn_gate_shexp.weight"),
        "mlp.shared_expert.up_proj.weight" => plain("ffn_up_shexp.weight"),
        "mlp.shared_expert.down_proj.weight" => plain("ffn_down_shexp.weight"),
        "mlp.experts.down_proj.weight" => plain("ffn_down_exps.weight"),
        "mlp.experts.gate_proj.weight" | "mlp.experts.up_proj.weight" => {
            let up = name == "mlp.experts.up_proj.weight";
            let own = blk(if up {
                "ffn_up_exps.weight"
            } else {
                "ffn_gate_exps.weight"
            });
            if f.is_none_or(|f| f.tensor(&own).is_some()) {
                Some(Source::Plain(own))
            } else {
                Some(Source::GateUpHalf {
                    name: blk("ffn_gate_up_exps.weight"),
                    up,
                })
            }
        }
        _ => None,
    }
}

/// The llama.cpp name of a hybrid / MoE family's tensor, when it differs from the dense map.
pub(crate) fn gguf_name(hf: &str, family: Family, f: Option<&GgufFile>) -> Option<String> {
    Some(match source(hf, family, f)? {
        Source::Plain(n) | Source::ALog(n) | Source::Conv(n) | Source::Row(n) => n,
        Source::GateUpHalf { name, .. } => name,
    })
}

/// `Some(result)` when `hf` needs one of the transforms above; `None` for the plain path.
pub(crate) fn tensor_f32(
    m: &GgufModel,
    hf: &str,
) -> Result<Option<Option<HostTensor>>, ModelError> {
    let family = m.config.family;
    if !family.is_hybrid_or_moe() {
        return Ok(None);
    }
    let Some(src) = source(hf, family, Some(&m.file)) else {
        return Ok(None);
    };
    let read = |name: &str| m.read_f32(name);
    Ok(Some(match src {
        Source::Plain(_) => return Ok(None),
        Source::ALog(name) => read(&name)?.map(|mut t| {
            t.data
                .iter_mut()
                .for_each(|x| *x = (-f64::from(*x)).ln() as f32);
            t
        }),
        Source::Conv(name) => read(&name)?.map(|mut t| {
            if let [c, k] = t.shape[..] {
                t.shape = vec![c, 1, k];
            }
            t
        }),
        Source::Row(name) => read(&name)?.map(|mut t| {
            if let [h] = t.shape[..] {
                t.shape = vec![1, h];
            }
            t
        }),
        Source::GateUpHalf { name, up } => match read(&name)? {
            None => None,
            Some(t) => {
                let [e, two_ff, h] = t.shape[..] else {
                    return Err(ModelError::TensorShape {
                        name,
                        expected: vec![0, 0, 0],
                        found: t.shape,
                    });
                };
                let ff = two_ff / 2;
                let off = if up { ff } else { 0 };
                let mut data = Vec::with_capacity(e * ff * h);
                for x in 0..e {
                    let base = (x * two_ff + off) * h;
                    data.extend_from_slice(&t.data[base..base + ff * h]);
                }
                Some(HostTensor {
                    shape: vec![e, ff, h],
                    data,
                })
            }
        },
    }))
}

/// `Some(result)` for tensors whose stored bytes cannot be used as is (transformed values), or
/// whose shape needs a view; `None` for the plain path.
pub(crate) fn tensor_raw<'a>(
    m: &'a GgufModel,
    hf: &str,
) -> Result<Option<Option<RawTensor<'a>>>, ModelError> {
    let family = m.config.family;
    if !family.is_hybrid_or_moe() {
        return Ok(None);
    }
    match source(hf, family, Some(&m.file)) {
        None | Some(Source::Plain(_)) => Ok(None),
        Some(Source::Row(name)) => {
            let Some(mut raw) = m.raw(&name)? else {
                return Ok(Some(None));
            };
            if let [h] = raw.shape[..] {
                raw.shape = vec![1, h];
            }
            Ok(Some(Some(raw)))
        }
        // Values to transform, or a part of a tensor: the f32 path.
        Some(_) => Ok(Some(None)),
    }
}
