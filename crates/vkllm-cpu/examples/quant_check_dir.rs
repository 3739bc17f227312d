//! Dequantizes every golden-format file (`fixtures/quant/make_quant_goldens.py` layout) in a
//! directory and compares bit for bit; used for the one-off check against real GGUF files
//! (`fixtures/quant/extract_real_gguf.py`). Exits non-zero on any mismatch or bad file.
//!
//! `cargo run -p vkllm-cpu --example quant_check_dir -- DIR`

use std::collections::BTreeMap;
use std::process::ExitCode;

use vkllm_cpu::{QuantType, dequantize_row};

fn u32_at(b: &[u8], i: usize) -> Option<usize> {
    Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?) as usize)
}

/// Returns (type, elements, mismatches) or a reason the file is unreadable.
fn check(b: &[u8]) -> Result<(QuantType, usize, usize), String> {
    if b.get(0..4) != Some(b"VKQG") {
        return Err("bad magic".into());
    }
    let id = u32_at(b, 8).ok_or("short header")?;
    let ty = QuantType::from_ggml_id(id as u32).map_err(|e| e.to_string())?;
    let (rows, cols, n) = (
        u32_at(b, 12).ok_or("short")?,
        u32_at(b, 16).ok_or("short")?,
        u32_at(b, 20).ok_or("short")?,
    );
    let bytes = b.get(24..24 + n).ok_or("short blocks")?;
    let want: Vec<f32> = b
        .get(24 + n..)
        .ok_or("short values")?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if want.len() != rows * cols {
        return Err(format!("{} values for [{rows}, {cols}]", want.len()));
    }
    let mut got = vec![f32::NAN; rows * cols];
    dequantize_row(ty, bytes, &mut got).map_err(|e| e.to_string())?;
    let bad = got
        .iter()
        .zip(&want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    Ok((ty, rows * cols, bad))
}

fn main() -> ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: quant_check_dir DIR");
        return ExitCode::FAILURE;
    };
    let mut entries: Vec<_> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            eprintln!("{dir}: {e}");
            return ExitCode::FAILURE;
        }
    };
    entries.sort();
    let mut per_type: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    let mut failed = entries.is_empty();
    for p in &entries {
        let res = std::fs::read(p)
            .map_err(|e| e.to_string())
            .and_then(|b| check(&b));
        match res {
            Ok((ty, n, bad)) => {
                let e = per_type.entry(ty.name()).or_default();
                *e = (e.0 + 1, e.1 + n, e.2 + bad);
                if bad > 0 {
                    eprintln!("{}: {bad} of {n} values differ", p.display());
                    failed = true;
                }
            }
            Err(e) => {
                eprintln!("{}: {e}", p.display());
                failed = true;
            }
        }
    }
    for (ty, (files, n, bad)) in &per_type {
        println!("{ty:>7}: {files:4} tensors, {n:11} values, {bad} differ");
    }
    if failed {
        eprintln!("FAILED ({} files)", entries.len());
        ExitCode::FAILURE
    } else {
        println!("all {} tensors bit-identical", entries.len());
        ExitCode::SUCCESS
    }
}
