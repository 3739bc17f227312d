//! The dot product every linear op and attention score uses.
//!
//! Method (fixed, so results never depend on threads or call site): the vectors are cut into
//! blocks of [`BLOCK`] = 64 elements (the last block may be shorter). Inside a block, element `i`
//! goes to lane `i % 8`; each of the 8 lanes accumulates its products in f32, in increasing `i`
//! (`lane += a[i] * b[i]`, product rounded to f32, then the sum rounded to f32: no fused
//! multiply-add). At the end of each block every lane's f32 sum is added to that lane's f64
//! total; after the last block the 8 f64 totals are summed in lane order 0..8 and the result is
//! rounded once to f32.
//!
//! Each lane sums at most 8 products in f32, so the f32 error is that of an 8-term sum; the long
//! reduction across blocks is in f64. The 8 lanes map onto SIMD registers, which keeps the op fast
//! enough to run 0.5B-parameter models on two cores.

/// Elements per block; each block is folded into the f64 total.
pub const BLOCK: usize = 64;
/// Independent f32 partial sums inside a block.
pub const LANES: usize = 8;

const STEPS: usize = BLOCK / LANES;

#[inline(always)]
fn block_sums(a: &[f32; BLOCK], b: &[f32; BLOCK]) -> [f32; LANES] {
    let mut acc = [0.0f32; LANES];
    for j in 0..STEPS {
        for l in 0..LANES {
            acc[l] += a[j * LANES + l] * b[j * LANES + l];
        }
    }
    acc
}

#[inline(always)]
fn add_lanes(tot: &mut [f64; LANES], acc: &[f32; LANES]) {
    for l in 0..LANES {
        tot[l] += f64::from(acc[l]);
    }
}

#[inline(always)]
fn finish(tot: &[f64; LANES]) -> f32 {
    let mut s = 0.0f64;
    for &t in tot {
        s += t;
    }
    s as f32
}

/// `sum(a[i] * b[i])` with the method described in the module docs.
///
/// # Panics
/// If `a.len() != b.len()` (a programming error).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    let (ab, at) = a.as_chunks::<BLOCK>();
    let (bb, bt) = b.as_chunks::<BLOCK>();
    let mut tot = [0.0f64; LANES];
    for (xa, xb) in ab.iter().zip(bb) {
        add_lanes(&mut tot, &block_sums(xa, xb));
    }
    if !at.is_empty() {
        let mut acc = [0.0f32; LANES];
        for (i, (x, y)) in at.iter().zip(bt).enumerate() {
            acc[i % LANES] += x * y;
        }
        add_lanes(&mut tot, &acc);
    }
    finish(&tot)
}

/// Four dot products sharing `w`: `[dot(w, x0), dot(w, x1), dot(w, x2), dot(w, x3)]`, each
/// bit-identical to [`dot`] (same lanes, same order), with `w` loaded once for all four.
///
/// # Panics
/// If any `x` differs in length from `w`.
#[inline(always)]
pub(crate) fn dot4(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    for xi in x {
        assert_eq!(xi.len(), w.len(), "dot4: length mismatch");
    }
    let (wb, wt) = w.as_chunks::<BLOCK>();
    let xb = x.map(|xi| xi.as_chunks::<BLOCK>().0);
    let mut tot = [[0.0f64; LANES]; 4];
    for (bi, wblk) in wb.iter().enumerate() {
        let xs = [&xb[0][bi], &xb[1][bi], &xb[2][bi], &xb[3][bi]];
        let mut acc = [[0.0f32; LANES]; 4];
        for j in 0..STEPS {
            let wv: [f32; LANES] = std::array::from_fn(|l| wblk[j * LANES + l]);
            for k in 0..4 {
                for l in 0..LANES {
                    acc[k][l] += wv[l] * xs[k][j * LANES + l];
                }
            }
        }
        for k in 0..4 {
            add_lanes(&mut tot[k], &acc[k]);
        }
    }
    if !wt.is_empty() {
        let base = wb.len() * BLOCK;
        let mut acc = [[0.0f32; LANES]; 4];
        for (i, &wv) in wt.iter().enumerate() {
            for k in 0..4 {
                acc[k][i % LANES] += wv * x[k][base + i];
            }
        }
        for k in 0..4 {
            add_lanes(&mut tot[k], &acc[k]);
        }
    }
    [
        finish(&tot[0]),
        finish(&tot[1]),
        finish(&tot[2]),
        finish(&tot[3]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum()
    }

    #[test]
    fn hand_values() {
        assert_eq!(dot(&[], &[]), 0.0);
        assert_eq!(dot(&[2.0], &[3.0]), 6.0);
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, -5.0, 6.0]), 12.0);
        // 1..=100 squared: n(n+1)(2n+1)/6 = 338350, exact in f32.
        let v: Vec<f32> = (1..=100).map(|i| i as f32).collect();
        assert_eq!(dot(&v, &v), 338_350.0);
    }

    #[test]
    fn close_to_f64_on_odd_sizes() {
        let mut rng = Rng::new(7);
        for n in [1, 7, 63, 64, 65, 127, 129, 1000, 4099] {
            let a = rng.vec(n);
            let b = rng.vec(n);
            let exact = dot_f64(&a, &b);
            let mag: f64 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| f64::from((x * y).abs()))
                .sum();
            let got = f64::from(dot(&a, &b));
            assert!(
                (got - exact).abs() <= 1e-6 * mag + 1e-30,
                "n={n}: {got} vs {exact}"
            );
        }
    }

    #[test]
    fn cancellation_is_handled_in_f64() {
        // Large terms that cancel across blocks: a naive f32 running sum loses the small ones.
        let mut a = vec![0.0f32; 256];
        let b = vec![1.0f32; 256];
        a[0] = 1.0e8;
        a[64] = -1.0e8;
        for (i, v) in a.iter_mut().enumerate().skip(128) {
            *v = if i % 2 == 0 { 0.5 } else { 0.25 };
        }
        // 64 halves and 64 quarters = 48.
        assert_eq!(dot(&a, &b), 48.0);
    }

    #[test]
    fn dot4_is_bit_identical_to_dot() {
        let mut rng = Rng::new(11);
        for n in [1, 5, 64, 100, 257] {
            let w = rng.vec(n);
            let xs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(n)).collect();
            let got = dot4(&w, [&xs[0], &xs[1], &xs[2], &xs[3]]);
            for k in 0..4 {
                assert_eq!(got[k].to_bits(), dot(&w, &xs[k]).to_bits(), "n={n} k={k}");
            }
        }
    }
}
