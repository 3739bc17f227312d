//! `shaders/matmul_narrow.wgsl`: `Y = X W^T` of quantized weights for a few tokens (2..=64:
//! batched decode steps, short prompts) on cooperative matrices (VK_KHR_cooperative_matrix,
//! f16 x f16 -> f32, 16 x 16 x 16, subgroup scope). Same contract and precision as
//! [`crate::matmul_coop::MatmulCoop`]; built for the case where the product is a read of the
//! weights: a workgroup owns 64 rows and every token, stages each 256-element step of its rows'
//! blocks with coalesced loads a step ahead, and dequantizes from shared memory.
//!
//! Split-K ([`NarrowConfig::split`]) spreads short grids (4096-row projections: 64 workgroups)
//! over more workgroups; the last workgroup of each row tile sums the partials in split order.

use crate::matmul_coop::SplitScratch;
use crate::matvec::{MatShape, check_weight};
use crate::sources::MATMUL_NARROW as SRC;
use crate::spec::{MAX_GROUPS_X, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, WeightType};

const BINDINGS: &[crate::BindingSpec] = &[
    rd("w"),
    rd("x"),
    rw("y"),
    rw("part"),
    rw("counters"),
    rd("w4"),
];

/// Every weight type through the raw staging.
pub static MATMUL_NARROW: KernelSpec = KernelSpec {
    name: "matmul_narrow",
    file: "matmul_narrow.wgsl",
    entry: "main",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

/// Q4_K read straight into registers (subgroups of 32; half the shared memory).
pub static MATMUL_NARROW_Q4K: KernelSpec = KernelSpec {
    name: "matmul_narrow_q4k",
    file: "matmul_narrow.wgsl",
    entry: "main_q4k",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

/// Q6_K read straight into registers (subgroups of 32; half the shared memory).
pub static MATMUL_NARROW_Q6K: KernelSpec = KernelSpec {
    name: "matmul_narrow_q6k",
    file: "matmul_narrow.wgsl",
    entry: "main_q6k",
    source: SRC,
    bindings: BINDINGS,
    push_size: 32,
    exact_fp: false,
    glsl: None,
};

/// Most tokens one launch takes (four 16-token accumulator tiles per subgroup).
pub const MAX_N: usize = 64;

/// Weight rows per workgroup (4 subgroups of 16).
pub const ROWS_PER_GROUP: usize = 64;

/// Elements of K per staged step.
const STEP: usize = 256;

/// 32-bit words of the shader's raw staging array.
const RAW_WORDS: usize = 4416;

/// Largest split-K factor.
pub const MAX_SPLIT: u32 = 16;

/// The quantized types the kernel decodes (those of `quant_blocks.inc.wgsl`'s `dequant16`).
pub const TYPES: [WeightType; 12] = [
    WeightType::Q4_0,
    WeightType::Q4_1,
    WeightType::Q5_0,
    WeightType::Q5_1,
    WeightType::Q8_0,
    WeightType::Q2_K,
    WeightType::Q3_K,
    WeightType::Q4_K,
    WeightType::Q5_K,
    WeightType::Q6_K,
    WeightType::IQ4_NL,
    WeightType::IQ4_XS,
];

/// One launch: the split-K factor and the form of X.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NarrowConfig {
    /// 1..=[`MAX_SPLIT`] workgroups per row tile, each over a share of K's 256-element steps.
    pub split: u32,
    /// X holds f16, two per u32 word (`to_f16`), instead of f32.
    pub x_f16: bool,
    /// Q6_K rows straight into registers (`main_q6k`, where [`direct_q6k`] allows) instead of
    /// through the raw staging.
    pub q6k_direct: bool,
}

impl NarrowConfig {
    /// Scratch a launch over `rows` x `n` outputs needs: (partial bytes, counter bytes). Every
    /// launch stores its tiles' partials (the epilogue reads them back); counters only with
    /// split-K.
    pub fn scratch_bytes(&self, rows: usize, n: usize) -> (u64, u64) {
        let tiles = rows.div_ceil(ROWS_PER_GROUP) as u64;
        let per_tile = (ROWS_PER_GROUP * 16 * n.div_ceil(16).max(1)) as u64 * 4;
        let counters = if self.split > 1 { tiles * 4 } else { 0 };
        (tiles * self.split as u64 * per_tile, counters)
    }

    /// Split factor for `rows` on a GPU of `compute_units` multiprocessors: enough workgroups
    /// for `waves` workgroups per multiprocessor, at most one share per step of `cols`.
    pub fn auto_split(rows: usize, cols: usize, compute_units: u32, waves: u32) -> u32 {
        let groups = rows.div_ceil(ROWS_PER_GROUP).max(1) as u64;
        let want = (compute_units.max(1) as u64 * waves.max(1) as u64).div_ceil(groups);
        want.clamp(1, MAX_SPLIT as u64)
            .min(cols.div_ceil(STEP).max(1) as u64) as u32
    }
}

/// Staged words per row and whether rows and steps are 16-byte aligned (slots of 4 consecutive
/// words), for `dtype` rows of `cols` elements.
fn staging(dtype: WeightType, cols: usize) -> (usize, bool) {
    let step_bytes = STEP / dtype.block_size() * dtype.bytes() as usize;
    let row_bytes = cols / dtype.block_size() * dtype.bytes() as usize;
    if step_bytes.is_multiple_of(16) && row_bytes.is_multiple_of(16) {
        (step_bytes / 4, true)
    } else {
        (step_bytes.div_ceil(4) + 1, false)
    }
}

/// Whether Q4_K rows go straight from memory into registers (one invocation per row half: 128
/// invocations, subgroups of 32) instead of through the raw staging.
pub fn direct_q4k(dtype: WeightType, subgroup_size: u32) -> bool {
    dtype == WeightType::Q4_K && 4 * subgroup_size as usize == 2 * ROWS_PER_GROUP
}

/// Whether Q6_K rows can go straight into registers (as [`direct_q4k`]: 128 invocations).
pub fn direct_q6k(dtype: WeightType, subgroup_size: u32) -> bool {
    dtype == WeightType::Q6_K && 4 * subgroup_size as usize == 2 * ROWS_PER_GROUP
}

/// Whether the kernel takes `dtype` rows of `cols` elements with subgroups of `subgroup_size`:
/// one of [`TYPES`], whole blocks, a step's rows within the staging array, at most 9 register
/// slots per invocation.
pub fn supported(dtype: WeightType, cols: usize, subgroup_size: u32) -> bool {
    if !TYPES.contains(&dtype) || cols == 0 || !cols.is_multiple_of(dtype.block_size()) {
        return false;
    }
    if !subgroup_size.is_power_of_two() || !(8..=128).contains(&subgroup_size) {
        return false;
    }
    let (rw, _) = staging(dtype, cols);
    let slots = (ROWS_PER_GROUP * rw).div_ceil(16 * subgroup_size as usize);
    ROWS_PER_GROUP * rw <= RAW_WORDS && (1..=9).contains(&slots)
}

/// `Y[t, row_offset + r] (+)= sum_c X[t, c] W[r, c]` for `t < n <= 64`.
pub struct MatmulNarrow<B> {
    pub w: B,
    pub x: B,
    pub y: B,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct NarrowParams {
    n: u32,
    rows: u32,
    cols: u32,
    row_offset: u32,
    y_stride: u32,
    accumulate: u32,
    wwords: u32,
    pad: u32,
}

impl<B: KernelBuffer> MatmulNarrow<B> {
    /// `n` tokens (1..=[`MAX_N`]), `y_stride` the full output width; `scratch` sized by
    /// [`NarrowConfig::scratch_bytes`] (counters zero before the first split launch; each
    /// launch leaves them zero).
    pub fn dispatch(
        self,
        s: &MatShape,
        n: usize,
        y_stride: usize,
        subgroup_size: u32,
        cfg: &NarrowConfig,
        scratch: SplitScratch<B>,
    ) -> Result<Dispatch<B>, Error> {
        let k = if direct_q4k(s.dtype, subgroup_size) {
            &MATMUL_NARROW_Q4K
        } else if cfg.q6k_direct && direct_q6k(s.dtype, subgroup_size) {
            &MATMUL_NARROW_Q6K
        } else {
            &MATMUL_NARROW
        };
        if !supported(s.dtype, s.cols, subgroup_size) {
            return Err(shape_err(
                k,
                format!(
                    "{} rows of {} with subgroups of {subgroup_size}",
                    s.dtype.name(),
                    s.cols
                ),
            ));
        }
        if !(1..=MAX_N).contains(&n) || !(1..=MAX_SPLIT).contains(&cfg.split) {
            return Err(shape_err(k, format!("n {n}, split {}", cfg.split)));
        }
        check_weight(k, &self.w, s)?;
        if s.row_offset + s.rows > y_stride {
            return Err(shape_err(k, "part rows beyond y_stride"));
        }
        let x_bytes = if cfg.x_f16 { 2 } else { 4 } * (n * s.cols) as u64;
        need(k, "x", &self.x, x_bytes)?;
        to_u32(k, "n * y_stride", n * y_stride)?;
        to_u32(k, "n * cols", n * s.cols)?;
        need(k, "y", &self.y, 4 * (n * y_stride) as u64)?;
        let (pb, cb) = cfg.scratch_bytes(s.rows, n);
        need(k, "part", &scratch.part, pb)?;
        need(k, "counters", &scratch.counters, cb)?;
        to_u32(k, "partial elements", (pb / 4) as usize)?;
        let gx = s.rows.div_ceil(ROWS_PER_GROUP);
        if gx > MAX_GROUPS_X as usize {
            return Err(shape_err(k, format!("{gx} workgroups")));
        }
        let (rw, vec) = staging(s.dtype, s.cols);
        let nwg = 4 * subgroup_size as usize;
        let slots = (ROWS_PER_GROUP * rw).div_ceil(4 * nwg);
        let p = NarrowParams {
            n: n as u32,
            rows: to_u32(k, "rows", s.rows)?,
            cols: to_u32(k, "cols", s.cols)?,
            row_offset: to_u32(k, "row_offset", s.row_offset)?,
            y_stride: y_stride as u32,
            accumulate: s.accumulate as u32,
            wwords: to_u32(k, "weight words", (self.w.byte_len() / 4) as usize)?,
            pad: 0,
        };
        let o = crate::mat_quant::format_overrides(s.dtype)
            .set("SG", subgroup_size as f64)
            .set("NWG", nwg as f64)
            .set("MT", n.div_ceil(16) as f64)
            .set("RW", rw as f64)
            .set("RV", vec as u32 as f64)
            .set("NSLOT", slots as f64)
            .set("SPLIT", cfg.split as f64)
            .set("XH", cfg.x_f16 as u32 as f64);
        Ok(Dispatch::new(
            k,
            o,
            vec![
                self.w,
                self.x,
                self.y,
                scratch.part,
                scratch.counters,
                self.w,
            ],
            &p,
            [gx as u32, 1, cfg.split],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_of_each_type_fits() {
        for t in TYPES {
            let cols = 4096;
            assert!(supported(t, cols, 32), "{t:?}");
            let (rw, _) = staging(t, cols);
            assert!(ROWS_PER_GROUP * rw <= RAW_WORDS, "{t:?}");
        }
        // Q4_K and Q8_0 rows of whole steps are 16-byte aligned; Q6_K's 210-byte blocks are not.
        assert_eq!(staging(WeightType::Q4_K, 4096), (36, true));
        assert_eq!(staging(WeightType::Q8_0, 4096), (68, true));
        assert_eq!(staging(WeightType::Q6_K, 4096), (54, false));
        assert!(!supported(WeightType::F16, 4096, 32));
        assert!(!supported(WeightType::Q4_K, 4096 + 32, 32));
    }

    #[test]
    fn auto_split_fills_the_gpu() {
        // The runtime's rule (four workgroups per multiprocessor) with 132 of them: 4096 rows
        // make 64 row tiles -> 9 shares of 16 steps; 28672 rows 448 tiles -> 2.
        assert_eq!(NarrowConfig::auto_split(4096, 4096, 132, 4), 9);
        assert_eq!(NarrowConfig::auto_split(28672, 4096, 132, 4), 2);
        // The LM head's 2004 tiles stay unsplit; never more shares than steps.
        assert_eq!(NarrowConfig::auto_split(128256, 4096, 132, 4), 1);
        assert_eq!(NarrowConfig::auto_split(64, 512, 132, 4), 2);
    }
}
