//! `shaders/mat_quant.wgsl`: matvec, matmul and embedding gather over llama.cpp-quantized
//! weights (the raw GGUF blocks, dequantized in registers). Callers reach these through the
//! ordinary [`Matvec`], [`Matmul`] and [`Embedding`] bindings with a quantized [`WeightType`].

use crate::embedding::{Embedding, EmbeddingShape};
use crate::matmul::{Matmul, MatmulParams, TILE};
use crate::matvec::{MatShape, Matvec, check_weight};
use crate::sources::MAT_QUANT as SRC;
use crate::spec::{MAX_GROUPS_X, grid_for, need, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides, WeightType};

const WG: u32 = 256;

/// Matvec workgroup size and rows per workgroup for rows of `cols` elements: each invocation
/// takes 16-element units, so short rows (Qwen2.5-0.5B's 896 columns are 56 units) get smaller
/// workgroups with more rows each, keeping most invocations busy.
pub fn matvec_config(cols: usize) -> (u32, u32) {
    match cols / 16 {
        0..=64 => (64, 4),
        65..=128 => (128, 2),
        _ => (256, 2),
    }
}

pub static MATVEC_QUANT: KernelSpec = KernelSpec {
    name: "matvec_quant",
    file: "mat_quant.wgsl",
    entry: "matvec",
    source: SRC,
    bindings: &[rd("w"), rd("x"), rw("y")],
    push_size: 24,
    exact_fp: false,
    glsl: None,
};

pub static MATMUL_QUANT: KernelSpec = KernelSpec {
    name: "matmul_quant",
    file: "mat_quant.wgsl",
    entry: "matmul",
    source: SRC,
    bindings: &[rd("w"), rd("x"), rw("y")],
    push_size: 24,
    exact_fp: false,
    glsl: None,
};

pub static EMBEDDING_QUANT: KernelSpec = KernelSpec {
    name: "embedding_quant",
    file: "mat_quant.wgsl",
    entry: "embedding",
    source: SRC,
    bindings: &[rd("table"), rd("ids"), rw("out")],
    push_size: 24,
    exact_fp: false,
    glsl: None,
};

/// The format overrides of `mat_quant.wgsl` for `dtype` (a quantized type).
pub fn format_overrides(dtype: WeightType) -> Overrides {
    Overrides::new()
        .set("QTYPE", dtype.ggml_id() as f64)
        .set("BLOCK", dtype.block_size() as f64)
        .set("TS", dtype.bytes() as f64)
}

pub(crate) fn matvec<B: KernelBuffer>(m: Matvec<B>, s: &MatShape) -> Result<Dispatch<B>, Error> {
    let k = &MATVEC_QUANT;
    check_weight(k, &m.w, s)?;
    need(k, "x", &m.x, 4 * s.cols as u64)?;
    need(k, "y", &m.y, 4 * (s.row_offset + s.rows) as u64)?;
    let (wg, r) = matvec_config(s.cols);
    let p = MatmulParams {
        n: 1,
        rows: to_u32(k, "rows", s.rows)?,
        cols: to_u32(k, "cols", s.cols)?,
        row_offset: to_u32(k, "row_offset", s.row_offset)?,
        y_stride: to_u32(k, "y_stride", s.row_offset + s.rows)?,
        accumulate: s.accumulate as u32,
    };
    Ok(Dispatch::new(
        k,
        format_overrides(s.dtype)
            .set("WG", wg as f64)
            .set("R", r as f64),
        vec![m.w, m.x, m.y],
        &p,
        grid_for(k, (s.rows as u64).div_ceil(r as u64))?,
    ))
}

pub(crate) fn matmul<B: KernelBuffer>(
    m: Matmul<B>,
    s: &MatShape,
    n: usize,
    y_stride: usize,
) -> Result<Dispatch<B>, Error> {
    let k = &MATMUL_QUANT;
    check_weight(k, &m.w, s)?;
    if s.row_offset + s.rows > y_stride {
        return Err(shape_err(k, "part rows beyond y_stride"));
    }
    need(k, "x", &m.x, 4 * (n * s.cols) as u64)?;
    need(k, "y", &m.y, 4 * (n * y_stride) as u64)?;
    let gx = s.rows.div_ceil(TILE);
    let gy = n.div_ceil(TILE);
    if n == 0 || gx > MAX_GROUPS_X as usize || gy > MAX_GROUPS_X as usize {
        return Err(shape_err(k, format!("grid {gx} x {gy} out of range")));
    }
    let p = MatmulParams::new(k, s, n, y_stride)?;
    Ok(Dispatch::new(
        k,
        format_overrides(s.dtype),
        vec![m.w, m.x, m.y],
        &p,
        [gx as u32, gy as u32, 1],
    ))
}

pub(crate) fn embedding<B: KernelBuffer>(
    e: Embedding<B>,
    s: &EmbeddingShape,
) -> Result<Dispatch<B>, Error> {
    let k = &EMBEDDING_QUANT;
    let Some(row_bytes) = s.dtype.row_bytes(s.dim as u64) else {
        return Err(shape_err(
            k,
            format!(
                "{} rows need dim a multiple of {}, got {}",
                s.dtype.name(),
                s.dtype.block_size(),
                s.dim
            ),
        ));
    };
    if s.n == 0 || s.dim == 0 || s.part_rows == 0 {
        return Err(shape_err(k, "empty dispatch"));
    }
    if s.n > MAX_GROUPS_X as usize {
        return Err(shape_err(
            k,
            format!("{} tokens > {MAX_GROUPS_X} per dispatch", s.n),
        ));
    }
    if s.row_start + s.part_rows > s.vocab {
        return Err(shape_err(k, "part rows beyond vocab"));
    }
    let bytes = (s.part_rows as u64) * row_bytes;
    if bytes > u32::MAX as u64 - 16 {
        return Err(shape_err(k, "quantized table part over 4 GiB: split it"));
    }
    need(k, "table", &e.table, bytes.div_ceil(4) * 4)?;
    need(k, "ids", &e.ids, 4 * s.n as u64)?;
    need(k, "out", &e.out, 4 * (s.n * s.dim) as u64)?;
    let p = MatmulParams {
        n: to_u32(k, "n", s.n)?,
        rows: to_u32(k, "part_rows", s.part_rows)?,
        cols: to_u32(k, "dim", s.dim)?,
        row_offset: to_u32(k, "row_start", s.row_start)?,
        y_stride: to_u32(k, "vocab", s.vocab)?,
        accumulate: 0,
    };
    let gx = (s.dim as u32 / 16).div_ceil(WG);
    Ok(Dispatch::new(
        k,
        format_overrides(s.dtype).set("WG", WG as f64),
        vec![e.table, e.ids, e.out],
        &p,
        [gx, s.n as u32, 1],
    ))
}
