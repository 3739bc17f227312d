//! `shaders/kv_append.wgsl`: write new K and V rows into the cache (f32, f16, or quantized on
//! write: q8_0, q4_0).

use crate::sources::KV_APPEND as SRC;
use crate::spec::{BindingSpec, grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

/// The quantizing entry's bindings; the float one takes all but the last (`centre`).
const BINDINGS: &[BindingSpec] = &[
    rd("k_new"),
    rd("v_new"),
    rd("pos"),
    rw("k_cache"),
    rw("v_cache"),
    rd("centre"),
];

pub static KV_APPEND: KernelSpec = KernelSpec {
    name: "kv_append",
    file: "kv_append.wgsl",
    entry: "main",
    source: SRC,
    bindings: BINDINGS.split_at(5).0,
    push_size: 20,
    exact_fp: false,
    glsl: None,
};

/// The quantizing append (q8_0, q4_0): one workgroup of 64 per unit (`quant` entry point).
pub static KV_APPEND_QUANT: KernelSpec = KernelSpec {
    name: "kv_append_quant",
    entry: "quant",
    bindings: BINDINGS,
    ..KV_APPEND
};

/// Values per unit of a quantized cache (two blocks of 32, see `shaders/kv_quant.inc.wgsl`).
pub const KV_UNIT: usize = 64;

/// Element type of a KV cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    #[default]
    F32,
    /// Half the memory; keys and values are rounded to f16 (nearest even) when stored.
    F16,
    /// 8-bit codes with one f16 scale per block of 32 values (34 bytes per 32 values, 53% of
    /// f16); layout in `shaders/kv_quant.inc.wgsl`, reference in `vkllm_cpu::kv_quant`.
    Q8_0,
    /// 4-bit codes with one f16 scale per block of 32 values (18 bytes per 32 values).
    Q4_0,
    /// q4_0's layout for rotated units (keys and values, heads of whole 64-value units): codes
    /// into 16 levels, scale the block's negated value of largest magnitude
    /// (`vkllm_cpu::kv_quant`).
    Tq4,
}

impl KvType {
    /// Every type, in the order `--kv-type` lists them.
    pub const ALL: [KvType; 5] = [
        KvType::F32,
        KvType::F16,
        KvType::Q8_0,
        KvType::Q4_0,
        KvType::Tq4,
    ];

    /// The kernels' KV_DTYPE override value.
    pub fn code(self) -> f64 {
        match self {
            KvType::F32 => 0.0,
            KvType::F16 => 1.0,
            KvType::Q8_0 => 2.0,
            KvType::Q4_0 => 3.0,
            KvType::Tq4 => 4.0,
        }
    }

    /// Stored in blocks with scales (q8_0, q4_0, tq4).
    pub fn is_quantized(self) -> bool {
        matches!(self, KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4)
    }

    /// Bytes of `n` values: whole rows of a width [`KvType::check_width`] accepts.
    pub fn bytes(self, n: u64) -> u64 {
        match self {
            KvType::F32 => 4 * n,
            KvType::F16 => 2 * n,
            KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => {
                n.div_ceil(KV_UNIT as u64) * 4 * self.unit_words() as u64
            }
        }
    }

    /// u32 words of `n` values (as [`KvType::bytes`]).
    pub fn words(self, n: u64) -> u64 {
        self.bytes(n).div_ceil(4)
    }

    /// Words of one [`KV_UNIT`]-value unit of a quantized type: the codes and a word of two f16
    /// scales (0 for f32 and f16).
    pub fn unit_words(self) -> usize {
        match self {
            KvType::Q8_0 => 17,
            KvType::Q4_0 | KvType::Tq4 => 9,
            _ => 0,
        }
    }

    /// Why rows of `kv_dim` values (heads of `head_dim`) cannot be stored as this type, if they
    /// cannot: f16 pairs need an even width; quantized units a width that is a multiple of 64 and
    /// heads a multiple of 32 (blocks never straddle heads).
    pub fn check_width(self, kv_dim: usize, head_dim: usize) -> Result<(), String> {
        match self {
            KvType::F32 => Ok(()),
            KvType::F16 if kv_dim.is_multiple_of(2) => Ok(()),
            KvType::F16 => Err(format!("an f16 cache needs an even kv_dim, got {kv_dim}")),
            KvType::Tq4 if !head_dim.is_multiple_of(64) => Err(format!(
                "a tq4 cache rotates whole 64-value units of each head: head_dim must be a \
                 multiple of 64, got {head_dim}"
            )),
            _ if kv_dim.is_multiple_of(64) && head_dim.is_multiple_of(32) => Ok(()),
            _ => Err(format!(
                "a {} cache needs kv_dim a multiple of 64 and head_dim of 32, got {kv_dim} and \
                 {head_dim}",
                self.name()
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
            KvType::Tq4 => "tq4",
        }
    }

    /// Why keys (`key`) or values of this type cannot have their units stored rotated (`rot`), if
    /// they cannot: q8_0 keys and q4_0 values may be, tq4 always are, other parts never.
    pub fn check_rot(self, key: bool, rot: bool) -> Result<(), String> {
        let which = if key { "keys" } else { "values" };
        match (self, rot) {
            (KvType::Tq4, true) => Ok(()),
            (KvType::Tq4, false) => Err(format!("tq4 {which} are always stored rotated")),
            (_, false) => Ok(()),
            (KvType::Q8_0, true) if key => Ok(()),
            (KvType::Q4_0, true) if !key => Ok(()),
            (t, true) => Err(format!("rotated {which} in a {} cache", t.name())),
        }
    }

    /// `f32`, `f16`, `q8_0`, `q4_0` or `tq4`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// The element types of a cache's keys and values. They are the same type, or two quantized
/// ones (rotated q8_0 keys with q4_0 values keep the keys' precision at 41% of f16's memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvTypes {
    pub k: KvType,
    pub v: KvType,
}

impl From<KvType> for KvTypes {
    fn from(t: KvType) -> Self {
        KvTypes { k: t, v: t }
    }
}

impl KvTypes {
    /// Keys and values in their own types, if the pair is one the kernels take.
    pub fn new(k: KvType, v: KvType) -> Result<Self, String> {
        if k != v && !(k.is_quantized() && v.is_quantized()) {
            return Err(format!(
                "K {} with V {}: the types must match unless both are quantized (q8_0, q4_0, tq4)",
                k.name(),
                v.name()
            ));
        }
        Ok(KvTypes { k, v })
    }

    /// `q8_0`, or `q8_0/q4_0` (K/V) when they differ.
    pub fn name(&self) -> String {
        match self.k == self.v {
            true => self.k.name().to_string(),
            false => format!("{}/{}", self.k.name(), self.v.name()),
        }
    }

    /// Stored in blocks (both types are, or neither: see [`KvTypes::new`]).
    pub fn is_quantized(&self) -> bool {
        self.k.is_quantized()
    }

    /// [`KvType::check_width`] for both.
    pub fn check_width(&self, kv_dim: usize, head_dim: usize) -> Result<(), String> {
        self.k.check_width(kv_dim, head_dim)?;
        self.v.check_width(kv_dim, head_dim)
    }
}

/// Which parts of a quantized cache store their 64-value units rotated
/// (`vkllm_cpu::kv_quant::rotate`): attention takes rotated keys with the query rotated alike,
/// and sums rotated values into an output it rotates back (`kv_unrotate.wgsl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KvRot {
    pub k: bool,
    pub v: bool,
}

impl KvRot {
    /// No part rotated.
    pub const NONE: KvRot = KvRot { k: false, v: false };

    /// The rotation a cache of `types` with heads of `head_dim` takes: tq4 always (its heads are
    /// whole units), q8_0 keys and (`q4_0_values`) q4_0 values where the heads are whole 64-value
    /// units (the quality tables in docs/quantization.md), nothing else.
    pub fn for_types(types: KvTypes, head_dim: usize, q4_0_values: bool) -> Self {
        let whole = head_dim.is_multiple_of(KV_UNIT);
        KvRot {
            k: types.k == KvType::Tq4 || (types.k == KvType::Q8_0 && whole),
            v: types.v == KvType::Tq4 || (types.v == KvType::Q4_0 && whole && q4_0_values),
        }
    }

    /// Why `types` cannot be stored with this rotation, if it cannot ([`KvType::check_rot`]).
    pub fn check(self, types: KvTypes) -> Result<(), String> {
        types.k.check_rot(true, self.k)?;
        types.v.check_rot(false, self.v)
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct KvAppendParams {
    pub n_tok: u32,
    pub kv_dim: u32,
    pub max_tok: u32,
    pub row_stride: u32,
    pub ring: u32,
}

/// `k_cache[pos[t]] = k_new[t]`, `v_cache[pos[t]] = v_new[t]` for `t < n_tok`.
pub struct KvAppend<B> {
    pub k_new: B,
    pub v_new: B,
    pub pos: B,
    pub k_cache: B,
    pub v_cache: B,
}

impl<B: KernelBuffer> KvAppend<B> {
    /// `kv_dim` = kv heads * head dim; the caches hold `max_tok` rows of it in `dtype`.
    pub fn dispatch(
        self,
        dtype: KvType,
        n_tok: usize,
        kv_dim: usize,
        max_tok: usize,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_slots(dtype, n_tok, kv_dim, max_tok, 0)
    }

    /// Like [`KvAppend::dispatch`] for a slot-major cache: token `t` writes row
    /// `t * row_stride + pos[t]`, and positions `>= max_tok` (inactive slots) write nothing.
    /// `row_stride` 0 is the single-sequence case.
    pub fn dispatch_slots(
        self,
        dtype: KvType,
        n_tok: usize,
        kv_dim: usize,
        max_tok: usize,
        row_stride: usize,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_ring(dtype, n_tok, kv_dim, max_tok, row_stride, max_tok)
    }

    /// Like [`KvAppend::dispatch_slots`] for caches that keep `ring` rows per slot: token `t`
    /// writes row `t * row_stride + pos[t] % ring` (a sliding-window layer's ring; `ring >=
    /// max_tok` is the full cache). With `row_stride` 0 the `n_tok` tokens (consecutive
    /// positions) must fit in the ring.
    pub fn dispatch_ring(
        self,
        dtype: KvType,
        n_tok: usize,
        kv_dim: usize,
        max_tok: usize,
        row_stride: usize,
        ring: usize,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_rotated(dtype, KvRot::NONE, n_tok, kv_dim, max_tok, row_stride, ring)
    }

    /// [`KvAppend::dispatch_ring`] into a cache of `types` (keys and values may differ, see
    /// [`KvTypes`]) whose units are stored rotated as `rot` says (`shaders/kv_quant.inc.wgsl`;
    /// the attention kernels then take `AttnShape::rot_k`, and rotated values need their output
    /// rotated back).
    #[allow(clippy::too_many_arguments)]
    pub fn dispatch_rotated(
        self,
        types: impl Into<KvTypes>,
        rot: KvRot,
        n_tok: usize,
        kv_dim: usize,
        max_tok: usize,
        row_stride: usize,
        ring: usize,
    ) -> Result<Dispatch<B>, Error> {
        let geom = (n_tok, kv_dim, max_tok, row_stride, ring);
        self.dispatch_centred(types, rot, None, geom)
    }

    /// [`KvAppend::dispatch_rotated`] with the keys centred first when `centre` is given
    /// (`[3, kv_dim]` f32: shift, inverse scale, and the sink offset the key at position 0 is
    /// stored less, after the scaling; quantized keys only). `geom`: n_tok, kv_dim, max_tok,
    /// row_stride, ring as there.
    pub fn dispatch_centred(
        self,
        types: impl Into<KvTypes>,
        rot: KvRot,
        centre: Option<B>,
        geom: (usize, usize, usize, usize, usize),
    ) -> Result<Dispatch<B>, Error> {
        let (n_tok, kv_dim, max_tok, row_stride, ring) = geom;
        let types = types.into();
        let dtype = types.k;
        let k = match dtype.is_quantized() {
            true => &KV_APPEND_QUANT,
            false => &KV_APPEND,
        };
        KvTypes::new(types.k, types.v).map_err(|m| shape_err(k, m))?;
        rot.check(types).map_err(|m| shape_err(k, m))?;
        if ring == 0 {
            return Err(shape_err(k, "ring of 0 rows"));
        }
        let slot_rows = ring.min(max_tok);
        if row_stride == 0 && ring < max_tok && n_tok > ring {
            return Err(shape_err(
                k,
                format!("{n_tok} tokens overwrite each other in a ring of {ring} rows"),
            ));
        }
        // Units of 64 never straddle rows; the head split does not matter to the append (any
        // split into whole units passes the check).
        types.check_width(kv_dim, 64).map_err(|m| shape_err(k, m))?;
        let src = 4 * (n_tok * kv_dim) as u64;
        need(k, "k_new", &self.k_new, src)?;
        need(k, "v_new", &self.v_new, src)?;
        need(k, "pos", &self.pos, 4 * n_tok as u64)?;
        if row_stride != 0 && row_stride < slot_rows {
            return Err(shape_err(
                k,
                format!("row_stride {row_stride} overlaps slots of {slot_rows} rows"),
            ));
        }
        let rows = n_tok.saturating_sub(1) * row_stride + slot_rows;
        let values = (rows * kv_dim) as u64;
        need(k, "k_cache", &self.k_cache, types.k.bytes(values))?;
        need(k, "v_cache", &self.v_cache, types.v.bytes(values))?;
        if let Some(c) = &centre {
            if !dtype.is_quantized() {
                return Err(shape_err(k, "centred keys need a quantized K cache"));
            }
            need(k, "centre", c, 12 * kv_dim as u64)?;
        }
        // Workgroups: one per cache word batch of WG, or one per quantized unit.
        let groups = match dtype {
            KvType::F32 => ((n_tok * kv_dim) as u64).div_ceil(WG as u64),
            KvType::F16 => ((n_tok * kv_dim / 2) as u64).div_ceil(WG as u64),
            KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => (n_tok * kv_dim / KV_UNIT) as u64,
        };
        let p = KvAppendParams {
            n_tok: to_u32(k, "n_tok", n_tok)?,
            kv_dim: to_u32(k, "kv_dim", kv_dim)?,
            max_tok: to_u32(k, "max_tok", max_tok)?,
            row_stride: to_u32(k, "row_stride", row_stride)?,
            ring: to_u32(k, "ring", ring)?,
        };
        let centred = centre.is_some();
        let mut bufs = vec![self.k_new, self.v_new, self.pos, self.k_cache, self.v_cache];
        if dtype.is_quantized() {
            // Any buffer where the keys are not centred (the shader does not read it).
            bufs.push(centre.unwrap_or(bufs[0]));
        }
        Ok(Dispatch::new(
            k,
            Overrides::new()
                .set("WG", WG as f64)
                .set("KV_DTYPE", dtype.code())
                .set("KV_DTYPE_V", types.v.code())
                .set("KV_ROT_K", f64::from(u8::from(rot.k)))
                .set("KV_ROT_V", f64::from(u8::from(rot.v)))
                .set("KV_CENTRE", f64::from(u8::from(centred))),
            bufs,
            &p,
            grid_for(k, groups)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{KvRot, KvType, KvTypes};

    /// q8_0 keys and q4_0 values rotate where heads are whole units; tq4 always; nothing else.
    #[test]
    fn rotation_follows_the_types_and_heads() {
        let t = |k, v| KvTypes { k, v };
        let (q8, q4, tq4) = (KvType::Q8_0, KvType::Q4_0, KvType::Tq4);
        let kv = |k, v| KvRot { k, v };
        assert_eq!(KvRot::for_types(t(q8, q8), 128, true), kv(true, false));
        assert_eq!(KvRot::for_types(t(q4, q4), 64, true), kv(false, true));
        assert_eq!(KvRot::for_types(t(q4, q4), 64, false), KvRot::NONE);
        assert_eq!(KvRot::for_types(t(q8, q4), 256, true), kv(true, true));
        assert_eq!(KvRot::for_types(t(q4, q4), 96, true), KvRot::NONE);
        assert_eq!(KvRot::for_types(t(q8, tq4), 96, false), kv(false, true));
        assert_eq!(
            KvRot::for_types(t(KvType::F16, KvType::F16), 128, true),
            KvRot::NONE
        );
        assert!(kv(false, true).check(t(q4, q4)).is_ok());
        assert!(kv(true, false).check(t(q4, q4)).is_err());
        assert!(kv(false, true).check(t(q8, q8)).is_err());
        assert!(kv(true, false).check(t(tq4, tq4)).is_err());
        assert!(kv(true, true).check(t(tq4, tq4)).is_ok());
    }
}
