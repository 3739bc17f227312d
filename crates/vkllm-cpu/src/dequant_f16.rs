//! A quantized weight's rows as f16 (the oracle of `dequant_f16.wgsl`): the values are
//! [`dequantize_row`](crate::dequantize_row)'s, each rounded to one of the two f16 values
//! around it ([`f16_neighbours`](crate::f16_neighbours): the GPU's rounding direction is its
//! own); `to_f16` of them gives the nearest-even rounding.

use crate::error::CpuError;
use crate::quant::{QuantType, dequantize_to_vec};

/// The f32 values of `rows` rows of `cols` elements of `ty` (row-major, rows back to back)
/// that the kernel rounds to f16.
///
/// # Errors
/// When `cols` is not a whole number of blocks or `bytes` is not `rows` rows long.
pub fn dequant_f16(
    ty: QuantType,
    bytes: &[u8],
    rows: usize,
    cols: usize,
) -> Result<Vec<f32>, CpuError> {
    // Rows must be whole blocks (then the rows are one run of blocks).
    ty.row_bytes(cols)?;
    dequantize_to_vec(ty, bytes, rows * cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::quantize_row;

    #[test]
    fn rows_are_the_dequantized_blocks_and_lengths_are_checked() {
        let cols = 64;
        let x: Vec<f32> = (0..3 * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let mut bytes = Vec::new();
        for r in x.chunks(cols) {
            bytes.extend(quantize_row(QuantType::Q8_0, r).unwrap());
        }
        let v = dequant_f16(QuantType::Q8_0, &bytes, 3, cols).unwrap();
        let d = dequantize_to_vec(QuantType::Q8_0, &bytes, 3 * cols).unwrap();
        assert_eq!(v, d);
        // Q8_0 keeps each value within half a step of its block's scale.
        for (a, b) in v.iter().zip(&x) {
            assert!((a - b).abs() <= 2.0 / 127.0, "{a} vs {b}");
        }
        assert!(dequant_f16(QuantType::Q8_0, &bytes, 2, cols).is_err());
        assert!(dequant_f16(QuantType::Q8_0, &bytes, 3, 48).is_err());
    }
}
