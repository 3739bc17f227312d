//! Matvec/matmul micro-benchmark by timestamp queries: GB/s (weight bytes read, as stored: the
//! quantized blocks for llama.cpp formats) and GFLOP/s.

use vkllm_kernels::WeightType;

use crate::buffer::MemoryKind;
use crate::device::Device;
use crate::error::Result;
use crate::recorder::Recorder;
use crate::tensor::{MatmulKernel, Tensor};

/// One measured shape.
#[derive(Clone, Debug)]
pub struct BenchResult {
    /// "matvec", "matmul" (the kernel [`MatmulKernel::Auto`] picks), "matmul portable" or
    /// "matmul coop BMxBN".
    pub op: String,
    pub dtype: WeightType,
    pub rows: usize,
    pub cols: usize,
    /// Tokens (1 for matvec).
    pub n: usize,
    /// Median GPU time of one call (all parts), nanoseconds.
    pub ns: f64,
    pub gb_per_s: f64,
    pub gflop_per_s: f64,
}

impl BenchResult {
    /// A markdown table row: `| op | dtype | shape | us | GB/s | GFLOP/s |`.
    pub fn markdown_row(&self) -> String {
        format!(
            "| {} | {} | {}x{} (n={}) | {:.1} | {:.1} | {:.1} |",
            self.op,
            self.dtype.name(),
            self.rows,
            self.cols,
            self.n,
            self.ns / 1e3,
            self.gb_per_s,
            self.gflop_per_s
        )
    }
}

/// Header of [`BenchResult::markdown_row`].
pub const MARKDOWN_HEADER: &str =
    "| op | weights | shape | time (us) | GB/s | GFLOP/s |\n| --- | --- | --- | --- | --- | --- |";

/// Times `iters` back-to-back calls of `y = W x` (n = 1: matvec; else matmul) in one recording
/// and reports the median. Weights hold a constant pattern (time does not depend on values).
pub fn bench_matmul(
    dev: &Device,
    dtype: WeightType,
    rows: usize,
    cols: usize,
    n: usize,
    iters: u32,
) -> Result<BenchResult> {
    bench_matmul_with(dev, dtype, rows, cols, n, iters, MatmulKernel::Auto)
}

/// [`bench_matmul`] on a chosen matmul kernel (ignored for n = 1).
pub fn bench_matmul_with(
    dev: &Device,
    dtype: WeightType,
    rows: usize,
    cols: usize,
    n: usize,
    iters: u32,
    kernel: MatmulKernel,
) -> Result<BenchResult> {
    let w = Tensor::new(dev, "bench-w", dtype, rows, cols)?;
    let parts = w.parts.len() as u32;
    let x = dev.create_buffer("bench-x", 4 * (n * cols) as u64, MemoryKind::Device)?;
    let y = dev.create_buffer("bench-y", 4 * (n * rows) as u64, MemoryKind::Device)?;
    let iters = iters.max(1);
    let mut r = Recorder::with_timestamps(dev, iters * parts)?;
    // 0x3c003c00 is (1.0, 1.0) in f16, 1.0/2^7-ish in f32/bf16: finite everywhere (in quantized
    // blocks every f16 scale field reads 1.0 or a tiny subnormal).
    for p in &w.parts {
        r.fill(p.buffer.all(), 0x3c00_3c00)?;
    }
    r.fill(x.all(), 0x3c00_3c00)?;
    for _ in 0..iters {
        if n == 1 {
            r.matvec(&w, x.all(), y.all(), false)?;
        } else {
            r.matmul_with(&w, x.all(), n, y.all(), false, kernel)?;
        }
    }
    let rec = r.finish()?;
    // First submit warms caches and clocks; the second is measured.
    rec.submit()?;
    rec.submit()?;
    let t = rec.timings()?;
    let mut per_call: Vec<f64> = t
        .chunks(parts as usize)
        .map(|c| c.iter().map(|d| d.ns).sum())
        .collect();
    per_call.sort_by(|a, b| a.total_cmp(b));
    let ns = per_call[per_call.len() / 2].max(1.0);
    let bytes = dtype.storage_bytes((rows * cols) as u64) as f64 + 4.0 * (n * (rows + cols)) as f64;
    let flops = 2.0 * (rows * cols * n) as f64;
    Ok(BenchResult {
        op: match kernel {
            _ if n == 1 => "matvec".into(),
            MatmulKernel::Auto => "matmul".into(),
            MatmulKernel::Portable => "matmul portable".into(),
            MatmulKernel::Coop(t) => format!(
                "matmul coop {}x{} ({}x{} sg, {}x{} tiles)",
                t.bm(),
                t.bn(),
                t.sgm,
                t.sgn,
                t.wm,
                t.wn
            ),
        },
        dtype,
        rows,
        cols,
        n,
        ns,
        gb_per_s: bytes / ns,
        gflop_per_s: flops / ns,
    })
}
