//! Matrix-matrix product `y = x W^T` (a batch of [`crate::matvec`]s): `x: [n, cols]`,
//! `W: [rows, cols]` row-major, `y: [n, rows]`.
//!
//! Every `y[t, r]` is exactly [`crate::dot`]`(W[r], x[t])` (8 f32 lanes per 64-element block,
//! folded into an f64 total), so `matmul` with `n = 1` equals [`crate::matvec`] bit for bit.
//! Loop order for cache reuse: tokens in tiles of 64, then weight rows, then four tokens at a time
//! sharing each weight load (`dot4`, bit-identical to `dot`). Above ~1M MACs the weight rows are
//! split into contiguous ranges over `std::thread::available_parallelism` scoped threads; each
//! output element is computed by one thread in the same order, so the result is bit-identical
//! whatever the thread count.

use crate::dot::{dot, dot4};
use crate::threads::threads_for;

/// Tokens per tile: 64 rows of `x` stay in L2 while every weight row passes over them.
const TOKEN_TILE: usize = 64;

/// `y = x W^T` with `w: [rows, cols]`, `x: [n, cols]`, `y: [n, rows]`.
///
/// # Panics
/// If a slice length does not match `rows`/`cols`/`n` (a programming error).
pub fn matmul(w: &[f32], rows: usize, cols: usize, x: &[f32], n: usize, y: &mut [f32]) {
    matmul_threads(w, rows, cols, x, n, y, threads_for(rows * cols * n, rows));
}

/// [`matmul`] on exactly `threads` threads (at least one); tests use it to check that the
/// thread count never changes a bit.
pub(crate) fn matmul_threads(
    w: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    threads: usize,
) {
    assert_eq!(w.len(), rows * cols, "matmul: w is not [rows, cols]");
    assert_eq!(x.len(), n * cols, "matmul: x is not [n, cols]");
    assert_eq!(y.len(), n * rows, "matmul: y is not [n, rows]");
    if rows == 0 || n == 0 {
        return;
    }
    let threads = threads.clamp(1, rows);
    if threads == 1 {
        block(w, cols, x, n, 0..rows, y, rows);
        return;
    }
    let chunk = rows.div_ceil(threads);
    let ranges: Vec<std::ops::Range<usize>> = (0..rows)
        .step_by(chunk)
        .map(|r0| r0..(r0 + chunk).min(rows))
        .collect();
    let parts: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranges[1..]
            .iter()
            .map(|r| {
                let r = r.clone();
                s.spawn(move || {
                    let mut buf = vec![0.0f32; n * r.len()];
                    let stride = r.len();
                    block(w, cols, x, n, r, &mut buf, stride);
                    buf
                })
            })
            .collect();
        let mut first = vec![0.0f32; n * ranges[0].len()];
        block(
            w,
            cols,
            x,
            n,
            ranges[0].clone(),
            &mut first,
            ranges[0].len(),
        );
        let mut parts = vec![first];
        for h in handles {
            match h.join() {
                Ok(buf) => parts.push(buf),
                Err(e) => std::panic::resume_unwind(e),
            }
        }
        parts
    });
    for (r, buf) in ranges.iter().zip(&parts) {
        let len = r.len();
        for t in 0..n {
            y[t * rows + r.start..t * rows + r.end].copy_from_slice(&buf[t * len..(t + 1) * len]);
        }
    }
}

/// Computes `y[t, r]` for `t in 0..n`, `r in rr`, into `out[t * stride + (r - rr.start)]`.
fn block(
    w: &[f32],
    cols: usize,
    x: &[f32],
    n: usize,
    rr: std::ops::Range<usize>,
    out: &mut [f32],
    stride: usize,
) {
    let xrow = |t: usize| &x[t * cols..(t + 1) * cols];
    for t0 in (0..n).step_by(TOKEN_TILE) {
        let t1 = (t0 + TOKEN_TILE).min(n);
        for r in rr.clone() {
            let wr = &w[r * cols..(r + 1) * cols];
            let o = r - rr.start;
            let mut t = t0;
            while t + 4 <= t1 {
                let v = dot4(wr, [xrow(t), xrow(t + 1), xrow(t + 2), xrow(t + 3)]);
                for (k, vk) in v.into_iter().enumerate() {
                    out[(t + k) * stride + o] = vk;
                }
                t += 4;
            }
            while t < t1 {
                out[t * stride + o] = dot(wr, xrow(t));
                t += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matvec::matvec;
    use crate::testutil::Rng;

    #[test]
    fn hand_values() {
        // W = [[1, 2], [3, 4], [5, 6]], x = [[1, 1], [2, -1]] -> y = [[3, 7, 11], [0, 2, 4]]
        let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let x = [1.0, 1.0, 2.0, -1.0];
        let mut y = [f32::NAN; 6];
        matmul(&w, 3, 2, &x, 2, &mut y);
        assert_eq!(y, [3.0, 7.0, 11.0, 0.0, 2.0, 4.0]);
    }

    #[test]
    fn matches_f64_matvec_and_any_thread_count() {
        let mut rng = Rng::new(5);
        for (rows, cols, n) in [
            (1, 1, 1),
            (5, 3, 2),
            (19, 70, 7),
            (131, 65, 70),
            (300, 257, 9),
        ] {
            let w = rng.vec(rows * cols);
            let x = rng.vec(n * cols);
            let mut y1 = vec![f32::NAN; n * rows];
            matmul_threads(&w, rows, cols, &x, n, &mut y1, 1);
            for t in 0..n {
                for r in 0..rows {
                    let exact: f64 = (0..cols)
                        .map(|c| f64::from(w[r * cols + c]) * f64::from(x[t * cols + c]))
                        .sum();
                    assert!((f64::from(y1[t * rows + r]) - exact).abs() < 1e-5);
                }
                let mut yv = vec![f32::NAN; rows];
                matvec(&w, rows, cols, &x[t * cols..(t + 1) * cols], &mut yv);
                let row = &y1[t * rows..(t + 1) * rows];
                assert!(row.iter().zip(&yv).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
            for th in [2, 3, 8] {
                let mut yt = vec![f32::NAN; n * rows];
                matmul_threads(&w, rows, cols, &x, n, &mut yt, th);
                assert!(y1.iter().zip(&yt).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }

    #[test]
    fn large_default_path_is_parallel_safe() {
        // Over the 1M-MAC threshold, so the default path may use several threads.
        let (rows, cols, n) = (512, 300, 8);
        let mut rng = Rng::new(9);
        let w = rng.vec(rows * cols);
        let x = rng.vec(n * cols);
        let mut yd = vec![f32::NAN; n * rows];
        let mut y1 = vec![f32::NAN; n * rows];
        matmul(&w, rows, cols, &x, n, &mut yd);
        matmul_threads(&w, rows, cols, &x, n, &mut y1, 1);
        assert!(y1.iter().zip(&yd).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
