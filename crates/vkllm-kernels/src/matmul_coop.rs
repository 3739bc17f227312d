//! `shaders/matmul_coop.wgsl`: `Y = X W^T` for prefill on cooperative matrices
//! (VK_KHR_cooperative_matrix, f16 x f16 -> f32, 16 x 16 x 16, subgroup scope), for every
//! weight type (F32/BF16 rounded to f16 and quantized blocks dequantized to f16 in shared
//! memory). Same contract as [`crate::matmul::Matmul`]; the runtime picks it only on devices
//! that enable the cooperative-matrix feature with that shape.

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
    bindings: &[rd("w"), rd("x"), rw("y")],
    push_size: 24,
    exact_fp: false,
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
/// subgroup scratch tiles of 16 x 16 f32, whatever the tiling (48 KiB).
pub const SHARED_BYTES: u32 = 2 * 2 * 128 * 40 * 2 + 8 * 256 * 4;

/// `Y[t, row_offset + r] (+)= sum_c X[t, c] W[r, c]` for `t < n` on cooperative matrices.
pub struct MatmulCoop<B> {
    pub w: B,
    pub x: B,
    pub y: B,
}

impl<B: KernelBuffer> MatmulCoop<B> {
    /// `n` tokens, `y_stride` the full output width; `subgroup_size` is the device's (the
    /// workgroup is `tile.subgroups()` subgroups of it).
    pub fn dispatch(
        self,
        s: &MatShape,
        n: usize,
        y_stride: usize,
        subgroup_size: u32,
        tile: CoopTile,
    ) -> Result<Dispatch<B>, Error> {
        let k = &MATMUL_COOP;
        check_weight(k, &self.w, s)?;
        if !tile.fits(subgroup_size) {
            return Err(shape_err(
                k,
                format!("tiling {tile:?} with subgroups of {subgroup_size}"),
            ));
        }
        let wg = tile.subgroups() * subgroup_size;
        if s.row_offset + s.rows > y_stride {
            return Err(shape_err(k, "part rows beyond y_stride"));
        }
        to_u32(k, "n * cols", n * s.cols)?;
        to_u32(k, "n * y_stride", n * y_stride)?;
        need(k, "x", &self.x, 4 * (n * s.cols) as u64)?;
        need(k, "y", &self.y, 4 * (n * y_stride) as u64)?;
        let gx = s.rows.div_ceil(tile.bn());
        let gy = n.div_ceil(tile.bm());
        if n == 0 || gx > MAX_GROUPS_X as usize || gy > MAX_GROUPS_X as usize {
            return Err(shape_err(k, format!("grid {gx} x {gy} out of range")));
        }
        let p = MatmulParams {
            n: to_u32(k, "n", n)?,
            rows: to_u32(k, "rows", s.rows)?,
            cols: to_u32(k, "cols", s.cols)?,
            row_offset: to_u32(k, "row_offset", s.row_offset)?,
            y_stride: to_u32(k, "y_stride", y_stride)?,
            accumulate: s.accumulate as u32,
        };
        let (dtype, wvec) = match s.dtype {
            WeightType::F32 => (0.0, s.cols.is_multiple_of(4)),
            WeightType::F16 => (1.0, s.cols.is_multiple_of(8)),
            WeightType::Bf16 => (2.0, s.cols.is_multiple_of(8)),
            _ => (3.0, false),
        };
        let mut o = if s.dtype.is_quantized() {
            crate::mat_quant::format_overrides(s.dtype)
        } else {
            Overrides::new()
        };
        o = o
            .set("DTYPE", dtype)
            .set("WVEC", wvec as u32 as f64)
            .set("XVEC", s.cols.is_multiple_of(4) as u32 as f64)
            .set("SG", subgroup_size as f64)
            .set("CM_WG", wg as f64)
            .set("CM_SGM", tile.sgm as f64)
            .set("CM_SGN", tile.sgn as f64)
            .set("WM", tile.wm as f64)
            .set("WN", tile.wn as f64);
        Ok(Dispatch::new(
            k,
            o,
            vec![self.w, self.x, self.y],
            &p,
            [gx as u32, gy as u32, 1],
        ))
    }
}
