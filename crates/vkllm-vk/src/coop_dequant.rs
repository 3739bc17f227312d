//! Prefill products of quantized weights through an f16 copy: `dequant_f16` writes the weight's
//! rows as f16 into a scratch buffer, then `matmul_coop` multiplies them as an f16 weight
//! (its fastest path) instead of decoding blocks in every workgroup of every K step.
//!
//! Off by default (`VKLLM_COOP_DEQUANT=1`, or [`Recorder::set_dequant_weights`]): not yet
//! measured end to end. The expected trade, from the per-shape figures (H200, n = 512,
//! `matmul_bench --auto`, us): Llama-3.2-1B 8192 x 2048 Q8_0 151.9 against f16 105.2 and
//! 2048 x 8192 184.9 against 136.8, for a copy that writes 2 bytes per weight (32 MiB for
//! 8192 x 2048, some 10 us at the device's copy bandwidth); Qwen3-0.6B's small shapes gain
//! less (3072 x 1024 Q8_0 40.0 against f16 33.7). The copies live in [`DEQUANT_SLOTS`] scratch
//! buffers used in turn (so q/k/v or gate/up still overlap), each as large as the largest
//! weight copied through it.

use vkllm_kernels::dequant_f16::{DequantF16, f16_bytes};

use crate::buffer::{Buffer, MemoryKind};
use crate::error::Result;
use crate::recorder::Recorder;
use crate::tensor::Tensor;

/// Scratch buffers for f16 weight copies per recorder.
pub const DEQUANT_SLOTS: usize = 3;

/// `VKLLM_COOP_DEQUANT=1` (read once): cooperative-matrix prefill products of quantized weights
/// multiply an f16 copy ([`Recorder::dequant_weights`]'s default); otherwise they decode the
/// blocks themselves (the reference path).
pub fn dequant_enabled() -> bool {
    static D: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *D.get_or_init(|| std::env::var("VKLLM_COOP_DEQUANT").is_ok_and(|v| v == "1"))
}

/// The scratch of f16 weight copies (part of the split-K scratch a recorder hands on).
#[derive(Default)]
pub struct DequantSlots {
    bufs: [Option<Buffer>; DEQUANT_SLOTS],
    next: usize,
    /// Set by [`Recorder::set_dequant_weights`]; `None`: [`dequant_enabled`].
    on: Option<bool>,
}

impl Recorder {
    /// Cooperative-matrix products of quantized weights recorded from now on multiply an f16
    /// copy (`true`) or decode blocks themselves (`false`).
    pub fn set_dequant_weights(&mut self, on: bool) {
        self.split.deq.on = Some(on);
    }

    /// Whether cooperative-matrix products of quantized weights multiply an f16 copy.
    pub fn dequant_weights(&self) -> bool {
        self.split.deq.on.unwrap_or_else(dequant_enabled)
    }

    /// Whether a cooperative-matrix product of `w` goes through an f16 copy: on
    /// ([`Recorder::dequant_weights`]), a quantized weight in one part whose rows are whole
    /// 16-byte words as f16 (`cols % 8 == 0`, the f16 path's vector loads).
    pub(crate) fn dequant_applies(&self, w: &Tensor) -> bool {
        self.dequant_weights()
            && w.dtype.is_quantized()
            && w.parts.len() == 1
            && w.cols.is_multiple_of(8)
    }

    /// Records `w`'s f16 copy into the next scratch slot (grown to fit) and returns the slot;
    /// its first `f16_bytes(rows, cols)` bytes hold the copy.
    pub(crate) fn f16_weight(&mut self, w: &Tensor) -> Result<Buffer> {
        let bytes = f16_bytes(w.rows, w.cols);
        let i = self.split.deq.next;
        self.split.deq.next = (i + 1) % DEQUANT_SLOTS;
        let buf = match &self.split.deq.bufs[i] {
            Some(b) if b.size() >= bytes => b.clone(),
            _ => {
                let b =
                    self.device()
                        .create_buffer("matmul f16 weight", bytes, MemoryKind::Device)?;
                self.split.deq.bufs[i] = Some(b.clone());
                b
            }
        };
        let d = DequantF16 {
            w: w.parts[0].buffer.all(),
            out: buf.slice(0, bytes)?,
        }
        .dispatch(w.dtype, w.rows, w.cols)?;
        self.dispatch(d)?;
        Ok(buf)
    }
}
