//! `shaders/glsl/matmul_cm2.comp`: `Y = X W^T` for prefill on workgroup-scope cooperative
//! matrices (VK_NV_cooperative_matrix2) for f16 weights and f16 X, f32 sums: the contract of
//! [`crate::matmul::Matmul`] (push constants, `row_offset`, `y_stride`, accumulate), plus the
//! gated form `act(X gate^T) * (X up^T)` in one launch. Tensor-addressed loads and stores take
//! every bound, so any n, rows and cols run. Q4_K weights run on their own module
//! ([`MATMUL_CM2_Q4_K`]), whose loads decode the GGUF blocks (no f16 copy); up to three f16
//! products of one X (q/k/v) share a launch on [`MATMUL_CM2_GROUP`] ([`MatmulCm2Group`]).

use crate::activation::Activation;
use crate::matmul::MatmulParams;
use crate::matvec::{MatShape, check_weight};
use crate::spec::{MAX_GROUPS_X, need, rd, rw, shape_err};
use crate::{Dispatch, Error, GlslKernel, KernelBuffer, KernelSpec, Overrides, WeightType};

const SPEC_IDS: &[(&str, u32)] = &[
    ("BM", 1),
    ("BN", 2),
    ("BK", 3),
    ("GLU", 4),
    ("TOKENS_FIRST", 5),
];

static GLSL: GlslKernel = GlslKernel {
    spirv: include_bytes!("../shaders/glsl/matmul_cm2.spv"),
    spec_ids: SPEC_IDS,
};

static GLSL_Q4_K: GlslKernel = GlslKernel {
    spirv: include_bytes!("../shaders/glsl/matmul_cm2_q4_k.spv"),
    spec_ids: SPEC_IDS,
};

pub static MATMUL_CM2: KernelSpec = KernelSpec {
    name: "matmul_cm2",
    file: "glsl/matmul_cm2.comp",
    entry: "main",
    source: "",
    bindings: &[rd("w"), rd("x"), rw("y"), rd("w1")],
    push_size: 24,
    exact_fp: false,
    glsl: Some(&GLSL),
};

/// [`MATMUL_CM2`] for Q4_K weights, decoded in the loads.
pub static MATMUL_CM2_Q4_K: KernelSpec = KernelSpec {
    name: "matmul_cm2_q4_k",
    file: "glsl/matmul_cm2_q4_k.comp",
    entry: "main",
    source: "",
    bindings: &[rd("w"), rd("x"), rw("y"), rd("w1")],
    push_size: 24,
    exact_fp: false,
    glsl: Some(&GLSL_Q4_K),
};

static GLSL_GROUP: GlslKernel = GlslKernel {
    spirv: include_bytes!("../shaders/glsl/matmul_cm2_group.spv"),
    spec_ids: SPEC_IDS,
};

/// [`MATMUL_CM2`] for up to three f16 weights of one X, each into its own output.
pub static MATMUL_CM2_GROUP: KernelSpec = KernelSpec {
    name: "matmul_cm2_group",
    file: "glsl/matmul_cm2_group.comp",
    entry: "main",
    source: "",
    bindings: &[
        rd("w"),
        rd("x"),
        rw("y"),
        rd("w1"),
        rd("w2"),
        rw("y1"),
        rw("y2"),
    ],
    push_size: 24,
    exact_fp: false,
    glsl: Some(&GLSL_GROUP),
};

/// Most products [`MatmulCm2Group`] takes.
pub const MAX_SEGMENTS: usize = 3;

/// Whether the kernel reads `dtype` weights as they are stored (f16, and Q4_K by decoding).
pub fn reads(dtype: WeightType) -> bool {
    matches!(dtype, WeightType::F16 | WeightType::Q4_K)
}

/// Invocations per workgroup (a literal in the shader).
pub const WG: u32 = 256;

/// A launch's tile: `bm` weight rows x `bn` tokens per workgroup, K walked `bk` at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    /// Workgroups walk the token tiles first: the launches sharing a weight tile run together,
    /// so it is read from memory about once instead of once per token tile.
    pub tokens_first: bool,
}

impl CmTile {
    /// 128 x 128, K step 64.
    pub const LARGE: CmTile = CmTile {
        bm: 128,
        bn: 128,
        bk: 64,
        tokens_first: false,
    };
    /// 64 x 64, K step 64: for grids the large tile leaves thin.
    pub const SMALL: CmTile = CmTile {
        bm: 64,
        bn: 64,
        bk: 64,
        tokens_first: false,
    };

    /// Whether the shader takes this tile: each side a multiple of 16 in 16..=256, `bk` 16, 32
    /// or 64, and the accumulator (`bm x bn` f32, two of them when gated) at most 128 values an
    /// invocation.
    pub fn fits(&self, gated: bool) -> bool {
        let side = |x: u32| x.is_multiple_of(16) && (16..=256).contains(&x);
        let per = (self.bm * self.bn * if gated { 2 } else { 1 }) / WG;
        side(self.bm) && side(self.bn) && matches!(self.bk, 16 | 32 | 64) && per <= 128
    }

    /// The tile for `rows` x `n`: [`CmTile::LARGE`] where its grid has at least `min_groups`
    /// workgroups, else [`CmTile::SMALL`] (gated launches too: two 128 x 128 accumulators
    /// measured faster than two of 64 x 128, docs/benchmarks.md).
    pub fn for_shape(rows: usize, n: usize, min_groups: usize) -> CmTile {
        if CmTile::LARGE.groups(rows, n) >= min_groups {
            CmTile::LARGE
        } else {
            CmTile::SMALL
        }
    }

    /// This tile with the workgroup order `tokens_first`.
    pub fn with_tokens_first(self, tokens_first: bool) -> CmTile {
        CmTile {
            tokens_first,
            ..self
        }
    }

    fn groups(&self, rows: usize, n: usize) -> usize {
        rows.div_ceil(self.bm as usize) * n.div_ceil(self.bn as usize)
    }
}

/// `Y[t, row_offset + r] (+)= sum_c X[t, c] W[r, c]` (f16 X; f16 or Q4_K W), or with `w1` the gated
/// `Y[t, r] = act(sum_c X[t, c] W[r, c]) * sum_c X[t, c] W1[r, c]`.
pub struct MatmulCm2<B> {
    pub w: B,
    /// f16 `[n, cols]`.
    pub x: B,
    pub y: B,
    /// The up weight of a gated launch (`None`: plain; `w` is then bound in its place).
    pub w1: Option<B>,
}

impl<B: KernelBuffer> MatmulCm2<B> {
    /// `n` tokens with tile `t`; `y_stride` the output width; `act` the gated launch's
    /// activation (required with `w1`, which must have `w`'s shape; no accumulate, part rows
    /// from 0).
    pub fn dispatch(
        self,
        s: &MatShape,
        n: usize,
        y_stride: usize,
        t: CmTile,
        act: Option<Activation>,
    ) -> Result<Dispatch<B>, Error> {
        let k = match s.dtype {
            WeightType::F16 => &MATMUL_CM2,
            WeightType::Q4_K => &MATMUL_CM2_Q4_K,
            _ => {
                return Err(shape_err(
                    &MATMUL_CM2,
                    format!("takes f16 or Q4_K weights, got {}", s.dtype.name()),
                ));
            }
        };
        check_weight(k, &self.w, s)?;
        let gated = self.w1.is_some();
        if gated != act.is_some() {
            return Err(shape_err(
                k,
                "a gated launch needs both w1 and its activation",
            ));
        }
        if gated && (s.accumulate || s.row_offset != 0) {
            return Err(shape_err(
                k,
                "a gated launch neither accumulates nor offsets rows",
            ));
        }
        if !t.fits(gated) {
            return Err(shape_err(k, format!("tile {t:?} does not fit")));
        }
        if s.row_offset + s.rows > y_stride {
            return Err(shape_err(k, "part rows beyond y_stride"));
        }
        if let Some(w1) = &self.w1 {
            check_weight(k, w1, s)?;
        }
        if !s.cols.is_multiple_of(8) {
            return Err(shape_err(
                k,
                format!("cols a multiple of 8, got {}", s.cols),
            ));
        }
        need(k, "x", &self.x, 2 * (n * s.cols) as u64)?;
        need(k, "y", &self.y, 4 * (n * y_stride) as u64)?;
        let gx = s.rows.div_ceil(t.bm as usize);
        let gy = n.div_ceil(t.bn as usize);
        if n == 0 || gx > MAX_GROUPS_X as usize || gy > MAX_GROUPS_X as usize {
            return Err(shape_err(k, format!("grid {gx} x {gy} out of range")));
        }
        let p = MatmulParams::new(k, s, n, y_stride)?;
        let glu = match act {
            None => 0,
            Some(Activation::Silu) => 1,
            Some(Activation::GeluTanh) => 2,
        };
        let o = Overrides::new()
            .set("BM", t.bm as f64)
            .set("BN", t.bn as f64)
            .set("BK", t.bk as f64)
            .set("GLU", glu as f64)
            .set("TOKENS_FIRST", u32::from(t.tokens_first) as f64);
        let w1 = self.w1.unwrap_or(self.w);
        Ok(Dispatch::new(
            k,
            o,
            vec![self.w, self.x, self.y, w1],
            &p,
            match t.tokens_first {
                true => [gy as u32, gx as u32, 1],
                false => [gx as u32, gy as u32, 1],
            },
        ))
    }
}

/// One product of a [`MatmulCm2Group`]: f16 `w` `[rows, cols]` into `y` `[n, rows]`.
pub struct Cm2Segment<B> {
    pub w: B,
    pub y: B,
    pub rows: usize,
}

/// The push constants of [`MATMUL_CM2_GROUP`].
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct GroupParams {
    n: u32,
    rows0: u32,
    cols: u32,
    rows1: u32,
    rows2: u32,
    unused: u32,
}

/// `Y_s[t, r] = sum_c X[t, c] W_s[r, c]` for each segment s (2 or 3, f16 weights of `cols`
/// columns) in one launch: the grid's row tiles are segment 0's, then 1's, then 2's.
pub struct MatmulCm2Group<B> {
    /// f16 `[n, cols]`.
    pub x: B,
    pub segments: Vec<Cm2Segment<B>>,
}

impl<B: KernelBuffer> MatmulCm2Group<B> {
    /// `n` tokens over `cols` columns with tile `t`.
    pub fn dispatch(self, cols: usize, n: usize, t: CmTile) -> Result<Dispatch<B>, Error> {
        let k = &MATMUL_CM2_GROUP;
        let segs = self.segments.len();
        if !(2..=MAX_SEGMENTS).contains(&segs) {
            return Err(shape_err(
                k,
                format!("2..={MAX_SEGMENTS} segments, got {segs}"),
            ));
        }
        if !t.fits(false) {
            return Err(shape_err(k, format!("tile {t:?} does not fit")));
        }
        if !cols.is_multiple_of(8) {
            return Err(shape_err(k, format!("cols a multiple of 8, got {cols}")));
        }
        need(k, "x", &self.x, 2 * (n * cols) as u64)?;
        let mut rows = [0u32; MAX_SEGMENTS];
        let mut gx = 0usize;
        for (i, s) in self.segments.iter().enumerate() {
            let shape = MatShape {
                dtype: WeightType::F16,
                rows: s.rows,
                cols,
                row_offset: 0,
                accumulate: false,
            };
            check_weight(k, &s.w, &shape)?;
            need(k, "y", &s.y, 4 * (n * s.rows) as u64)?;
            if s.rows == 0 {
                return Err(shape_err(k, format!("segment {i} has no rows")));
            }
            rows[i] = u32::try_from(s.rows)
                .map_err(|_| shape_err(k, format!("segment {i}: {} rows", s.rows)))?;
            gx += s.rows.div_ceil(t.bm as usize);
        }
        let gy = n.div_ceil(t.bn as usize);
        if n == 0 || gx > MAX_GROUPS_X as usize || gy > MAX_GROUPS_X as usize {
            return Err(shape_err(k, format!("grid {gx} x {gy} out of range")));
        }
        let p = GroupParams {
            n: n as u32,
            rows0: rows[0],
            cols: u32::try_from(cols).map_err(|_| shape_err(k, format!("{cols} cols")))?,
            rows1: rows[1],
            rows2: rows[2],
            unused: 0,
        };
        let o = Overrides::new()
            .set("BM", t.bm as f64)
            .set("BN", t.bn as f64)
            .set("BK", t.bk as f64)
            .set("GLU", 0.0)
            .set("TOKENS_FIRST", u32::from(t.tokens_first) as f64);
        // An absent third segment binds the first's buffers (never read or written).
        let s = &self.segments;
        let third = s.get(2).unwrap_or(&s[0]);
        let bufs = vec![s[0].w, self.x, s[0].y, s[1].w, third.w, s[1].y, third.y];
        Ok(Dispatch::new(
            k,
            o,
            bufs,
            &p,
            match t.tokens_first {
                true => [gy as u32, gx as u32, 1],
                false => [gx as u32, gy as u32, 1],
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_fit_the_accumulator_budget() {
        assert!(CmTile::LARGE.fits(false));
        assert!(CmTile::LARGE.fits(true));
        assert!(
            !CmTile {
                bm: 256,
                ..CmTile::LARGE
            }
            .fits(true)
        );
        assert!(
            CmTile {
                bn: 256,
                ..CmTile::LARGE
            }
            .fits(false)
        );
        assert!(CmTile::SMALL.fits(true));
        assert!(
            !CmTile {
                bk: 48,
                ..CmTile::SMALL
            }
            .fits(false)
        );
        assert!(
            !CmTile {
                bm: 24,
                ..CmTile::SMALL
            }
            .fits(false)
        );
        // 14336 rows x 512 tokens: 112 x 4 large tiles; 1024 rows: 8 x 4 < 96, so small.
        assert_eq!(CmTile::for_shape(14336, 512, 96), CmTile::LARGE);
        assert_eq!(CmTile::for_shape(4096, 512, 96), CmTile::LARGE);
        assert_eq!(CmTile::for_shape(1024, 512, 96), CmTile::SMALL);
    }
}
