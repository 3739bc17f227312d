//! The quantized matrix-vector reference: the oracle GPU quantized matvec kernels are tested
//! against.

use super::{QuantType, dequantize_row};
use crate::CpuError;
use crate::dot::dot;
use crate::threads::threads_for;

/// `y = W x` with `W: [rows, cols]` stored row by row in `ty`'s blocks (`w_bytes`).
///
/// Each row is dequantized exactly ([`dequantize_row`]) and `y[r]` is [`crate::dot`] of it with
/// `x`, so the result is bit-identical to [`crate::matvec`] on the dequantized matrix, whatever
/// the thread count (rows are split between scoped threads above ~1M MACs, as `matvec`).
///
/// # Errors
/// [`CpuError::QuantRowLength`] if `cols` is not a whole number of blocks,
/// [`CpuError::QuantShapeOverflow`] if the matrix size overflows `usize`,
/// [`CpuError::QuantByteLength`] if `w_bytes` is not exactly `rows` rows.
///
/// # Panics
/// If `x.len() != cols` or `y.len() != rows` (a programming error).
pub fn matvec_quant(
    ty: QuantType,
    w_bytes: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), CpuError> {
    let work = rows.saturating_mul(cols);
    matvec_quant_threads(ty, w_bytes, rows, cols, x, y, threads_for(work, rows))
}

/// [`matvec_quant`] on exactly `threads` threads (at least one).
pub(crate) fn matvec_quant_threads(
    ty: QuantType,
    w_bytes: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
    threads: usize,
) -> Result<(), CpuError> {
    let row_bytes = ty.row_bytes(cols)?;
    let (Some(expected), Some(elements)) = (rows.checked_mul(row_bytes), rows.checked_mul(cols))
    else {
        return Err(CpuError::QuantShapeOverflow { ty, rows, cols });
    };
    if w_bytes.len() != expected {
        return Err(CpuError::QuantByteLength {
            ty,
            elements,
            expected,
            got: w_bytes.len(),
        });
    }
    assert_eq!(x.len(), cols, "matvec_quant: x is not [cols]");
    assert_eq!(y.len(), rows, "matvec_quant: y is not [rows]");
    if rows == 0 {
        return Ok(());
    }
    let run = |first_row: usize, ys: &mut [f32]| -> Result<(), CpuError> {
        let mut buf = vec![0.0f32; cols];
        for (i, yv) in ys.iter_mut().enumerate() {
            let r = first_row + i;
            dequantize_row(ty, &w_bytes[r * row_bytes..(r + 1) * row_bytes], &mut buf)?;
            *yv = dot(&buf, x);
        }
        Ok(())
    };
    let threads = threads.clamp(1, rows);
    if threads == 1 {
        return run(0, y);
    }
    let chunk = rows.div_ceil(threads);
    std::thread::scope(|s| {
        let mut parts = y.chunks_mut(chunk).enumerate();
        let first = parts.next();
        let handles: Vec<_> = parts
            .map(|(i, ys)| s.spawn(move || run(i * chunk, ys)))
            .collect();
        let mut res = match first {
            Some((_, ys)) => run(0, ys),
            None => Ok(()),
        };
        for h in handles {
            // A worker can only panic on a bug in this module: propagate it.
            let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            res = res.and(r);
        }
        res
    })
}
