//! Weight tensors: a `[rows, cols]` matrix in F32/F16/BF16 or a llama.cpp block format (the raw
//! GGUF bytes), split by rows into parts that each fit one storage-buffer range (128 MiB on
//! lavapipe, 4 GiB on NVIDIA), and the matrix kernels run over all parts. A row of a quantized
//! tensor is `cols / block_size` whole blocks, so splits fall on row (and block) boundaries.

use vkllm_kernels::WeightType;
use vkllm_kernels::embedding::{Embedding, EmbeddingShape};
use vkllm_kernels::matmul::Matmul;
use vkllm_kernels::matmul_cm2::CmTile;
use vkllm_kernels::matmul_coop::{CoopConfig, CoopTile, MatmulCoop};
use vkllm_kernels::matmul_narrow::NarrowConfig;
use vkllm_kernels::matvec::{MatShape, Matvec};
use vkllm_kernels::matvec_fused::{
    Epilogue, MatvecFused, MatvecImpl, MatvecOp, MatvecPart, MatvecTuning, NormPrologue,
};
use vkllm_kernels::matvec_rows::MatvecLayout;

use crate::Error;
use crate::buffer::{BufSlice, Buffer, MemoryKind};
use crate::decode_route::fused_matvec_impl;
use crate::device::Device;
use crate::error::Result;
use crate::recorder::Recorder;

/// One row range of a weight.
#[derive(Clone, Debug)]
pub struct TensorPart {
    pub buffer: Buffer,
    pub row_start: usize,
    pub rows: usize,
}

/// A row-major `[rows, cols]` weight on the device.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: WeightType,
    pub rows: usize,
    pub cols: usize,
    pub parts: Vec<TensorPart>,
}

impl Tensor {
    /// Allocates a weight, split so every part fits `dev.max_buffer_bytes()`.
    pub fn new(
        dev: &Device,
        label: &str,
        dtype: WeightType,
        rows: usize,
        cols: usize,
    ) -> Result<Self> {
        if rows == 0 || cols == 0 {
            return Err(Error::Shape(format!(
                "{label}: empty tensor [{rows}, {cols}]"
            )));
        }
        if !dtype.is_quantized() && dtype != WeightType::F32 && !cols.is_multiple_of(2) {
            return Err(Error::Shape(format!(
                "{label}: 16-bit rows must have an even length, got {cols}"
            )));
        }
        let Some(row_bytes) = dtype.row_bytes(cols as u64) else {
            return Err(Error::Shape(format!(
                "{label}: {} rows must be a multiple of {} elements, got {cols}",
                dtype.name(),
                dtype.block_size()
            )));
        };
        // Whole 16-byte words, so padding a part to one (the fast matvec reads weights as 16-byte
        // words) cannot take it past the limit.
        let max = dev.max_buffer_bytes() / 16 * 16;
        // Parts also stay under 2^32 elements and (quantized) under 4 GiB - 16 bytes: the
        // kernels index elements and bytes with u32.
        let rows_per_part = ((max / row_bytes) as usize)
            .min((u32::MAX as usize) / cols)
            .min(((u32::MAX as u64 - 16) / row_bytes) as usize);
        if rows_per_part == 0 {
            return Err(Error::BufferRange {
                what: format!("{label}: one row"),
                len: row_bytes,
                max,
            });
        }
        let mut parts = Vec::new();
        let mut r = 0;
        while r < rows {
            let n = rows_per_part.min(rows - r);
            // Quantized rows need not be whole words: pad the part to a 16-byte word.
            let buffer = dev.create_buffer(
                &format!("{label}[{r}..{}]", r + n),
                (row_bytes * n as u64).div_ceil(16) * 16,
                MemoryKind::Device,
            )?;
            parts.push(TensorPart {
                buffer,
                row_start: r,
                rows: n,
            });
            r += n;
        }
        Ok(Tensor {
            dtype,
            rows,
            cols,
            parts,
        })
    }

    /// Uploads the whole weight from its packed bytes (`rows * cols` elements of `dtype`,
    /// little-endian, 16-bit types two per word, quantized types as GGUF blocks: the bytes as
    /// stored on disk).
    pub fn upload(&self, dev: &Device, bytes: &[u8]) -> Result<()> {
        let row_bytes = self.row_bytes();
        if bytes.len() != row_bytes * self.rows {
            return Err(Error::Shape(format!(
                "tensor [{}, {}] {}: got {} bytes, need {}",
                self.rows,
                self.cols,
                self.dtype.name(),
                bytes.len(),
                row_bytes * self.rows
            )));
        }
        for p in &self.parts {
            let s = p.row_start * row_bytes;
            dev.upload(&p.buffer, 0, &bytes[s..s + p.rows * row_bytes])?;
        }
        Ok(())
    }

    /// A tensor holding `bytes` (see [`Tensor::upload`]).
    pub fn from_bytes(
        dev: &Device,
        label: &str,
        dtype: WeightType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<Self> {
        let t = Self::new(dev, label, dtype, rows, cols)?;
        t.upload(dev, bytes)?;
        Ok(t)
    }

    /// Bytes of one row as stored (whole blocks for quantized types; no padding).
    pub fn row_bytes(&self) -> usize {
        // `new` checked that cols is a whole number of blocks.
        self.cols / self.dtype.block_size() * self.dtype.bytes() as usize
    }

    /// The matmul shape of part `p` (its rows, the tensor's columns and type).
    pub fn shape(&self, p: &TensorPart, accumulate: bool) -> MatShape {
        MatShape {
            dtype: self.dtype,
            rows: p.rows,
            cols: self.cols,
            row_offset: p.row_start,
            accumulate,
        }
    }
}

/// Which kernel runs [`Recorder::matmul_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulKernel {
    /// Cooperative matrices when the device enabled them ([`Device::coopmat`]): quantized
    /// products of 2 to the tuning's `coop_narrow` tokens on `matmul_narrow`
    /// ([`crate::narrow_config`]); else for `n >= COOP_MIN_N`, where a tiling runs with the
    /// device's subgroup size, `matmul_coop` with the tiling [`CoopTile::for_shape`] picks and
    /// split-K where the grid is small ([`crate::coop_auto_config`]; tuning `splitk=off` keeps
    /// the original launch); else the portable kernels.
    Auto,
    /// The portable tiled kernels (`matmul.wgsl`, `mat_quant.wgsl`): the reference path.
    Portable,
    /// `matmul_coop.wgsl` with this tiling (an error on devices without cooperative matrices).
    Coop(CoopTile),
    /// `matmul_coop.wgsl` with this launch (K step, split-K; an error on devices without
    /// cooperative matrices or where it does not fit).
    CoopWith(CoopConfig),
    /// `matmul_narrow.wgsl` with this launch (an error on devices without cooperative matrices
    /// or for shapes it does not take).
    Narrow(NarrowConfig),
    /// `matmul_cm2.comp` with this tile (an error on devices without the cm2 kernels or for
    /// weights it does not take: f16, or quantized ones with an f16 copy).
    Cm2(CmTile),
}

/// Fewest tokens for which [`MatmulKernel::Auto`] takes the cooperative-matrix kernel (its
/// smallest tile is 64 tokens; below 16 most of every 16 x 16 tile would be padding).
pub const COOP_MIN_N: usize = 16;

/// [`MatmulKernel::Auto`] takes the largest tiling that still makes this many workgroups, else
/// the smallest: about one workgroup per multiprocessor of a large GPU (132 SMs). At n = 512,
/// 4096 and 3072 rows then take 128 x 128 tiles and 1024 rows 64 x 64 (docs/benchmarks.md).
pub const COOP_MIN_GROUPS: usize = 96;

/// What a [`Recorder::matvec_fused`] computes besides `y = W x` (see
/// [`vkllm_kernels::matvec_fused`]).
#[derive(Clone, Copy, Debug)]
pub struct MatvecPlan<'a> {
    /// Activation columns (tokens), 1..=8: x is `[n_cols, cols]`, y is `[n_cols, y_stride]`.
    pub n_cols: usize,
    pub y_stride: usize,
    /// Where each weight's rows go in a row of y (one offset per weight; gated: the first
    /// places the output, the second is not used).
    pub y_offsets: &'a [usize],
    /// RMSNorm of x first: its weight `[cols]` and parameters.
    pub norm: Option<(BufSlice<'a>, NormPrologue)>,
    pub epilogue: Epilogue,
    /// Launch shape; `None` for the kernel's default.
    pub tuning: Option<MatvecTuning>,
    /// Thread layout; `None` for [`default_matvec_layout`] of the device.
    pub layout: Option<MatvecLayout>,
    /// The next product reads y with this RMSNorm prologue (weights, offset): an accumulating
    /// one-column int8 product may quantize y for it (`Q8aRules::xg_produce`).
    pub next_norm: Option<(BufSlice<'a>, f32)>,
}

impl<'a> MatvecPlan<'a> {
    /// Store, no norm, default tuning.
    pub fn new(n_cols: usize, y_stride: usize, y_offsets: &'a [usize]) -> Self {
        MatvecPlan {
            n_cols,
            y_stride,
            y_offsets,
            norm: None,
            epilogue: Epilogue::Store,
            tuning: None,
            layout: None,
            next_norm: None,
        }
    }
}

/// The matvec layout for `dev`: [`crate::Tuning::matvec_layout`] when set, else
/// [`MatvecLayout::Rows`] on CPU implementations (lavapipe: one invocation per row suits SIMD
/// lanes on CPU threads) and [`MatvecLayout::Teams`] on every GPU. Rows needs subgroups of at
/// least 8 lanes (teams otherwise, even when asked for).
pub fn default_matvec_layout(dev: &crate::Device) -> MatvecLayout {
    let forced = dev.tuning().matvec_layout;
    // The rows kernel broadcasts x across 8 lanes of a subgroup.
    let rows_ok = dev.info().subgroup_size >= 8;
    match forced {
        Some(MatvecLayout::Rows) if rows_ok => MatvecLayout::Rows,
        Some(_) => MatvecLayout::Teams,
        None if rows_ok && dev.info().kind == crate::DeviceKind::Cpu => MatvecLayout::Rows,
        None => MatvecLayout::Teams,
    }
}

/// One part per weight (each unsplit), at its output offset.
pub(crate) fn whole_parts(w: &[&Tensor], y_offsets: &[usize]) -> Vec<MatvecPart> {
    w.iter()
        .zip(y_offsets)
        .map(|(t, &y_offset)| MatvecPart {
            rows: t.rows,
            y_offset,
        })
        .collect()
}

pub(crate) fn unfusable(w: &[&Tensor], reason: impl Into<String>) -> Error {
    let weights: Vec<String> = w
        .iter()
        .map(|t| format!("{} [{}, {}]", t.dtype.name(), t.rows, t.cols))
        .collect();
    Error::Unfusable {
        weights: weights.join(", "),
        reason: reason.into(),
    }
}

impl Recorder {
    /// `y (+)= W x` over every part of `w` (one dispatch per part), with
    /// [`fused_matvec_impl`] (the device's default, or the tuning's `matvec`).
    pub fn matvec(
        &mut self,
        w: &Tensor,
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        accumulate: bool,
    ) -> Result<()> {
        let imp = fused_matvec_impl(self.device());
        self.matvec_impl(imp, w, x, y, accumulate)
    }

    /// [`Recorder::matvec`] with the kernel chosen by `imp` (the fast kernel falls back to the
    /// reference for float rows that are not whole 16-byte words).
    pub fn matvec_impl(
        &mut self,
        imp: MatvecImpl,
        w: &Tensor,
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        accumulate: bool,
    ) -> Result<()> {
        self.matvec_next(imp, w, x, y, accumulate, None)
    }

    /// `y += W x` for one column whose y the next product reads with the RMSNorm prologue
    /// `next` (weights, offset): [`Recorder::matvec`] with [`MatvecPlan::next_norm`], so that
    /// the int8 product may quantize y for that product.
    pub fn matvec_add_before_norm(
        &mut self,
        w: &Tensor,
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        next: (BufSlice<'_>, f32),
    ) -> Result<()> {
        let imp = fused_matvec_impl(self.device());
        self.matvec_next(imp, w, x, y, true, Some(next))
    }

    /// [`Recorder::matvec_impl`] with [`MatvecPlan::next_norm`] (the reference kernel, which
    /// does not quantize its output, ignores it).
    fn matvec_next(
        &mut self,
        imp: MatvecImpl,
        w: &Tensor,
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        accumulate: bool,
        next_norm: Option<(BufSlice<'_>, f32)>,
    ) -> Result<()> {
        if imp != MatvecImpl::Reference {
            let mut plan = MatvecPlan::new(1, w.rows, &[0]);
            if accumulate {
                plan.epilogue = Epilogue::Accumulate;
            }
            plan.next_norm = next_norm;
            return self.matvec_fused_with(imp, &[w], x, y, &plan);
        }
        for p in &w.parts {
            let d = Matvec {
                w: p.buffer.all(),
                x,
                y,
            }
            .dispatch(&w.shape(p, accumulate))?;
            self.dispatch(d)?;
        }
        Ok(())
    }

    /// One fused matvec over 1..=3 weights of one type and column count (q/k/v into regions of
    /// one output; gate and up with a gated epilogue), `plan.n_cols` columns, an optional
    /// RMSNorm prologue. A single row-split weight runs one dispatch per part; several weights
    /// or a gated epilogue need unsplit weights of one type: otherwise [`Error::Unfusable`], and
    /// the caller records separate matvecs. A single weight whose float rows are not whole
    /// 16-byte words runs the reference kernel when the plan is plain (one column, store or
    /// accumulate, no norm), and is [`Error::Unfusable`] otherwise.
    pub fn matvec_fused(
        &mut self,
        w: &[&Tensor],
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        plan: &MatvecPlan<'_>,
    ) -> Result<()> {
        let imp = fused_matvec_impl(self.device());
        self.matvec_fused_with(imp, w, x, y, plan)
    }

    /// [`Recorder::matvec_fused`] on a chosen kernel: [`MatvecImpl::Int8`] runs
    /// `matvec_q8a.wgsl` where [`Recorder::q8a_runs`] says so and the fast kernel elsewhere;
    /// [`MatvecImpl::Reference`] is taken as [`MatvecImpl::Fast`] (the reference kernels have
    /// no fusions: [`Recorder::matvec_impl`] runs them).
    pub fn matvec_fused_with(
        &mut self,
        imp: MatvecImpl,
        w: &[&Tensor],
        x: BufSlice<'_>,
        y: BufSlice<'_>,
        plan: &MatvecPlan<'_>,
    ) -> Result<()> {
        let Some(first) = w.first() else {
            return Err(Error::Shape("matvec_fused: no weights".into()));
        };
        if plan.y_offsets.len() != w.len() {
            return Err(Error::Shape(format!(
                "matvec_fused: {} weights, {} y offsets",
                w.len(),
                plan.y_offsets.len()
            )));
        }
        if w.iter().any(|t| t.cols != first.cols) {
            return Err(unfusable(w, "weights differ in columns"));
        }
        let gated = matches!(plan.epilogue, Epilogue::Gated { .. });
        let mixed = w.iter().any(|t| t.dtype != first.dtype);
        let mut op = MatvecOp {
            dtype: first.dtype,
            cols: first.cols,
            parts: Vec::new(),
            part_types: if mixed {
                w.iter().map(|t| t.dtype).collect()
            } else {
                Vec::new()
            },
            n_cols: plan.n_cols,
            y_stride: plan.y_stride,
            norm: plan.norm.map(|(_, n)| n),
            epilogue: plan.epilogue,
            tuning: plan.tuning,
            q8a: self.q8a_rules(),
        };
        let norm_w = plan.norm.map(|(b, _)| b);
        let layout = match plan.layout {
            // The rows kernel needs 8-lane subgroups (see `default_matvec_layout`).
            Some(MatvecLayout::Rows) if self.device().info().subgroup_size < 8 => {
                MatvecLayout::Teams
            }
            Some(l) => l,
            None => default_matvec_layout(self.device()),
        };
        if mixed {
            // Weights of different types share one launch only on the int8 kernel (one part
            // each); `y_offsets` gave the parts so that the kernel's checks see them.
            op.parts = whole_parts(w, plan.y_offsets);
            let int8 = self.q8a_xg_runs(imp, &op) || self.q8a_runs(imp, &op);
            if !int8 || w.iter().any(|t| t.parts.len() != 1) {
                return Err(unfusable(w, "weights differ in type"));
            }
        }
        if !op.fast_supported() {
            let plain = w.len() == 1
                && plan.n_cols == 1
                && plan.norm.is_none()
                && matches!(plan.epilogue, Epilogue::Store | Epilogue::Accumulate);
            if !plain {
                return Err(unfusable(
                    w,
                    format!(
                        "{} rows of {} elements are not whole 16-byte words",
                        first.dtype.name(),
                        first.cols
                    ),
                ));
            }
            let accumulate = plan.epilogue == Epilogue::Accumulate;
            for p in &first.parts {
                let mut s = first.shape(p, accumulate);
                s.row_offset += plan.y_offsets[0];
                let d = Matvec {
                    w: p.buffer.all(),
                    x,
                    y,
                }
                .dispatch(&s)?;
                self.dispatch(d)?;
            }
            return Ok(());
        }
        if self.q8a_xg_runs(imp, &op) {
            return self.matvec_q8a_xg(w, x, y, norm_w, op, plan.y_offsets);
        }
        if let Some(next) = plan.next_norm
            && w.len() == 1
            && plan.y_offsets[0] == 0
            && self.matvec_q8a_qout(imp, first, x, y, &op, next)?
        {
            return Ok(());
        }
        if w.len() == 1 && !gated {
            for p in &first.parts {
                op.parts = vec![MatvecPart {
                    rows: p.rows,
                    y_offset: plan.y_offsets[0] + p.row_start,
                }];
                let m = MatvecFused {
                    w: vec![p.buffer.all()],
                    x,
                    y,
                    norm_w,
                };
                let d = if self.q8a_runs(imp, &op) {
                    m.dispatch_q8a(&op)?
                } else {
                    match layout {
                        MatvecLayout::Teams => m.dispatch(&op)?,
                        MatvecLayout::Rows => m.dispatch_rows(&op)?,
                    }
                };
                self.dispatch(d)?;
            }
            return Ok(());
        }
        if w.iter().any(|t| t.parts.len() != 1) {
            return Err(unfusable(w, "a weight is split in row parts"));
        }
        op.parts = whole_parts(w, plan.y_offsets);
        if layout == MatvecLayout::Rows && !gated && !self.q8a_runs(imp, &op) {
            // One dispatch per part: llvmpipe runs a branch between bindings as masked code
            // that loads from every one of them.
            for (t, part) in w.iter().zip(op.parts.clone()) {
                op.parts = vec![part];
                let d = MatvecFused {
                    w: vec![t.parts[0].buffer.all()],
                    x,
                    y,
                    norm_w,
                }
                .dispatch_rows(&op)?;
                self.dispatch(d)?;
            }
            return Ok(());
        }
        let m = MatvecFused {
            w: w.iter().map(|t| t.parts[0].buffer.all()).collect(),
            x,
            y,
            norm_w,
        };
        let d = if self.q8a_runs(imp, &op) {
            m.dispatch_q8a(&op)?
        } else {
            match layout {
                MatvecLayout::Teams => m.dispatch(&op)?,
                MatvecLayout::Rows => m.dispatch_rows(&op)?,
            }
        };
        self.dispatch(d)
    }

    /// Whether [`Recorder::matvec_fused_with`] takes `matvec_q8a.wgsl` for `op`: `imp` is
    /// [`MatvecImpl::Int8`], the device enabled integer dot products ([`Device::int8_dot`]), has
    /// subgroups of at least 4 lanes and the kernel's shared memory, and the kernel takes the op
    /// ([`vkllm_kernels::matvec_q8a::supported`]).
    pub fn q8a_runs(&self, imp: MatvecImpl, op: &MatvecOp) -> bool {
        let dev = self.device();
        imp == MatvecImpl::Int8
            && dev.int8_dot()
            && dev.info().min_subgroup_size >= 4
            && dev.info().limits.max_shared_memory as usize
                >= vkllm_kernels::matvec_q8a::SHARED_BYTES
            && vkllm_kernels::matvec_q8a::supported(op)
    }

    /// `Y[n, rows] (+)= X[n, cols] W^T` over every part of `w` ([`MatmulKernel::Auto`]).
    pub fn matmul(
        &mut self,
        w: &Tensor,
        x: BufSlice<'_>,
        n: usize,
        y: BufSlice<'_>,
        accumulate: bool,
    ) -> Result<()> {
        self.matmul_with(w, x, n, y, accumulate, MatmulKernel::Auto)
    }

    /// [`Recorder::matmul`] on a chosen kernel.
    pub fn matmul_with(
        &mut self,
        w: &Tensor,
        x: BufSlice<'_>,
        n: usize,
        y: BufSlice<'_>,
        accumulate: bool,
        kernel: MatmulKernel,
    ) -> Result<()> {
        let dev = self.device().clone();
        let narrow = match kernel {
            MatmulKernel::Narrow(c) if dev.coopmat() => Some(c),
            MatmulKernel::Auto => {
                crate::matmul_narrow::narrow_config(&dev, w.dtype, w.rows, n, w.cols)
            }
            _ => None,
        };
        if let Some(c) = narrow {
            return self.matmul_narrow(w, x, n, y, accumulate, c);
        }
        for p in &w.parts {
            if let Some(t) = self.cm2_tile(w, p.rows, n, false, kernel) {
                self.matmul_cm2_part(w, p, x, n, y, accumulate, t)?;
                continue;
            }
            if let MatmulKernel::Cm2(_) = kernel {
                return Err(self.cm2_missing(w, n));
            }
            let sg = dev.info().subgroup_size;
            let cfg = match kernel {
                MatmulKernel::Portable => None,
                MatmulKernel::Auto if !dev.coopmat() || n < COOP_MIN_N => None,
                MatmulKernel::Auto => crate::coop_split::auto_config(
                    dev.tuning(),
                    w.dtype,
                    p.rows,
                    n,
                    w.cols,
                    sg,
                    COOP_MIN_GROUPS,
                ),
                MatmulKernel::Coop(_) | MatmulKernel::CoopWith(_) | MatmulKernel::Narrow(_)
                    if !dev.coopmat() =>
                {
                    return Err(Error::MissingFeature {
                        device: dev.info().name.clone(),
                        feature: "cooperative matrices (VK_KHR_cooperative_matrix, f16 16x16x16) \
                                  enabled on the device"
                            .into(),
                    });
                }
                MatmulKernel::Coop(t) => Some(CoopConfig::plain(t)),
                MatmulKernel::CoopWith(c) => Some(c),
                // (Recorded above.)
                MatmulKernel::Narrow(_) | MatmulKernel::Cm2(_) => None,
            };
            let mut shape = w.shape(p, accumulate);
            // A quantized weight may be multiplied as its f16 copy (coop_dequant.rs), with the
            // launch an f16 weight of that shape takes.
            let copy = match cfg {
                Some(_) if self.dequant_applies(w, w.rows * w.cols, n) => Some(self.f16_weight(w)?),
                _ => None,
            };
            let cfg = match (&copy, kernel) {
                (Some(_), MatmulKernel::Auto) => {
                    shape.dtype = WeightType::F16;
                    crate::coop_split::auto_config(
                        dev.tuning(),
                        WeightType::F16,
                        p.rows,
                        n,
                        w.cols,
                        sg,
                        COOP_MIN_GROUPS,
                    )
                }
                (Some(_), _) => {
                    shape.dtype = WeightType::F16;
                    cfg
                }
                (None, _) => cfg,
            };
            // Accumulating and split-K auto launches store Y directly where they can.
            let cfg = match (cfg, kernel) {
                (Some(c), MatmulKernel::Auto) => Some(CoopConfig {
                    direct: crate::coop_split::direct_wanted(
                        self.device().tuning(),
                        accumulate,
                        c.split,
                    ),
                    ..c
                }),
                (c, _) => c,
            };
            let wbuf = match &copy {
                Some(b) => b.slice(0, vkllm_kernels::dequant_f16::f16_bytes(w.rows, w.cols))?,
                None => p.buffer.all(),
            };
            // f16 X: converted once per source (the parts and q/k/v share it).
            let half = cfg
                .is_some_and(|c| c.x_f16)
                .then(|| self.half_x(x, n * w.cols))
                .transpose()?;
            let x = half.as_ref().map_or(x, |h| h.all());
            let d = match cfg {
                None => Matmul {
                    w: p.buffer.all(),
                    x,
                    y,
                }
                .dispatch(&shape, n, w.rows)?,
                Some(c) if c.split > 1 => {
                    let (pb, cb) = c.scratch_bytes(p.rows, n);
                    let (buf, ctr) = self.split_slot(pb, cb)?;
                    let scratch = crate::coop_split::scratch_slices(&buf, ctr)?;
                    let d = MatmulCoop { w: wbuf, x, y }.dispatch_with(
                        &shape,
                        n,
                        w.rows,
                        sg,
                        &c,
                        Some(scratch),
                    )?;
                    self.dispatch(d)?;
                    continue;
                }
                Some(c) => {
                    MatmulCoop { w: wbuf, x, y }.dispatch_with(&shape, n, w.rows, sg, &c, None)?
                }
            };
            self.dispatch(d)?;
        }
        Ok(())
    }

    /// `out[t] = table[ids[t]]` over every part of the `[vocab, dim]` table.
    pub fn embedding(
        &mut self,
        table: &Tensor,
        ids: BufSlice<'_>,
        n: usize,
        out: BufSlice<'_>,
    ) -> Result<()> {
        for p in &table.parts {
            let d = Embedding {
                table: p.buffer.all(),
                ids,
                out,
            }
            .dispatch(&EmbeddingShape {
                dtype: table.dtype,
                vocab: table.rows,
                dim: table.cols,
                n,
                row_start: p.row_start,
                part_rows: p.rows,
            })?;
            self.dispatch(d)?;
        }
        Ok(())
    }
}
