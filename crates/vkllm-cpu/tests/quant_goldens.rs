//! The quantized formats against goldens made by the `gguf` Python package's numpy code
//! (`fixtures/quant/make_quant_goldens.py`): dequantization and the legacy/float quantizers must
//! match bit for bit. The K-quant quantizer goldens come from ggml's C reference
//! quantizers (`fixtures/quant/ggml_kquant_ref.c`, built with `-ffp-contract=off`), since the
//! package has none.

use std::path::{Path, PathBuf};

use vkllm_cpu::{QuantType, dequantize_row, quantize_row};

struct Golden {
    ty: QuantType,
    rows: usize,
    cols: usize,
    bytes: Vec<u8>,
    values: Vec<f32>,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/quant")
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn load(name: &str) -> Golden {
    let path = dir().join(name);
    let b = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[0..4], b"VKQG", "{name}: magic");
    assert_eq!(u32_at(&b, 4), 1, "{name}: version");
    let ty = QuantType::from_ggml_id(u32_at(&b, 8)).unwrap();
    let rows = u32_at(&b, 12) as usize;
    let cols = u32_at(&b, 16) as usize;
    let n = u32_at(&b, 20) as usize;
    let bytes = b[24..24 + n].to_vec();
    let values: Vec<f32> = b[24 + n..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(values.len(), rows * cols, "{name}: value count");
    assert_eq!(
        bytes.len(),
        rows * ty.row_bytes(cols).unwrap(),
        "{name}: byte count"
    );
    Golden {
        ty,
        rows,
        cols,
        bytes,
        values,
    }
}

fn name(ty: QuantType) -> String {
    ty.name().to_lowercase()
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    for ty in QuantType::ALL {
        let g = load(&format!("dequant_{}.bin", name(ty)));
        assert_eq!(g.ty, ty);
        let rb = ty.row_bytes(g.cols).unwrap();
        let mut out = vec![f32::NAN; g.cols];
        for r in 0..g.rows {
            dequantize_row(ty, &g.bytes[r * rb..(r + 1) * rb], &mut out).unwrap();
            for (c, (got, want)) in out.iter().zip(&g.values[r * g.cols..]).enumerate() {
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{ty} row {r} col {c}: {got} vs {want}"
                );
            }
        }
        // The whole tensor at once gives the same values.
        let mut all = vec![f32::NAN; g.rows * g.cols];
        dequantize_row(ty, &g.bytes, &mut all).unwrap();
        assert!(
            all.iter()
                .zip(&g.values)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}

#[test]
fn quantize_matches_reference_byte_for_byte() {
    let types = [
        QuantType::F16,
        QuantType::BF16,
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q8_0,
        // From ggml's own quantize_row_q{2..6}_K_ref (ggml_kquant_ref.c).
        QuantType::Q2_K,
        QuantType::Q3_K,
        QuantType::Q4_K,
        QuantType::Q5_K,
        QuantType::Q6_K,
    ];
    let mut files: Vec<String> = types
        .iter()
        .map(|t| format!("quant_{}.bin", name(*t)))
        .collect();
    files.push("quant_f16_wide.bin".into());
    files.push("quant_bf16_wide.bin".into());
    for f in files {
        let g = load(&f);
        let rb = g.ty.row_bytes(g.cols).unwrap();
        for r in 0..g.rows {
            let got = quantize_row(g.ty, &g.values[r * g.cols..(r + 1) * g.cols]).unwrap();
            let want = &g.bytes[r * rb..(r + 1) * rb];
            if got != want {
                let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
                panic!(
                    "{f} row {r}: first differing byte {i}: {} vs {}",
                    got[i], want[i]
                );
            }
        }
    }
}
