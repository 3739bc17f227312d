//! Matvec/matmul micro-benchmark by timestamp queries: GB/s (weight bytes read, as stored: the
//! quantized blocks for llama.cpp formats) and GFLOP/s; the fused matvec variants
//! ([`bench_matvec`]) and the copy roof ([`bench_copy`]).

use vkllm_kernels::WeightType;
use vkllm_kernels::matvec_fused::{Epilogue, GatedAct, MatvecImpl, MatvecTuning, NormPrologue};

use crate::buffer::MemoryKind;
use crate::device::Device;
use crate::error::Result;
use crate::recorder::{DispatchTiming, Recorder, Recording};
use crate::tensor::{MatmulKernel, MatvecPlan, Tensor};

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
    bench_matmul_with(dev, dtype, rows, cols, n, iters, MatmulKernel::Auto, false)
}

/// [`bench_matmul`] on a chosen matmul kernel (ignored for n = 1), with `accumulate`: each
/// product adds into Y (`Y += X W^T`, as the residual projections do) instead of overwriting it.
#[allow(clippy::too_many_arguments)]
pub fn bench_matmul_with(
    dev: &Device,
    dtype: WeightType,
    rows: usize,
    cols: usize,
    n: usize,
    iters: u32,
    kernel: MatmulKernel,
    accumulate: bool,
) -> Result<BenchResult> {
    let w = Tensor::new(dev, "bench-w", dtype, rows, cols)?;
    let parts = w.parts.len() as u32;
    let x = dev.create_buffer("bench-x", 4 * (n * cols) as u64, MemoryKind::Device)?;
    let y = dev.create_buffer("bench-y", 4 * (n * rows) as u64, MemoryKind::Device)?;
    let iters = iters.max(1);
    // Per call: a dispatch per part, or an f16 weight copy and the product; and to_f16 once.
    let mut r = Recorder::with_timestamps(dev, iters * (parts + 1) + 1)?;
    // 0x3c003c00 is (1.0, 1.0) in f16, 1.0/2^7-ish in f32/bf16: finite everywhere (in quantized
    // blocks every f16 scale field reads 1.0 or a tiny subnormal).
    for p in &w.parts {
        r.fill(p.buffer.all(), 0x3c00_3c00)?;
    }
    r.fill(x.all(), 0x3c00_3c00)?;
    if accumulate {
        r.fill(y.all(), 0)?;
    }
    for _ in 0..iters {
        if n == 1 {
            r.matvec(&w, x.all(), y.all(), accumulate)?;
        } else {
            r.matmul_with(&w, x.all(), n, y.all(), accumulate, kernel)?;
        }
    }
    let rec = r.finish()?;
    let mut per_call = Vec::new();
    for t in warm_then_time(&rec)? {
        // The f16 copy of X (`to_f16`, recorded once: every call shares it) is not timed; every
        // call records the same dispatches (one per part, or a weight's f16 copy and the
        // product: coop_dequant.rs).
        let mm: Vec<f64> = t
            .iter()
            .filter(|d| d.label != vkllm_kernels::to_f16::TO_F16.name)
            .map(|d| d.ns)
            .collect();
        let per = (mm.len() / iters as usize).max(1);
        per_call.extend(mm.chunks(per).map(|c| c.iter().sum::<f64>()));
    }
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
            MatmulKernel::Cm2(t) => format!(
                "matmul cm2 {}x{}x{}{}",
                t.bm,
                t.bn,
                t.bk,
                if t.tokens_first { " tokens first" } else { "" }
            ),
            MatmulKernel::Narrow(c) => format!(
                "matmul narrow split {}{}",
                c.split,
                if c.x_f16 { " x16" } else { "" }
            ),
            MatmulKernel::CoopWith(c) => format!(
                "matmul coop {}x{} ({}x{} sg, {}x{} tiles) bk {} split {} stages {}",
                c.tile.bm(),
                c.tile.bn(),
                c.tile.sgm,
                c.tile.sgn,
                c.tile.wm,
                c.tile.wn,
                c.bk,
                c.split,
                c.stages
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

/// Submits `rec` until [`WARM_UP`] has passed (at least twice: caches, and clocks that drop
/// while the host compiles the next pipeline), then [`MEASURED_SUBMITS`] more, and returns the
/// timings of each measured submit.
fn warm_then_time(rec: &Recording) -> Result<Vec<Vec<DispatchTiming>>> {
    let start = std::time::Instant::now();
    let mut n = 0;
    while n < 2 || start.elapsed() < WARM_UP {
        rec.submit()?;
        n += 1;
    }
    (0..MEASURED_SUBMITS)
        .map(|_| {
            rec.submit()?;
            rec.timings()
        })
        .collect()
}

/// Warm-up time before a micro-benchmark is measured.
pub const WARM_UP: std::time::Duration = std::time::Duration::from_millis(200);

/// Measured submits per micro-benchmark (the median is over all their calls).
pub const MEASURED_SUBMITS: usize = 3;

/// The fused shape a [`bench_matvec`] measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatvecFusion {
    /// `y = W x`.
    Plain,
    /// RMSNorm prologue, then `y = W x`.
    Norm,
    /// q, k, v (rows split 2 : 1 : 1) into one output, with the norm: one dispatch.
    Qkv,
    /// Gate and up (`rows` rows each), silu, with the norm: one dispatch.
    GateUp,
}

impl MatvecFusion {
    pub fn name(self) -> &'static str {
        match self {
            MatvecFusion::Plain => "plain",
            MatvecFusion::Norm => "norm",
            MatvecFusion::Qkv => "qkv",
            MatvecFusion::GateUp => "gate_up",
        }
    }
}

/// One matvec benchmark: `n` columns of a `[rows, cols]` weight, fused as `fusion`.
#[derive(Clone, Copy, Debug)]
pub struct MatvecBench {
    pub dtype: WeightType,
    pub rows: usize,
    pub cols: usize,
    pub n: usize,
    pub imp: MatvecImpl,
    pub fusion: MatvecFusion,
    pub tuning: Option<MatvecTuning>,
    pub iters: u32,
    /// Weight copies the dispatches take in turn (1: the same weights every time). More copies
    /// than fit the GPU's last-level cache time the weights streamed from memory, as in a decode
    /// step, instead of served from the cache across repeats.
    pub copies: usize,
    /// Time only each call's last dispatch: the product without the `quantize_act_q8` launch
    /// recorded before it on quantized x (tuning `q8a_xg1`).
    pub last_only: bool,
}

/// Most weight copies [`cold_copies`] asks for (small matrices: each copy is an allocation).
pub const MAX_COLD_COPIES: usize = 64;

/// Copies of a `weight_bytes` weight that [`MatvecBench::copies`] needs so that the set passes
/// `cache_bytes` twice over (1 when one copy already does; at most [`MAX_COLD_COPIES`]).
pub fn cold_copies(weight_bytes: u64, cache_bytes: u64) -> usize {
    let n = cache_bytes
        .saturating_mul(2)
        .div_ceil(weight_bytes.max(1))
        .max(1);
    n.min(MAX_COLD_COPIES as u64) as usize
}

/// Times `b.iters` back-to-back dispatches (median) of the fast or the reference matvec.
/// `gb_per_s` counts the bytes read and written once (weights as stored, x, norm weight, y);
/// the reference kernel takes only plain single-column shapes.
pub fn bench_matvec(dev: &Device, b: &MatvecBench) -> Result<BenchResult> {
    let plain = b.fusion == MatvecFusion::Plain && b.n == 1;
    if b.imp == MatvecImpl::Reference && !plain {
        return Err(crate::Error::Shape(
            "the reference matvec takes one column and no fusion".into(),
        ));
    }
    let (cols, n) = (b.cols, b.n);
    let part_rows: Vec<usize> = match b.fusion {
        MatvecFusion::Plain | MatvecFusion::Norm => vec![b.rows],
        MatvecFusion::Qkv => {
            let q = b.rows / 2;
            let k = b.rows / 4;
            vec![q, k, b.rows - q - k]
        }
        MatvecFusion::GateUp => vec![b.rows, b.rows],
    };
    let copies: Vec<Vec<Tensor>> = (0..b.copies.max(1))
        .map(|_| {
            part_rows
                .iter()
                .map(|&r| Tensor::new(dev, "bench-w", b.dtype, r, cols))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    let ws = &copies[0];
    let out_rows = if b.fusion == MatvecFusion::GateUp {
        b.rows
    } else {
        part_rows.iter().sum()
    };
    let x = dev.create_buffer("bench-x", 4 * (n * cols) as u64, MemoryKind::Device)?;
    let nw = dev.create_buffer("bench-norm-w", 4 * cols as u64, MemoryKind::Device)?;
    let y = dev.create_buffer("bench-y", 4 * (n * out_rows) as u64, MemoryKind::Device)?;
    // A launch shape is the team kernel's; else the device's layout.
    let layout = match b.tuning {
        Some(_) => vkllm_kernels::matvec_rows::MatvecLayout::Teams,
        None => crate::tensor::default_matvec_layout(dev),
    };
    let dispatches: u32 = if ws.len() == 1 {
        ws[0].parts.len() as u32
    } else if layout == vkllm_kernels::matvec_rows::MatvecLayout::Rows
        && b.fusion != MatvecFusion::GateUp
    {
        // The rows kernel runs one dispatch per part.
        ws.len() as u32
    } else {
        1
    };
    let iters = b.iters.max(1);
    // Twice the products: room for a quantization launched before each.
    let mut r = Recorder::with_timestamps(dev, 2 * iters * dispatches)?;
    // See `bench_matmul` for the fill pattern.
    for w in copies.iter().flatten() {
        for p in &w.parts {
            r.fill(p.buffer.all(), 0x3c00_3c00)?;
        }
    }
    r.fill(x.all(), 0x3c00_3c00)?;
    r.fill(nw.all(), 0x3c00_3c00)?;
    let mut offsets = vec![0usize];
    for &pr in &part_rows[..part_rows.len() - 1] {
        offsets.push(offsets.last().copied().unwrap_or(0) + pr);
    }
    if b.fusion == MatvecFusion::GateUp {
        offsets = vec![0, 0];
    }
    let norm = NormPrologue {
        eps: 1e-6,
        offset: 0.0,
    };
    let plan = MatvecPlan {
        n_cols: n,
        y_stride: out_rows,
        y_offsets: &offsets,
        norm: (b.fusion != MatvecFusion::Plain).then_some((nw.all(), norm)),
        epilogue: if b.fusion == MatvecFusion::GateUp {
            Epilogue::Gated {
                act: GatedAct::Silu,
            }
        } else {
            Epilogue::Store
        },
        tuning: b.tuning,
        layout: Some(layout),
        next_norm: None,
    };
    for i in 0..iters as usize {
        let ws = &copies[i % copies.len()];
        if b.imp == MatvecImpl::Reference {
            r.matvec_impl(MatvecImpl::Reference, &ws[0], x.all(), y.all(), false)?;
        } else {
            let refs: Vec<&Tensor> = ws.iter().collect();
            r.matvec_fused_with(b.imp, &refs, x.all(), y.all(), &plan)?;
        }
    }
    let rec = r.finish()?;
    let mut per_call = Vec::new();
    for t in warm_then_time(&rec)? {
        // Dispatches per call as recorded (a product on quantized x adds its quantization).
        let per = (t.len() / iters as usize).max(dispatches as usize);
        per_call.extend(t.chunks(per).map(|c| {
            if b.last_only {
                c.last().map_or(0.0, |d| d.ns)
            } else {
                c.iter().map(|d| d.ns).sum::<f64>()
            }
        }));
    }
    per_call.sort_by(|a, b| a.total_cmp(b));
    let ns = per_call[per_call.len() / 2].max(1.0);
    let weights: u64 = part_rows
        .iter()
        .map(|&pr| b.dtype.storage_bytes((pr * cols) as u64))
        .sum();
    let norm_bytes = if b.fusion == MatvecFusion::Plain {
        0
    } else {
        4 * cols
    };
    let bytes = weights as f64 + 4.0 * (n * (cols + out_rows)) as f64 + norm_bytes as f64;
    let flops = 2.0 * (part_rows.iter().sum::<usize>() * cols * n) as f64;
    Ok(BenchResult {
        op: format!(
            "{}{}",
            match (b.imp, b.fusion) {
                (MatvecImpl::Reference, _) => "matvec-ref",
                (_, MatvecFusion::Plain) => "matvec",
                (_, MatvecFusion::Norm) => "norm+matvec",
                (_, MatvecFusion::Qkv) => "norm+qkv",
                (_, MatvecFusion::GateUp) => "norm+gate_up+silu",
            },
            if b.imp == MatvecImpl::Int8 {
                " int8"
            } else {
                ""
            }
        ),
        dtype: b.dtype,
        rows: b.rows,
        cols,
        n,
        ns,
        gb_per_s: bytes / ns,
        gflop_per_s: flops / ns,
    })
}

/// Times `iters` back-to-back `dequant_f16` calls (a quantized `rows` x `cols` weight written
/// as f16, the copy prefill products may multiply: coop_dequant.rs) and reports the median;
/// GB/s counts the blocks read and the halves written.
pub fn bench_dequant(
    dev: &Device,
    dtype: WeightType,
    rows: usize,
    cols: usize,
    iters: u32,
) -> Result<BenchResult> {
    use vkllm_kernels::dequant_f16::{DequantF16, f16_bytes};
    let w = Tensor::new(dev, "bench-w", dtype, rows, cols)?;
    let Some(p) = w.parts.first().filter(|_| w.parts.len() == 1) else {
        return Err(crate::Error::Recording(
            "dequant_f16 bench: the weight is larger than one storage binding",
        ));
    };
    let out = dev.create_buffer("bench-f16", f16_bytes(rows, cols), MemoryKind::Device)?;
    let iters = iters.max(1);
    let mut r = Recorder::with_timestamps(dev, iters)?;
    r.fill(p.buffer.all(), 0x3c00_3c00)?;
    for _ in 0..iters {
        r.dispatch(
            DequantF16 {
                w: p.buffer.all(),
                out: out.all(),
            }
            .dispatch(dtype, rows, cols)?,
        )?;
    }
    let ns = median_dispatch_ns(&r.finish()?)?;
    let bytes = dtype.storage_bytes((rows * cols) as u64) + f16_bytes(rows, cols);
    Ok(BenchResult {
        op: "dequant_f16".into(),
        dtype,
        rows,
        cols,
        n: 0,
        ns,
        gb_per_s: bytes as f64 / ns,
        gflop_per_s: 0.0,
    })
}

/// GB/s of the `copy` kernel over `bytes` bytes (read + write counted): the bandwidth roof the
/// matvec figures compare with.
pub fn bench_copy(dev: &Device, bytes: u64, iters: u32) -> Result<f64> {
    let n = (bytes / 4) as usize;
    let a = dev.create_buffer("bench-copy-a", 4 * n as u64, MemoryKind::Device)?;
    let o = dev.create_buffer("bench-copy-out", 4 * n as u64, MemoryKind::Device)?;
    let iters = iters.max(1);
    let mut r = Recorder::with_timestamps(dev, iters)?;
    r.fill(a.all(), 0)?;
    for _ in 0..iters {
        r.dispatch(
            vkllm_kernels::elementwise::Copy {
                a: a.all(),
                out: o.all(),
            }
            .dispatch(n)?,
        )?;
    }
    Ok(8.0 * n as f64 / median_dispatch_ns(&r.finish()?)?)
}

/// The median GPU time of `rec`'s dispatches over `warm_then_time`'s submits (ns, >= 1).
pub fn median_dispatch_ns(rec: &Recording) -> Result<f64> {
    let mut t: Vec<f64> = warm_then_time(rec)?
        .iter()
        .flatten()
        .map(|d| d.ns)
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    Ok(t[t.len() / 2].max(1.0))
}

#[cfg(test)]
mod tests {
    use super::{MAX_COLD_COPIES, cold_copies};

    #[test]
    fn cold_copies_pass_the_cache_twice_within_the_cap() {
        let mib = 1u64 << 20;
        // 33 MiB weights past a 50 MiB cache twice: 100 / 33 -> 4 copies.
        assert_eq!(cold_copies(33 * mib, 50 * mib), 4);
        assert_eq!(cold_copies(100 * mib, 50 * mib), 1);
        assert_eq!(cold_copies(200 * mib, 50 * mib), 1);
        assert_eq!(cold_copies(1024, 50 * mib), MAX_COLD_COPIES);
        assert_eq!(cold_copies(0, u64::MAX), MAX_COLD_COPIES);
        assert_eq!(cold_copies(mib, 0), 1);
    }
}
