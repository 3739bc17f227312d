//! `shaders/attention.wgsl` (decode: split-K + merge) and `shaders/attention_prefill.wgsl`
//! (prefill: tiled, online softmax).

use crate::kv_append::{KvType, KvTypes};
use crate::sources::{
    ATTENTION, ATTENTION_PREFILL, ATTENTION_WIDE, ATTENTION_WIDE_MERGE, ATTENTION_WIDE_QUANT,
};
use crate::spec::{BindingSpec, MAX_GROUPS_X, need, rd, rw, shape_err, to_u32, wr};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

/// Workgroup size of the decode kernels.
pub(crate) const WG: u32 = 128;

pub use crate::attention_fused::{
    ATTN_DECODE_FUSED, ATTN_WIDE_ROPE, AttnDecodeFused, AttnDecodeRope, AttnRope,
};
/// Query tile of the prefill kernel.
pub const PREFILL_BQ: usize = 16;

/// The decode split passes' bindings (`out` bound but not used; `sink` read only with a sink).
const SPLIT_BINDINGS: &[BindingSpec] = &[
    rd("q"),
    rd("k"),
    rd("v"),
    rd("q_pos"),
    wr("part_ml"),
    wr("part_o"),
    rd("out"),
    rd("sink"),
];

/// Pass 1: per (chunk, head, query) partial softmax. `out` is bound but not used.
pub static ATTN_SPLIT: KernelSpec = KernelSpec {
    name: "attn_decode_split",
    file: "attention.wgsl",
    entry: "split",
    source: ATTENTION,
    bindings: SPLIT_BINDINGS,
    push_size: 44,
    exact_fp: false,
    glsl: None,
};

/// Pass 1, grouped-query form: per (chunk, kv head, query) partials of every query head of the
/// group (see [`AttnDecode::dispatch_gqa`]).
pub static ATTN_SPLIT_GQA: KernelSpec = KernelSpec {
    name: "attn_decode_split_gqa",
    file: "attention.wgsl",
    entry: "split_gqa",
    source: ATTENTION,
    bindings: SPLIT_BINDINGS,
    push_size: 44,
    exact_fp: false,
    glsl: None,
};

/// Pass 1 over f16 caches with 16-byte loads (`shaders/attention_wide.wgsl`): the grouped split's
/// partials (see [`AttnDecode::dispatch_wide`]).
pub static ATTN_SPLIT_WIDE: KernelSpec = KernelSpec {
    name: "attn_decode_split_wide",
    file: "attention_wide.wgsl",
    entry: "split",
    source: ATTENTION_WIDE,
    bindings: SPLIT_BINDINGS,
    push_size: 44,
    exact_fp: false,
    glsl: None,
};

/// Pass 1 over q8_0 / q4_0 / tq4 caches in the wide split's organisation
/// (`shaders/attention_wide_quant.wgsl`): the grouped split's partials (see
/// [`AttnDecode::dispatch_wide`]).
pub static ATTN_SPLIT_WIDE_QUANT: KernelSpec = KernelSpec {
    name: "attn_decode_split_wide_quant",
    file: "attention_wide_quant.wgsl",
    entry: "split",
    source: ATTENTION_WIDE_QUANT,
    bindings: SPLIT_BINDINGS,
    push_size: 44,
    exact_fp: false,
    glsl: None,
};

/// The wide splits' one-dispatch form (`split_merge`): partials read back by the last workgroup
/// per (query, kv head), which merges them into `out`; `counters` one u32 per (query, kv head).
const WIDE_MERGE_BINDINGS: &[BindingSpec] = &[
    rd("q"),
    rd("k"),
    rd("v"),
    rd("q_pos"),
    rw("part_ml"),
    rw("part_o"),
    wr("out"),
    rd("sink"),
    rw("counters"),
];

/// [`ATTN_SPLIT_WIDE`] whose last workgroup per (query, kv head) merges
/// (`shaders/attention_wide_merge.wgsl`; see [`AttnDecode::dispatch_wide_merged`]).
pub static ATTN_SPLIT_WIDE_MERGE: KernelSpec = KernelSpec {
    name: "attn_decode_wide_merged",
    file: "attention_wide_merge.wgsl",
    entry: "split_merge",
    source: ATTENTION_WIDE_MERGE,
    bindings: WIDE_MERGE_BINDINGS,
    push_size: 44,
    exact_fp: false,
    glsl: None,
};

/// Floats of the wide splits' shared scratch (`WIDE_PW`): the merging workgroup stages one
/// weight per (head of the group, chunk) there.
const WIDE_PW: usize = 4096;

/// Head dims per merge workgroup (`MERGE_D` in attention.wgsl).
const MERGE_D: usize = 32;

/// Most key chunks one decode attention splits into (the merge stages one weight per chunk).
pub const MAX_CHUNKS: usize = 2048;

/// Most query heads per kv head [`AttnDecode::dispatch_gqa`] handles.
pub const GQA_MAX: usize = 8;

/// Chunk count the adaptive split aims for (`ADAPT_CHUNKS` in attention_gqa.inc.wgsl).
pub const ADAPT_CHUNKS: usize = 128;

/// Keys per split workgroup of decode attention: `chunk` for every query (`min == 0`), or for
/// the grouped split adaptive per query on the device: the smallest power of two from `min` that
/// covers the query's visible keys in at most [`ADAPT_CHUNKS`] chunks, at most `chunk`. A
/// recorded step sizes `chunk` for the whole cache; `min` keeps short contexts split finely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunking {
    pub chunk: usize,
    pub min: usize,
}

impl From<usize> for Chunking {
    fn from(chunk: usize) -> Self {
        Chunking { chunk, min: 0 }
    }
}

impl Chunking {
    /// Adaptive chunks from `min` (clamped to `chunk`) up to `chunk`.
    pub fn adaptive(chunk: usize, min: usize) -> Self {
        Chunking {
            chunk,
            min: min.min(chunk),
        }
    }
}

/// Pass 2: merge the chunks. `q`, `k`, `v`, `q_pos` are bound but not used.
pub static ATTN_MERGE: KernelSpec = KernelSpec {
    name: "attn_decode_merge",
    file: "attention.wgsl",
    entry: "merge",
    source: ATTENTION,
    bindings: &[
        rd("q"),
        rd("k"),
        rd("v"),
        rd("q_pos"),
        rd("part_ml"),
        rd("part_o"),
        rw("out"),
    ],
    push_size: 44,
    exact_fp: false,
    glsl: None,
};

pub static ATTN_PREFILL: KernelSpec = KernelSpec {
    name: "attn_prefill",
    file: "attention_prefill.wgsl",
    entry: "main",
    source: ATTENTION_PREFILL,
    bindings: &[
        rd("q"),
        rd("k"),
        rd("v"),
        rd("q_pos"),
        rw("out"),
        rd("sink"),
    ],
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

/// Attention problem: `n_q` queries (positions in a `q_pos` buffer) against the keys at positions
/// `0..n_kv` of a K/V cache `[rows, n_kv_heads, head_dim]`: row `j` holds position `j`, or with a
/// `ring`, row `j % ring` does (a sliding-window layer that keeps only `ring` rows).
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_q: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub n_kv: usize,
    /// Multiplies q.k (usually 1 / sqrt(head_dim)).
    pub scale: f32,
    /// `cap * tanh(s / cap)` on the scaled scores (Gemma 2).
    pub softcap: Option<f32>,
    /// Sliding window: key j is visible to a query at position p when p - j < window.
    pub window: Option<usize>,
    pub kv: KvType,
    /// The V cache's type: `kv`, or another quantized type when `kv` is one (see `KvTypes`).
    pub kv_v: KvType,
    /// The cache's K units are stored rotated (q8_0 with heads of whole 64-value units; see
    /// `shaders/kv_quant.inc.wgsl`): the kernels rotate the queries alike.
    pub rot_k: bool,
    /// Key rows between consecutive queries' caches: 0 when every query reads the same cache,
    /// the per-slot capacity when query `i` is slot `i` of a slot-major cache (decode only).
    pub kv_stride: usize,
    /// Rows each cache keeps: the key at position `j` is row `j % ring`. `None` (or a ring of at
    /// least `n_kv`) is the full cache. A ring smaller than `n_kv` needs a window whose keys fit:
    /// `window + n_q - 1 <= ring` for queries sharing one cache (consecutive positions: a chunk
    /// must not overwrite keys its earlier queries see), `window <= ring` per slot.
    pub ring: Option<usize>,
}

impl AttnShape {
    pub(crate) fn check(&self, k: &'static KernelSpec) -> Result<(), Error> {
        if self.n_q == 0 || self.n_kv == 0 || self.n_heads == 0 || self.n_kv_heads == 0 {
            return Err(shape_err(k, "empty attention"));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(shape_err(
                k,
                format!(
                    "n_heads {} not a multiple of n_kv_heads {}",
                    self.n_heads, self.n_kv_heads
                ),
            ));
        }
        if self.head_dim == 0 || self.head_dim > 256 || !self.head_dim.is_multiple_of(2) {
            return Err(shape_err(
                k,
                format!("head_dim {} must be even and <= 256", self.head_dim),
            ));
        }
        let types = KvTypes::new(self.kv, self.kv_v).map_err(|m| shape_err(k, m))?;
        types
            .check_width(self.n_kv_heads * self.head_dim, self.head_dim)
            .map_err(|m| shape_err(k, m))?;
        if let Err(m) = self.kv.check_rot(true, self.rot_k) {
            return Err(shape_err(k, m));
        }
        if self.rot_k && !self.head_dim.is_multiple_of(64) {
            return Err(shape_err(
                k,
                format!(
                    "rotated keys need heads of whole 64-value units, not {} with head_dim {}",
                    self.kv.name(),
                    self.head_dim
                ),
            ));
        }
        if let Some(c) = self.softcap
            && !(c.is_finite() && c > 0.0)
        {
            return Err(shape_err(k, format!("softcap {c} must be > 0")));
        }
        if self.window == Some(0) {
            return Err(shape_err(k, "window 0 sees nothing"));
        }
        if self.ring == Some(0) {
            return Err(shape_err(k, "ring of 0 rows"));
        }
        if self.ring_rows() < self.n_kv {
            let ring = self.ring_rows();
            let extra = if self.kv_stride == 0 { self.n_q - 1 } else { 0 };
            match self.window {
                Some(w) if w + extra <= ring => {}
                _ => {
                    return Err(shape_err(
                        k,
                        format!(
                            "a ring of {ring} rows cannot hold the keys of {} queries with window {:?}",
                            self.n_q, self.window
                        ),
                    ));
                }
            }
        }
        if self.kv_stride != 0 && self.kv_stride < self.rows() {
            return Err(shape_err(
                k,
                format!(
                    "kv_stride {} overlaps caches of {} rows",
                    self.kv_stride,
                    self.rows()
                ),
            ));
        }
        Ok(())
    }

    /// The push constants of the prefill kernels (`k` names the kernel in errors).
    pub(crate) fn prefill_params(
        &self,
        k: &'static KernelSpec,
    ) -> Result<AttnPrefillParams, Error> {
        Ok(AttnPrefillParams {
            n_q: to_u32(k, "n_q", self.n_q)?,
            n_heads: to_u32(k, "n_heads", self.n_heads)?,
            n_kv_heads: to_u32(k, "n_kv_heads", self.n_kv_heads)?,
            n_kv: to_u32(k, "n_kv", self.n_kv)?,
            scale: self.scale,
            softcap: self.softcap.unwrap_or(0.0),
            window: to_u32(k, "window", self.window.unwrap_or(0))?,
            ring: to_u32(k, "ring", self.ring_rows())?,
        })
    }

    /// The ring length the kernels use (`n_kv` when there is no ring: row = position).
    pub(crate) fn ring_rows(&self) -> usize {
        self.ring.unwrap_or(self.n_kv)
    }

    /// Rows of each cache.
    fn rows(&self) -> usize {
        self.n_kv.min(self.ring_rows())
    }

    /// The kernels that read only f32 and f16 caches (the cooperative-matrix prefill and the
    /// one-dispatch decode forms) refuse quantized ones.
    pub(crate) fn check_unquantized(&self, k: &'static KernelSpec) -> Result<(), Error> {
        match self.kv.is_quantized() || self.kv_v != self.kv {
            true => Err(shape_err(
                k,
                format!(
                    "reads f32 or f16 caches, not {}",
                    KvTypes {
                        k: self.kv,
                        v: self.kv_v
                    }
                    .name()
                ),
            )),
            false => Ok(()),
        }
    }

    /// Keys a query can see at most: its window, clipped to the cache.
    fn span(&self) -> usize {
        self.window.map_or(self.n_kv, |w| w.min(self.n_kv))
    }

    pub(crate) fn check_buffers<B: KernelBuffer>(
        &self,
        k: &'static KernelSpec,
        q: &B,
        kc: &B,
        vc: &B,
        q_pos: &B,
        out: &B,
    ) -> Result<(), Error> {
        let qb = 4 * (self.n_q * self.n_heads * self.head_dim) as u64;
        need(k, "q", q, qb)?;
        let rows = (self.n_q - 1) * self.kv_stride + self.rows();
        let values = (rows * self.n_kv_heads * self.head_dim) as u64;
        need(k, "k", kc, self.kv.bytes(values))?;
        need(k, "v", vc, self.kv_v.bytes(values))?;
        need(k, "q_pos", q_pos, 4 * self.n_q as u64)?;
        need(k, "out", out, qb)
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttnDecodeParams {
    pub n_q: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub n_kv: u32,
    pub n_chunks: u32,
    pub scale: f32,
    pub softcap: f32,
    pub window: u32,
    pub kv_stride: u32,
    pub ring: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttnPrefillParams {
    pub n_q: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub n_kv: u32,
    pub scale: f32,
    pub softcap: f32,
    pub window: u32,
    pub ring: u32,
}

/// Split-K decode attention: two dispatches (split, merge) through caller-provided scratch
/// (`part_ml`, `part_o`, sized by [`AttnDecode::scratch_bytes`]).
pub struct AttnDecode<B> {
    pub q: B,
    pub k: B,
    pub v: B,
    pub q_pos: B,
    pub part_ml: B,
    pub part_o: B,
    pub out: B,
    /// Centred quantized keys: the offset the key at position 0 is read plus (`[n_kv_heads *
    /// head_dim]` f32, in the cache's stored space: rotated like its units with `rot_k`).
    pub sink: Option<B>,
}

/// Checks an attention sink's offset: quantized keys only, `n_kv_heads * head_dim` values.
pub(crate) fn check_sink<B: KernelBuffer>(
    k: &'static KernelSpec,
    s: &AttnShape,
    sink: &Option<B>,
) -> Result<(), Error> {
    let Some(b) = sink else { return Ok(()) };
    if !s.kv.is_quantized() {
        return Err(shape_err(
            k,
            format!(
                "a sink offset over {} keys (quantized keys only)",
                s.kv.name()
            ),
        ));
    }
    need(k, "sink", b, 4 * (s.n_kv_heads * s.head_dim) as u64)
}

impl<B: KernelBuffer> AttnDecode<B> {
    /// Chunks per query (the split's grid and the partials' layout): those of `chunk` keys that
    /// cover a query's visible keys (its window, or the whole cache), with adaptive chunking at
    /// least as many as a short context takes (up to [`ADAPT_CHUNKS`]).
    pub fn n_chunks(s: &AttnShape, chunking: impl Into<Chunking>) -> usize {
        let c = chunking.into();
        let fixed = s.span().div_ceil(c.chunk.max(1));
        match c.min {
            0 => fixed,
            m => fixed.max(ADAPT_CHUNKS.min(s.span().div_ceil(m))),
        }
    }

    /// Bytes of (`part_ml`, `part_o`) for `s` split as `chunking` says.
    pub fn scratch_bytes(s: &AttnShape, chunking: impl Into<Chunking>) -> (u64, u64) {
        let parts = (s.n_q * s.n_heads * Self::n_chunks(s, chunking)) as u64;
        (8 * parts, 4 * parts * s.head_dim as u64)
    }

    /// `chunk`: keys per split workgroup, a power of two in 32..=1024 (256 is a good default).
    /// The reference split: one workgroup per query head, one key per invocation.
    pub fn dispatch(self, s: &AttnShape, chunk: usize) -> Result<[Dispatch<B>; 2], Error> {
        self.dispatch_with(&ATTN_SPLIT, s, chunk.into())
    }

    /// The grouped split: one workgroup per kv head scores its keys for all `n_heads /
    /// n_kv_heads <= GQA_MAX` query heads (each K row read once), subgroups across keys and lanes
    /// across the row; `chunk` a power of two in 8..=256 (64 suits decode). Same partials and
    /// merge as [`AttnDecode::dispatch`]; head_dim <= 256. Adaptive chunking ([`Chunking`]):
    /// `min` a power of two from 8.
    pub fn dispatch_gqa(
        self,
        s: &AttnShape,
        chunking: impl Into<Chunking>,
    ) -> Result<[Dispatch<B>; 2], Error> {
        let k = &ATTN_SPLIT_GQA;
        let c = chunking.into();
        check_gqa(k, s, c.chunk)?;
        check_adaptive(k, c)?;
        self.dispatch_with(k, s, c)
    }

    /// The grouped split with the group's queries in registers and several keys in flight per
    /// lane (the same partials as [`AttnDecode::dispatch_gqa`], its reference): f16 K and V
    /// with head_dim a multiple of 8 (16-byte loads: every binding 16-byte aligned, the caller's
    /// duty, as Vulkan checks only the device's offset alignment), or K and V each q8_0, q4_0 or
    /// tq4 with heads of whole 64-value units; the grouped split's chunking limits; subgroups of
    /// at least 8 lanes.
    pub fn dispatch_wide(
        self,
        s: &AttnShape,
        chunking: impl Into<Chunking>,
    ) -> Result<[Dispatch<B>; 2], Error> {
        let k = match s.kv.is_quantized() {
            true => &ATTN_SPLIT_WIDE_QUANT,
            false => &ATTN_SPLIT_WIDE,
        };
        let c = chunking.into();
        if !Self::wide_applies(s) {
            return Err(shape_err(
                k,
                format!(
                    "reads f16 caches with head_dim a multiple of 8 or quantized ones with heads \
                     of whole 64-value units, not {} with head_dim {}",
                    KvTypes { k: s.kv, v: s.kv_v }.name(),
                    s.head_dim
                ),
            ));
        }
        check_gqa(k, s, c.chunk)?;
        check_adaptive(k, c)?;
        self.dispatch_with(k, s, c)
    }

    /// [`AttnDecode::dispatch_wide`] over f16 caches in one dispatch: the split's last workgroup
    /// per (query, kv head) merges its group's partials. `counters` (`4 * n_q * n_kv_heads` bytes) must be zero
    /// before the first dispatch; each dispatch leaves them zero. At most 4096 (chunks x query
    /// heads per kv head).
    pub fn dispatch_wide_merged(
        self,
        s: &AttnShape,
        chunking: impl Into<Chunking>,
        counters: B,
    ) -> Result<Dispatch<B>, Error> {
        let c = chunking.into();
        let k = &ATTN_SPLIT_WIDE_MERGE;
        if s.kv != KvType::F16 || s.kv_v != KvType::F16 {
            return Err(shape_err(k, String::from("reads f16 caches only")));
        }
        need(k, "counters", &counters, 4 * (s.n_q * s.n_kv_heads) as u64)?;
        if !Self::wide_merge_fits(s, c) {
            let g = s.n_heads / s.n_kv_heads.max(1);
            let chunks = Self::n_chunks(s, c);
            return Err(shape_err(
                k,
                format!(
                    "{chunks} key chunks x {g} heads per group (at most {WIDE_PW}: use a \
                     larger chunk)"
                ),
            ));
        }
        let [mut split, _merge] = self.dispatch_wide(s, c)?;
        split.kernel = k;
        split.buffers.push(counters);
        Ok(split)
    }

    /// Whether [`AttnDecode::dispatch_wide_merged`] takes `s`: f16 caches the wide split
    /// reads, and chunk weights its merging workgroup can stage (chunks x query heads per kv
    /// head at most 4096).
    pub fn wide_merge_fits(s: &AttnShape, chunking: impl Into<Chunking>) -> bool {
        let g = s.n_heads / s.n_kv_heads.max(1);
        s.kv == KvType::F16 && Self::wide_applies(s) && g * Self::n_chunks(s, chunking) <= WIDE_PW
    }

    /// The shapes [`AttnDecode::dispatch_wide`] takes (besides the grouped split's limits).
    pub fn wide_applies(s: &AttnShape) -> bool {
        let f16 = s.kv == KvType::F16
            && s.kv_v == KvType::F16
            && !s.rot_k
            && s.head_dim.is_multiple_of(8);
        let quant = s.kv.is_quantized() && s.kv_v.is_quantized() && s.head_dim.is_multiple_of(64);
        (f16 || quant) && s.head_dim <= 256
    }

    fn dispatch_with(
        self,
        k: &'static KernelSpec,
        s: &AttnShape,
        chunking: Chunking,
    ) -> Result<[Dispatch<B>; 2], Error> {
        let chunk = chunking.chunk;
        s.check(k)?;
        let wide_quant = std::ptr::eq(k, &ATTN_SPLIT_WIDE_QUANT);
        let wide = std::ptr::eq(k, &ATTN_SPLIT_WIDE) || wide_quant;
        let grouped = std::ptr::eq(k, &ATTN_SPLIT_GQA) || wide;
        // (The grouped splits' own check, `check_gqa`, admits chunks from 8.)
        let min = if grouped { 8 } else { 16 };
        if !(min..=1024).contains(&chunk) || !chunk.is_power_of_two() {
            return Err(shape_err(
                k,
                format!("chunk {chunk} must be a power of two in {min}..=1024"),
            ));
        }
        s.check_buffers(k, &self.q, &self.k, &self.v, &self.q_pos, &self.out)?;
        check_sink(k, s, &self.sink)?;
        let p = decode_params(k, s, chunking, &self.part_ml, &self.part_o)?;
        let n_chunks = p.n_chunks as usize;
        let buffers = vec![
            self.q,
            self.k,
            self.v,
            self.q_pos,
            self.part_ml,
            self.part_o,
            self.out,
        ];
        let sinked = f64::from(u8::from(self.sink.is_some()));
        // Any buffer where there is no sink (the shaders do not read it).
        let mut split_buffers = buffers.clone();
        split_buffers.push(self.sink.unwrap_or(self.q));
        let ov = Overrides::new()
            .set("WG", WG as f64)
            .set("CHUNK", chunk as f64)
            .set("CHUNK_MIN", chunking.min as f64)
            .set("KV_DTYPE", s.kv.code())
            .set("KV_DTYPE_V", s.kv_v.code())
            .set("KV_ROT_K", f64::from(u8::from(s.rot_k)))
            .set("KV_SINK", sinked);
        let split_ov = match wide {
            true => {
                let o = Overrides::new()
                    .set("WG", WG as f64)
                    .set("CHUNK", chunk as f64)
                    .set("CHUNK_MIN", chunking.min as f64)
                    .set("GQ", (s.n_heads / s.n_kv_heads) as f64)
                    .set("HD", s.head_dim as f64);
                match wide_quant {
                    true => o
                        .set("KV_DTYPE", s.kv.code())
                        .set("KV_DTYPE_V", s.kv_v.code())
                        .set("KV_ROT_K", f64::from(u8::from(s.rot_k)))
                        .set("KV_SINK", sinked),
                    false => o,
                }
            }
            false => ov.clone(),
        };
        let split = Dispatch::new(
            k,
            split_ov,
            split_buffers,
            &p,
            [
                n_chunks as u32,
                if grouped {
                    s.n_kv_heads as u32
                } else {
                    s.n_heads as u32
                },
                s.n_q as u32,
            ],
        );
        let merge = Dispatch::new(
            &ATTN_MERGE,
            ov,
            buffers,
            &p,
            [
                s.n_heads as u32,
                s.n_q as u32,
                s.head_dim.div_ceil(MERGE_D) as u32,
            ],
        );
        Ok([split, merge])
    }
}

/// The grouped split's limits: `chunk` a power of two in 8..=256, at most [`GQA_MAX`] query
/// heads per kv head.
pub(crate) fn check_gqa(k: &'static KernelSpec, s: &AttnShape, chunk: usize) -> Result<(), Error> {
    if !(8..=256).contains(&chunk) || !chunk.is_power_of_two() {
        return Err(shape_err(
            k,
            format!("chunk {chunk} must be a power of two in 8..=256"),
        ));
    }
    if s.n_kv_heads == 0 || s.n_heads / s.n_kv_heads.max(1) > GQA_MAX {
        return Err(shape_err(
            k,
            format!(
                "{} query heads per kv head (at most {GQA_MAX})",
                s.n_heads / s.n_kv_heads.max(1)
            ),
        ));
    }
    Ok(())
}

/// Adaptive chunks of the grouped splits start at a power of two in 8..=chunk.
fn check_adaptive(k: &'static KernelSpec, c: Chunking) -> Result<(), Error> {
    if c.min != 0 && (c.min < 8 || !c.min.is_power_of_two() || c.min > c.chunk) {
        return Err(shape_err(
            k,
            format!(
                "adaptive chunks from {} must start at a power of two in 8..={}",
                c.min, c.chunk
            ),
        ));
    }
    Ok(())
}

/// Checks the partial buffers and the grid of a decode split into chunks of `chunk` keys (`s`
/// already checked) and returns its parameters.
pub(crate) fn decode_params<B: KernelBuffer>(
    k: &'static KernelSpec,
    s: &AttnShape,
    chunking: impl Into<Chunking>,
    part_ml: &B,
    part_o: &B,
) -> Result<AttnDecodeParams, Error> {
    let chunking = chunking.into();
    let (ml, o) = AttnDecode::<B>::scratch_bytes(s, chunking);
    need(k, "part_ml", part_ml, ml)?;
    need(k, "part_o", part_o, o)?;
    let n_chunks = AttnDecode::<B>::n_chunks(s, chunking);
    if n_chunks > MAX_CHUNKS {
        return Err(shape_err(
            k,
            format!("{n_chunks} key chunks (at most {MAX_CHUNKS}: use a larger chunk)"),
        ));
    }
    let m = MAX_GROUPS_X as usize;
    if n_chunks > m || s.n_heads > m || s.n_q > m {
        return Err(shape_err(k, "grid out of range"));
    }
    Ok(AttnDecodeParams {
        n_q: to_u32(k, "n_q", s.n_q)?,
        n_heads: to_u32(k, "n_heads", s.n_heads)?,
        n_kv_heads: to_u32(k, "n_kv_heads", s.n_kv_heads)?,
        head_dim: to_u32(k, "head_dim", s.head_dim)?,
        n_kv: to_u32(k, "n_kv", s.n_kv)?,
        n_chunks: n_chunks as u32,
        scale: s.scale,
        softcap: s.softcap.unwrap_or(0.0),
        window: to_u32(k, "window", s.window.unwrap_or(0))?,
        kv_stride: to_u32(k, "kv_stride", s.kv_stride)?,
        ring: to_u32(k, "ring", s.ring_rows())?,
    })
}

/// Tiled causal attention for prefill.
pub struct AttnPrefill<B> {
    pub q: B,
    pub k: B,
    pub v: B,
    pub q_pos: B,
    pub out: B,
    /// Centred quantized keys: the offset the key at position 0 is read plus
    /// ([`AttnDecode::sink`]).
    pub sink: Option<B>,
}

impl<B: KernelBuffer> AttnPrefill<B> {
    pub fn dispatch(self, s: &AttnShape) -> Result<Dispatch<B>, Error> {
        let k = &ATTN_PREFILL;
        s.check(k)?;
        if s.kv_stride != 0 {
            return Err(shape_err(
                k,
                "prefill reads one cache (kv_stride must be 0)",
            ));
        }
        if !s.head_dim.is_multiple_of(8) {
            return Err(shape_err(
                k,
                format!("head_dim {} must be a multiple of 8", s.head_dim),
            ));
        }
        s.check_buffers(k, &self.q, &self.k, &self.v, &self.q_pos, &self.out)?;
        check_sink(k, s, &self.sink)?;
        let tiles = s.n_q.div_ceil(PREFILL_BQ);
        if tiles > MAX_GROUPS_X as usize || s.n_heads > MAX_GROUPS_X as usize {
            return Err(shape_err(k, "grid out of range"));
        }
        let bk = if s.head_dim > 128 { 8 } else { 16 };
        let p = s.prefill_params(k)?;
        Ok(Dispatch::new(
            k,
            Overrides::new()
                .set("HD", s.head_dim as f64)
                .set("BK", bk as f64)
                .set("KV_DTYPE", s.kv.code())
                .set("KV_DTYPE_V", s.kv_v.code())
                .set("KV_ROT_K", f64::from(u8::from(s.rot_k)))
                .set("KV_SINK", f64::from(u8::from(self.sink.is_some()))),
            vec![
                self.q,
                self.k,
                self.v,
                self.q_pos,
                self.out,
                // Any buffer where there is no sink (the shader does not read it).
                self.sink.unwrap_or(self.q),
            ],
            &p,
            [tiles as u32, s.n_heads as u32, 1],
        ))
    }
}
