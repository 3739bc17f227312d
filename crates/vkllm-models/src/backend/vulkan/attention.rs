//! Attention on the Vulkan backend: which kernel runs a batch (decode: the fused grouped split,
//! the two-dispatch grouped split or the reference split + merge, `VKLLM_ATTN`; prefill: the
//! cooperative-matrix kernel where it applies (the second form unless `VKLLM_ATTN_PREFILL=coop1`),
//! else the portable tiled one), and its dispatch.

use vkllm_cpu::AttnParams;
use vkllm_kernels::attention::{
    AttnDecode, AttnDecodeFused, AttnPrefill, AttnShape, GQA_MAX, MAX_CHUNKS,
};
use vkllm_kernels::attention_prefill_coop::AttnPrefillCoop;
use vkllm_vk::BufSlice;

use super::{VulkanBackend, kv_type};
use crate::backend::{KvRows, KvView, Tensor};
use crate::error::ModelError;

/// Keys per split-K workgroup of decode attention (the reference split).
const ATTN_CHUNK: usize = 256;
/// Keys per workgroup of the grouped-query split (`VKLLM_ATTN_CHUNK`, a power of two in
/// 16..=256, overrides it for tuning).
fn attn_chunk_gqa() -> usize {
    static CHUNK: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CHUNK.get_or_init(|| {
        std::env::var("VKLLM_ATTN_CHUNK")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|c| (16..=256).contains(c) && c.is_power_of_two())
            .unwrap_or(16)
    })
}

/// How decode attention is dispatched where the grouped-query split applies (`VKLLM_ATTN`).
/// The default is the two-dispatch split: on the H200 it measured faster than the fused form
/// (Qwen3-0.6B Q8_0 tg128: 557 against 548 tok/s; the fused form's last workgroup merges the
/// group's heads one after another where the merge kernel runs them in parallel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AttnMode {
    /// `fused`: one dispatch, the grouped split whose last workgroup per group merges.
    Fused,
    /// The grouped split, then the merge (two dispatches; the default).
    Split,
    /// `reference`: the reference split (one workgroup per query head), then the merge.
    Reference,
}

fn attn_mode() -> AttnMode {
    static MODE: std::sync::OnceLock<AttnMode> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("VKLLM_ATTN").as_deref() {
        Ok("fused") => AttnMode::Fused,
        Ok("reference") => AttnMode::Reference,
        _ => AttnMode::Split,
    })
}

impl VulkanBackend {
    pub(super) fn attention_op(
        &mut self,
        q: Tensor,
        kv: &KvView,
        n: usize,
        positions: Tensor,
        p: &AttnParams,
        out: Tensor,
    ) -> Result<(), ModelError> {
        let per_row = kv.rows == KvRows::PerRow;
        // Keys visible to the batch: the whole slot while a step is captured or per row (masked
        // by the positions on the device), else up to the largest position.
        let n_kv = if per_row {
            kv.capacity
        } else {
            self.positions_end(positions, n)
        };
        if n_kv > kv.capacity {
            return Err(ModelError::ContextFull {
                pos: n_kv - 1,
                capacity: kv.capacity,
            });
        }
        let decode = n == 1 || per_row;
        let shape = AttnShape {
            n_q: n,
            n_heads: p.n_heads,
            n_kv_heads: p.n_kv_heads,
            head_dim: p.head_dim,
            n_kv,
            scale: p.scale,
            softcap: p.softcap,
            window: p.window,
            kv: kv_type(kv.dtype),
            kv_stride: if per_row { kv.stride } else { 0 },
            ring: Some(kv.ring),
        };
        let qw = n * p.n_heads * p.head_dim;
        // The grouped-query split (one workgroup per kv head, small chunks) unless the
        // reference ops are selected or the grouping is too wide for it.
        // (It sums 8-lane clusters with shuffles: subgroups of at least 8 lanes.)
        let info = self.dev.info();
        let min_sg = if info.min_subgroup_size > 0 {
            info.min_subgroup_size
        } else {
            info.subgroup_size
        };
        let mode = attn_mode();
        let gqa = self.fused
            && mode != AttnMode::Reference
            && p.n_heads / p.n_kv_heads.max(1) <= GQA_MAX
            && min_sg >= 8;
        // Split and merge in one dispatch unless `VKLLM_ATTN=split` asks for two.
        let one_pass = gqa && mode == AttnMode::Fused;
        let chunk = if gqa { attn_chunk_gqa() } else { ATTN_CHUNK };
        // Long caches: grow the chunk so the merge's partial count stays bounded.
        let chunk = chunk.max(n_kv.div_ceil(MAX_CHUNKS).next_power_of_two());
        if decode {
            let (ml, o) = AttnDecode::<BufSlice<'_>>::scratch_bytes(&shape, chunk);
            self.attn_parts(ml, o)?;
            if one_pass {
                self.attn_counters(AttnDecodeFused::<BufSlice<'_>>::counter_bytes(&shape))?;
            }
        }
        let width = p.n_kv_heads * p.head_dim;
        let coop_pos0 = if decode {
            None
        } else {
            self.coop_prefill_pos0(positions, n, p.head_dim)
        };
        self.record(|me, r| {
            let (ks, vs, _) = me.kv_region(kv, width)?;
            let (qs, ps, os) = (me.head(q, qw)?, me.head(positions, n)?, me.head(out, qw)?);
            if decode {
                let (ml, o) = me.attn_parts.as_ref().expect("allocated above");
                if one_pass {
                    let counters = me.attn_counters.as_ref().expect("allocated above");
                    let a = AttnDecodeFused {
                        q: qs,
                        k: ks,
                        v: vs,
                        q_pos: ps,
                        part_ml: ml.all(),
                        part_o: o.all(),
                        out: os,
                        counters: counters.all(),
                    };
                    r.dispatch(a.dispatch(&shape, chunk)?)?;
                    return Ok(());
                }
                let a = AttnDecode {
                    q: qs,
                    k: ks,
                    v: vs,
                    q_pos: ps,
                    part_ml: ml.all(),
                    part_o: o.all(),
                    out: os,
                };
                let ds = if gqa {
                    a.dispatch_gqa(&shape, chunk)?
                } else {
                    a.dispatch(&shape, chunk)?
                };
                r.dispatch_all(ds)?;
            } else if let Some(pos0) = coop_pos0 {
                let sg = me.dev.info().subgroup_size;
                let a = AttnPrefillCoop {
                    q: qs,
                    k: ks,
                    v: vs,
                    q_pos: ps,
                    out: os,
                };
                match me.coop2_tile(&shape) {
                    Some(t) => r.dispatch(a.dispatch_v2(&shape, pos0, sg, t)?)?,
                    None => r.dispatch(a.dispatch(&shape, pos0, sg)?)?,
                }
            } else {
                let a = AttnPrefill {
                    q: qs,
                    k: ks,
                    v: vs,
                    q_pos: ps,
                    out: os,
                };
                r.dispatch(a.dispatch(&shape)?)?;
            }
            Ok(())
        })
    }
}
