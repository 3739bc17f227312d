//! Weight tensors: a `[rows, cols]` matrix in F32/F16/BF16, split by rows into parts that each
//! fit one storage-buffer range (128 MiB on lavapipe, 4 GiB on NVIDIA), and the matrix kernels
//! run over all parts.

use vkllm_kernels::WeightType;
use vkllm_kernels::embedding::{Embedding, EmbeddingShape};
use vkllm_kernels::matmul::Matmul;
use vkllm_kernels::matvec::{MatShape, Matvec};

use crate::Error;
use crate::buffer::{BufSlice, Buffer, MemoryKind};
use crate::device::Device;
use crate::error::Result;
use crate::recorder::Recorder;

/// One row range of a weight.
#[derive(Clone, Debug)]
pub struct TensorPart {
    pub buffer: Buffer,
    pub row_start: usize,
    pub rows: usize,
}

/// A row-major `[rows, cols]` weight on the device.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: WeightType,
    pub rows: usize,
    pub cols: usize,
    pub parts: Vec<TensorPart>,
}

impl Tensor {
    /// Allocates a weight, split so every part fits `dev.max_buffer_bytes()`.
    pub fn new(
        dev: &Device,
        label: &str,
        dtype: WeightType,
        rows: usize,
        cols: usize,
    ) -> Result<Self> {
        if rows == 0 || cols == 0 {
            return Err(Error::Shape(format!(
                "{label}: empty tensor [{rows}, {cols}]"
            )));
        }
        if dtype != WeightType::F32 && !cols.is_multiple_of(2) {
            return Err(Error::Shape(format!(
                "{label}: 16-bit rows must have an even length, got {cols}"
            )));
        }
        let row_bytes = dtype.storage_bytes(cols as u64);
        let max = dev.max_buffer_bytes();
        // Parts also stay under 2^32 elements (the kernels index with u32).
        let rows_per_part = ((max / row_bytes) as usize).min((u32::MAX as usize) / cols);
        if rows_per_part == 0 {
            return Err(Error::BufferRange {
                what: format!("{label}: one row"),
                len: row_bytes,
                max,
            });
        }
        let mut parts = Vec::new();
        let mut r = 0;
        while r < rows {
            let n = rows_per_part.min(rows - r);
            let buffer = dev.create_buffer(
                &format!("{label}[{r}..{}]", r + n),
                row_bytes * n as u64,
                MemoryKind::Device,
            )?;
            parts.push(TensorPart {
                buffer,
                row_start: r,
                rows: n,
            });
            r += n;
        }
        Ok(Tensor {
            dtype,
            rows,
            cols,
            parts,
        })
    }

    /// Uploads the whole weight from its packed bytes (`rows * cols` elements of `dtype`,
    /// little-endian, 16-bit types two per word as stored on disk).
    pub fn upload(&self, dev: &Device, bytes: &[u8]) -> Result<()> {
        let row_bytes = self.dtype.bytes() as usize * self.cols;
        if bytes.len() != row_bytes * self.rows {
            return Err(Error::Shape(format!(
                "tensor [{}, {}] {}: got {} bytes, need {}",
                self.rows,
                self.cols,
                self.dtype.name(),
                bytes.len(),
                row_bytes * self.rows
            )));
        }
        for p in &self.parts {
            let s = p.row_start * row_bytes;
            dev.upload(&p.buffer, 0, &bytes[s..s + p.rows * row_bytes])?;
        }
        Ok(())
    }

    /// A tensor holding `bytes` (see [`Tensor::upload`]).
    pub fn from_bytes(
        dev: &Device,
        label: &str,
        dtype: WeightType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<Self> {
        let t = Self::new(dev, label, dtype, rows, cols)?;
        t.upload(dev, bytes)?;
        Ok(t)
    }

    fn shape(&self, p: &TensorPart, accumulate: bool) -> MatShape {
        MatShape {
            dtype: self.dtype,
            rows: p.rows,
            cols: self.cols,
            row_offset: p.row_start,
            accumulate,
        }
    }
}

impl Recorder {
    /// `y (+)= W x` over every part of `w` (one dispatch per part).
    pub fn matvec(
        &mut self,
        w: &Tensor,
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        accumulate: bool,
    ) -> Result<()> {
        for p in &w.parts {
            let d = Matvec {
                w: p.buffer.all(),
                x,
                y,
            }
            .dispatch(&w.shape(p, accumulate))?;
            self.dispatch(d)?;
        }
        Ok(())
    }

    /// `Y[n, rows] (+)= X[n, cols] W^T` over every part of `w`.
    pub fn matmul(
        &mut self,
        w: &Tensor,
        x: BufSlice<'_>,
        n: usize,
        y: BufSlice<'_>,
        accumulate: bool,
    ) -> Result<()> {
        for p in &w.parts {
            let d = Matmul {
                w: p.buffer.all(),
                x,
                y,
            }
            .dispatch(&w.shape(p, accumulate), n, w.rows)?;
            self.dispatch(d)?;
        }
        Ok(())
    }

    /// `out[t] = table[ids[t]]` over every part of the `[vocab, dim]` table.
    pub fn embedding(
        &mut self,
        table: &Tensor,
        ids: BufSlice<'_>,
        n: usize,
        out: BufSlice<'_>,
    ) -> Result<()> {
        for p in &table.parts {
            let d = Embedding {
                table: p.buffer.all(),
                ids,
                out,
            }
            .dispatch(&EmbeddingShape {
                dtype: table.dtype,
                vocab: table.rows,
                dim: table.cols,
                n,
                row_start: p.row_start,
                part_rows: p.rows,
            })?;
            self.dispatch(d)?;
        }
        Ok(())
    }
}
