//! `shaders/glsl/attention_prefill_cm2.comp`: the prefill attention on workgroup-scope
//! cooperative matrices (VK_NV_cooperative_matrix2), the contract of
//! [`crate::attention_prefill_coop2`] (same push constants, bindings and key split) for f16 K/V
//! without a ring: scores, probabilities and the running max and sum stay in registers.

use crate::attention::AttnShape;
use crate::attention_prefill_coop::{AttnPrefillCoop, AttnPrefillCoopParams};
use crate::attention_prefill_coop2::{
    CoopAttn2Scratch, check_queries_and_split, split_bindings, split_parts, wave_split,
};
use crate::kv_append::KvType;
use crate::spec::{MAX_GROUPS_X, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, GlslKernel, KernelBuffer, KernelSpec, Overrides};

static GLSL: GlslKernel = GlslKernel {
    spirv: include_bytes!("../shaders/glsl/attention_prefill_cm2.spv"),
    spec_ids: &[
        ("HD", 1),
        ("BR", 2),
        ("BC", 3),
        ("SPLIT_ON", 4),
        ("HALF", 5),
        ("SUM_MMA", 6),
        ("PROBE", 7),
        ("PREFETCH", 8),
        ("QSCALE", 9),
        ("UNCLAMPED", 10),
        ("STATS16", 11),
        ("OHALF", 12),
    ],
};

pub static ATTN_PREFILL_CM2: KernelSpec = KernelSpec {
    name: "attn_prefill_cm2",
    file: "glsl/attention_prefill_cm2.comp",
    entry: "main",
    source: "",
    bindings: &[
        rd("q"),
        rd("k"),
        rd("v"),
        rd("q_pos"),
        rw("out"),
        rw("out16"),
        rw("kv_part"),
        rw("kv_ctr"),
    ],
    push_size: 44,
    exact_fp: false,
    glsl: Some(&GLSL),
};

/// Invocations per workgroup (fixed in the shader: a specialised LocalSizeId would need
/// maintenance4).
pub const WG: u32 = 128;

/// Shared memory for the staged queries (the driver reserves more for workgroup-scope matrices).
pub const MAX_Q_SHARED: usize = 40 * 1024;

/// Workgroup-scope matrices resident per multiprocessor assumed by [`CmAttnTile::auto_split`].
const WAVE_PER_CU: usize = 2;

/// The push constants: coop2's (the first kernel's, then the fewest steps of a split tile and
/// the split).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    base: AttnPrefillCoopParams,
    split_min: u32,
    split: u32,
}

/// The cm2 kernel's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CmAttnTile {
    /// Rows per workgroup ((query, head) pairs of one GQA group; a multiple of 16).
    pub br: u32,
    /// Keys per step (a multiple of 16).
    pub bc: u32,
    /// Workgroups a split tile's keys are walked by (1 ..=
    /// [`crate::attention_prefill_coop2::MAX_SPLIT`]; 1: no split).
    pub split: u32,
    /// Fewest key steps of a tile that is split (>= 1).
    pub split_min: u32,
    /// Row sums of the probabilities on the tensor cores (f16 probabilities times ones)
    /// instead of a reduction over the f32 ones.
    pub sum_mma: bool,
    /// The next step's K and V tiles loaded while a step computes.
    pub prefetch: bool,
    /// The scale (and log2 e) folded into the staged queries, probabilities by exp2; `false`:
    /// scores scaled each step (the reference).
    pub qscale: bool,
    /// Steps whose keys all lie in the cache load K and V through an unclamped layout with a
    /// 16-byte row stride (`false`: every load clamped, the reference).
    pub unclamped: bool,
    /// The running max and sum and the rescale factors as `br` x 16 matrices (`false`: `br` x
    /// `bc`, the reference).
    pub stats16: bool,
    /// The output as two head_dim / 2 column halves (head dims a multiple of 32 up to 128, where
    /// it measured faster; not with `prefetch` or a probe; `false`: one matrix, the reference).
    pub o_halves: bool,
    /// Diagnostics: 0 computes attention; 1..=5 write an intermediate of the first key step
    /// instead (see the shader's PROBE).
    pub probe: u32,
}

impl CmAttnTile {
    /// The configuration for `s` if the kernel runs it: f16 K and V (plain keys), no ring
    /// smaller than the cache, head_dim a multiple of 16 in 16..=256, a GQA group of at most
    /// 64 heads. 64 rows x 64 keys per step up to head dim 128, 32 x 32 past it where the GQA
    /// group fits (measured fastest on the H100: docs/benchmarks.md), row sums on the tensor
    /// cores, the scale folded into the staged queries, unclamped loads inside the cache, row
    /// statistics as rows x 16 matrices.
    pub fn for_shape(s: &AttnShape) -> Option<CmAttnTile> {
        let ring_ok = s.ring.is_none_or(|r| r >= s.n_kv);
        let kv_ok = s.kv == KvType::F16 && s.kv_v == KvType::F16 && !s.rot_k;
        let hd_ok = s.head_dim.is_multiple_of(16) && (16..=256).contains(&s.head_dim);
        let group = s.n_heads / s.n_kv_heads.max(1);
        let (br, bc) = if s.head_dim > 128 && group <= 32 {
            (32, 32)
        } else if s.head_dim > 128 {
            (64, 32)
        } else {
            (64, 64)
        };
        if !(ring_ok && kv_ok && hd_ok && (1..=br).contains(&group)) || s.kv_stride != 0 {
            return None;
        }
        Some(CmAttnTile {
            br: br as u32,
            bc,
            split: 1,
            split_min: 1,
            sum_mma: true,
            prefetch: false,
            qscale: true,
            unclamped: true,
            stats16: true,
            o_halves: false,
            probe: 0,
        })
    }

    /// This configuration with `br` rows and `bc` keys per step, if the kernel runs them for
    /// `s`: multiples of 16 up to 128 (`br` from 32: NVIDIA's M granularity for workgroup
    /// matrices of 128 invocations; 16-row tiles gave wrong output on the H100), `br` at least
    /// the GQA group, the staged queries (`br` rows of head_dim + 8 halves) within
    /// [`MAX_Q_SHARED`]. The device's own granularities: `DeviceInfo::cm2_attn_fits` in vkllm-vk.
    pub fn with_tile(self, br: u32, bc: u32, s: &AttnShape) -> Option<CmAttnTile> {
        let ok = |x: u32| x.is_multiple_of(16) && (16..=128).contains(&x);
        let group = s.n_heads / s.n_kv_heads.max(1);
        let q_bytes = br as usize * (s.head_dim + 8) * 2;
        (ok(br) && br >= 32 && ok(bc) && group <= br as usize && q_bytes <= MAX_Q_SHARED)
            .then_some(CmAttnTile { br, bc, ..self })
    }

    /// Queries per workgroup for GQA `group`.
    pub fn bq(&self, group: usize) -> usize {
        self.br as usize / group.max(1)
    }

    fn tiles(&self, s: &AttnShape) -> usize {
        s.n_q
            .div_ceil(self.bq(s.n_heads / s.n_kv_heads.max(1)).max(1))
    }

    /// The split for `s` whose queries start at `pos0` on a GPU of `compute_units`
    /// multiprocessors (`None`: unknown), by coop2's rule ([`crate::attention_prefill_coop2::
    /// CoopAttn2Tile::auto_split`]) with two resident workgroups per multiprocessor.
    pub fn auto_split(&self, s: &AttnShape, pos0: usize, compute_units: Option<u32>) -> u32 {
        let wgs = (self.tiles(s) * s.n_kv_heads).max(1);
        let steps = (pos0 + s.n_q).div_ceil(self.bc as usize);
        let wave = compute_units.unwrap_or(64).max(1) as usize * WAVE_PER_CU;
        wave_split(wgs, steps, wave)
    }

    /// This configuration with tiles split `split` ways where they take more than
    /// `ceil(steps / split)` steps (`steps` the heaviest tile's), or unsplit.
    pub fn with_split(self, split: u32, n_q: usize, pos0: usize) -> CmAttnTile {
        let steps = (pos0 + n_q).div_ceil(self.bc as usize) as u32;
        let (split, split_min) = split_parts(split, steps);
        CmAttnTile {
            split,
            split_min,
            ..self
        }
    }

    /// Bytes of `part` a split launch of `s` needs: per (kv head, query tile, part) the
    /// workgroup's rows of head_dim + 2 f32.
    pub fn part_bytes(&self, s: &AttnShape) -> u64 {
        let rows = (s.n_kv_heads * self.tiles(s)) as u64 * self.split as u64 * self.br as u64;
        rows * (s.head_dim as u64 + 2) * 4
    }

    /// Bytes of `ctr` a split launch of `s` needs: one u32 per (kv head, query tile).
    pub fn counter_bytes(&self, s: &AttnShape) -> u64 {
        4 * (s.n_kv_heads * self.tiles(s)) as u64
    }
}

impl<B: KernelBuffer> AttnPrefillCoop<B> {
    /// The cm2 kernel: one dispatch for `s` whose queries sit at positions `pos0..pos0 + n_q`,
    /// with configuration `t` (from [`CmAttnTile::for_shape`]), the optional f16 copy of the
    /// output (`to_f16`'s layout) and, for a split (`t.split > 1`, required then), its scratch
    /// ([`CmAttnTile::part_bytes`], [`CmAttnTile::counter_bytes`] of zeroed counters).
    pub fn dispatch_cm2(
        self,
        s: &AttnShape,
        pos0: usize,
        t: CmAttnTile,
        out16: Option<B>,
        scratch: Option<CoopAttn2Scratch<B>>,
    ) -> Result<Dispatch<B>, Error> {
        let k = &ATTN_PREFILL_CM2;
        s.check(k)?;
        s.check_unquantized(k)?;
        let Some(fit) = CmAttnTile::for_shape(s) else {
            return Err(shape_err(
                k,
                format!(
                    "needs f16 K/V without a ring, head_dim a multiple of 16 up to 256 (got {}) \
                     and a GQA group of at most 64 over one cache",
                    s.head_dim
                ),
            ));
        };
        if fit.with_tile(t.br, t.bc, s).is_none() {
            return Err(shape_err(
                k,
                format!(
                    "{} rows x {} keys per step: multiples of 16 up to 128, at least the GQA \
                     group's rows, the staged queries within {} bytes",
                    t.br, t.bc, MAX_Q_SHARED
                ),
            ));
        }
        check_queries_and_split(k, s, pos0, t.split, t.split_min)?;
        s.check_buffers(k, &self.q, &self.k, &self.v, &self.q_pos, &self.out)?;
        let groups_x = t.tiles(s) * t.split as usize;
        if groups_x > MAX_GROUPS_X as usize || s.n_kv_heads > MAX_GROUPS_X as usize {
            return Err(shape_err(k, "grid out of range"));
        }
        let bytes = (t.part_bytes(s), t.counter_bytes(s));
        let (part, ctr) = split_bindings(k, t.split, bytes, scratch, self.out)?;
        let p = Params {
            base: AttnPrefillCoopParams {
                base: s.prefill_params(k)?,
                pos0: to_u32(k, "pos0", pos0)?,
            },
            split_min: t.split_min,
            split: t.split,
        };
        let o = Overrides::new()
            .set("HD", s.head_dim as f64)
            .set("BR", t.br as f64)
            .set("BC", t.bc as f64)
            .set("SPLIT_ON", f64::from(u8::from(t.split > 1)))
            .set("SUM_MMA", f64::from(u8::from(t.sum_mma)))
            .set("PROBE", t.probe.min(5) as f64)
            .set("PREFETCH", f64::from(u8::from(t.prefetch)))
            .set("QSCALE", f64::from(u8::from(t.qscale)))
            .set("UNCLAMPED", f64::from(u8::from(t.unclamped)))
            .set("STATS16", f64::from(u8::from(t.stats16)))
            .set(
                "OHALF",
                f64::from(u8::from(
                    t.o_halves && s.head_dim.is_multiple_of(32) && s.head_dim <= 128,
                )),
            );
        let grid = [groups_x as u32, s.n_kv_heads as u32, 1];
        self.bind_v2(k, s, o, out16, (part, ctr), &p, grid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(n_q: usize, n_kv: usize, heads: (usize, usize), hd: usize) -> AttnShape {
        AttnShape {
            n_q,
            n_heads: heads.0,
            n_kv_heads: heads.1,
            head_dim: hd,
            n_kv,
            scale: 1.0,
            softcap: None,
            window: None,
            kv: KvType::F16,
            kv_v: KvType::F16,
            rot_k: false,
            kv_stride: 0,
            ring: None,
        }
    }

    #[test]
    fn takes_f16_caches_without_a_wrapping_ring() {
        let s = shape(240, 8432, (32, 8), 128);
        let t = CmAttnTile::for_shape(&s).expect("the 8B shape");
        assert_eq!((t.br, t.bc, t.bq(4)), (64, 64, 16));
        assert!(t.unclamped && t.stats16 && !t.o_halves);
        assert_eq!(
            CmAttnTile::for_shape(&shape(9, 9, (16, 2), 256)).map(|t| (t.br, t.bc)),
            Some((32, 32))
        );
        // A GQA group past 32 rows keeps 64 rows (of 32 keys) at head dim 256.
        let wide_group = CmAttnTile::for_shape(&shape(9, 9, (48, 1), 256));
        assert_eq!(wide_group.map(|t| (t.br, t.bc)), Some((64, 32)));
        let f32_kv = AttnShape {
            kv: KvType::F32,
            kv_v: KvType::F32,
            ..s
        };
        assert!(CmAttnTile::for_shape(&f32_kv).is_none());
        let ring = AttnShape {
            ring: Some(4096),
            window: Some(1024),
            ..s
        };
        assert!(CmAttnTile::for_shape(&ring).is_none());
        let whole_ring = AttnShape {
            ring: Some(8432),
            ..s
        };
        assert!(CmAttnTile::for_shape(&whole_ring).is_some());
        assert!(CmAttnTile::for_shape(&shape(9, 9, (4, 4), 72)).is_none());
        let t128 = t.with_tile(128, 32, &s).map(|t| (t.br, t.bc));
        assert_eq!(t128, Some((128, 32)));
        assert!(t.with_tile(48, 24, &s).is_none());
        assert!(t.with_tile(16, 32, &shape(9, 9, (8, 8), 256)).is_none());
        assert!(t.with_tile(16, 64, &shape(9, 9, (32, 1), 128)).is_none());
        // 128 rows of head dim 256 would stage 67,584 bytes of queries.
        let hd256 = shape(9, 9, (16, 2), 256);
        assert!(t.with_tile(128, 32, &hd256).is_none());
        assert!(t.with_tile(64, 32, &hd256).is_some());
    }

    #[test]
    fn split_fills_waves_and_sizes_its_scratch() {
        let s = shape(240, 8432, (32, 8), 128);
        let t = CmAttnTile::for_shape(&s).unwrap();
        // 15 tiles x 8 kv heads = 120 workgroups on 132 x 2 resident: two parts.
        let sp = t.auto_split(&s, 8192, Some(132));
        assert_eq!(sp, 2);
        let t = t.with_split(sp, 240, 8192);
        assert_eq!(t.split, 2);
        assert_eq!(t.part_bytes(&s), 8 * 15 * 2 * 64 * 130 * 4);
        assert_eq!(t.counter_bytes(&s), 4 * 8 * 15);
        // A short prompt at position 0 has too few steps to split.
        let s0 = shape(64, 64, (32, 8), 128);
        let t0 = CmAttnTile::for_shape(&s0).unwrap();
        assert_eq!(t0.with_split(4, 32, 0).split, 1);
        assert_eq!(t0.auto_split(&s0, 0, Some(132)), 1);
    }
}
