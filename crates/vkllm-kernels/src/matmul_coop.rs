//! `shaders/matmul_coop.wgsl`: `Y = X W^T` for prefill on cooperative matrices
//! (VK_KHR_cooperative_matrix, f16 x f16 -> f32, 16 x 16 x 16, subgroup scope), for every
//! weight type (F32/BF16 rounded to f16 and quantized blocks dequantized to f16 in shared
//! memory). Same contract as [`crate::matmul::Matmul`]; the runtime picks it only on devices
//! that enable the cooperative-matrix feature with that shape.
//!
//! A launch is a [`CoopConfig`]: the [`CoopTile`], the K step (32, or 64 for tiles whose two
//! stages still fit) and the split-K factor. With split-K the workgroups of one output tile
//! each walk a share of K and the last one sums their partials (in a fixed order) from a
//! caller-owned scratch ([`SplitScratch`]): more workgroups for grids that would leave
//! multiprocessors idle.

use crate::matmul::MatmulParams;
use crate::matvec::{MatShape, check_weight};
use crate::sources::MATMUL_COOP as SRC;
use crate::spec::{MAX_GROUPS_X, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides, WeightType};

pub static MATMUL_COOP: KernelSpec = KernelSpec {
    name: "matmul_coop",
    file: "matmul_coop.wgsl",
    entry: "matmul_coop",
    source: SRC,
    bindings: &[
        rd("w"),
        rd("x"),
        rw("y"),
        rw("part"),
        rw("counters"),
        rd("w1"),
        rd("w2"),
        rw("y1"),
        rw("y2"),
        rw("yh"),
    ],
    push_size: 48,
    exact_fp: false,
    glsl: None,
};

/// Workgroup tiling: `sgm x sgn` subgroups, each owning `wm x wn` 16 x 16 accumulator tiles, so
/// a workgroup computes `16 sgm wm` tokens x `16 sgn wn` rows of Y.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopTile {
    pub sgm: u32,
    pub sgn: u32,
    pub wm: u32,
    pub wn: u32,
}

impl CoopTile {
    /// 128 x 128 per workgroup, 8 subgroups of 4 x 2 tiles: for large grids.
    pub const LARGE: CoopTile = CoopTile {
        sgm: 2,
        sgn: 4,
        wm: 4,
        wn: 2,
    };
    /// 64 x 128 per workgroup, 8 subgroups of 2 x 2 tiles: for smaller grids, where the large
    /// tile would leave much of the GPU idle.
    pub const SMALL: CoopTile = CoopTile {
        sgm: 2,
        sgn: 4,
        wm: 2,
        wn: 2,
    };

    /// Tokens per workgroup.
    pub fn bm(&self) -> usize {
        16 * (self.sgm * self.wm) as usize
    }
    /// Weight rows per workgroup.
    pub fn bn(&self) -> usize {
        16 * (self.sgn * self.wn) as usize
    }
    pub fn subgroups(&self) -> u32 {
        self.sgm * self.sgn
    }
    /// Whether the shader runs this tiling with subgroups of `subgroup_size` (a power of two,
    /// 4..=128): 2 or 4 tiles each way per subgroup (its named accumulators), at most 128 x 128
    /// per workgroup (its staging arrays), 8 subgroups (its scratch tiles) and 1024 invocations,
    /// and 1 to 4 whole 16-byte slots per invocation of each staged slice (its prefetch
    /// registers; X slices are `bm` x 8 slots, W slices `bn` x 8 (f32) or `bn` x 4 (16-bit)).
    pub fn fits(&self, subgroup_size: u32) -> bool {
        let wg = self.subgroups() as usize * subgroup_size as usize;
        let slots_ok = |slots: usize| slots.is_multiple_of(wg) && (1..=4).contains(&(slots / wg));
        matches!(self.wm, 2 | 4)
            && matches!(self.wn, 2 | 4)
            && self.sgm > 0
            && self.sgn > 0
            && self.bm() <= 128
            && self.bn() <= 128
            && self.subgroups() <= 8
            && subgroup_size.is_power_of_two()
            && (4..=128).contains(&subgroup_size)
            && wg <= 1024
            && slots_ok(self.bm() * 8)
            && slots_ok(self.bn() * 8)
            && slots_ok(self.bn() * 4)
    }

    /// 128 x 128 per workgroup, 4 subgroups of 4 x 4 tiles (twice the multiplications per
    /// loaded fragment of [`CoopTile::LARGE`]): its slices fit the prefetch registers only with
    /// f16 X and 16-bit or quantized weights at K step 64 ([`CoopConfig::fits_for`]).
    pub const WIDE: CoopTile = CoopTile {
        sgm: 2,
        sgn: 2,
        wm: 4,
        wn: 4,
    };

    /// 128 x 64 per workgroup (128 tokens, 64 rows), 4 x 2 subgroups of 2 x 2 tiles: for
    /// quantized weights, whose 64 rows of blocks a workgroup then dequantizes per slice.
    pub const TALL: CoopTile = CoopTile {
        sgm: 4,
        sgn: 2,
        wm: 2,
        wn: 2,
    };

    /// 64 x 64 per workgroup, 4 subgroups of 2 x 2 tiles: for small weights (1024-row
    /// projections of 0.5B models), where even 64 x 128 leaves SMs idle.
    pub const TINY: CoopTile = CoopTile {
        sgm: 2,
        sgn: 2,
        wm: 2,
        wn: 2,
    };

    /// Workgroups for `rows` x `n` outputs.
    pub fn groups(&self, rows: usize, n: usize) -> usize {
        rows.div_ceil(self.bn()) * n.div_ceil(self.bm())
    }

    /// The tiling for `rows` x `n` outputs with subgroups of `subgroup_size`: the largest of
    /// [`CoopTile::LARGE`], [`CoopTile::SMALL`], [`CoopTile::TINY`] that runs there and still
    /// gives at least `min_groups` workgroups (else the smallest that runs; `None` if none does).
    pub fn for_shape(
        rows: usize,
        n: usize,
        subgroup_size: u32,
        min_groups: usize,
    ) -> Option<CoopTile> {
        let fitting: Vec<CoopTile> = [CoopTile::LARGE, CoopTile::SMALL, CoopTile::TINY]
            .into_iter()
            .filter(|t| t.fits(subgroup_size))
            .collect();
        fitting
            .iter()
            .find(|t| t.groups(rows, n) >= min_groups)
            .or(fitting.last())
            .copied()
    }
}

/// Shared memory the shader declares (bytes): two stages of two 128 x 40 f16 slices and 8
/// subgroup scratch tiles of 16 x 16 f32, whatever the configuration (48 KiB).
pub const SHARED_BYTES: u32 = 2 * 2 * 128 * 40 * 2 + 8 * 256 * 4;

/// vec4<f16> in each of the shader's two staging arrays.
const ARRAY_VEC4: usize = 2560;

/// Largest split-K factor.
pub const MAX_SPLIT: u32 = 16;

/// One launch configuration: a tiling, the K step of one shared-memory stage and the split-K
/// factor (1: no split).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopConfig {
    pub tile: CoopTile,
    /// 32 or 64.
    pub bk: u32,
    /// 1..=[`MAX_SPLIT`] workgroups per output tile, each over a share of K.
    pub split: u32,
    /// Shared-memory stages: 2 (double buffering) or 1 (a second barrier per step; half the
    /// shared memory, so K step 64 fits tiles of up to 128 x 128).
    pub stages: u32,
    /// Quantized weights: dequantize the next slice into registers before the multiplications
    /// (as float slices are loaded), where each invocation has 1 or 2 units of it; false: after
    /// them (the original order). Ignored for float weights and the original launch.
    pub prefetch_quant: bool,
    /// X holds f16, two per u32 word (`to_f16`), instead of f32: half the bytes and prefetch
    /// registers per slice. Needs `cols % 8 == 0`.
    pub x_f16: bool,
    /// Direct epilogue: workgroups whose whole tile lies inside Y, with y_stride and row_offset
    /// multiples of 4, store their accumulators straight into Y with cooperative stores (and
    /// start from a cooperative load of Y when accumulating) instead of going through shared
    /// memory tile by tile; with split-K, the last workgroup of such a tile sums the partials
    /// with cooperative loads and stores the sum the same way.
    pub direct: bool,
}

impl CoopConfig {
    /// `tile` with K steps of 32 and no split (the kernel's original launch).
    pub const fn plain(tile: CoopTile) -> Self {
        CoopConfig {
            tile,
            bk: 32,
            split: 1,
            stages: 2,
            prefetch_quant: false,
            x_f16: false,
            direct: false,
        }
    }

    /// vec4<f16> per staged row (`bk` halves + 8 of padding).
    fn ldv(&self) -> u32 {
        self.bk / 4 + 2
    }

    /// Whether the shader runs this configuration with subgroups of `subgroup_size`, for every
    /// weight type: [`CoopConfig::fits_for`] with f32 and with 16-bit weights.
    pub fn fits(&self, subgroup_size: u32) -> bool {
        self.fits_for(subgroup_size, WeightType::F32)
            && self.fits_for(subgroup_size, WeightType::F16)
    }

    /// Whether the shader runs this configuration with subgroups of `subgroup_size` on `dtype`
    /// weights: the tiling's own limits ([`CoopTile::fits`], but 1 to 8 16-byte prefetch slots
    /// per invocation of the X slice (f32 or f16) and of a float W slice at this K step), `bk`
    /// 32 or 64, `split` 1..=[`MAX_SPLIT`] and `stages` 1 or 2, each slice's stages within the
    /// shader's fixed arrays (2 x 128 rows of 40 halves: K step 64 takes at most 64 x 64 tiles
    /// with two stages).
    pub fn fits_for(&self, subgroup_size: u32, dtype: WeightType) -> bool {
        let t = &self.tile;
        let wg = t.subgroups() as usize * subgroup_size as usize;
        let per_row = self.bk as usize / 4;
        let x_row = if self.x_f16 { per_row / 2 } else { per_row };
        let w_row = match dtype {
            WeightType::F32 => Some(per_row),
            WeightType::F16 | WeightType::Bf16 => Some(per_row / 2),
            _ => None,
        };
        let slots_ok = |slots: usize| slots.is_multiple_of(wg) && (1..=8).contains(&(slots / wg));
        matches!(self.bk, 32 | 64)
            && (1..=MAX_SPLIT).contains(&self.split)
            && matches!(t.wm, 2 | 4)
            && matches!(t.wn, 2 | 4)
            && t.sgm > 0
            && t.sgn > 0
            && t.bm() <= 128
            && t.bn() <= 128
            && t.subgroups() <= 8
            && subgroup_size.is_power_of_two()
            && (4..=128).contains(&subgroup_size)
            && wg <= 1024
            && slots_ok(t.bm() * x_row)
            && w_row.is_none_or(|r| slots_ok(t.bn() * r))
            && matches!(self.stages, 1 | 2)
            && self.stages as usize * t.bm() * self.ldv() as usize <= ARRAY_VEC4
            && self.stages as usize * t.bn() * self.ldv() as usize <= ARRAY_VEC4
    }

    /// K steps of each split's share of `cols` (the last share may be shorter or empty).
    pub fn share_steps(&self, cols: usize) -> usize {
        cols.div_ceil(self.bk as usize)
            .div_ceil(self.split as usize)
    }

    /// Scratch a split launch over `rows` x `n` outputs needs: (partial bytes, counter bytes);
    /// (0, 0) without split.
    pub fn scratch_bytes(&self, rows: usize, n: usize) -> (u64, u64) {
        self.scratch_bytes_segments(&[rows], n)
    }

    /// [`CoopConfig::scratch_bytes`] of a launch over segments of these row counts
    /// ([`MatmulCoopGroup`]: each segment's rows are tiled on their own).
    pub fn scratch_bytes_segments(&self, rows: &[usize], n: usize) -> (u64, u64) {
        if self.split <= 1 {
            return (0, 0);
        }
        let tiles: u64 = rows.iter().map(|&r| self.tile.groups(r, n) as u64).sum();
        let per_tile = (self.tile.bm() * self.tile.bn()) as u64 * 4;
        (tiles * self.split as u64 * per_tile, tiles * 4)
    }
}

/// Split-K scratch: `part` holds the partial tiles ([`CoopConfig::scratch_bytes`]; any
/// contents), `counters` one u32 per output tile, zero before the first split dispatch that
/// uses them (each dispatch leaves them zero). Dispatches that share them must be ordered
/// (the runtime's recorder does: both are written).
#[derive(Clone, Copy, Debug)]
pub struct SplitScratch<B> {
    pub part: B,
    pub counters: B,
}

/// `Y[t, row_offset + r] (+)= sum_c X[t, c] W[r, c]` for `t < n` on cooperative matrices.
pub struct MatmulCoop<B> {
    pub w: B,
    pub x: B,
    pub y: B,
}

impl<B: KernelBuffer> MatmulCoop<B> {
    /// `n` tokens, `y_stride` the full output width; `subgroup_size` is the device's (the
    /// workgroup is `tile.subgroups()` subgroups of it). K steps of 32, no split.
    pub fn dispatch(
        self,
        s: &MatShape,
        n: usize,
        y_stride: usize,
        subgroup_size: u32,
        tile: CoopTile,
    ) -> Result<Dispatch<B>, Error> {
        if !tile.fits(subgroup_size) {
            return Err(shape_err(
                &MATMUL_COOP,
                format!("tiling {tile:?} with subgroups of {subgroup_size}"),
            ));
        }
        self.dispatch_with(
            s,
            n,
            y_stride,
            subgroup_size,
            &CoopConfig::plain(tile),
            None,
        )
    }

    /// [`MatmulCoop::dispatch`] with a launch configuration; `scratch` is required when
    /// `cfg.split > 1` (and ignored otherwise).
    pub fn dispatch_with(
        self,
        s: &MatShape,
        n: usize,
        y_stride: usize,
        subgroup_size: u32,
        cfg: &CoopConfig,
        scratch: Option<SplitScratch<B>>,
    ) -> Result<Dispatch<B>, Error> {
        MatmulCoopGroup {
            x: self.x,
            segments: vec![CoopSegment {
                w: self.w,
                y: self.y,
                shape: *s,
                y_stride,
            }],
            glu: None,
        }
        .dispatch_with(n, subgroup_size, cfg, scratch)
    }
}

/// One weight of a [`MatmulCoopGroup`]: `y[t, row_offset + r] (+)= sum_c X[t, c] w[r, c]`,
/// `y` rows `y_stride` long (`shape.accumulate` must agree across the group).
#[derive(Clone, Copy, Debug)]
pub struct CoopSegment<B> {
    pub w: B,
    pub y: B,
    pub shape: MatShape,
    pub y_stride: usize,
}

/// Up to [`MAX_SEGMENTS`] products of the same `X` with weights of one type and width in one
/// launch (q/k/v of a layer): the grid's workgroup columns cover the segments one after the
/// other, so a small weight's workgroups run beside the others' instead of after them.
pub struct MatmulCoopGroup<B> {
    pub x: B,
    pub segments: Vec<CoopSegment<B>>,
    /// The gated launch (GLU): two segments, gate and up, of one float type and the same rows;
    /// segment 0's `y` gets `act(X gate^T) * (X up^T)` and segment 1's `y` is not written.
    pub glu: Option<CoopGlu<B>>,
}

/// The gated epilogue of a [`MatmulCoopGroup`]: the activation of the gate, and optionally a
/// buffer for the output as f16 pairs (`to_f16`'s layout; then rows must be even, y_stride
/// equal to rows and row_offset 0).
#[derive(Clone, Copy, Debug)]
pub struct CoopGlu<B> {
    pub act: crate::activation::Activation,
    pub half: Option<B>,
}

/// Most weights in one [`MatmulCoopGroup`] launch.
pub const MAX_SEGMENTS: usize = 3;

/// `matmul_coop`'s push constants: [`MatmulParams`] of segment 0, then rows, row_offset and
/// y_stride of segments 1 and 2.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct CoopParams {
    first: MatmulParams,
    more: [[u32; 3]; 2],
}

impl<B: KernelBuffer> MatmulCoopGroup<B> {
    /// One launch over every segment (see [`MatmulCoop::dispatch_with`]); more than one segment
    /// needs a configuration other than [`CoopConfig::plain`].
    pub fn dispatch_with(
        self,
        n: usize,
        subgroup_size: u32,
        cfg: &CoopConfig,
        scratch: Option<SplitScratch<B>>,
    ) -> Result<Dispatch<B>, Error> {
        let k = &MATMUL_COOP;
        let tile = cfg.tile;
        let segs = &self.segments;
        let Some(first) = segs.first().copied() else {
            return Err(shape_err(k, "no segments"));
        };
        if segs.len() > MAX_SEGMENTS {
            return Err(shape_err(k, format!("{} segments", segs.len())));
        }
        if segs.len() > 1 && *cfg == CoopConfig::plain(tile) {
            return Err(shape_err(k, "segments need a configured launch"));
        }
        let s0 = first.shape;
        if !cfg.fits_for(subgroup_size, s0.dtype) {
            return Err(shape_err(
                k,
                format!("configuration {cfg:?} with subgroups of {subgroup_size}"),
            ));
        }
        let wg = tile.subgroups() * subgroup_size;
        let x_bytes = if cfg.x_f16 { 2 } else { 4 } * (n * s0.cols) as u64;
        to_u32(k, "n * cols", n * s0.cols)?;
        if cfg.x_f16 && !s0.cols.is_multiple_of(8) {
            return Err(shape_err(
                k,
                format!("f16 X needs cols % 8 == 0, not {}", s0.cols),
            ));
        }
        need(k, "x", &self.x, x_bytes)?;
        if let Some(g) = &self.glu {
            glu_check(k, segs, cfg, subgroup_size, g.half.is_some())?;
            if let Some(h) = &g.half {
                need(k, "yh", h, 2 * (n * s0.rows) as u64)?;
            }
        }
        let mut gx = 0usize;
        let mut rows = Vec::with_capacity(segs.len());
        let mut seg_params = [[0u32; 3]; MAX_SEGMENTS];
        for (i, sg) in segs.iter().enumerate() {
            let s = &sg.shape;
            if s.dtype != s0.dtype || s.cols != s0.cols || s.accumulate != s0.accumulate {
                return Err(shape_err(
                    k,
                    "segments differ in weight type, columns or accumulation",
                ));
            }
            check_weight(k, &sg.w, s)?;
            if s.row_offset + s.rows > sg.y_stride {
                return Err(shape_err(k, "part rows beyond y_stride"));
            }
            to_u32(k, "n * y_stride", n * sg.y_stride)?;
            need(k, "y", &sg.y, 4 * (n * sg.y_stride) as u64)?;
            gx += s.rows.div_ceil(tile.bn());
            rows.push(s.rows);
            seg_params[i] = [
                to_u32(k, "rows", s.rows)?,
                to_u32(k, "row_offset", s.row_offset)?,
                to_u32(k, "y_stride", sg.y_stride)?,
            ];
        }
        if self.glu.is_some() {
            // One grid column per BN interleaved gate and up rows.
            gx = (2 * s0.rows).div_ceil(tile.bn());
        }
        let gy = n.div_ceil(tile.bm());
        if n == 0 || gx > MAX_GROUPS_X as usize || gy > MAX_GROUPS_X as usize {
            return Err(shape_err(k, format!("grid {gx} x {gy} out of range")));
        }
        let (part, counters) = if cfg.split > 1 {
            let Some(sc) = scratch else {
                return Err(shape_err(k, "split-K without scratch buffers"));
            };
            let (pb, cb) = cfg.scratch_bytes_segments(&rows, n);
            need(k, "part", &sc.part, pb)?;
            need(k, "counters", &sc.counters, cb)?;
            to_u32(k, "partial elements", (pb / 4) as usize)?;
            (sc.part, sc.counters)
        } else {
            (first.y, first.y)
        };
        let p = CoopParams {
            first: MatmulParams {
                n: to_u32(k, "n", n)?,
                rows: seg_params[0][0],
                cols: to_u32(k, "cols", s0.cols)?,
                row_offset: seg_params[0][1],
                y_stride: seg_params[0][2],
                accumulate: s0.accumulate as u32,
            },
            more: [seg_params[1], seg_params[2]],
        };
        let (dtype, wvec) = match s0.dtype {
            WeightType::F32 => (0.0, s0.cols.is_multiple_of(4)),
            WeightType::F16 => (1.0, s0.cols.is_multiple_of(8)),
            WeightType::Bf16 => (2.0, s0.cols.is_multiple_of(8)),
            _ => (3.0, false),
        };
        let mut o = if s0.dtype.is_quantized() {
            crate::mat_quant::format_overrides(s0.dtype)
        } else {
            Overrides::new()
        };
        o = o
            .set("DTYPE", dtype)
            .set("WVEC", wvec as u32 as f64)
            .set("XVEC", s0.cols.is_multiple_of(4) as u32 as f64)
            .set("SG", subgroup_size as f64)
            .set("CM_WG", wg as f64)
            .set("CM_SGM", tile.sgm as f64)
            .set("CM_SGN", tile.sgn as f64)
            .set("WM", tile.wm as f64)
            .set("WN", tile.wn as f64);
        if *cfg != CoopConfig::plain(tile) {
            // (The original launch keeps the WGSL defaults: its pipeline is the same as before.)
            let ldv = cfg.ldv();
            // Quantized units of a W slice per invocation, when prefetched (1 or 2, even).
            let units = tile.bn() * cfg.bk as usize / 16;
            let qpre = match units.is_multiple_of(wg as usize) {
                true if cfg.prefetch_quant && units / wg as usize <= 2 => units / wg as usize,
                _ => 0,
            };
            o = o
                .set("QPRE", qpre as f64)
                .set("CM_BK", cfg.bk as f64)
                .set("SPLIT", cfg.split as f64)
                .set("CM_STAGES", cfg.stages as f64)
                .set("CM_LDV", ldv as f64)
                .set("CM_SA", (tile.bm() as u32 * ldv) as f64)
                .set("CM_SB", (tile.bn() as u32 * ldv) as f64)
                .set("XH", cfg.x_f16 as u32 as f64)
                .set("CM_DIRECT", cfg.direct as u32 as f64);
            if segs.len() > 1 {
                o = o.set("SEGS", segs.len() as f64);
            }
            if let Some(g) = &self.glu {
                let act = match g.act {
                    crate::activation::Activation::Silu => 1.0,
                    crate::activation::Activation::GeluTanh => 2.0,
                };
                o = o
                    .set("GLU", act)
                    .set("GLU_HALF", g.half.is_some() as u32 as f64);
            }
        }
        // Unused segment bindings repeat segment 0's buffers.
        let seg = |i: usize| segs.get(i).copied().unwrap_or(first);
        Ok(Dispatch::new(
            k,
            o,
            vec![
                first.w,
                self.x,
                first.y,
                part,
                counters,
                seg(1).w,
                seg(2).w,
                seg(1).y,
                seg(2).y,
                self.glu.and_then(|g| g.half).unwrap_or(first.y),
            ],
            &p,
            [gx as u32, gy as u32, cfg.split],
        ))
    }
}

/// A gated launch's requirements (see [`MatmulCoopGroup::glu`]).
fn glu_check<B: KernelBuffer>(
    k: &'static KernelSpec,
    segs: &[CoopSegment<B>],
    cfg: &CoopConfig,
    subgroup_size: u32,
    half: bool,
) -> Result<(), Error> {
    let [g, u] = segs else {
        return Err(shape_err(
            k,
            "a gated launch needs two segments, gate and up",
        ));
    };
    if g.shape.rows != u.shape.rows || g.shape.dtype.is_quantized() {
        return Err(shape_err(
            k,
            "a gated launch needs float gate and up weights of the same rows",
        ));
    }
    if cfg.split != 1 || cfg.direct || g.shape.accumulate || subgroup_size < 8 {
        return Err(shape_err(
            k,
            "a gated launch needs no split-K, no direct epilogue, no accumulation and \
             subgroups of at least 8",
        ));
    }
    if half && (g.shape.rows % 2 != 0 || g.y_stride != g.shape.rows || g.shape.row_offset != 0) {
        return Err(shape_err(
            k,
            "a gated launch's f16 copy needs even rows, y_stride = rows and row_offset 0",
        ));
    }
    Ok(())
}
