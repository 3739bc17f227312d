//! Matrix-vector product `y = W x`, `W` row-major `[rows, cols]`.
//!
//! Each `y[r]` is [`crate::dot`] of row `r` with `x` (8 f32 lanes per 64-element block, folded
//! into an f64 total, see [`crate::dot`]). Above ~1M MACs the rows are split into contiguous
//! ranges over `std::thread::available_parallelism` scoped threads; every `y[r]` is computed by
//! one thread in the same order, so the result is bit-identical for any thread count, and
//! identical to [`crate::matmul`] with `n = 1`.

use crate::dot::dot;
use crate::threads::threads_for;

/// `y = W x` with `w: [rows, cols]`, `x: [cols]`, `y: [rows]`.
///
/// # Panics
/// If a slice length does not match `rows`/`cols` (a programming error).
pub fn matvec(w: &[f32], rows: usize, cols: usize, x: &[f32], y: &mut [f32]) {
    matvec_threads(w, rows, cols, x, y, threads_for(rows * cols, rows));
}

/// [`matvec`] on exactly `threads` threads (at least one); tests use it to check that the
/// thread count never changes a bit.
pub(crate) fn matvec_threads(
    w: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
    threads: usize,
) {
    assert_eq!(w.len(), rows * cols, "matvec: w is not [rows, cols]");
    assert_eq!(x.len(), cols, "matvec: x is not [cols]");
    assert_eq!(y.len(), rows, "matvec: y is not [rows]");
    if rows == 0 {
        return;
    }
    let threads = threads.clamp(1, rows);
    let run = |first_row: usize, ys: &mut [f32]| {
        for (i, yv) in ys.iter_mut().enumerate() {
            let r = first_row + i;
            *yv = dot(&w[r * cols..(r + 1) * cols], x);
        }
    };
    if threads == 1 {
        run(0, y);
        return;
    }
    let chunk = rows.div_ceil(threads);
    std::thread::scope(|s| {
        let mut parts = y.chunks_mut(chunk).enumerate();
        let first = parts.next();
        for (i, ys) in parts {
            s.spawn(move || run(i * chunk, ys));
        }
        if let Some((_, ys)) = first {
            run(0, ys);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn hand_values() {
        // [[1, 2, 3], [4, 5, 6]] * [1, 0, -1] = [-2, -2]
        let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut y = [f32::NAN; 2];
        matvec(&w, 2, 3, &[1.0, 0.0, -1.0], &mut y);
        assert_eq!(y, [-2.0, -2.0]);
    }

    #[test]
    fn matches_f64_and_is_thread_independent() {
        let mut rng = Rng::new(3);
        for (rows, cols) in [(1, 1), (3, 5), (17, 130), (257, 67), (1031, 1029)] {
            let w = rng.vec(rows * cols);
            let x = rng.vec(cols);
            let mut y1 = vec![f32::NAN; rows];
            matvec_threads(&w, rows, cols, &x, &mut y1, 1);
            for r in 0..rows {
                let exact: f64 = (0..cols)
                    .map(|c| f64::from(w[r * cols + c]) * f64::from(x[c]))
                    .sum();
                assert!((f64::from(y1[r]) - exact).abs() < 1e-5, "r={r}");
            }
            for t in [2, 3, 7] {
                let mut yt = vec![f32::NAN; rows];
                matvec_threads(&w, rows, cols, &x, &mut yt, t);
                assert!(y1.iter().zip(&yt).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
            let mut yd = vec![f32::NAN; rows];
            matvec(&w, rows, cols, &x, &mut yd);
            assert!(y1.iter().zip(&yd).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}
