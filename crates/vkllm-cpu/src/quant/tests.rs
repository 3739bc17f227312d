//! Unit tests of the quantized formats: geometry, errors, hand-built blocks, the matvec oracle,
//! quantizer round trips against ggml's error bounds. Bit-exact agreement with the `gguf`
//! package lives in `tests/quant_goldens.rs`.

use super::*;
use crate::testutil::Rng;

fn f16b(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

#[test]
fn geometry_matches_ggml_table() {
    // (type, ggml id, block, bytes) from ggml-common.h / ggml.c's type traits.
    let table = [
        (QuantType::F32, 0, 1, 4),
        (QuantType::F16, 1, 1, 2),
        (QuantType::Q4_0, 2, 32, 18),
        (QuantType::Q4_1, 3, 32, 20),
        (QuantType::Q5_0, 6, 32, 22),
        (QuantType::Q5_1, 7, 32, 24),
        (QuantType::Q8_0, 8, 32, 34),
        (QuantType::Q2_K, 10, 256, 84),
        (QuantType::Q3_K, 11, 256, 110),
        (QuantType::Q4_K, 12, 256, 144),
        (QuantType::Q5_K, 13, 256, 176),
        (QuantType::Q6_K, 14, 256, 210),
        (QuantType::IQ4_NL, 20, 32, 18),
        (QuantType::IQ4_XS, 23, 256, 136),
        (QuantType::BF16, 30, 1, 2),
    ];
    assert_eq!(table.len(), QuantType::ALL.len());
    for (ty, id, bs, ts) in table {
        assert_eq!(ty.ggml_id(), id);
        assert_eq!(QuantType::from_ggml_id(id), Ok(ty));
        assert_eq!((ty.block_size(), ty.type_size()), (bs, ts), "{ty}");
    }
    for id in [4, 5, 9, 15, 16, 19, 21, 22, 24, 29, 31, 39, u32::MAX] {
        assert_eq!(
            QuantType::from_ggml_id(id),
            Err(CpuError::UnknownGgmlType { id })
        );
    }
    assert_eq!(QuantType::Q4_K.row_bytes(512), Ok(288));
    assert_eq!(
        QuantType::F32.row_bytes(usize::MAX),
        Err(CpuError::QuantShapeOverflow {
            ty: QuantType::F32,
            rows: 1,
            cols: usize::MAX
        })
    );
    assert_eq!(QuantType::Q8_0.row_bytes(96), Ok(102));
}

#[test]
fn length_errors_are_typed() {
    let mut out = vec![0.0f32; 64];
    assert_eq!(
        dequantize_row(QuantType::Q4_0, &[0u8; 35], &mut out),
        Err(CpuError::QuantByteLength {
            ty: QuantType::Q4_0,
            elements: 64,
            expected: 36,
            got: 35
        })
    );
    let mut out = vec![0.0f32; 300];
    assert_eq!(
        dequantize_row(QuantType::Q4_K, &[0u8; 144], &mut out),
        Err(CpuError::QuantRowLength {
            ty: QuantType::Q4_K,
            elements: 300,
            block: 256
        })
    );
    assert!(matches!(
        quantize_row(QuantType::Q8_0, &[0.0; 33]),
        Err(CpuError::QuantRowLength { elements: 33, .. })
    ));
    for ty in QuantType::ALL {
        let r = quantize_row(ty, &vec![0.5; ty.block_size()]);
        if ty.can_quantize() {
            assert_eq!(r.unwrap().len(), ty.type_size(), "{ty}");
        } else {
            assert_eq!(r, Err(CpuError::UnsupportedQuant { ty, op: "quantize" }));
        }
    }
    let mut y = [0.0f32; 2];
    assert!(matches!(
        matvec_quant(QuantType::Q8_0, &[0u8; 67], 2, 32, &[0.0; 32], &mut y),
        Err(CpuError::QuantByteLength {
            expected: 68,
            got: 67,
            ..
        })
    ));
    // The shape is checked before the slices: a size that overflows usize is an error.
    let mut y = [0.0f32; 1];
    assert_eq!(
        matvec_quant(QuantType::Q8_0, &[], usize::MAX / 2, 64, &[0.0; 64], &mut y),
        Err(CpuError::QuantShapeOverflow {
            ty: QuantType::Q8_0,
            rows: usize::MAX / 2,
            cols: 64
        })
    );
}

#[test]
fn hand_built_legacy_blocks() {
    // Q4_0, d = 0.5: byte j holds element j (low nibble) and j + 16 (high nibble).
    let mut b = vec![0u8; 18];
    b[0..2].copy_from_slice(&f16b(0.5));
    b[2] = 0xF0; // elem 0: q=0 -> -4.0; elem 16: q=15 -> 3.5
    b[3] = 0x98; // elem 1: q=8 -> 0.0;  elem 17: q=9 -> 0.5
    let mut y = [f32::NAN; 32];
    dequantize_row(QuantType::Q4_0, &b, &mut y).unwrap();
    assert_eq!((y[0], y[16], y[1], y[17]), (-4.0, 3.5, 0.0, 0.5));
    assert_eq!(y[2], -4.0); // q = 0 -> (0 - 8) * 0.5

    // Q5_1, d = 0.25, m = -1: bit 4 of element 17 set through qh bit 17.
    let mut b = vec![0u8; 24];
    b[0..2].copy_from_slice(&f16b(0.25));
    b[2..4].copy_from_slice(&f16b(-1.0));
    b[4..8].copy_from_slice(&(1u32 << 17).to_le_bytes());
    b[8 + 1] = 0x3A; // elem 1: q = 10 -> 1.5; elem 17: q = 3 | 16 = 19 -> 3.75
    let mut y = [f32::NAN; 32];
    dequantize_row(QuantType::Q5_1, &b, &mut y).unwrap();
    assert_eq!((y[1], y[17], y[0]), (1.5, 3.75, -1.0));

    // Q8_0, d = 2: i8 values.
    let mut b = vec![0u8; 34];
    b[0..2].copy_from_slice(&f16b(2.0));
    b[2] = (-128i8) as u8;
    b[33] = 127;
    let mut y = [f32::NAN; 32];
    dequantize_row(QuantType::Q8_0, &b, &mut y).unwrap();
    assert_eq!((y[0], y[1], y[31]), (-256.0, 0.0, 254.0));
}

#[test]
fn hand_built_k_blocks() {
    // Q4_K: d = 1, dmin = 0.5; sub-block 5 has scale 0b100011 = 35 and min 0b010010 = 18.
    // scale(5) = (sc[9] & 15) | (sc[1] >> 6) << 4; min(5) = (sc[9] >> 4) | (sc[5] >> 6) << 4.
    let mut b = vec![0u8; 144];
    b[0..2].copy_from_slice(&f16b(1.0));
    b[2..4].copy_from_slice(&f16b(0.5));
    let sc = &mut b[4..16];
    sc[9] = 0x23; // scale low 3, min low 2
    sc[1] = 0b10 << 6; // scale high bits 2 -> 32 + 3 = 35
    sc[5] = 0b01 << 6; // min high bits 1 -> 16 + 2 = 18
    // Sub-block 5 is the high nibble of qs[64..96]; element 5*32 + 7 = 167 <- qs[64 + 7].
    b[16 + 64 + 7] = 0xB0; // q = 11
    let mut y = vec![f32::NAN; 256];
    dequantize_row(QuantType::Q4_K, &b, &mut y).unwrap();
    assert_eq!(y[167], 35.0 * 11.0 - 0.5 * 18.0);
    assert_eq!(y[160], -9.0); // q = 0
    assert_eq!(y[0], 0.0); // sub-block 0: scale 0, min 0

    // Q6_K: d = 0.25, scales[e / 16]; element e = 128h + 32k + l.
    let mut b = vec![0u8; 210];
    b[208..210].copy_from_slice(&f16b(0.25));
    b[192 + 13] = (-3i8) as u8; // sub-block 13 = elements 208..224 (h=1, k=2, l=16..32)
    // e = 128 + 64 + 20 = 212: ql[64 + 20] high nibble, qh[32 + 20] bits 4..5.
    b[64 + 20] = 0x50; // low nibble of q = 5
    b[128 + 32 + 20] = 0b10 << 4; // high pair 2 -> q = 5 + 32 = 37 -> 37 - 32 = 5
    let mut y = vec![f32::NAN; 256];
    dequantize_row(QuantType::Q6_K, &b, &mut y).unwrap();
    assert_eq!(y[212], 0.25 * -3.0 * 5.0);
    assert_eq!(y[208], 0.25 * -3.0 * -32.0); // q = 0 -> -32

    // Q3_K: a clear hmask bit subtracts 4. Scale 0 = (sc[0] & 15) | (sc[8] & 3) << 4, minus 32.
    let mut b = vec![0u8; 110];
    b[108..110].copy_from_slice(&f16b(2.0));
    b[96] = 0x05;
    b[96 + 8] = 0x02; // scale 0 = 5 | 32 = 37 -> 5
    b[32] = 0x03; // element 0: low bits 3
    b[0] = 0x02; // hmask[0] bit 0 clear (element 0), bit 1 set (element 32)
    let mut y = vec![f32::NAN; 256];
    dequantize_row(QuantType::Q3_K, &b, &mut y).unwrap();
    assert_eq!(y[0], 10.0 * (3.0 - 4.0));
    assert_eq!(y[1], 10.0 * -4.0);

    // IQ4_XS: sub-block 3 scale = (scales_l[1] >> 4) | ((scales_h >> 6) & 3) << 4.
    let mut b = vec![0u8; 136];
    b[0..2].copy_from_slice(&f16b(0.5));
    b[2..4].copy_from_slice(&(0b11u16 << 6).to_le_bytes());
    b[5] = 0x40; // scales_l[1] high nibble 4 -> ls = 4 | 48 = 52 -> 20
    b[8 + 3 * 16 + 2] = 0xF0; // element 96 + 2 -> idx 0 (-127), element 96 + 18 -> idx 15 (113)
    let mut y = vec![f32::NAN; 256];
    dequantize_row(QuantType::IQ4_XS, &b, &mut y).unwrap();
    assert_eq!((y[98], y[114]), (10.0 * -127.0, 10.0 * 113.0));
}

#[test]
fn bf16_and_f16_hand_values() {
    let bits = |v: f32| float::f32_to_bf16_bits(v);
    assert_eq!(bits(1.0), 0x3F80);
    assert_eq!(bits(f32::from_bits(0x3F80_8000)), 0x3F80); // tie -> even
    assert_eq!(bits(f32::from_bits(0x3F81_8000)), 0x3F82); // tie -> even (up)
    assert_eq!(bits(f32::from_bits(0x3F80_8001)), 0x3F81);
    assert_eq!(bits(f32::MAX), 0x7F80); // rounds to +inf
    assert_eq!(bits(f32::from_bits(0x7F80_0001)), 0x7FC0); // signalling NaN -> quiet
    assert_eq!(bits(-0.0), 0x8000);
    let q = quantize_row(QuantType::F16, &[1.0, 65520.0, -2.0f32.powi(-24)]).unwrap();
    assert_eq!(q, [0x00, 0x3C, 0x00, 0x7C, 0x01, 0x80]);
}

fn all_finite(v: &[f32]) -> bool {
    v.iter().all(|x| x.is_finite())
}

#[test]
fn matvec_quant_is_matvec_of_dequantized_rows() {
    let mut rng = Rng::new(5);
    for ty in QuantType::ALL {
        let cols = if ty.block_size() == 256 { 512 } else { 96 };
        for rows in [1, 7, 37] {
            let rb = ty.row_bytes(cols).unwrap();
            // Random blocks with sane f16 scales: quantize random rows when possible, else
            // random bytes with every f16-looking field left as is (checked finite below).
            let w: Vec<u8> = if ty.can_quantize() {
                let v = rng.vec(rows * cols);
                quantize_row(ty, &v).unwrap()
            } else {
                let mut bytes: Vec<u8> = (0..rows * rb).map(|_| rng.next_u64() as u8).collect();
                // Scale fields (IQ4_NL/IQ4_XS/Q5_K/Q2_K/Q3_K): force small finite f16 values.
                let fields: &[usize] = match ty {
                    QuantType::Q2_K => &[80, 82],
                    QuantType::Q3_K => &[108],
                    QuantType::Q5_K => &[0, 2],
                    _ => &[0],
                };
                for blk in bytes.chunks_exact_mut(ty.type_size()) {
                    for &f in fields {
                        blk[f..f + 2].copy_from_slice(&f16b(0.01 * (1.0 + rng.f32())));
                    }
                }
                bytes
            };
            let mut dense = vec![0.0f32; rows * cols];
            dequantize_row(ty, &w, &mut dense).unwrap();
            assert!(all_finite(&dense), "{ty}");
            let x = rng.vec(cols);
            let mut want = vec![f32::NAN; rows];
            crate::matvec(&dense, rows, cols, &x, &mut want);
            for t in [1, 2, 3] {
                let mut y = vec![f32::NAN; rows];
                matvec::matvec_quant_threads(ty, &w, rows, cols, &x, &mut y, t).unwrap();
                assert!(
                    y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{ty} rows={rows} threads={t}"
                );
            }
            // And close to an f64 recomputation from the dequantized weights.
            for r in 0..rows {
                let exact: f64 = (0..cols)
                    .map(|c| f64::from(dense[r * cols + c]) * f64::from(x[c]))
                    .sum();
                let mag: f64 = (0..cols)
                    .map(|c| (f64::from(dense[r * cols + c]) * f64::from(x[c])).abs())
                    .sum();
                assert!((f64::from(want[r]) - exact).abs() <= 1e-6 * mag + 1e-30);
            }
        }
    }
}

/// ggml's test-quantize-fns data: `0.1 + 2 cos(i + offset)` (computed in f32).
fn ggml_test_data(n: usize, offset: f32) -> Vec<f32> {
    (0..n)
        .map(|i| 0.1 + 2.0 * (i as f32 + offset).cos())
        .collect()
}

/// ggml's `array_rmse` as test-quantize-fns computes it: `sqrt(sum (a - b)^2) / n` (f64 sum).
fn ggml_total_error(a: &[f32], b: &[f32]) -> f64 {
    let s: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    s.sqrt() / a.len() as f64
}

/// Root-mean-square error relative to the signal's RMS.
fn relative_rmse(a: &[f32], b: &[f32]) -> f64 {
    let e: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    let s: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
    (e / s).sqrt()
}

fn round_trip(ty: QuantType, x: &[f32]) -> Vec<f32> {
    let q = quantize_row(ty, x).unwrap();
    let mut y = vec![f32::NAN; x.len()];
    dequantize_row(ty, &q, &mut y).unwrap();
    y
}

#[test]
fn quantizers_meet_ggml_total_error_bound() {
    // test-quantize-fns: 4096 elements; MAX_QUANTIZATION_TOTAL_ERROR = 0.002 for 4 bits and
    // up, _3BITS = 0.004 (Q3_K), _2BITS = 0.0075 (Q2_K).
    let x = ggml_test_data(32 * 128, 0.0);
    for ty in QuantType::ALL.into_iter().filter(|t| t.can_quantize()) {
        let bound = match ty {
            QuantType::Q2_K => 0.0075,
            QuantType::Q3_K => 0.004,
            _ => 0.002,
        };
        let err = ggml_total_error(&x, &round_trip(ty, &x));
        eprintln!("{ty}: ggml total error {err:.3e} (bound {bound})");
        assert!(err < bound, "{ty}: total error {err} >= {bound}");
    }
}

#[test]
fn k_quantizers_relative_error_on_random_data() {
    // ggml's metric divides by n, so it is loose; this one is not. Uniform [-1, 1) data in
    // 32-element sub-blocks spans ~2, so a uniform 4-bit grid has step ~2/15 and RMS error
    // ~step/sqrt(12) = 0.0385 against a signal RMS of 1/sqrt(3) = 0.577: 0.067 relative. Q6_K
    // (64 signed levels per 16) gives ~(2/63)/sqrt(12)/0.577 = 0.016. Bounds: 0.075 and 0.02
    // (quantized 6-bit sub-scales cost a little). Q8_0 (2/254 step): 0.0040 -> bound 0.005;
    // Q4_0 (16 levels on [-max, max]): 0.067 -> bound 0.075.
    let mut rng = Rng::new(99);
    let x = rng.vec(256 * 64);
    for (ty, bound) in [
        (QuantType::Q4_K, 0.075),
        (QuantType::Q6_K, 0.02),
        (QuantType::Q8_0, 0.005),
        (QuantType::Q4_0, 0.075),
        (QuantType::Q4_1, 0.075),
        (QuantType::Q5_0, 0.04),
    ] {
        let e = relative_rmse(&x, &round_trip(ty, &x));
        eprintln!("{ty}: relative RMSE {e:.4}");
        assert!(e < bound, "{ty}: relative RMSE {e} >= {bound}");
    }
    // Q4_K keeps a (non-positive) min per sub-block: data offset by -3 keeps the grid step of
    // ~2/15, so the absolute RMS error stays near 0.0385 (bound: the same 0.075 * 0.577).
    let shifted: Vec<f32> = x.iter().map(|v| v - 3.0).collect();
    let y = round_trip(QuantType::Q4_K, &shifted);
    let abs_rmse = (shifted
        .iter()
        .zip(&y)
        .map(|(a, b)| f64::from(a - b).powi(2))
        .sum::<f64>()
        / x.len() as f64)
        .sqrt();
    eprintln!("q4_K shifted by -3: abs RMSE {abs_rmse:.4}");
    assert!(
        abs_rmse < 0.075 * 0.577,
        "Q4_K shifted: abs RMSE {abs_rmse}"
    );
}

#[test]
fn quantizers_handle_degenerate_blocks() {
    for ty in QuantType::ALL.into_iter().filter(|t| t.can_quantize()) {
        let n = ty.block_size().max(32) * 2;
        // All zeros round-trip to zeros.
        assert!(
            round_trip(ty, &vec![0.0; n]).iter().all(|v| *v == 0.0),
            "{ty}"
        );
        // Non-finite and extreme inputs never panic.
        let mut x = vec![1e-30f32; n];
        x[0] = f32::NAN;
        x[1] = f32::INFINITY;
        x[2] = -f32::MAX;
        x[n - 1] = f32::MIN_POSITIVE / 4.0;
        let _ = quantize_row(ty, &x).unwrap();
    }
    // Values on a 16-level grid (0..15 in every 32-element sub-block, scale 1, min 0) get their
    // own levels back: the only error left is the f16 rounding of d = 1/63 (relative < 2^-11).
    let x: Vec<f32> = (0..256).map(|i| (i % 16) as f32).collect();
    let y = round_trip(QuantType::Q4_K, &x);
    for (a, b) in x.iter().zip(&y) {
        assert!(
            (a - b).abs() <= a * 2f32.powi(-11),
            "Q4_K on its own grid: {a} -> {b}"
        );
    }
    // Q6_K: -32..31 in every sub-block (scale 1).
    let x: Vec<f32> = (0..256).map(|i| ((i * 7) % 64) as f32 - 32.0).collect();
    let y = round_trip(QuantType::Q6_K, &x);
    let err = relative_rmse(&x, &y);
    assert!(err < 0.01, "Q6_K on its own grid: {err}");
}

#[test]
fn quantize_rows_is_quantize_row_per_row() {
    let mut rng = Rng::new(7);
    // Enough rows for several parts (a part is about 2^18 inputs), so threads take part.
    let (rows, cols) = (1100, 512);
    let x = rng.vec(rows * cols);
    for ty in [
        QuantType::Q8_0,
        QuantType::Q4_K,
        QuantType::Q6_K,
        QuantType::F16,
    ] {
        let all = quantize_rows(ty, &x, cols).unwrap();
        let rb = ty.row_bytes(cols).unwrap();
        assert_eq!(all.len(), rows * rb, "{ty}");
        for r in [0, 1, 511, 512, 513, rows - 1] {
            let one = quantize_row(ty, &x[r * cols..(r + 1) * cols]).unwrap();
            assert_eq!(&all[r * rb..(r + 1) * rb], &one[..], "{ty} row {r}");
        }
    }
    assert_eq!(
        quantize_rows(QuantType::Q8_0, &x[..100], 64),
        Err(CpuError::QuantMatrixShape {
            ty: QuantType::Q8_0,
            len: 100,
            cols: 64
        })
    );
    assert!(matches!(
        quantize_rows(QuantType::Q4_K, &x[..320], 160),
        Err(CpuError::QuantRowLength { .. })
    ));
    assert!(matches!(
        quantize_rows(QuantType::IQ4_NL, &x[..64], 32),
        Err(CpuError::UnsupportedQuant { .. })
    ));
    let mut short = [0u8; 33];
    assert!(matches!(
        quantize_row_into(QuantType::Q8_0, &x[..32], &mut short),
        Err(CpuError::QuantByteLength { .. })
    ));
}
