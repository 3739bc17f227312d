//! `shaders/embedding.wgsl`: token embedding gather.

use crate::sources::EMBEDDING as SRC;
use crate::spec::{MAX_GROUPS_X, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides, WeightType};

const WG: u32 = 256;

pub static EMBEDDING: KernelSpec = KernelSpec {
    name: "embedding",
    file: "embedding.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("table"), rd("ids"), rw("out")],
    push_size: 20,
    exact_fp: false,
    glsl: None,
};

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct EmbeddingParams {
    pub n: u32,
    pub dim: u32,
    pub vocab: u32,
    pub row_start: u32,
    pub part_rows: u32,
}

/// `out[t, :] = table[ids[t], :]` (as f32) for `t < n`.
///
/// `table` holds rows `[row_start, row_start + part_rows)` of a `[vocab, dim]` table in `dtype`
/// (a whole table is one part with `row_start = 0`); tokens whose id lies in another part are
/// left untouched, so a split table takes one dispatch per part.
pub struct Embedding<B> {
    pub table: B,
    pub ids: B,
    pub out: B,
}

/// Shape of an embedding dispatch.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddingShape {
    pub dtype: WeightType,
    pub vocab: usize,
    pub dim: usize,
    pub n: usize,
    pub row_start: usize,
    pub part_rows: usize,
}

impl<B: KernelBuffer> Embedding<B> {
    /// Quantized tables go to [`crate::mat_quant::EMBEDDING_QUANT`].
    pub fn dispatch(self, s: &EmbeddingShape) -> Result<Dispatch<B>, Error> {
        if s.dtype.is_quantized() {
            return crate::mat_quant::embedding(self, s);
        }
        let k = &EMBEDDING;
        if s.dtype != WeightType::F32 && !s.dim.is_multiple_of(2) {
            return Err(shape_err(
                k,
                format!("16-bit table needs an even dim, got {}", s.dim),
            ));
        }
        if s.n > MAX_GROUPS_X as usize {
            return Err(shape_err(
                k,
                format!("{} tokens > {MAX_GROUPS_X} per dispatch", s.n),
            ));
        }
        if s.row_start + s.part_rows > s.vocab {
            return Err(shape_err(k, "part rows beyond vocab"));
        }
        let elems = (s.part_rows as u64) * (s.dim as u64);
        need(k, "table", &self.table, s.dtype.storage_bytes(elems))?;
        need(k, "ids", &self.ids, 4 * s.n as u64)?;
        need(k, "out", &self.out, 4 * (s.n * s.dim) as u64)?;
        if elems > u32::MAX as u64 {
            return Err(shape_err(k, "table part over 2^32 elements"));
        }
        let p = EmbeddingParams {
            n: to_u32(k, "n", s.n)?,
            dim: to_u32(k, "dim", s.dim)?,
            vocab: to_u32(k, "vocab", s.vocab)?,
            row_start: to_u32(k, "row_start", s.row_start)?,
            part_rows: to_u32(k, "part_rows", s.part_rows)?,
        };
        let gx = (s.dim as u32).div_ceil(WG);
        if gx == 0 || s.n == 0 {
            return Err(shape_err(k, "empty dispatch"));
        }
        Ok(Dispatch::new(
            k,
            Overrides::new()
                .set("WG", WG as f64)
                .set("DTYPE", s.dtype.code()),
            vec![self.table, self.ids, self.out],
            &p,
            [gx, s.n as u32, 1],
        ))
    }
}
