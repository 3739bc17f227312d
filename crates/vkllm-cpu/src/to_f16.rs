//! f32 -> f16 (the activations `matmul_coop` reads as f16): round to nearest even, and the pair
//! of f16 values around an input (a GPU's conversion may round either way: WGSL leaves the
//! direction to the implementation).

use half::f16;

/// `x` rounded to f16 (nearest, ties to even), as bits.
pub fn to_f16(x: &[f32]) -> Vec<u16> {
    x.iter().map(|&v| f16::from_f32(v).to_bits()).collect()
}

/// The f16 values just below and just above `v` (both the same when `v` is exactly an f16).
/// For finite `v` within the f16 range (|v| <= 65504).
pub fn f16_neighbours(v: f32) -> (f16, f16) {
    let r = f16::from_f32(v);
    let rv = r.to_f32();
    if rv == v {
        return (r, r);
    }
    // The neighbour on the other side of `v`: one step of the bit pattern away from zero when
    // |r| < |v|, towards zero otherwise (the f16 ordering of one sign is the ordering of bits).
    let step_out = rv.abs() < v.abs();
    let bits = r.to_bits();
    let mag = bits & 0x7fff;
    let sign = if r.to_bits() & 0x8000 != 0 || (mag == 0 && v < 0.0) {
        0x8000
    } else {
        0
    };
    let other_mag = if step_out { mag + 1 } else { mag - 1 };
    let other = f16::from_bits(sign | other_mag);
    if other.to_f32() < rv {
        (other, r)
    } else {
        (r, other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_bracket_the_input() {
        for v in [
            0.1f32, -0.1, 1.0, 1.0001, -1.0001, 2.71, -50.3, 65000.5, 1e-6, -1e-6, 0.0,
        ] {
            let (lo, hi) = f16_neighbours(v);
            assert!(lo.to_f32() <= v && v <= hi.to_f32(), "{v}: {lo} {hi}");
            if lo != hi {
                // Adjacent f16 values: nothing representable strictly between them.
                let mid = f16::from_f32((lo.to_f32() + hi.to_f32()) / 2.0);
                assert!(mid == lo || mid == hi, "{v}: {lo} {hi} not adjacent");
            }
            let r = f16::from_bits(to_f16(&[v])[0]);
            assert!(r == lo || r == hi);
        }
        assert_eq!(f16_neighbours(1.0), (f16::ONE, f16::ONE));
    }
}
