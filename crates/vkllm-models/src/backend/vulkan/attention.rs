//! Attention on the Vulkan backend: which kernel runs a batch (decode: the two-dispatch grouped
//! split, the one-dispatch grouped split, the grouped split with the input step folded in or the
//! reference split + merge, tuning `attn`; prefill: the cooperative-matrix kernel where it applies
//! (the second form unless tuning `attn_prefill=coop1`), else the portable tiled one), and its
//! dispatch.

use vkllm_cpu::AttnParams;
use vkllm_kernels::attention::{
    AttnDecode, AttnDecodeFused, AttnDecodeRope, AttnPrefill, AttnRope, AttnShape, Chunking,
    GQA_MAX, MAX_CHUNKS,
};
use vkllm_kernels::attention_prefill_coop::AttnPrefillCoop;
use vkllm_kernels::attention_prefill_coop2::CoopAttn2Scratch;
use vkllm_kernels::elementwise::MulRows;
use vkllm_kernels::kv_append::KvType;
use vkllm_kernels::kv_to_f16::KvToF16;
use vkllm_kernels::kv_unrotate::KvUnrotate;
use vkllm_kernels::rope_kv_append::HeadNorm;
use vkllm_kernels::to_f16::{ToF16, packed_bytes};
use vkllm_vk::{BufSlice, DecodeAttn, F32KvPrefill};

use super::fused::rope_layout;

use super::VulkanBackend;
use crate::backend::{Backend, KvRows, KvView, RopeKv, Tensor};
use crate::error::ModelError;

/// Keys per split-K workgroup of decode attention (the reference split).
const ATTN_CHUNK: usize = 256;
/// The grouped split's default chunk count per kv head: [`gqa_chunk`] doubles the chunk (from
/// [`GQA_MIN_CHUNK`] keys) until at most this many cover the visible keys (the adaptive split's
/// rule on the device too).
const GQA_TARGET_CHUNKS: usize = vkllm_kernels::attention::ADAPT_CHUNKS;
/// The grouped split's shortest default chunk.
const GQA_MIN_CHUNK: usize = 16;

/// Keys per workgroup of the grouped-query split for `keys` visible keys: the tuning's
/// `attn_chunk` when set, else [`default_gqa_chunk`].
fn gqa_chunk(t: &vkllm_vk::Tuning, keys: usize) -> usize {
    t.attn_chunk.unwrap_or_else(|| default_gqa_chunk(keys))
}

/// The smallest power of two from 16 that covers `keys` in at most [`GQA_TARGET_CHUNKS`]
/// chunks, at most 256. Short contexts are fastest with 16-key chunks; long ones with longer
/// chunks, since merging many partials per head costs more than the longer chunks do
/// (docs/benchmarks-history.md).
fn default_gqa_chunk(keys: usize) -> usize {
    keys.div_ceil(GQA_TARGET_CHUNKS)
        .next_power_of_two()
        .clamp(GQA_MIN_CHUNK, 256)
}

/// What [`VulkanBackend::attn_plan`] decided for one attention call.
struct AttnPlan {
    shape: AttnShape,
    /// One query per sequence (a decode step): the split kernels; else prefill.
    decode: bool,
    /// The grouped-query split applies.
    gqa: bool,
    /// Keys per split workgroup.
    chunking: Chunking,
}

impl VulkanBackend {
    /// Decode steps run the attention input step (q/k norm, RoPE, KV append), split and merge
    /// as one dispatch per layer where the projections are packed (measured slower than the
    /// default, see docs/benchmarks.md).
    pub fn with_folded_attention(mut self) -> Self {
        self.fold_attention = true;
        self
    }

    /// The attention problem of `n` queries at `positions` over `kv` and the kernels it takes.
    /// `one_pass`: the one-dispatch form (its merge stages one weight per (head, chunk), so the
    /// chunk grows with the group).
    fn attn_plan(
        &mut self,
        kv: &KvView,
        n: usize,
        positions: Tensor,
        p: &AttnParams,
        one_pass: bool,
    ) -> Result<AttnPlan, ModelError> {
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
            kv: kv.dtype,
            kv_v: kv.v_dtype,
            rot_k: kv.rot.k,
            kv_stride: if per_row { kv.stride } else { 0 },
            ring: Some(kv.ring),
        };
        let gqa = self.gqa_applies(p);
        // A windowed layer's queries see at most `window` keys.
        let keys = p.window.map_or(n_kv, |w| w.min(n_kv));
        let chunk = if gqa {
            gqa_chunk(self.dev.tuning(), keys)
        } else {
            ATTN_CHUNK
        };
        // Long caches: grow the chunk so the merge's partial count stays bounded.
        let group = if one_pass {
            p.n_heads / p.n_kv_heads.max(1)
        } else {
            1
        };
        let chunk = chunk.max((n_kv * group).div_ceil(MAX_CHUNKS).next_power_of_two());
        // A captured or per-row step sizes `chunk` for the whole cache; the grouped split then
        // picks each query's chunk from its position on the device (tuning `attn_adaptive`).
        let t = self.dev.tuning();
        let chunking = if gqa && per_row && !one_pass && t.attn_chunk.is_none() && t.attn_adaptive {
            Chunking::adaptive(chunk, GQA_MIN_CHUNK)
        } else {
            chunk.into()
        };
        if decode {
            let (ml, o) = AttnDecode::<BufSlice<'_>>::scratch_bytes(&shape, chunking);
            self.attn_parts(ml, o)?;
            if one_pass {
                self.attn_counters(AttnDecodeFused::<BufSlice<'_>>::counter_bytes(&shape))?;
            }
        }
        Ok(AttnPlan {
            shape,
            decode,
            gqa,
            chunking,
        })
    }

    /// The grouped-query split (one workgroup per kv head, small chunks) applies: fused ops,
    /// not tuning `attn=reference`, at most [`GQA_MAX`] query heads per kv head, and subgroups of
    /// at least 8 lanes (it sums 8-lane clusters with shuffles).
    fn gqa_applies(&self, p: &AttnParams) -> bool {
        let info = self.dev.info();
        let min_sg = if info.min_subgroup_size > 0 {
            info.min_subgroup_size
        } else {
            info.subgroup_size
        };
        self.fused
            && self.dev.tuning().attn != DecodeAttn::Reference
            && p.n_heads / p.n_kv_heads.max(1) <= GQA_MAX
            && min_sg >= 8
    }

    /// A cooperative-matrix prefill over the f32 cache of `shape` reads an f16 copy of its rows,
    /// when a coop kernel takes the shape over f16: by default (tuning `attn_f32_kv=half`)
    /// always; with `auto` only where neither takes it over f32 (head dims past 128: f32 tiles
    /// overflow the second kernel's registers or shared memory). The kernels round K and V to
    /// f16 as they load them anyway; shapes no coop kernel takes stay f32 (the portable kernel).
    fn f32_kv_half(&self, shape: &AttnShape) -> bool {
        use vkllm_kernels::attention_prefill_coop::CoopAttnTile;
        if shape.kv != KvType::F32 {
            return false;
        }
        let first = CoopAttnTile::for_shape(shape.head_dim, self.dev.info().subgroup_size);
        let half = AttnShape {
            kv: KvType::F16,
            kv_v: KvType::F16,
            ..*shape
        };
        let coop_takes_half = first.is_some() || self.coop2_tile(&half).is_some();
        match self.dev.tuning().attn_f32_kv {
            F32KvPrefill::Half => coop_takes_half,
            F32KvPrefill::Direct => false,
            F32KvPrefill::Auto => {
                coop_takes_half && first.is_none() && self.coop2_tile(shape).is_none()
            }
        }
    }

    pub(super) fn attention_op(
        &mut self,
        q: Tensor,
        kv: &KvView,
        n: usize,
        positions: Tensor,
        p: &AttnParams,
        out: Tensor,
    ) -> Result<(), ModelError> {
        // Centred keys: the query takes the scales the keys were divided by.
        if let Some(c) = kv.centre {
            let (qw, m) = (n * p.n_heads * p.head_dim, p.n_heads * p.head_dim);
            self.record(|me, r| {
                let qb = me.head(q, qw)?;
                let d = MulRows {
                    a: qb,
                    b: me.head(c.q_scale, m)?,
                    out: qb,
                }
                .dispatch(qw, m)?;
                Ok(r.dispatch(d)?)
            })?;
        }
        // Split and merge in one dispatch when tuning `attn=fused` asks for it (f32 and f16
        // caches only).
        let one_pass = self.dev.tuning().attn == DecodeAttn::Fused
            && self.gqa_applies(p)
            && !kv.dtype.is_quantized();
        let AttnPlan {
            shape,
            decode,
            gqa,
            chunking,
        } = self.attn_plan(kv, n, positions, p, one_pass)?;
        let chunk = chunking.chunk;
        let wide = self.dev.tuning().attn_wide && AttnDecode::<BufSlice<'_>>::wide_applies(&shape);
        // The wide split's last workgroup merges (tuning `attn_wide_merge`) where its chunk
        // weights fit the workgroup's scratch; otherwise split then merge.
        let wide_merge = decode
            && gqa
            && wide
            && self.dev.tuning().attn_wide_merge
            && AttnDecode::<BufSlice<'_>>::wide_merge_fits(&shape, chunking);
        if wide_merge {
            self.attn_counters(AttnDecodeFused::<BufSlice<'_>>::counter_bytes(&shape))?;
        }
        let qw = n * p.n_heads * p.head_dim;
        let width = p.n_kv_heads * p.head_dim;
        let coop_pos0 = if decode {
            None
        } else {
            self.coop_prefill_pos0(positions, n, p.head_dim)
        };
        // The cooperative-matrix kernels read f32 and f16 caches: a quantized one's visible rows
        // are copied to f16 first (the tiled kernel, tuning `attn_prefill=portable`, reads the
        // blocks in place), and so are an f32 one's where tuning `attn_f32_kv` asks.
        let half_values = match coop_pos0 {
            Some(_) if kv.dtype.is_quantized() || self.f32_kv_half(&shape) => {
                Some(shape.n_kv.min(kv.ring) * width)
            }
            _ => None,
        };
        let shape = match half_values {
            Some(values) => {
                self.kv_half(packed_bytes(values))?;
                AttnShape {
                    kv: KvType::F16,
                    kv_v: KvType::F16,
                    // The copy is rotated back: plain f16 keys.
                    rot_k: false,
                    ..shape
                }
            }
            None => shape,
        };
        // The second coop kernel, its heavy tiles' keys split as tuning `attn_coop_split` asks
        // (by default the split that fills whole waves of the GPU: `CoopAttn2Tile::auto_split`);
        // the workgroup-scope kernel instead where tuning `attn_prefill=cm2` asks and it takes
        // the shape, split by the same rule.
        let split = self.dev.tuning().attn_coop_split;
        let cu = self.dev.info().compute_units;
        let coop2 = coop_pos0.and_then(|pos0| {
            let t = self.coop2_tile(&shape)?;
            let parts = split.unwrap_or_else(|| t.auto_split(&shape, pos0, cu));
            Some(t.with_split(parts, n, pos0))
        });
        let cm2 = coop_pos0.and_then(|pos0| {
            let t = self.cm2_tile(&shape)?;
            let parts = split.unwrap_or_else(|| t.auto_split(&shape, pos0, cu));
            Some(t.with_split(parts, n, pos0))
        });
        // A head dim only the second kernel takes, on a shape outside it: the portable kernel.
        let sg = self.dev.info().subgroup_size;
        let first_ok = || {
            vkllm_kernels::attention_prefill_coop::CoopAttnTile::for_shape(p.head_dim, sg).is_some()
        };
        let coop_pos0 = coop_pos0.filter(|_| cm2.is_some() || coop2.is_some() || first_ok());
        let split_scratch = match (cm2, coop2) {
            (Some(t), _) => (t.split > 1).then(|| (t.part_bytes(&shape), t.counter_bytes(&shape))),
            (None, Some(t)) => {
                (t.split > 1).then(|| (t.part_bytes(&shape), t.counter_bytes(&shape)))
            }
            (None, None) => None,
        };
        if let Some((part, ctr)) = split_scratch {
            self.attn_parts(4, part)?;
            self.attn_counters(ctr)?;
        }
        self.record(|me, r| {
            let (ks, vs, _) = me.kv_region(kv, width)?;
            let (ks, vs) = match half_values {
                Some(values) => {
                    let (hk, hv) = me.kv_half.as_ref().ok_or(vkllm_vk::Error::Recording(
                        "prefill attention over a quantized cache without its f16 copy",
                    ))?;
                    let (hk, hv) = (hk.all(), hv.all());
                    if kv.dtype == KvType::F32 {
                        r.dispatch(ToF16 { a: ks, out: hk }.dispatch(values)?)?;
                        r.dispatch(ToF16 { a: vs, out: hv }.dispatch(values)?)?;
                    } else {
                        // Row 0 holds position 0 until a ring wraps.
                        let sink = match shape.n_kv <= kv.ring {
                            true => me.kv_sink(kv, width, true)?.map(|s| (s, width)),
                            false => None,
                        };
                        let copy = KvToF16 {
                            k: ks,
                            v: vs,
                            k_out: hk,
                            v_out: hv,
                            sink,
                        };
                        r.dispatch(copy.dispatch(kv.types(), kv.rot, values)?)?;
                    }
                    (hk, hv)
                }
                None => (ks, vs),
            };
            let (qs, ps, os) = (me.head(q, qw)?, me.head(positions, n)?, me.head(out, qw)?);
            if decode {
                let (ml, o) = me.attn_parts.as_ref().expect("allocated by attn_plan");
                if one_pass {
                    let counters = me.attn_counters.as_ref().expect("allocated by attn_plan");
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
                    sink: me.kv_sink(kv, width, false)?,
                };
                // The wide form (tuning `attn_wide`) for f16 caches (its 16-byte bindings hold:
                // the head buffers start at 0, cache regions at multiples of whole f16 heads of
                // 8) and quantized ones with heads of whole units (word bindings).
                if wide_merge {
                    let counters = me.attn_counters.as_ref().expect("allocated above");
                    r.dispatch(a.dispatch_wide_merged(&shape, chunking, counters.all())?)?;
                    return Ok(());
                }
                let ds = if gqa && wide {
                    a.dispatch_wide(&shape, chunking)?
                } else if gqa {
                    a.dispatch_gqa(&shape, chunking)?
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
                // The f16 copy of the output for the o projection's coop matmul (its X).
                let half = vkllm_vk::coop_half_x_wanted(&me.dev, n, p.n_heads * p.head_dim);
                let split = match (cm2, coop2) {
                    (Some(t), _) => t.split,
                    (None, Some(t)) => t.split,
                    (None, None) => {
                        r.dispatch(a.dispatch(&shape, pos0, sg)?)?;
                        return Ok(());
                    }
                };
                let scratch = match (split, &me.attn_parts, &me.attn_counters) {
                    (1, _, _) => None,
                    (_, Some((_, part)), Some(ctr)) => Some(CoopAttn2Scratch {
                        part: part.all(),
                        ctr: ctr.all(),
                    }),
                    _ => {
                        return Err(vkllm_vk::Error::Recording(
                            "prefill attention split without its scratch",
                        )
                        .into());
                    }
                };
                let h = match half {
                    true => Some(r.half_copy_target(qw)?),
                    false => None,
                };
                let o16 = match &h {
                    Some(h) => Some(h.slice(0, packed_bytes(qw))?),
                    None => None,
                };
                let d = match (cm2, coop2) {
                    (Some(t), _) => a.dispatch_cm2(&shape, pos0, t, o16, scratch)?,
                    (None, Some(t)) => a.dispatch_v2_full(&shape, pos0, sg, t, o16, scratch)?,
                    (None, None) => unreachable!("returned above"),
                };
                r.dispatch(d)?;
                if half {
                    r.half_copy_written(os, qw);
                }
            } else {
                let a = AttnPrefill {
                    q: qs,
                    k: ks,
                    v: vs,
                    q_pos: ps,
                    out: os,
                    sink: me.kv_sink(kv, width, false)?,
                };
                r.dispatch(a.dispatch(&shape)?)?;
            }
            // Rotated values read in place gave sums of rotated values (the f16 copy is rotated
            // back): rotate the output back.
            if kv.rot.v && half_values.is_none() {
                r.dispatch(KvUnrotate { x: os }.dispatch(qw)?)?;
            }
            Ok(())
        })
    }

    /// `Backend::rope_attention`: a decode step whose projections are packed runs the input
    /// step, split and merge as one dispatch with [`VulkanBackend::with_folded_attention`] (the
    /// grouped split, `AttnDecodeRope::dispatch`) or with tunings `attn_wide_merge` and
    /// `attn_wide_rope` over f16 caches (the wide split, `AttnDecodeRope::dispatch_wide`);
    /// otherwise `rope_kv` then `attention`.
    pub(super) fn rope_attention_op(
        &mut self,
        a: &RopeKv<'_>,
        kv: &KvView,
        p: &AttnParams,
        out: Tensor,
    ) -> Result<(), ModelError> {
        let n = a.n;
        let decode = n == 1 || kv.rows == KvRows::PerRow;
        let t = self.dev.tuning();
        let wide_asked = t.attn_wide && t.attn_wide_merge && t.attn_wide_rope;
        let packed = a
            .packed
            .filter(|_| decode && self.gqa_applies(p) && !kv.dtype.is_quantized());
        // The wide form: its plan as the plain split's (adaptive chunks), where it takes it.
        let wide_plan = match packed {
            Some(_) if wide_asked => {
                let plan = self.attn_plan(kv, n, a.positions, p, false)?;
                let fits = AttnDecode::<BufSlice<'_>>::wide_applies(&plan.shape)
                    && AttnDecode::<BufSlice<'_>>::wide_merge_fits(&plan.shape, plan.chunking);
                fits.then_some(plan)
            }
            _ => None,
        };
        let (packed, plan, wide) = match (packed, wide_plan) {
            (Some(t), Some(plan)) => (t, plan, true),
            (Some(t), None) if self.fold_attention => {
                (t, self.attn_plan(kv, n, a.positions, p, true)?, false)
            }
            _ => {
                self.mark("rope_kv");
                self.rope_kv(a, kv)?;
                self.mark("attention");
                return self.attention_op(a.q_out, kv, n, a.positions, p, out);
            }
        };
        if wide {
            self.attn_counters(AttnDecodeFused::<BufSlice<'_>>::counter_bytes(&plan.shape))?;
        }
        let ti = self.rope_kv_prepare(a, kv)?;
        self.mark("attention");
        let (hd, qd) = (a.head_dim, a.n_heads * a.head_dim);
        let width = a.n_kv_heads * hd;
        let r = AttnRope {
            rotary_dim: a.rope.rotary_dim,
            layout: rope_layout(a.rope.style),
            max_pos: self.ropes[ti].max_pos,
            norm: a.norm.map(|_| HeadNorm {
                eps: a.eps,
                offset: a.norm_offset,
            }),
            max_tok: kv.capacity,
            tok_stride: qd + 2 * width,
            k_off: qd,
            v_off: qd + width,
        };
        self.record(|me, rec| {
            let (ks, vs, _) = me.kv_region(kv, width)?;
            let (qn, kn) = match a.norm {
                Some((qw, kw)) => (me.head(qw, hd)?, me.head(kw, hd)?),
                None => (me.head(packed, 1)?, me.head(packed, 1)?),
            };
            let (ml, o) = me.attn_parts.as_ref().expect("allocated by attn_plan");
            let counters = me
                .attn_counters
                .as_ref()
                .expect("allocated above or by attn_plan");
            let op = AttnDecodeRope {
                qkv: me.head(packed, (n - 1) * r.tok_stride + qd + 2 * width)?,
                q_norm: qn,
                k_norm: kn,
                table: me.ropes[ti].buf.all(),
                k: ks,
                v: vs,
                q_pos: me.head(a.positions, n)?,
                part_ml: ml.all(),
                part_o: o.all(),
                out: me.head(out, n * qd)?,
                counters: counters.all(),
            };
            let d = match wide {
                true => op.dispatch_wide(&plan.shape, plan.chunking, &r)?,
                false => op.dispatch(&plan.shape, plan.chunking.chunk, &r)?,
            };
            Ok(rec.dispatch(d)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::default_gqa_chunk;

    /// 16 keys per chunk up to 128 chunks (2048 keys), then doubling, capped at 256.
    #[test]
    fn gqa_chunk_grows_with_the_span() {
        assert_eq!(default_gqa_chunk(1), 16);
        assert_eq!(default_gqa_chunk(145), 16);
        assert_eq!(default_gqa_chunk(2048), 16);
        assert_eq!(default_gqa_chunk(2049), 32);
        assert_eq!(default_gqa_chunk(4224), 64);
        assert_eq!(default_gqa_chunk(32768), 256);
        assert_eq!(default_gqa_chunk(1 << 20), 256);
    }
}
