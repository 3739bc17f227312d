//! Per-dispatch GPU timing of a whole forward (a prefill chunk), by graph region: the prefill
//! counterpart of `slot_profile` (which times one recorded decode step).

use super::VulkanBackend;
use super::slots::ProfiledDispatch;
use crate::error::ModelError;
use crate::forward::{KvCache, Logits, Model};
use crate::hybrid::{HybridModel, HybridState};

impl VulkanBackend {
    /// Runs `model` over `ids` at positions `0..ids.len()` in slot 0 of `kv` with GPU
    /// timestamps on every dispatch and returns them with the graph region each belongs to
    /// (times continue across the submits the forward needs). Nothing is cached between calls:
    /// a first call also pays pipeline creation on the host, not in these GPU times.
    pub fn forward_profile(
        &mut self,
        model: &Model,
        kv: &KvCache,
        ids: &[u32],
    ) -> Result<Vec<ProfiledDispatch>, ModelError> {
        self.profile_with(|b| {
            model
                .forward_slot(b, kv, 0, ids, 0, Logits::Last)
                .map(|_| ())
        })
    }

    /// [`VulkanBackend::forward_profile`] for a hybrid model: slot 0 of `st` is reset first
    /// (outside the timed work).
    pub fn hybrid_forward_profile(
        &mut self,
        model: &HybridModel,
        st: &HybridState,
        ids: &[u32],
    ) -> Result<Vec<ProfiledDispatch>, ModelError> {
        model.reset_slot(self, st, 0)?;
        self.profile_with(|b| {
            model
                .forward_slot(b, st, 0, ids, 0, Logits::Last)
                .map(|_| ())
        })
    }

    /// Times every dispatch `run` records (flushed before and after).
    fn profile_with(
        &mut self,
        run: impl FnOnce(&mut Self) -> Result<(), ModelError>,
    ) -> Result<Vec<ProfiledDispatch>, ModelError> {
        self.flush()?;
        self.timestamps = 16384;
        self.marks.clear();
        self.profiled = Some(Vec::new());
        let res = run(self).and_then(|_| self.flush());
        self.timestamps = 0;
        let t = self.profiled.take().unwrap_or_default();
        let marks = std::mem::take(&mut self.marks);
        res?;
        Ok(with_regions(&marks, &t))
    }
}

/// Each timed dispatch with the graph region it belongs to: the last `Backend::mark` at or
/// before its index (dispatches before any mark are "other"); a decode step's logprobs and
/// advance kernels, recorded after the "sample" mark, get their own regions.
pub(super) fn with_regions(
    marks: &[(usize, &'static str)],
    t: &[vkllm_vk::DispatchTiming],
) -> Vec<ProfiledDispatch> {
    t.iter()
        .enumerate()
        .map(|(i, x)| {
            let region = marks
                .iter()
                .rev()
                .find(|m| m.0 <= i)
                .map_or("other", |m| m.1);
            let region = match (region, x.label) {
                ("sample", "logprobs") => "logprobs",
                ("sample", "decode_advance") => "advance",
                (r, _) => r,
            };
            ProfiledDispatch {
                region,
                kernel: x.label,
                start_ns: x.start_ns,
                ns: x.ns,
            }
        })
        .collect()
}
