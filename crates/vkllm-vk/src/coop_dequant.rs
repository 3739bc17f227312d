//! Prefill products of quantized weights through an f16 copy: `dequant_f16` writes the weight's
//! rows as f16 into a scratch buffer, then `matmul_coop` multiplies them as an f16 weight
//! (its fastest path) instead of decoding blocks in every workgroup of every K step.
//!
//! When ([`DequantPolicy`], tuning `dequant`): by default ([`DequantPolicy::AUTO`]) for
//! weights of at least 1M elements (a q/k/v group only when each of its weights is) in products
//! over at least 512 tokens (a whole prefill chunk). The copy costs the same whatever the token
//! count while the saving grows with it, and a small weight's copy is mostly launch overhead.
//! Both bounds are measured: copies at 256 tokens or fewer lost, and copying only larger weights
//! gained less (docs/benchmarks.md, docs/benchmarks-history.md).
//! The copies live in [`DEQUANT_SLOTS`] scratch buffers used in turn (so q/k/v or gate/up
//! still overlap), each as large as the largest weight copied through it, and are made again
//! for every prefill chunk, unless the weight has a resident copy ([`Device::keep_f16`]: made
//! once, kept with the weight, within tuning `dequant_keep_mb`; released when a device
//! allocation or KV page would otherwise fail, [`Device::release_kept_f16`]).

use vkllm_kernels::WeightType;
use vkllm_kernels::dequant_f16::{DequantF16, f16_bytes};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::buffer::{Buffer, BufferInner, MemoryKind};
use crate::device::{Device, Shared};
use crate::error::{Error, Result};
use crate::recorder::Recorder;
use crate::tensor::Tensor;

/// Scratch buffers for f16 weight copies per recorder.
pub const DEQUANT_SLOTS: usize = 3;

/// Which cooperative-matrix prefill products of quantized weights multiply an f16 copy; the
/// others decode the blocks themselves (the reference path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DequantPolicy {
    /// None (the reference path).
    Off,
    /// Every one.
    All,
    /// Weights of at least `min_elements` elements (a group: each of its weights) in products
    /// over at least `min_tokens` tokens (Q8_0 weights: `min_tokens_q8`).
    Auto {
        min_elements: usize,
        min_tokens: usize,
        min_tokens_q8: usize,
    },
}

impl DequantPolicy {
    /// The default: the copy from 128 tokens (its f16 products beat the quantized kernel's from
    /// there on the H100's 8B and 1B Q4_K_M prefills, docs/benchmarks.md), Q8_0 weights from
    /// 512 (the 0.6B's Q8_0 products at 192 and 320 tokens were faster without it).
    pub const AUTO: DequantPolicy = DequantPolicy::Auto {
        min_elements: 1 << 20,
        min_tokens: 128,
        min_tokens_q8: 512,
    };

    /// Whether a product of a weight of `elements` elements (Q8_0 where `q8`) over `n` tokens
    /// goes through a copy.
    pub fn applies(self, elements: usize, n: usize, q8: bool) -> bool {
        match self {
            DequantPolicy::Off => false,
            DequantPolicy::All => true,
            DequantPolicy::Auto {
                min_elements,
                min_tokens,
                min_tokens_q8,
            } => elements >= min_elements && n >= if q8 { min_tokens_q8 } else { min_tokens },
        }
    }
}

/// The scratch of f16 weight copies (part of the split-K scratch a recorder hands on).
#[derive(Default)]
pub struct DequantSlots {
    bufs: [Option<Buffer>; DEQUANT_SLOTS],
    next: usize,
    /// Set by [`Recorder::set_dequant_policy`]; `None`: the device's [`crate::Tuning::dequant`].
    policy: Option<DequantPolicy>,
}

impl Recorder {
    /// Which cooperative-matrix products of quantized weights recorded from now on multiply an
    /// f16 copy.
    pub fn set_dequant_policy(&mut self, policy: DequantPolicy) {
        self.split.deq.policy = Some(policy);
    }

    /// [`Recorder::set_dequant_policy`], or the device's tuning's.
    pub fn dequant_policy(&self) -> DequantPolicy {
        self.split
            .deq
            .policy
            .unwrap_or(self.device().tuning().dequant)
    }

    /// Whether a cooperative-matrix product of `w` over `n` tokens goes through an f16 copy:
    /// [`Recorder::dequant_policy`] for `elements` weight elements (`w`'s, or its group's
    /// smallest weight's), a
    /// quantized weight in one part whose rows are whole 16-byte words as f16 (`cols % 8 == 0`,
    /// the f16 path's vector loads).
    pub(crate) fn dequant_applies(&self, w: &Tensor, elements: usize, n: usize) -> bool {
        w.dtype.is_quantized()
            && w.parts.len() == 1
            && w.cols.is_multiple_of(8)
            && self
                .dequant_policy()
                .applies(elements, n, w.dtype == WeightType::Q8_0)
    }

    /// `w`'s resident f16 copy ([`Device::keep_f16`]) where it has or gets one, else records
    /// the copy into the next scratch slot (grown to fit) and returns the slot; its first
    /// `f16_bytes(rows, cols)` bytes hold the copy.
    pub(crate) fn f16_weight(&mut self, w: &Tensor) -> Result<Buffer> {
        if let Some(kept) = self.device().keep_f16(w)? {
            return Ok(kept);
        }
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

/// The device's resident f16 copies: their bytes, the weights holding one, and whether memory
/// pressure released them (after which `auto` makes no more).
#[derive(Default)]
pub(crate) struct KeptCopies {
    pub(crate) bytes: AtomicU64,
    holders: Mutex<Vec<Weak<BufferInner>>>,
    released: AtomicBool,
}

/// A weight's resident f16 copy; its bytes count against tuning `dequant_keep_mb` until it
/// drops with the weight's buffer or is released.
pub(crate) struct KeptCopy {
    buf: Buffer,
    reserved: Reservation,
}

/// Bytes reserved in the device's count of resident copies, given back on drop.
struct Reservation {
    shared: Arc<Shared>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.shared
            .kept_f16
            .bytes
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Share of the device-local heap that this device's allocations may reach with the resident
/// f16 copies of tuning `dequant_keep_mb=auto` (the rest left for KV pages, scratch and other
/// processes).
pub(crate) const AUTO_KEEP_SHARE: (u64, u64) = (7, 10);

/// Whether a copy of `bytes` keeps `used` bytes of a `heap`-byte heap within
/// [`AUTO_KEEP_SHARE`].
fn auto_keep_fits(heap: u64, used: u64, bytes: u64) -> bool {
    let (num, den) = AUTO_KEEP_SHARE;
    used.saturating_add(bytes) <= heap / den * num
}

impl Device {
    /// The budget of resident copies under `dequant_keep_mb=auto` for the next copy of `bytes`:
    /// unbounded while the allocations in the largest device-local heap stay within
    /// [`AUTO_KEEP_SHARE`] of it with the copy, else what is held already (no more copies).
    fn auto_keep_budget(&self, bytes: u64) -> u64 {
        let held = self.kept_f16_bytes();
        if self.shared.kept_f16.released.load(Ordering::Relaxed) {
            return held;
        }
        let heaps = &self.info().heaps;
        let Some((i, heap)) = heaps
            .iter()
            .enumerate()
            .filter(|(_, h)| h.device_local)
            .max_by_key(|(_, h)| h.size)
        else {
            return held;
        };
        let Ok(budgets) = self.shared.allocator.get_heap_budgets() else {
            return held;
        };
        let used = budgets.get(i).map_or(u64::MAX, |b| b.statistics.blockBytes);
        match auto_keep_fits(heap.size, used, bytes) {
            true => u64::MAX,
            false => held,
        }
    }

    /// The resident f16 copy of quantized weight `w` (one part) that prefill products read
    /// instead of copying it again each chunk: the one made before, or one made now (its own
    /// submission, waited for) while tuning `dequant_keep_mb` has room for it; `None` when
    /// the budget is 0 or full, the device memory is, or `w` is not such a weight. The copy
    /// lives as long as the weight's buffer.
    pub fn keep_f16(&self, w: &Tensor) -> Result<Option<Buffer>> {
        let [part] = &w.parts[..] else {
            return Ok(None);
        };
        if !w.dtype.is_quantized() {
            return Ok(None);
        }
        let src = &part.buffer;
        // Held while a copy is made, so that one weight gets one copy.
        let mut slot = src
            .inner
            .f16_copy
            .lock()
            .map_err(|_| Error::Recording("resident copy lock poisoned"))?;
        if let Some(k) = &*slot {
            return Ok(Some(k.buf.clone()));
        }
        let bytes = f16_bytes(w.rows, w.cols);
        let budget = match self.tuning().dequant_keep_mb {
            Some(mb) => (mb as u64) << 20,
            None => self.auto_keep_budget(bytes),
        };
        let count = &self.shared.kept_f16.bytes;
        let reserved = count.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            (held + bytes <= budget).then_some(held + bytes)
        });
        if reserved.is_err() {
            return Ok(None);
        }
        let reserved = Reservation {
            shared: self.shared.clone(),
            bytes,
        };
        // Not at the cost of other copies: no release when memory is short.
        let buf = match self.create_buffer_once("resident f16 weight", bytes, MemoryKind::Device) {
            Ok(b) => b,
            Err(Error::OutOfDeviceMemory { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut r = Recorder::new(self)?;
        let d = DequantF16 {
            w: src.all(),
            out: buf.slice(0, bytes)?,
        }
        .dispatch(w.dtype, w.rows, w.cols)?;
        r.dispatch(d)?;
        r.finish()?.submit()?;
        *slot = Some(KeptCopy {
            buf: buf.clone(),
            reserved,
        });
        if let Ok(mut holders) = self.shared.kept_f16.holders.lock() {
            // Weights dropped since (a model unloaded) leave their entries here until now.
            holders.retain(|w| w.strong_count() > 0);
            holders.push(Arc::downgrade(&src.inner));
        }
        Ok(Some(buf))
    }

    /// Whether `w` holds a resident f16 copy now: its products then record no copy of their own.
    pub fn has_kept_f16(&self, w: &Tensor) -> bool {
        w.parts.iter().any(|p| {
            p.buffer
                .inner
                .f16_copy
                .lock()
                .is_ok_and(|slot| slot.is_some())
        })
    }

    /// Releases the resident f16 copies (their memory returns once the recordings reading
    /// them finish) and stops `dequant_keep_mb=auto` from making more; returns the bytes
    /// released. Device allocations and KV pages call it before they fail for memory.
    pub fn release_kept_f16(&self) -> u64 {
        let kept = &self.shared.kept_f16;
        kept.released.store(true, Ordering::Relaxed);
        let Ok(mut holders) = kept.holders.lock() else {
            return 0;
        };
        let mut freed = 0;
        holders.retain(|w| {
            let Some(inner) = w.upgrade() else {
                return false;
            };
            // A weight whose copy is being made or looked up right now keeps it (tried again
            // next time).
            let Ok(mut slot) = inner.f16_copy.try_lock() else {
                return true;
            };
            if let Some(copy) = slot.take() {
                freed += copy.reserved.bytes;
            }
            false
        });
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::{DequantPolicy, auto_keep_fits};

    #[test]
    fn auto_keep_leaves_three_tenths_of_the_heap() {
        let gib = 1u64 << 30;
        // 80 GiB: up to 56 GiB in use with the copy.
        assert!(auto_keep_fits(80 * gib, 40 * gib, 16 * gib));
        assert!(!auto_keep_fits(80 * gib, 40 * gib, 16 * gib + 1));
        // A heap already past the share takes nothing more.
        assert!(!auto_keep_fits(8 * gib, 6 * gib, 1));
        assert!(!auto_keep_fits(8 * gib, u64::MAX, 1));
    }

    #[test]
    fn policy_thresholds() {
        let p = DequantPolicy::Auto {
            min_elements: 1000,
            min_tokens: 64,
            min_tokens_q8: 256,
        };
        assert!(p.applies(1000, 64, false));
        assert!(!p.applies(999, 512, false));
        assert!(!p.applies(1 << 30, 63, false));
        assert!(!p.applies(1000, 255, true));
        assert!(p.applies(1000, 256, true));
        assert!(DequantPolicy::All.applies(1, 1, true));
        assert!(!DequantPolicy::Off.applies(usize::MAX, usize::MAX, false));
        // The default copies every weight of Llama-3.2-1B (its 512 x 2048 k and v included) and
        // of Qwen3-0.6B (1024 x 1024 k and v, 3072 x 1024 MLP) in a 512-token chunk, not
        // Qwen2.5-0.5B's 896 x 896 q nor its 128 x 896 k; the other quantized types from 128
        // tokens, Q8_0 from 512.
        let auto = |elements, n| DequantPolicy::AUTO.applies(elements, n, false);
        let auto_q8 = |elements, n| DequantPolicy::AUTO.applies(elements, n, true);
        assert!(auto(2048 * 2048, 512) && auto_q8(2048 * 2048, 512));
        assert!(auto(8192 * 2048, 512));
        assert!(auto(512 * 2048, 512));
        assert!(auto_q8(1024 * 1024, 512));
        assert!(auto_q8(3072 * 1024, 512));
        assert!(!auto(896 * 896, 512));
        assert!(!auto(128 * 896, 512));
        assert!(auto(14336 * 4096, 128) && !auto(14336 * 4096, 127));
        assert!(!auto_q8(8192 * 2048, 511));
    }
}
