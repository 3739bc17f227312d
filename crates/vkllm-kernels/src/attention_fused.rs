//! `shaders/attention_fused.wgsl`: decode attention in one dispatch (the grouped split whose last
//! workgroup per (kv head, query) merges), optionally with the attention input step folded in
//! (per-head q/k RMSNorm, RoPE and the KV append of the current token: [`AttnDecodeRope`]).

use crate::attention::{AttnDecode, AttnDecodeParams, AttnShape, Chunking, MAX_CHUNKS, WG};
use crate::attention::{check_gqa, decode_params};
use crate::kv_append::KvType;
use crate::rope::RopeLayout;
use crate::rope_kv_append::HeadNorm;
use crate::sources::{ATTENTION_FUSED, ATTENTION_WIDE_ROPE};
use crate::spec::{need, rd, rw, shape_err, to_u32, wr};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

/// Split and merge in one dispatch: the grouped-query split whose last workgroup per (kv head,
/// query) merges (see [`AttnDecodeFused`]); with `ROPE = 1` also the input step
/// ([`AttnDecodeRope`]). Bindings 8..=10 are read only with `ROPE = 1`.
pub static ATTN_DECODE_FUSED: KernelSpec = KernelSpec {
    name: "attn_decode_fused",
    file: "attention_fused.wgsl",
    entry: "main",
    source: ATTENTION_FUSED,
    bindings: &[
        rd("q"),
        rw("k"),
        rw("v"),
        rd("q_pos"),
        rw("part_ml"),
        rw("part_o"),
        wr("out"),
        rw("counters"),
        rd("q_norm"),
        rd("k_norm"),
        rd("table"),
    ],
    push_size: 84,
    exact_fp: false,
    glsl: None,
};

/// The input step's push words (after the decode words; zero without it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct RopeWords {
    rotary_dim: u32,
    style: u32,
    max_pos: u32,
    norm: u32,
    eps: f32,
    norm_offset: f32,
    max_tok: u32,
    q_tok_stride: u32,
    k_off: u32,
    v_off: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct AttnFusedParams {
    d: AttnDecodeParams,
    r: RopeWords,
}

/// The wide split over f16 caches with the input step folded in, whose last workgroup per
/// (query, kv head) merges (`shaders/attention_wide_rope.wgsl`; see
/// [`AttnDecodeRope::dispatch_wide`]). `sink` is bound but not read.
pub static ATTN_WIDE_ROPE: KernelSpec = KernelSpec {
    name: "attn_decode_wide_rope",
    file: "attention_wide_rope.wgsl",
    entry: "split_merge_rope",
    source: ATTENTION_WIDE_ROPE,
    bindings: &[
        rd("qkv"),
        rw("k"),
        rw("v"),
        rd("q_pos"),
        rw("part_ml"),
        rw("part_o"),
        wr("out"),
        rd("sink"),
        rw("counters"),
        rd("q_norm"),
        rd("k_norm"),
        rd("table"),
    ],
    push_size: 84,
    exact_fp: false,
    glsl: None,
};

/// Bytes of the merge counters: one u32 per (query, kv head).
fn counter_bytes(s: &AttnShape) -> u64 {
    4 * (s.n_q * s.n_kv_heads) as u64
}

/// The checks and parameters both forms share (`p` without the input-step fields).
fn fused_params<B: KernelBuffer>(
    k: &'static KernelSpec,
    s: &AttnShape,
    chunk: usize,
    part_ml: &B,
    part_o: &B,
    counters: &B,
) -> Result<AttnFusedParams, Error> {
    s.check(k)?;
    s.check_unquantized(k)?;
    check_gqa(k, s, chunk)?;
    need(k, "counters", counters, counter_bytes(s))?;
    let d = decode_params(k, s, chunk, part_ml, part_o)?;
    // The merge stages one weight per (head of the group, chunk).
    let g = s.n_heads / s.n_kv_heads;
    if g * d.n_chunks as usize > MAX_CHUNKS {
        return Err(shape_err(
            k,
            format!(
                "{} key chunks x {g} heads per group (at most {MAX_CHUNKS}: use a larger chunk)",
                d.n_chunks
            ),
        ));
    }
    Ok(AttnFusedParams {
        d,
        r: RopeWords::default(),
    })
}

fn overrides(s: &AttnShape, chunk: usize, rope: bool) -> Overrides {
    Overrides::new()
        .set("WG", WG as f64)
        .set("CHUNK", chunk as f64)
        .set("KV_DTYPE", s.kv.code())
        .set("KV_DTYPE_V", s.kv_v.code())
        .set("ROPE", if rope { 1.0 } else { 0.0 })
}

/// Decode attention in one dispatch (`shaders/attention_fused.wgsl`): the grouped split of
/// [`crate::attention::AttnDecode::dispatch_gqa`] whose last workgroup to finish per (kv head, query) merges the
/// group's partials, counted in `counters` (one u32 per (query, kv head), see
/// [`AttnDecodeFused::counter_bytes`]). The caller zeroes `counters` once before the first
/// dispatch; every completed dispatch leaves them zero again, so one zeroed buffer serves any
/// number of dispatches recorded in sequence (not concurrently). When a query's visible keys fit
/// one chunk, its output is written without partials. Same limits as the grouped split, and at
/// most [`MAX_CHUNKS`] (heads per group x chunks).
pub struct AttnDecodeFused<B> {
    pub q: B,
    pub k: B,
    pub v: B,
    pub q_pos: B,
    pub part_ml: B,
    pub part_o: B,
    pub out: B,
    pub counters: B,
}

impl<B: KernelBuffer> AttnDecodeFused<B> {
    /// Bytes of `counters` for `s`.
    pub fn counter_bytes(s: &AttnShape) -> u64 {
        counter_bytes(s)
    }

    /// `chunk`: keys per workgroup, a power of two in 8..=256; partials sized by
    /// [`crate::attention::AttnDecode::scratch_bytes`] for the same chunk.
    pub fn dispatch(self, s: &AttnShape, chunk: usize) -> Result<Dispatch<B>, Error> {
        let k = &ATTN_DECODE_FUSED;
        let p = fused_params(k, s, chunk, &self.part_ml, &self.part_o, &self.counters)?;
        s.check_buffers(k, &self.q, &self.k, &self.v, &self.q_pos, &self.out)?;
        let groups = [p.d.n_chunks, p.d.n_kv_heads, p.d.n_q];
        let q = self.q;
        Ok(Dispatch::new(
            k,
            overrides(s, chunk, false),
            vec![
                q,
                self.k,
                self.v,
                self.q_pos,
                self.part_ml,
                self.part_o,
                self.out,
                self.counters,
                q,
                q,
                q,
            ],
            &p,
            groups,
        ))
    }
}

/// The input step [`AttnDecodeRope`] folds in: `rope_kv_append.wgsl`'s shape for one token per
/// query, read from the packed projection output.
#[derive(Clone, Copy, Debug)]
pub struct AttnRope {
    /// Rotated dims (<= head_dim, even, > 0).
    pub rotary_dim: usize,
    pub layout: RopeLayout,
    /// Positions covered by the (cos, sin) table.
    pub max_pos: usize,
    /// `Some` when q and k are normalised per head first (`q_norm`, `k_norm` are read).
    pub norm: Option<HeadNorm>,
    /// Rows of each query's cache region a position may address (positions >= it write nothing
    /// and give NaN queries: an idle slot).
    pub max_tok: usize,
    /// f32 words between consecutive queries' rows of the packed projection output; a row holds
    /// the query heads at word 0, the key heads at `k_off` and the value heads at `v_off`.
    pub tok_stride: usize,
    pub k_off: usize,
    pub v_off: usize,
}

/// [`AttnDecodeFused`] with the attention input step of the current token folded in: every
/// workgroup normalises and rotates its group's query heads from `qkv` itself, and the workgroup
/// whose chunk holds the query's position also normalises and rotates that kv head's key and
/// appends it and the value to `k` / `v` (the arithmetic of `RopeKvAppend`, operation for
/// operation). One dispatch replaces `rope_kv_append` + the attention of a decode step. `table`
/// is `rope.wgsl`'s `[max_pos, rotary_dim / 2]` (cos, sin); `q_norm`/`k_norm` `[head_dim]` (any
/// buffer when `norm` is `None`).
pub struct AttnDecodeRope<B> {
    pub qkv: B,
    pub q_norm: B,
    pub k_norm: B,
    pub table: B,
    pub k: B,
    pub v: B,
    pub q_pos: B,
    pub part_ml: B,
    pub part_o: B,
    pub out: B,
    pub counters: B,
}

/// The input step's checks (rotation, packed rows, table and norm weights) and push words.
fn rope_words<B: KernelBuffer>(
    k: &'static KernelSpec,
    s: &AttnShape,
    r: &AttnRope,
    b: &AttnDecodeRope<B>,
) -> Result<RopeWords, Error> {
    let hd = s.head_dim;
    if r.rotary_dim == 0 || r.rotary_dim > hd || !r.rotary_dim.is_multiple_of(2) {
        return Err(shape_err(
            k,
            format!("rotary_dim {} must be even, in 1..={hd}", r.rotary_dim),
        ));
    }
    let (qd, kd) = (s.n_heads * hd, s.n_kv_heads * hd);
    if r.k_off < qd || r.v_off < r.k_off + kd || r.tok_stride < r.v_off + kd {
        return Err(shape_err(
            k,
            format!(
                "packed rows: q {qd} words, k at {} and v at {} ({kd} words each) in rows of {}",
                r.k_off, r.v_off, r.tok_stride
            ),
        ));
    }
    let qkv_words = (s.n_q - 1) * r.tok_stride + r.v_off + kd;
    need(k, "qkv", &b.qkv, 4 * qkv_words as u64)?;
    need(k, "table", &b.table, 4 * (r.max_pos * r.rotary_dim) as u64)?;
    if r.norm.is_some() {
        need(k, "q_norm", &b.q_norm, 4 * hd as u64)?;
        need(k, "k_norm", &b.k_norm, 4 * hd as u64)?;
    }
    let (norm, eps, norm_offset) = match r.norm {
        Some(n) => (1, n.eps, n.offset),
        None => (0, 0.0, 0.0),
    };
    Ok(RopeWords {
        rotary_dim: to_u32(k, "rotary_dim", r.rotary_dim)?,
        style: match r.layout {
            RopeLayout::Interleaved => 0,
            RopeLayout::NeoX => 1,
        },
        max_pos: to_u32(k, "max_pos", r.max_pos)?,
        norm,
        eps,
        norm_offset,
        max_tok: to_u32(k, "max_tok", r.max_tok)?,
        q_tok_stride: to_u32(k, "tok_stride", r.tok_stride)?,
        k_off: to_u32(k, "k_off", r.k_off)?,
        v_off: to_u32(k, "v_off", r.v_off)?,
    })
}

impl<B: KernelBuffer> AttnDecodeRope<B> {
    pub fn dispatch(self, s: &AttnShape, chunk: usize, r: &AttnRope) -> Result<Dispatch<B>, Error> {
        let k = &ATTN_DECODE_FUSED;
        let mut p = fused_params(k, s, chunk, &self.part_ml, &self.part_o, &self.counters)?;
        p.r = rope_words(k, s, r, &self)?;
        // The output and caches as the plain form checks them (qkv stands in for q: it is
        // larger). The appended row is a visible key's (position < n_kv), so within them.
        s.check_buffers(k, &self.qkv, &self.k, &self.v, &self.q_pos, &self.out)?;
        let groups = [p.d.n_chunks, p.d.n_kv_heads, p.d.n_q];
        Ok(Dispatch::new(
            k,
            overrides(s, chunk, true),
            vec![
                self.qkv,
                self.k,
                self.v,
                self.q_pos,
                self.part_ml,
                self.part_o,
                self.out,
                self.counters,
                self.q_norm,
                self.k_norm,
                self.table,
            ],
            &p,
            groups,
        ))
    }

    /// The same step as the wide split over f16 caches whose last workgroup merges
    /// ([`AttnDecode::dispatch_wide_merged`]'s shapes, chunking and counters; partials sized by
    /// [`AttnDecode::scratch_bytes`] for `chunking`), every live workgroup staging its queries.
    pub fn dispatch_wide(
        self,
        s: &AttnShape,
        chunking: impl Into<Chunking>,
        r: &AttnRope,
    ) -> Result<Dispatch<B>, Error> {
        let k = &ATTN_WIDE_ROPE;
        if s.kv != KvType::F16 || s.kv_v != KvType::F16 || s.rot_k {
            return Err(shape_err(
                k,
                String::from("reads and appends to f16 caches only"),
            ));
        }
        let words = rope_words(k, s, r, &self)?;
        let split = AttnDecode {
            q: self.qkv,
            k: self.k,
            v: self.v,
            q_pos: self.q_pos,
            part_ml: self.part_ml,
            part_o: self.part_o,
            out: self.out,
            sink: None,
        };
        let mut d = split.dispatch_wide_merged(s, chunking, self.counters)?;
        d.kernel = k;
        d.push.extend_from_slice(bytemuck::bytes_of(&words));
        d.buffers.extend([self.q_norm, self.k_norm, self.table]);
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_match_the_shader_block() {
        // 11 decode words + 10 input-step words, as the WGSL Params struct declares them.
        assert_eq!(std::mem::size_of::<AttnFusedParams>(), 84);
        assert_eq!(ATTN_DECODE_FUSED.push_size, 84);
    }
}
