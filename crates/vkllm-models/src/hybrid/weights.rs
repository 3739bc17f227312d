//! The weights of hybrid and MoE models, loaded by their Hugging Face names.
//!
//! Layout changes made at load time (pure row selections, so quantized rows move unchanged):
//! - gated attention: `q_proj` holds per head `[query (head_dim), gate (head_dim)]` rows; they
//!   become two matrices, `q` and `gate`;
//! - Qwen3-Next: `in_proj_qkvz` holds per key head `[q, k, v (r heads), z (r heads)]` and
//!   `in_proj_ba` per key head `[b (r), a (r)]` (`r = v_heads / k_heads`); they become Qwen3.5's
//!   `in_proj_qkv` (all q, all k, all v), `in_proj_z`, `in_proj_b`, `in_proj_a` (each of the two
//!   independently: llama.cpp's GGUF splits the first and keeps the second);
//! - routed experts (`mlp.experts.{e}.{gate,up,down}_proj`) are stacked into one matrix per
//!   projection ([`Experts`]); a source may offer them already stacked as
//!   `mlp.experts.{gate,up,down}_proj.weight` of shape `[experts, rows, cols]` (GGUF). Block
//!   formats (Q8_0, Q4_K, ...) stay as stored when the backend computes with them (the Vulkan
//!   expert kernels dequantize the selected experts' blocks in registers), else f32.
//!
//! Multimodal Qwen3.5 checkpoints keep the language model under `model.language_model.`;
//! [`TextModelNames`] finds tensors there too.

use vkllm_cpu::quant::QuantType;

use crate::backend::{Backend, Experts, Linear, Tensor};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::hybrid::config::{HybridConfig, Mixer};
use crate::weights::{HostTensor, Loader, RawTensor, TensorSource};

/// A Gated DeltaNet layer's weights (Qwen3.5 layout).
#[derive(Clone, Debug)]
pub struct DeltaWeights {
    /// `[conv_dim, hidden]`: q, k and v of every head.
    pub qkv: Linear,
    pub z: Linear,
    pub b: Linear,
    pub a: Linear,
    /// Depthwise convolution, `[conv_dim, kernel]`.
    pub conv: Tensor,
    pub a_log: Tensor,
    pub dt_bias: Tensor,
    /// The gated RMSNorm's weight, `[v_dim]`.
    pub norm: Tensor,
    pub out: Linear,
}

/// A full-attention layer's weights.
#[derive(Clone, Debug)]
pub struct AttnWeights {
    pub q: Linear,
    /// The output gate (gated attention of the hybrid families).
    pub gate: Option<Linear>,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub q_norm: Tensor,
    pub k_norm: Tensor,
}

/// A layer's token mixer.
#[derive(Clone, Debug)]
pub enum MixerWeights {
    Attention(AttnWeights),
    DeltaNet(DeltaWeights),
}

/// A gated MLP.
#[derive(Clone, Debug)]
pub struct MlpWeights {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

/// The shared expert of a MoE block, scaled by `sigmoid(gate . x)`.
#[derive(Clone, Debug)]
pub struct SharedExpert {
    pub mlp: MlpWeights,
    /// `[1, hidden]`.
    pub gate: Linear,
}

/// A Mixture-of-Experts block.
#[derive(Clone, Debug)]
pub struct MoeWeights {
    /// `[n_experts, hidden]`; with `shared_stacked`, `[n_experts + 1, hidden]`: the shared
    /// expert's gate is its last row.
    pub router: Linear,
    /// The routed experts; with `shared_stacked` the shared expert is one more, the last.
    pub experts: Experts,
    /// The shared expert when it runs as its own MLP.
    pub shared: Option<SharedExpert>,
    /// The shared expert is stacked with the routed ones ([`Backend::stacks_shared_expert`]).
    pub shared_stacked: bool,
}

/// A layer's feed-forward block.
#[derive(Clone, Debug)]
pub enum FfnWeights {
    Dense(MlpWeights),
    Moe(MoeWeights),
}

/// One decoder layer.
#[derive(Clone, Debug)]
pub struct HybridLayerWeights {
    pub attn_norm: Tensor,
    pub mixer: MixerWeights,
    pub ffn_norm: Tensor,
    pub ffn: FfnWeights,
}

/// All weights of a hybrid or MoE model.
#[derive(Clone, Debug)]
pub struct HybridWeights {
    pub embed: Tensor,
    pub layers: Vec<HybridLayerWeights>,
    pub final_norm: Tensor,
    pub lm_head: Linear,
}

/// A source that also looks for `model.X` under `model.language_model.X` (multimodal Qwen3.5).
pub struct TextModelNames<'a>(pub &'a dyn TensorSource);

impl TextModelNames<'_> {
    fn alt(name: &str) -> Option<String> {
        name.strip_prefix("model.")
            .map(|rest| format!("model.language_model.{rest}"))
    }
}

impl TensorSource for TextModelNames<'_> {
    fn tensor_f32(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        match self.0.tensor_f32(name)? {
            Some(t) => Ok(Some(t)),
            None => match Self::alt(name) {
                Some(alt) => self.0.tensor_f32(&alt),
                None => Ok(None),
            },
        }
    }

    fn tensor_raw(&self, name: &str) -> Result<Option<RawTensor<'_>>, ModelError> {
        match self.0.tensor_raw(name)? {
            Some(t) => Ok(Some(t)),
            None => match Self::alt(name) {
                Some(alt) => self.0.tensor_raw(&alt),
                None => Ok(None),
            },
        }
    }
}

fn linear(weight: Tensor, rows: usize, cols: usize) -> Linear {
    Linear {
        weight,
        bias: None,
        rows,
        cols,
    }
}

impl<B: Backend> Loader<'_, B> {
    /// The rows `pick` (in that order) of the `[rows, cols]` matrix `name`, as a new matrix.
    fn rows_of(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        pick: &[usize],
    ) -> Result<Linear, ModelError> {
        if let Some(raw) = self.src.tensor_raw(name)? {
            if raw.shape != [rows, cols] {
                return Err(ModelError::TensorShape {
                    name: name.to_string(),
                    expected: vec![rows, cols],
                    found: raw.shape,
                });
            }
            let rb = raw.bytes.len() / rows;
            let bytes: Vec<u8> = pick
                .iter()
                .flat_map(|&r| &raw.bytes[r * rb..(r + 1) * rb])
                .copied()
                .collect();
            if let Some(t) = self.b.upload_matrix_raw(raw.ty, &bytes, pick.len(), cols)? {
                return Ok(linear(t, pick.len(), cols));
            }
        }
        let data = self.read(name, &[rows, cols])?;
        let sel: Vec<f32> = pick
            .iter()
            .flat_map(|&r| &data[r * cols..(r + 1) * cols])
            .copied()
            .collect();
        let t = self.b.upload_matrix(&sel, pick.len(), cols)?;
        Ok(linear(t, pick.len(), cols))
    }

    /// A bias-free `[rows, cols]` matrix by its full name.
    fn plain(&mut self, name: &str, rows: usize, cols: usize) -> Result<Linear, ModelError> {
        Ok(linear(self.matrix(name, rows, cols)?, rows, cols))
    }

    /// The stacked gate, up and down projections of `n` experts: kept in their stored block
    /// format when the source offers all three that way and the backend computes with it (the
    /// quantized expert kernels read only the selected experts' blocks), else f32. With
    /// `shared` (the shared expert's prefix, an MLP as wide as the experts) it is stacked last
    /// when its matrices come in the experts' format (the returned flag says whether it was).
    fn experts(
        &mut self,
        p: &str,
        n: usize,
        ff: usize,
        h: usize,
        shared: Option<&str>,
    ) -> Result<(Tensor, Tensor, Tensor, bool), ModelError> {
        let shapes = [
            ("gate_proj", ff, h),
            ("up_proj", ff, h),
            ("down_proj", h, ff),
        ];
        let mut raws = Vec::with_capacity(3);
        for (kind, rows, cols) in shapes {
            match self.stacked_raw(p, kind, n, rows, cols)? {
                Some(r) => raws.push((r, rows, cols)),
                None => break,
            }
        }
        if raws.len() == 3 {
            // The shared expert's blocks, when all three are in the experts' formats.
            let mut extra = Vec::with_capacity(3);
            if let Some(sp) = shared {
                for ((kind, rows, cols), (r, _, _)) in shapes.iter().zip(&raws) {
                    match self.src.tensor_raw(&format!("{sp}.{kind}.weight"))? {
                        Some(t) if t.ty == r.0 && t.shape == [*rows, *cols] => {
                            extra.push(t.bytes.into_owned())
                        }
                        _ => break,
                    }
                }
            }
            let stacked = extra.len() == 3;
            if stacked {
                for ((r, _, _), e) in raws.iter_mut().zip(extra) {
                    r.1.extend_from_slice(&e);
                }
            }
            let ne = n + stacked as usize;
            let mut up = Vec::with_capacity(3);
            for (r, rows, cols) in &raws {
                match self.b.upload_matrix_raw(r.0, &r.1, ne * rows, *cols)? {
                    Some(t) => up.push(t),
                    // The backend declined the format (it does all or none in practice; a
                    // declined one after accepted ones only leaves those unused).
                    None => break,
                }
            }
            if let [g, u, d] = up[..] {
                return Ok((g, u, d, stacked));
            }
        }
        Ok((
            self.stacked(p, "gate_proj", n, ff, h, shared)?,
            self.stacked(p, "up_proj", n, ff, h, shared)?,
            self.stacked(p, "down_proj", n, h, ff, shared)?,
            shared.is_some(),
        ))
    }

    /// The stored blocks of the experts' `kind` projection, stacked (`n * rows` rows of
    /// `cols`), when the source has them in one block format (not a float type): one
    /// `[experts, rows, cols]` tensor or every per-expert tensor.
    fn stacked_raw(
        &mut self,
        p: &str,
        kind: &str,
        n: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Option<(QuantType, Vec<u8>)>, ModelError> {
        let block = |t: QuantType| !matches!(t, QuantType::F32 | QuantType::F16 | QuantType::BF16);
        let whole = format!("{p}.mlp.experts.{kind}.weight");
        if let Some(r) = self.src.tensor_raw(&whole)? {
            let ok = r.shape == [n, rows, cols] && block(r.ty);
            return Ok(ok.then(|| (r.ty, r.bytes.into_owned())));
        }
        let mut ty = None;
        let mut bytes = Vec::new();
        for e in 0..n {
            let Some(r) = self
                .src
                .tensor_raw(&format!("{p}.mlp.experts.{e}.{kind}.weight"))?
            else {
                return Ok(None);
            };
            if r.shape != [rows, cols] || !block(r.ty) || ty.is_some_and(|t| t != r.ty) {
                return Ok(None);
            }
            ty = Some(r.ty);
            bytes.extend_from_slice(&r.bytes);
        }
        Ok(ty.map(|t| (t, bytes)))
    }

    /// Experts' `kind` projection (`gate_proj`, `up_proj`, `down_proj`) of `[rows, cols]` each,
    /// stacked in f32 (dequantized at load): from one `[experts, rows, cols]` tensor when the
    /// source has it, else from the per-expert tensors; then the shared expert's (prefix
    /// `shared`) when given.
    fn stacked(
        &mut self,
        p: &str,
        kind: &str,
        n: usize,
        rows: usize,
        cols: usize,
        shared: Option<&str>,
    ) -> Result<Tensor, ModelError> {
        let whole = format!("{p}.mlp.experts.{kind}.weight");
        let mut data = match self.src.tensor_f32(&whole)? {
            Some(t) if t.shape == [n, rows, cols] => t.data,
            Some(t) => {
                return Err(ModelError::TensorShape {
                    name: whole,
                    expected: vec![n, rows, cols],
                    found: t.shape,
                });
            }
            None => {
                let mut data = Vec::with_capacity(n * rows * cols);
                for e in 0..n {
                    data.extend(
                        self.read(&format!("{p}.mlp.experts.{e}.{kind}.weight"), &[rows, cols])?,
                    );
                }
                data
            }
        };
        if let Some(sp) = shared {
            data.extend(self.read(&format!("{sp}.{kind}.weight"), &[rows, cols])?);
        }
        let ne = n + shared.is_some() as usize;
        self.b.upload_matrix(&data, ne * rows, cols)
    }

    fn mlp(&mut self, p: &str, hidden: usize, ff: usize) -> Result<MlpWeights, ModelError> {
        Ok(MlpWeights {
            gate: self.plain(&format!("{p}.gate_proj.weight"), ff, hidden)?,
            up: self.plain(&format!("{p}.up_proj.weight"), ff, hidden)?,
            down: self.plain(&format!("{p}.down_proj.weight"), hidden, ff)?,
        })
    }

    fn delta(
        &mut self,
        p: &str,
        c: &ModelConfig,
        hy: &HybridConfig,
    ) -> Result<DeltaWeights, ModelError> {
        let h = c.hidden_size;
        let d = hy.delta;
        let (qw, vw, hv, conv) = (d.qk_width(), d.v_width(), d.n_v_heads, hy.conv_dim());
        let (dk, r) = (d.k_dim, d.n_v_heads / d.n_k_heads);
        let heads = 0..d.n_k_heads;
        let (qkv, z) = if hy.packed_qkvz {
            // Per key head: [q (k_dim), k (k_dim), v (r * v_dim), z (r * v_dim)].
            let rv = r * d.v_dim;
            let blk = 2 * dk + 2 * rv;
            let span = |kh: usize, off: usize, len: usize| (kh * blk + off)..(kh * blk + off + len);
            let mut qkv_rows: Vec<usize> = heads.clone().flat_map(|kh| span(kh, 0, dk)).collect();
            qkv_rows.extend(heads.clone().flat_map(|kh| span(kh, dk, dk)));
            qkv_rows.extend(heads.clone().flat_map(|kh| span(kh, 2 * dk, rv)));
            let z_rows: Vec<usize> = heads
                .clone()
                .flat_map(|kh| span(kh, 2 * dk + rv, rv))
                .collect();
            let total = d.n_k_heads * blk;
            let name = format!("{p}.in_proj_qkvz.weight");
            (
                self.rows_of(&name, total, h, &qkv_rows)?,
                self.rows_of(&name, total, h, &z_rows)?,
            )
        } else {
            (
                self.plain(&format!("{p}.in_proj_qkv.weight"), conv, h)?,
                self.plain(&format!("{p}.in_proj_z.weight"), vw, h)?,
            )
        };
        let (b, a) = if hy.packed_ba {
            // Per key head: [b (r), a (r)].
            let ba = format!("{p}.in_proj_ba.weight");
            let b_rows: Vec<usize> = heads
                .clone()
                .flat_map(|kh| kh * 2 * r..kh * 2 * r + r)
                .collect();
            let a_rows: Vec<usize> = heads
                .flat_map(|kh| kh * 2 * r + r..(kh + 1) * 2 * r)
                .collect();
            (
                self.rows_of(&ba, 2 * hv, h, &b_rows)?,
                self.rows_of(&ba, 2 * hv, h, &a_rows)?,
            )
        } else {
            (
                self.plain(&format!("{p}.in_proj_b.weight"), hv, h)?,
                self.plain(&format!("{p}.in_proj_a.weight"), hv, h)?,
            )
        };
        debug_assert_eq!(qkv.rows, 2 * qw + vw);
        Ok(DeltaWeights {
            qkv,
            z,
            b,
            a,
            conv: self.tensor(&format!("{p}.conv1d.weight"), &[conv, 1, hy.conv_kernel])?,
            a_log: self.tensor(&format!("{p}.A_log"), &[hv])?,
            dt_bias: self.tensor(&format!("{p}.dt_bias"), &[hv])?,
            norm: self.tensor(&format!("{p}.norm.weight"), &[d.v_dim])?,
            out: self.plain(&format!("{p}.out_proj.weight"), h, vw)?,
        })
    }

    fn attn(&mut self, p: &str, c: &ModelConfig, gated: bool) -> Result<AttnWeights, ModelError> {
        let (h, hd) = (c.hidden_size, c.head_dim);
        let bias = c.qkv_bias;
        let (q, gate) = if gated {
            // Per head: [query (head_dim), gate (head_dim)].
            let name = format!("{p}.q_proj.weight");
            let rows = 2 * c.q_dim();
            let q_rows: Vec<usize> = (0..c.n_heads)
                .flat_map(|i| 2 * i * hd..(2 * i + 1) * hd)
                .collect();
            let g_rows: Vec<usize> = (0..c.n_heads)
                .flat_map(|i| (2 * i + 1) * hd..(2 * i + 2) * hd)
                .collect();
            (
                self.rows_of(&name, rows, h, &q_rows)?,
                Some(self.rows_of(&name, rows, h, &g_rows)?),
            )
        } else {
            (
                self.linear(&format!("{p}.q_proj"), c.q_dim(), h, bias)?,
                None,
            )
        };
        Ok(AttnWeights {
            q,
            gate,
            k: self.linear(&format!("{p}.k_proj"), c.kv_dim(), h, bias)?,
            v: self.linear(&format!("{p}.v_proj"), c.kv_dim(), h, bias)?,
            o: self.linear(&format!("{p}.o_proj"), h, c.q_dim(), c.o_bias)?,
            q_norm: self.tensor(&format!("{p}.q_norm.weight"), &[hd])?,
            k_norm: self.tensor(&format!("{p}.k_norm.weight"), &[hd])?,
        })
    }
}

impl HybridWeights {
    /// Loads every tensor the config calls for, checking each shape.
    pub fn load<B: Backend>(
        cfg: &ModelConfig,
        src: &dyn TensorSource,
        b: &mut B,
    ) -> Result<Self, ModelError> {
        let names = TextModelNames(src);
        let mut ld = Loader { src: &names, b };
        let h = cfg.hidden_size;
        let embed = ld.matrix("model.embed_tokens.weight", cfg.vocab_size, h)?;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = format!("model.layers.{i}");
            let mixer = match cfg.hybrid.as_ref().map(|hy| (hy, hy.mixers[i])) {
                Some((hy, Mixer::DeltaNet)) => {
                    MixerWeights::DeltaNet(ld.delta(&format!("{p}.linear_attn"), cfg, hy)?)
                }
                Some((_, Mixer::Attention)) => {
                    MixerWeights::Attention(ld.attn(&format!("{p}.self_attn"), cfg, true)?)
                }
                None => MixerWeights::Attention(ld.attn(&format!("{p}.self_attn"), cfg, false)?),
            };
            let ffn = match &cfg.moe {
                Some(m) if m.sparse[i] => {
                    let mp = format!("{p}.mlp");
                    let ff = m.expert_ff;
                    let sp = format!("{mp}.shared_expert");
                    let stack = m.shared_ff == Some(ff) && ld.b.stacks_shared_expert();
                    let (gate, up, down, stacked) =
                        ld.experts(&p, m.n_experts, ff, h, stack.then_some(sp.as_str()))?;
                    let experts = Experts {
                        gate,
                        up,
                        down,
                        n_experts: m.n_experts + stacked as usize,
                        hidden: h,
                        ff,
                    };
                    let shared = match m.shared_ff {
                        Some(sff) if !stacked => Some(SharedExpert {
                            mlp: ld.mlp(&sp, h, sff)?,
                            gate: ld.plain(&format!("{mp}.shared_expert_gate.weight"), 1, h)?,
                        }),
                        _ => None,
                    };
                    let router = format!("{mp}.gate.weight");
                    let router = if stacked {
                        // The router's rows, then the shared expert's gate (f32, as stored).
                        let mut rows = ld.read(&router, &[m.n_experts, h])?;
                        rows.extend(ld.read(&format!("{mp}.shared_expert_gate.weight"), &[1, h])?);
                        let t = ld.b.upload_matrix(&rows, m.n_experts + 1, h)?;
                        linear(t, m.n_experts + 1, h)
                    } else {
                        ld.plain(&router, m.n_experts, h)?
                    };
                    FfnWeights::Moe(MoeWeights {
                        router,
                        experts,
                        shared,
                        shared_stacked: stacked,
                    })
                }
                _ => FfnWeights::Dense(ld.mlp(&format!("{p}.mlp"), h, cfg.intermediate_size)?),
            };
            layers.push(HybridLayerWeights {
                attn_norm: ld.tensor(&format!("{p}.input_layernorm.weight"), &[h])?,
                mixer,
                ffn_norm: ld.tensor(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                ffn,
            });
        }
        let final_norm = ld.tensor("model.norm.weight", &[h])?;
        let lm_weight = match ld.optional_matrix("lm_head.weight", cfg.vocab_size, h)? {
            Some(t) => t,
            None if cfg.tie_embeddings => embed,
            None => {
                return Err(ModelError::MissingTensor {
                    name: "lm_head.weight".into(),
                });
            }
        };
        Ok(HybridWeights {
            embed,
            layers,
            final_norm,
            lm_head: linear(lm_weight, cfg.vocab_size, h),
        })
    }
}
