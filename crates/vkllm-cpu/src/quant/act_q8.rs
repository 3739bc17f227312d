//! Matrix-vector products over int8-quantized activations: the oracle of the GPU's
//! `matvec_q8a` kernel (int8 dot products; vkllm-kernels `matvec_q8a`).
//!
//! The activations are quantized per 32 elements (a "unit"): `amax = max |v_i|`,
//! `d = amax * f32(1 / 127)`, `q_i = round_half_even(v_i * (127 / amax))` clamped to
//! [-127, 127] (all 0 when `amax = 0`), `sum = sum_i q_i`. The product of a weight row with them
//! is `sum over units of d * sum_i w_i q_i`, `w` the row dequantized exactly
//! ([`dequantize_row`]); [`matvec_q8act`] computes it in f64 and rounds once.
//!
//! The GPU computes `127 / amax` with a division Vulkan lets be inexact (2.5 ulp), so a code
//! whose `v_i * (127 / amax)` lies within [`TIE_MARGIN`] of a rounding tie may come out one
//! apart there; [`ActQ8::near_tie`] marks those elements (a test allows `d * |w_i|` for each).

use super::{QuantType, dequantize_row, f16_at, kquants::scale_min_k4};
use crate::CpuError;

/// Distance to a rounding tie (in code units) within which the GPU's code may differ by one:
/// `|v * id| <= 127` and `id` off by a few ulp move the product by < 127 * 4 * 2^-24 ~ 3e-5.
pub const TIE_MARGIN: f32 = 1e-4;

/// Activations quantized per 32 elements (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct ActQ8 {
    /// The codes, one per element.
    pub q: Vec<i8>,
    /// The scale of each 32-element unit.
    pub d: Vec<f32>,
    /// The sum of each unit's codes.
    pub sum: Vec<i32>,
    /// Elements whose code the GPU may round the other way (within [`TIE_MARGIN`] of a tie).
    pub near_tie: Vec<bool>,
}

/// Quantizes `v` per 32 elements (see the module docs).
///
/// # Panics
/// If `v.len()` is not a multiple of 32 (a programming error: callers pass whole rows of
/// 32-element blocks).
pub fn quantize_act_q8(v: &[f32]) -> ActQ8 {
    assert!(
        v.len().is_multiple_of(32),
        "quantize_act_q8: {} elements is not a multiple of 32",
        v.len()
    );
    let inv127 = (1.0f64 / 127.0) as f32;
    let mut a = ActQ8 {
        q: Vec::with_capacity(v.len()),
        d: Vec::with_capacity(v.len() / 32),
        sum: Vec::with_capacity(v.len() / 32),
        near_tie: Vec::with_capacity(v.len()),
    };
    for unit in v.chunks_exact(32) {
        let amax = unit.iter().fold(0f32, |m, &x| m.max(x.abs()));
        let id = if amax > 0.0 { 127.0 / amax } else { 0.0 };
        let mut s = 0i32;
        for &x in unit {
            let t = x * id;
            let q = t.round_ties_even().clamp(-127.0, 127.0) as i8;
            let frac = t.abs() - t.abs().floor();
            a.near_tie.push((frac - 0.5).abs() < TIE_MARGIN);
            a.q.push(q);
            s += i32::from(q);
        }
        a.d.push(amax * inv127);
        a.sum.push(s);
    }
    a
}

/// `y = W q8(x)`: each row of `W` (`ty`'s blocks, `w_bytes`) dequantized exactly, times the
/// quantized activations `x` (one column of `cols`), summed in f64 per unit and over units, and
/// rounded to f32 once.
///
/// # Errors
/// As [`super::matvec_quant`]: [`CpuError::QuantRowLength`], [`CpuError::QuantShapeOverflow`],
/// [`CpuError::QuantByteLength`].
///
/// # Panics
/// If `x` does not hold `cols` elements or `y.len() != rows` (a programming error).
pub fn matvec_q8act(
    ty: QuantType,
    w_bytes: &[u8],
    rows: usize,
    cols: usize,
    x: &ActQ8,
    y: &mut [f32],
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
    assert_eq!(x.q.len(), cols, "matvec_q8act: x is not [cols]");
    assert_eq!(y.len(), rows, "matvec_q8act: y is not [rows]");
    let mut w = vec![0f32; cols];
    for (r, yv) in y.iter_mut().enumerate() {
        dequantize_row(ty, &w_bytes[r * row_bytes..(r + 1) * row_bytes], &mut w)?;
        let mut acc = 0f64;
        for (u, (wu, qu)) in w.chunks_exact(32).zip(x.q.chunks_exact(32)).enumerate() {
            let s: f64 = wu
                .iter()
                .zip(qu)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            acc += f64::from(x.d[u]) * s;
        }
        *yv = acc as f32;
    }
    Ok(())
}

/// The offset each 32-element unit of a row subtracts from all its weights: `dmin * min` of the
/// sub-block for Q4_K (`w = (d * scale) * q - dmin * min`), 0 for the other formats. The GPU sums
/// `(d * scale) * sum(q_w q_x)` and `dmin * min * sum(q_x)` apart, so its rounding error scales
/// with `|w| + offset` (what a test's tolerance needs).
///
/// # Errors
/// [`CpuError::QuantRowLength`] if `cols` is not whole blocks, [`CpuError::QuantByteLength`]
/// if `row` is not exactly one row.
pub fn unit_offsets(ty: QuantType, row: &[u8], cols: usize) -> Result<Vec<f32>, CpuError> {
    let row_bytes = ty.row_bytes(cols)?;
    if row.len() != row_bytes {
        return Err(CpuError::QuantByteLength {
            ty,
            elements: cols,
            expected: row_bytes,
            got: row.len(),
        });
    }
    let mut out = vec![0f32; cols / 32];
    if ty == QuantType::Q4_K {
        for (b, o) in row.chunks_exact(144).zip(out.chunks_exact_mut(8)) {
            let dmin = f16_at(&b[2..]);
            for (j, v) in o.iter_mut().enumerate() {
                *v = dmin * f32::from(scale_min_k4(j, &b[4..16]).1);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizes_by_hand() {
        // One unit: amax 2.54 -> id = 50, d = 0.02; 1.01 * 50 = 50.5 rounds to even 50.
        let mut v = vec![0f32; 32];
        v[0] = 2.54;
        v[1] = -1.27;
        v[2] = 0.01;
        v[3] = 1.01;
        let a = quantize_act_q8(&v);
        assert_eq!(&a.q[..4], &[127, -64, 0, 50]);
        assert!(a.q[4..].iter().all(|&q| q == 0));
        assert_eq!(a.sum, vec![127 - 64 + 50]);
        assert!((a.d[0] - 0.02).abs() < 1e-8);
        // 50.5 and -63.5 are ties (the GPU may round them the other way); 127 is not.
        assert!(a.near_tie[1] && a.near_tie[3] && !a.near_tie[0]);
        let zero = quantize_act_q8(&[0f32; 32]);
        assert_eq!(zero.d, vec![0.0]);
        assert!(zero.q.iter().all(|&q| q == 0));
    }

    #[test]
    fn q8_0_product_by_hand() {
        // A Q8_0 row of one block: d = 0.5, codes 0..32 -> w_i = i / 2.
        let mut b = vec![0u8; 34];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        for i in 0..32 {
            b[2 + i] = i as u8;
        }
        // x = 1 everywhere: amax 1, id 127, codes 127, d = f32(1 / 127).
        let a = quantize_act_q8(&[1f32; 32]);
        let mut y = [0f32];
        matvec_q8act(QuantType::Q8_0, &b, 1, 32, &a, &mut y).unwrap();
        // sum_i (i / 2) * 127 * (1 / 127) = 31 * 32 / 4 = 248 (up to d's rounding).
        assert!((y[0] - 248.0).abs() < 1e-4, "{}", y[0]);
    }
}
