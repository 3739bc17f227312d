//! `shaders/matvec.wgsl`: `y = W x` for decode (f32 activations, F32/F16/BF16 weights; quantized
//! weights dispatch `shaders/mat_quant.wgsl` through the same binding).

use crate::sources::MATVEC as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides, WeightType};

const WG: u32 = 256;
const R: u32 = 2;

pub static MATVEC: KernelSpec = KernelSpec {
    name: "matvec",
    file: "matvec.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("w"), rd("x"), rw("y")],
    push_size: 16,
    exact_fp: false,
    glsl: None,
};

/// The 16-byte-load variant, chosen when each row is a whole number of vec4 words
/// ([`MatShape::vectorizable`]).
pub static MATVEC_VEC: KernelSpec = KernelSpec {
    name: "matvec_vec4",
    file: "matvec.wgsl",
    entry: "main_vec",
    source: SRC,
    bindings: &[rd("w"), rd("x"), rw("y")],
    push_size: 16,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatvecParams {
    pub rows: u32,
    pub cols: u32,
    pub row_offset: u32,
    pub accumulate: u32,
}

/// Shape of one weight part: `rows` rows of `cols`, written to `y[row_offset..row_offset + rows]`.
#[derive(Clone, Copy, Debug)]
pub struct MatShape {
    pub dtype: WeightType,
    pub rows: usize,
    pub cols: usize,
    /// First output row of this part (0 for an unsplit weight).
    pub row_offset: usize,
    /// Add into the output instead of overwriting it (fused residual add).
    pub accumulate: bool,
}

impl MatShape {
    /// Rows are whole 16-byte words (cols a multiple of 4 for f32, 8 for 16-bit types), so the
    /// vec4 matvec applies (quantized types have their own kernel: always false).
    pub fn vectorizable(&self) -> bool {
        let per_word = match self.dtype {
            WeightType::F32 => 4,
            WeightType::F16 | WeightType::Bf16 => 8,
            _ => return false,
        };
        self.cols.is_multiple_of(per_word)
    }
}

pub(crate) fn check_weight<B: KernelBuffer>(
    k: &'static KernelSpec,
    w: &B,
    s: &MatShape,
) -> Result<(), Error> {
    if s.rows == 0 || s.cols == 0 {
        return Err(shape_err(k, "empty matrix"));
    }
    let Some(row_bytes) = s.dtype.row_bytes(s.cols as u64) else {
        return Err(shape_err(
            k,
            format!(
                "{} rows need cols a multiple of {}, got {}",
                s.dtype.name(),
                s.dtype.block_size(),
                s.cols
            ),
        ));
    };
    if !s.dtype.is_quantized() && s.dtype != WeightType::F32 && !s.cols.is_multiple_of(2) {
        return Err(shape_err(
            k,
            format!("16-bit weights need even cols, got {}", s.cols),
        ));
    }
    let elems = (s.rows as u64) * (s.cols as u64);
    if elems > u32::MAX as u64 {
        return Err(shape_err(k, "weight part over 2^32 elements: split it"));
    }
    let bytes = (s.rows as u64) * row_bytes;
    if s.dtype.is_quantized() && bytes > u32::MAX as u64 - 16 {
        return Err(shape_err(k, "quantized weight part over 4 GiB: split it"));
    }
    need(k, "w", w, s.dtype.storage_bytes(elems))
}

/// `y[row_offset + r] (+)= sum_c W[r, c] x[c]`.
pub struct Matvec<B> {
    pub w: B,
    pub x: B,
    pub y: B,
}

impl<B: KernelBuffer> Matvec<B> {
    /// Uses [`MATVEC_VEC`] when the shape allows it, else [`MATVEC`]; quantized weights go to
    /// [`crate::mat_quant::MATVEC_QUANT`].
    pub fn dispatch(self, s: &MatShape) -> Result<Dispatch<B>, Error> {
        if s.dtype.is_quantized() {
            return crate::mat_quant::matvec(self, s);
        }
        let k = if s.vectorizable() {
            &MATVEC_VEC
        } else {
            &MATVEC
        };
        check_weight(k, &self.w, s)?;
        need(k, "x", &self.x, 4 * s.cols as u64)?;
        need(k, "y", &self.y, 4 * (s.row_offset + s.rows) as u64)?;
        let p = MatvecParams {
            rows: to_u32(k, "rows", s.rows)?,
            cols: to_u32(k, "cols", s.cols)?,
            row_offset: to_u32(k, "row_offset", s.row_offset)?,
            accumulate: s.accumulate as u32,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new()
                .set("WG", WG as f64)
                .set("R", R as f64)
                .set("DTYPE", s.dtype.code()),
            vec![self.w, self.x, self.y],
            &p,
            grid_for(k, (s.rows as u64).div_ceil(R as u64))?,
        ))
    }
}
