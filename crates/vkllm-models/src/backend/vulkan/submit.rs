//! How recorded work reaches the GPU: the open recorder, forwards submitted in growing parts
//! while they are recorded, the one wait at the end (`flush`), and reads copied into a
//! host-visible buffer within the same submit.

use vkllm_vk::{Buffer, MemoryKind, Recorder, Validation};

use super::VulkanBackend;
use crate::backend::Tensor;
use crate::error::ModelError;

/// Dispatches of the first part of a forward submitted while the rest is recorded; each
/// further part doubles, up to [`MAX_PART`] (see `VulkanBackend::record`). 16 measured at least
/// as fast as 32 or 8 (docs/benchmarks.md); the tuning's `split_submit` default.
pub(super) const FIRST_PART: usize = vkllm_vk::SPLIT_SUBMIT_FIRST;
const MAX_PART: usize = 256;

/// The largest read `read_f32` copies within the recorded work (larger ones, e.g. every row's
/// logits of a long chunk, go through the device's chunked staging download).
const READBACK_MAX: u64 = 64 << 20;

impl VulkanBackend {
    /// Chooses how forwards reach the GPU (both on by default; the tuning's `one_submit=0` and
    /// `split_submit=0` turn them off at creation). `one_submit`: step inputs in
    /// host-visible memory and reads copied in the same submit as the work before them;
    /// `first_part`: a forward is submitted in growing parts while it is recorded, the first
    /// of this many dispatches (default 16), each next one twice as large up to 256 (or the
    /// first); `None`: one submit after recording. Off: inputs uploaded and logits
    /// downloaded by copies of their own, one submit after recording. Set it before any
    /// tensor is allocated (it picks where step inputs live).
    pub fn with_submits(mut self, one_submit: bool, first_part: Option<usize>) -> Self {
        self.one_submit = one_submit;
        self.first_part = first_part.map(|n| n.max(1));
        self.next_part = self.first_part.unwrap_or(FIRST_PART);
        self
    }

    /// Parts of forwards submitted before their recording was finished (see
    /// [`VulkanBackend::with_submits`]).
    pub fn parts_submitted(&self) -> u64 {
        self.parts_submitted
    }

    /// Submits everything recorded so far and waits for it.
    pub fn flush(&mut self) -> Result<(), ModelError> {
        if self.capture_ctx.is_some() {
            return Err(ModelError::Config {
                field: "decode capture".into(),
                msg: "an op needed a host round trip while a decode step was being recorded".into(),
            });
        }
        if let Some(mut r) = self.rec.take() {
            self.split_scratch = r.take_split_scratch();
            let rec = r.finish()?;
            rec.submit()?;
            if let Some(t) = self.profiled.as_mut() {
                // Each recording's times start at 0: continue after the previous one.
                let off = t.last().map_or(0.0, |d| d.start_ns + d.ns);
                t.extend(rec.timings()?.into_iter().map(|mut d| {
                    d.start_ns += off;
                    d
                }));
            }
            if self.dev.validation() == Validation::On {
                self.dev.check_validation()?;
            }
        }
        // Earlier parts finished before the last one (it starts with a full barrier); waiting
        // is a formality, dropping them frees their command buffers.
        for part in self.in_flight.drain(..) {
            part.wait()?;
        }
        // A replayed chain submitted before the work above finished before it too.
        self.wait_replay()?;
        self.next_part = self.first_part.unwrap_or(FIRST_PART);
        if !self.retired.is_empty() {
            // Replaced scratch is freed: captures recorded over it must not run.
            self.scratch_gen += 1;
            self.retired.clear();
        }
        Ok(())
    }

    /// Runs `f` with the open recorder (one is started when none is open).
    pub(super) fn record(
        &mut self,
        f: impl FnOnce(&Self, &mut Recorder) -> Result<(), ModelError>,
    ) -> Result<(), ModelError> {
        let mut r = match self.rec.take() {
            Some(r) => r,
            None => {
                let mut r = Recorder::with_timestamps(&self.dev, self.timestamps)?;
                r.set_split_scratch(std::mem::take(&mut self.split_scratch));
                r
            }
        };
        // Decode steps may take quantized x in the int8 matvec (the tuning's `q8a_xg`); prompt
        // prefill keeps the exact products, as its keys and values stay in the cache.
        let xg = self.decoding() && self.dev.tuning().q8a_xg;
        let rules = r.q8a_rules();
        r.set_q8a_rules(vkllm_vk::kernels::matvec_q8a::Q8aRules { xg, ..rules });
        let res = f(self, &mut r);
        if res.is_ok()
            && let Some(first) = self.first_part
            && self.timestamps == 0
            && self.capture_ctx.is_none()
            && r.dispatches() >= self.next_part
        {
            // Start the GPU on what is recorded while the rest is recorded: parts of 16, 32,
            // 64... dispatches are submitted without waiting; `flush` submits the last part
            // and waits.
            self.split_scratch = r.take_split_scratch();
            let part = r.finish()?;
            part.submit_nowait()?;
            self.in_flight.push(part);
            self.parts_submitted += 1;
            self.next_part = (2 * self.next_part).min(MAX_PART.max(first));
            return Ok(());
        }
        self.rec = Some(r);
        res
    }

    /// The host-visible buffer reads are copied into (grown to `bytes` on demand; a recording
    /// keeps the buffer it copies into alive, so a replaced one is never freed under it).
    pub(super) fn readback_buffer(&mut self, bytes: u64) -> Result<Buffer, ModelError> {
        match &self.readback {
            Some(b) if b.size() >= bytes => Ok(b.clone()),
            _ => {
                let b = self
                    .dev
                    .create_buffer("readback", bytes, MemoryKind::Host)?;
                self.readback = Some(b.clone());
                Ok(b)
            }
        }
    }

    /// `read_f32`'s copy within the recorded work (one submit and one wait for both) when the
    /// one-submit path is on and the read is at most [`READBACK_MAX`] bytes; false: the caller
    /// reads through a download of its own.
    pub(super) fn read_in_submit(
        &mut self,
        t: Tensor,
        offset: usize,
        out: &mut [f32],
    ) -> Result<bool, ModelError> {
        let bytes = 4 * out.len() as u64;
        if !self.one_submit || bytes == 0 || bytes > READBACK_MAX {
            return Ok(false);
        }
        let staging = self.readback_buffer(bytes)?;
        self.record(|me, r| {
            Ok(r.copy(
                me.buf(t).slice(4 * offset as u64, bytes)?,
                staging.slice(0, bytes)?,
            )?)
        })?;
        self.flush()?;
        staging.read_host(0, bytemuck::cast_slice_mut(out))?;
        Ok(true)
    }
}
