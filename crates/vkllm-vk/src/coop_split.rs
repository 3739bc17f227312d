//! `matmul_coop` launch choice for [`MatmulKernel::Auto`](crate::MatmulKernel::Auto) (tiling, K
//! step, split-K factor; environment switches) and the split-K scratch a [`Recorder`] owns.
//!
//! Split-K scratch: a recorder keeps [`SLOTS`] buffers, used in turn by successive split
//! dispatches, so independent products (q, k, v of one layer) need not wait for each other on
//! one shared scratch (the recorder orders the dispatches that share a slot, since each writes
//! it). A slot is `[counters | partials]`; its counters are zeroed by a fill recorded when the
//! slot is created (or grown) in this recording, and every split dispatch leaves them zero, so
//! replays of the recording start from zero too.

use vkllm_kernels::WeightType;
use vkllm_kernels::matmul_coop::{CoopConfig, CoopTile, MAX_SPLIT, SplitScratch};

use crate::buffer::{BufSlice, Buffer, MemoryKind};
use crate::error::Result;
use crate::recorder::Recorder;

/// Scratch buffers per recorder.
pub const SLOTS: usize = 3;

/// Default [`split_target`] for float weights: split-K until a product has about this many
/// workgroups (about one per multiprocessor of a 132-SM H200). Measured there (prefill chunk
/// of 512 tokens, all matmuls): Qwen3-0.6B F16 12.0 ms (original launch) -> 9.5 ms at 128 and
/// 10.7 ms at 256; Llama-3.2-1B F16 15.4 -> 11.1 (128) and 11.9 (256).
pub const SPLIT_TARGET_FLOAT: usize = 128;

/// Default [`split_target`] for quantized weights (their blocks are dequantized on the way to
/// shared memory: more workgroups hide more of that latency). Measured on the H200: Qwen3-0.6B
/// Q4_K_M 14.0 -> 12.5 (128) and 11.1 ms (256), Q8_0 13.7 -> 12.4 and 10.7, Q4_0 12.6 -> 12.0
/// and 10.7; Llama-3.2-1B Q4_K_M 20.9 -> 16.9 and 14.4.
pub const SPLIT_TARGET_QUANT: usize = 256;

/// The split-K target for `dtype` weights: `VKLLM_MATMUL_SPLITK=0` (or `off`) turns split-K
/// off (the kernel's original launch: [`CoopTile::for_shape`] at K step 32), a number sets the
/// target workgroup count for every type (read once); unset or unparsable:
/// [`SPLIT_TARGET_FLOAT`] or [`SPLIT_TARGET_QUANT`].
pub fn split_target(dtype: WeightType) -> usize {
    static T: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let env = *T.get_or_init(|| match std::env::var("VKLLM_MATMUL_SPLITK") {
        Ok(v) if v.eq_ignore_ascii_case("off") => Some(0),
        Ok(v) => v.trim().parse().ok(),
        Err(_) => None,
    });
    env.unwrap_or(if dtype.is_quantized() {
        SPLIT_TARGET_QUANT
    } else {
        SPLIT_TARGET_FLOAT
    })
}

/// `VKLLM_COOP_BK=64|32` (read once): the K step of [`auto_config`]'s launches (unless
/// split-K is off); unset: [`DEFAULT_BK`].
pub fn env_bk() -> u32 {
    static B: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *B.get_or_init(|| match std::env::var("VKLLM_COOP_BK").as_deref() {
        Ok("64") => 64,
        Ok("32") => 32,
        _ => DEFAULT_BK,
    })
}

/// K step of [`auto_config`]'s launches where the tiling fits it.
pub const DEFAULT_BK: u32 = 64;

/// `VKLLM_COOP_QPRE=1` (read once): [`auto_config`]'s launches dequantize quantized weights
/// into registers before the multiplications ([`CoopConfig::prefetch_quant`]; measured slower
/// on the H200, so off by default).
fn env_qpre() -> bool {
    static Q: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *Q.get_or_init(|| std::env::var("VKLLM_COOP_QPRE").is_ok_and(|v| v == "1"))
}

/// `VKLLM_COOP_TILE=tiny|small|large` (read once): [`auto_config`] uses this tiling (when it
/// fits the device) unless split-K is off.
fn env_tile() -> Option<CoopTile> {
    static T: std::sync::OnceLock<Option<CoopTile>> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        match std::env::var("VKLLM_COOP_TILE")
            .ok()?
            .to_ascii_lowercase()
            .as_str()
        {
            "tiny" => Some(CoopTile::TINY),
            "small" => Some(CoopTile::SMALL),
            "large" => Some(CoopTile::LARGE),
            _ => None,
        }
    })
}

/// The launch [`MatmulKernel::Auto`](crate::MatmulKernel::Auto) takes for `rows` x `n` outputs
/// over `cols` of `dtype` weights with subgroups of `subgroup_size` (`None`: no tiling runs
/// there).
/// With [`split_target`] 0: the original launch, [`CoopTile::for_shape`]'s tiling with
/// `min_groups` at K step 32. Otherwise: that tiling, but 64 x 128 where it picks 64 x 64
/// (with the longer K step the larger tile wins on the H200), at K step [`env_bk`] (two
/// shared-memory stages where they fit, else one), K split in the fewest parts (each at least
/// 2 K steps) that give [`split_target`] workgroups. `VKLLM_COOP_TILE` forces the tiling.
pub fn auto_config(
    dtype: WeightType,
    rows: usize,
    n: usize,
    cols: usize,
    subgroup_size: u32,
    min_groups: usize,
) -> Option<CoopConfig> {
    let tile = CoopTile::for_shape(rows, n, subgroup_size, min_groups)?;
    let target = split_target(dtype);
    if target == 0 {
        return Some(CoopConfig::plain(tile));
    }
    let fits = |t: &CoopTile| t.fits(subgroup_size);
    let tile = match env_tile().filter(fits) {
        Some(t) => t,
        None if tile == CoopTile::TINY && fits(&CoopTile::SMALL) => CoopTile::SMALL,
        None => tile,
    };
    let mut cfg = CoopConfig {
        prefetch_quant: env_qpre(),
        ..CoopConfig::plain(tile)
    };
    // Two stages where they fit, else one.
    for stages in [2, 1] {
        let c = CoopConfig {
            bk: env_bk(),
            stages,
            ..cfg
        };
        if c.fits(subgroup_size) {
            cfg = c;
            break;
        }
    }
    Some(with_split(cfg, rows, n, cols, target))
}

/// `cfg` split in the fewest parts (1..=[`MAX_SPLIT`], each share at least 2 K steps) that
/// give `target` workgroups for `rows` x `n` outputs over `cols`.
pub fn with_split(
    cfg: CoopConfig,
    rows: usize,
    n: usize,
    cols: usize,
    target: usize,
) -> CoopConfig {
    let groups = cfg.tile.groups(rows, n).max(1);
    let steps = cols.div_ceil(cfg.bk as usize);
    let split = target
        .div_ceil(groups)
        .min(steps / 2)
        .clamp(1, MAX_SPLIT as usize);
    CoopConfig {
        split: split as u32,
        ..cfg
    }
}

/// One scratch buffer: `ctr` bytes of counters, then `part` bytes of partials.
#[derive(Clone)]
struct Slot {
    buf: Buffer,
    ctr: u64,
    part: u64,
}

/// Split-K scratch slots. A recorder starts with empty ones; a caller that records many
/// command buffers (a forward submitted in parts) moves them from one recorder to the next
/// ([`Recorder::take_split_scratch`], [`Recorder::set_split_scratch`]) instead of allocating
/// new ones each time. A slot's counters are zeroed when it is created and every split
/// dispatch leaves them zero, so a slot is valid in any recording submitted after that.
#[derive(Default)]
pub struct SplitSlots {
    slots: [Option<Slot>; SLOTS],
    next: usize,
}

/// Counter bytes rounded so the partials start at a 256-byte offset (every storage-buffer
/// offset alignment Vulkan allows).
fn ctr_bytes(bytes: u64) -> u64 {
    bytes.max(4).next_multiple_of(256)
}

impl Recorder {
    /// The next scratch slot with at least `part` bytes of partials and `ctr` bytes of
    /// counters (zeroed), as (buffer, counter bytes): `[0, counter bytes)` are the counters,
    /// the partials follow.
    pub(crate) fn split_slot(&mut self, part: u64, ctr: u64) -> Result<(Buffer, u64)> {
        let i = self.split.next;
        self.split.next = (i + 1) % SLOTS;
        if let Some(s) = &self.split.slots[i]
            && s.part >= part
            && s.ctr >= ctr
        {
            return Ok((s.buf.clone(), s.ctr));
        }
        let (old_c, old_p) = self.split.slots[i]
            .as_ref()
            .map_or((0, 0), |s| (s.ctr, s.part));
        let c = ctr_bytes(ctr.max(old_c));
        let p = part.max(old_p).next_multiple_of(4);
        let buf =
            self.device()
                .create_buffer("matmul split-K scratch", c + p, MemoryKind::Device)?;
        // Zeroed by a submit of its own (not in this recording), so the slot can move on to
        // other recorders whatever becomes of this one.
        self.device().one_shot(|d, cb| {
            // SAFETY: cb is recording; `buf` is at least `c` bytes.
            unsafe { d.cmd_fill_buffer(cb, buf.raw(), 0, c, 0) }
        })?;
        self.split.slots[i] = Some(Slot {
            buf: buf.clone(),
            ctr: c,
            part: p,
        });
        Ok((buf, c))
    }
}

impl Recorder {
    /// Hands this recorder's split-K scratch to the caller (it records with fresh slots if it
    /// needs any more).
    pub fn take_split_scratch(&mut self) -> SplitSlots {
        std::mem::take(&mut self.split)
    }

    /// Records with `slots` (from an earlier recorder, see [`SplitSlots`]) as split-K scratch.
    pub fn set_split_scratch(&mut self, slots: SplitSlots) {
        self.split = slots;
    }
}

/// The two bindings of a slot from [`Recorder::split_slot`].
pub(crate) fn scratch_slices(buf: &Buffer, ctr: u64) -> Result<SplitScratch<BufSlice<'_>>> {
    Ok(SplitScratch {
        part: buf.slice(ctr, buf.size() - ctr)?,
        counters: buf.slice(0, ctr)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(tile: CoopTile, bk: u32) -> CoopConfig {
        CoopConfig {
            bk,
            ..CoopConfig::plain(tile)
        }
    }

    /// The split is the fewest parts reaching the target, capped by 2 K steps per share and
    /// MAX_SPLIT (hand-computed grids of the Qwen3-0.6B projections at 512 tokens).
    #[test]
    fn split_reaches_the_target() {
        let small = cfg(CoopTile::SMALL, 64);
        // 1024 rows x 512 tokens of 64 x 128: 8 x 8 = 64 groups; 128 -> 2, 256 -> 4.
        assert_eq!(with_split(small, 1024, 512, 1024, 128).split, 2);
        assert_eq!(with_split(small, 1024, 512, 3072, 256).split, 4);
        // 2048 rows: 128 groups, already at 128.
        assert_eq!(with_split(small, 2048, 512, 1024, 128).split, 1);
        // 3072 rows of 128 x 128: 24 x 4 = 96 groups; 256 -> 3.
        let large = cfg(CoopTile::LARGE, 64);
        assert_eq!(with_split(large, 3072, 512, 1024, 256).split, 3);
        // 64 tokens, 1024 rows: 8 groups; 256 -> 32, capped at 16.
        assert_eq!(with_split(small, 1024, 64, 4096, 256).split, MAX_SPLIT);
        // 192 columns at K step 64: 3 steps, at most 1 share of 2 steps.
        assert_eq!(with_split(small, 1024, 64, 192, 256).split, 1);
        // 256 columns: 4 steps, 2 shares.
        assert_eq!(with_split(small, 1024, 64, 256, 256).split, 2);
        // Target 0 or 1: no split.
        assert_eq!(with_split(small, 1024, 64, 4096, 1).split, 1);
    }

    #[test]
    fn counter_region_keeps_partials_aligned() {
        assert_eq!(ctr_bytes(4), 256);
        assert_eq!(ctr_bytes(0), 256);
        assert_eq!(ctr_bytes(257), 512);
    }
}
