//! `matmul_coop` launch choice for [`MatmulKernel::Auto`](crate::MatmulKernel::Auto) (tiling, K
//! step, split-K factor, under the device's [`Tuning`]) and the split-K scratch a [`Recorder`]
//! owns.
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
use crate::tuning::{SplitK, Tuning};

/// Scratch buffers per recorder.
pub const SLOTS: usize = 3;

/// Default [`split_target`] for float weights: split-K until a product has about this many
/// workgroups (about one per multiprocessor of a 132-SM GPU); 128 beat 256 for float weights
/// (docs/benchmarks-history.md).
pub const SPLIT_TARGET_FLOAT: usize = 128;

/// Default [`split_target`] for quantized weights (their blocks are dequantized on the way to
/// shared memory: more workgroups hide more of that latency; 256 beat 128,
/// docs/benchmarks-history.md).
pub const SPLIT_TARGET_QUANT: usize = 256;

/// The split-K target for `dtype` weights under `t`: 0 when split-K is off (the kernel's
/// original launch: [`CoopTile::for_shape`] at K step 32), else [`Tuning::splitk`]'s target or
/// [`SPLIT_TARGET_FLOAT`] / [`SPLIT_TARGET_QUANT`].
pub fn split_target(t: &Tuning, dtype: WeightType) -> usize {
    match t.splitk {
        SplitK::Off => 0,
        SplitK::Target(n) => n,
        SplitK::Auto if dtype.is_quantized() => SPLIT_TARGET_QUANT,
        SplitK::Auto => SPLIT_TARGET_FLOAT,
    }
}

/// K step of [`auto_config`]'s launches where the tiling fits it ([`Tuning::coop_bk`]'s
/// default).
pub const DEFAULT_BK: u32 = 64;

/// Whether an automatic launch takes the direct epilogue: [`Tuning::coop_direct`] and the launch
/// accumulates or splits K (faster for split and accumulating launches, mixed for unsplit
/// overwriting ones, which never take it; docs/benchmarks.md).
pub fn direct_wanted(t: &Tuning, accumulate: bool, split: u32) -> bool {
    t.coop_direct && (accumulate || split > 1)
}

/// Whether a product of `rows` tokens over `cols` columns run by [`MatmulKernel::Auto`](crate::MatmulKernel::Auto)
/// on `dev` reads its X as f16, so a producer of that X should leave the f16 copy
/// ([`Recorder::half_copy_target`]): cooperative matrices on, [`Tuning::coop_x_f16`], split-K not
/// turned off (the original launch reads f32), `rows >= COOP_MIN_N` and `cols % 8 == 0`.
pub fn half_x_wanted(dev: &crate::Device, rows: usize, cols: usize) -> bool {
    let t = dev.tuning();
    dev.coopmat()
        && t.coop_x_f16
        && t.splitk != SplitK::Off
        && rows >= crate::COOP_MIN_N
        && cols.is_multiple_of(8)
}

/// Float weights with at least this many columns split a 128 x 128 grid that is too small
/// rather than take 64 x 128 tiles, which measured slower on long K
/// (docs/benchmarks-history.md).
pub const LONG_K: usize = 4096;

/// The launch [`MatmulKernel::Auto`](crate::MatmulKernel::Auto) takes for `rows` x `n` outputs
/// over `cols` of `dtype` weights with subgroups of `subgroup_size` under `t` (`None`: no
/// tiling runs there). With [`split_target`] 0: the original launch, [`CoopTile::for_shape`]'s
/// tiling with `min_groups` at K step 32. Otherwise each launch is at K step
/// [`Tuning::coop_bk`] (two shared-memory stages where they fit, else one) with X read as f16
/// where [`Tuning::coop_x_f16`] and `cols % 8 == 0`, and the tiling is the first that applies of:
/// 1. [`Tuning::coop_tile`]'s, split by [`with_split`];
/// 2. quantized weights: [`CoopTile::TALL`] unsplit where it makes at least `min_groups`
///    workgroups over at most 1024 columns, and for Q8_0 also `2 min_groups` over at most 2048
///    (where it measured faster than the rules below; docs/benchmarks-history.md);
/// 3. [`CoopTile::WIDE`] where it fits and makes at least `2 min_groups` workgroups;
/// 4. float weights: [`CoopTile::LARGE`] unsplit where it makes `min_groups` workgroups;
///    [`CoopTile::TINY`] unsplit where it makes `min_groups..2 min_groups` workgroups over at
///    most 1024 columns; else where `cols >= LONG_K` [`CoopTile::WIDE`] split to `2 target`
///    workgroups, otherwise [`CoopTile::LARGE`] split to `target`, both by `pow2_split`
///    ([`Tuning::coop_float_split`]; with it off: LARGE split in the fewest parts reaching
///    `min_groups` where `cols >= LONG_K`, TINY as above);
/// 5. [`CoopTile::SMALL`] split by [`with_split`] (every other quantized grid ends here).
///
/// Grids that already fill the GPU stay unsplit: with f16 X each workgroup runs fast enough that
/// splitting costs more than it gives (docs/benchmarks-history.md).
pub fn auto_config(
    t: &Tuning,
    dtype: WeightType,
    rows: usize,
    n: usize,
    cols: usize,
    subgroup_size: u32,
    min_groups: usize,
) -> Option<CoopConfig> {
    let fallback = CoopTile::for_shape(rows, n, subgroup_size, min_groups)?;
    let target = split_target(t, dtype);
    if target == 0 {
        return Some(CoopConfig::plain(fallback));
    }
    let x_f16 = t.coop_x_f16 && cols.is_multiple_of(8);
    // `tile` at K step coop_bk, f16 X if enabled, two stages where they fit; None if no such
    // launch fits.
    let launch = |tile: CoopTile| {
        let halves: &[bool] = if x_f16 { &[true, false] } else { &[false] };
        halves.iter().find_map(|&x_f16| {
            [2, 1].into_iter().find_map(|stages| {
                let c = CoopConfig {
                    bk: t.coop_bk,
                    stages,
                    x_f16,
                    ..CoopConfig::plain(tile)
                };
                c.fits_for(subgroup_size, dtype).then_some(c)
            })
        })
    };
    if let Some(c) = t.coop_tile.and_then(launch) {
        return Some(with_split(c, rows, n, cols, target));
    }
    let groups = |t: CoopTile| t.groups(rows, n);
    let tall = groups(CoopTile::TALL);
    let tall_fits = match dtype {
        WeightType::Q8_0 => cols <= 2048 && tall >= 2 * min_groups,
        _ => false,
    } || (dtype.is_quantized() && cols <= 1024 && tall >= min_groups);
    if tall_fits && let Some(c) = launch(CoopTile::TALL) {
        return Some(c);
    }
    if let Some(c) = launch(CoopTile::WIDE)
        && groups(CoopTile::WIDE) >= 2 * min_groups
    {
        return Some(c);
    }
    let tiny_fits = (min_groups..2 * min_groups).contains(&groups(CoopTile::TINY)) && cols <= 1024;
    if !dtype.is_quantized() {
        if let Some(c) = launch(CoopTile::LARGE) {
            let g = groups(CoopTile::LARGE).max(1);
            if g >= min_groups {
                return Some(c);
            }
            if t.coop_float_split {
                if cols >= LONG_K
                    && let Some(w) = launch(CoopTile::WIDE)
                {
                    return Some(pow2_split(w, rows, n, cols, 2 * target));
                }
                if !tiny_fits {
                    return Some(pow2_split(c, rows, n, cols, target));
                }
            } else if cols >= LONG_K {
                let split = min_groups.div_ceil(g).min(cols.div_ceil(c.bk as usize) / 2);
                return Some(CoopConfig {
                    split: split.clamp(1, MAX_SPLIT as usize) as u32,
                    ..c
                });
            }
        }
        if let Some(c) = launch(CoopTile::TINY)
            && tiny_fits
        {
            return Some(c);
        }
    }
    let c = launch(CoopTile::SMALL).or_else(|| launch(fallback))?;
    Some(with_split(c, rows, n, cols, target))
}

/// [`with_split`] rounded down to a power of two (a split in 3 measured slowest on every shape
/// tried; docs/benchmarks.md).
fn pow2_split(cfg: CoopConfig, rows: usize, n: usize, cols: usize, target: usize) -> CoopConfig {
    let c = with_split(cfg, rows, n, cols, target);
    CoopConfig {
        split: 1 << c.split.ilog2(),
        ..c
    }
}

/// `cfg` split in as many parts as fit in `target` workgroups for `rows` x `n` outputs over
/// `cols` (`target / groups`, rounded down: a grid that already fills most of the target is
/// not split), at most [`MAX_SPLIT`] and with each share at least 2 K steps.
pub fn with_split(
    cfg: CoopConfig,
    rows: usize,
    n: usize,
    cols: usize,
    target: usize,
) -> CoopConfig {
    let groups = cfg.tile.groups(rows, n).max(1);
    let steps = cols.div_ceil(cfg.bk as usize);
    let split = (target / groups)
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
///
/// They also carry the f16 copy of a matmul's X ([`Recorder::half_x`]) and what it is a copy
/// of; that record is dropped when the slots move on (the next recorder converts again).
#[derive(Default)]
pub struct SplitSlots {
    slots: [Option<Slot>; SLOTS],
    next: usize,
    /// Two f16 scratch buffers: 0 for X conversions and producers' copies, 1 for a copy
    /// written by a launch that reads its own X from 0 (the gated launch).
    half: [Option<Buffer>; 2],
    /// The f32 source each of `half` holds, as (buffer, byte offset, elements); `None` after
    /// any recorded write overlapping it.
    pub(crate) half_src: [Option<(ash::vk::Buffer, u64, usize)>; 2],
    /// f16 copies of quantized weights (coop_dequant.rs), used in turn.
    pub(crate) deq: crate::coop_dequant::DequantSlots,
    /// Activations quantized for the int8 matvec (`quantize_act_q8`).
    q8x: Option<Buffer>,
    /// The counters of producers quantizing their output into `q8x` (`main_qout`), zeroed
    /// when created and left zero by every launch.
    q8x_ctl: Option<Buffer>,
    /// What `q8x` holds (one column quantized with a norm's weights, by a producer or a
    /// quantize launch); `None` after any recorded write to it or to those activations.
    pub(crate) q8x_src: Option<crate::matvec_q8x::Q8xKey>,
}

impl SplitSlots {
    /// The int8 activation scratch's handle, once created.
    pub(crate) fn q8x_raw(&self) -> Option<ash::vk::Buffer> {
        self.q8x.as_ref().map(|b| b.raw())
    }
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
        let mut s = std::mem::take(&mut self.split);
        s.half_src = [None; 2];
        s.q8x_src = None;
        s
    }

    /// `elems` f32 of `x` as f16 words (`to_f16`) in this recorder's scratch: converted here,
    /// unless the scratch already holds exactly them and nothing recorded since wrote to `x`
    /// (q, k and v of a layer share one conversion).
    pub fn half_x(&mut self, x: BufSlice<'_>, elems: usize) -> Result<Buffer> {
        let key = Some((x.buffer.raw(), x.offset, elems));
        for i in 0..2 {
            if self.split.half_src[i] == key
                && let Some(b) = &self.split.half[i]
            {
                return Ok(b.clone());
            }
        }
        let buf = self.half_scratch(0, elems)?;
        let bytes = vkllm_kernels::to_f16::packed_bytes(elems);
        self.dispatch(
            vkllm_kernels::to_f16::ToF16 {
                a: x,
                out: buf.slice(0, bytes)?,
            }
            .dispatch(elems)?,
        )?;
        self.half_written(0, x, elems);
        Ok(buf)
    }

    /// The scratch of activations quantized for the int8 matvec, grown to `bytes` (every
    /// product reuses it: the recorder's barriers order its writes after earlier reads).
    pub(crate) fn q8x_scratch(&mut self, bytes: u64) -> Result<Buffer> {
        match &self.split.q8x {
            Some(b) if b.size() >= bytes => Ok(b.clone()),
            _ => {
                let b = self.device().create_buffer(
                    "int8 matvec activations",
                    bytes,
                    MemoryKind::Device,
                )?;
                self.split.q8x = Some(b.clone());
                self.split.q8x_src = None;
                Ok(b)
            }
        }
    }

    /// The counters of `main_qout` launches, at least `bytes` (zero between launches).
    pub(crate) fn q8x_ctl(&mut self, bytes: u64) -> Result<Buffer> {
        if let Some(b) = &self.split.q8x_ctl
            && b.size() >= bytes
        {
            return Ok(b.clone());
        }
        let b = self.device().create_buffer(
            "int8 matvec quantize counters",
            bytes,
            MemoryKind::Device,
        )?;
        // Zeroed by a submit of its own, as the split-K slots.
        self.device().one_shot(|d, cb| {
            // SAFETY: cb is recording; `b` is `bytes` long, a multiple of 4.
            unsafe { d.cmd_fill_buffer(cb, b.raw(), 0, bytes, 0) }
        })?;
        self.split.q8x_ctl = Some(b.clone());
        Ok(b)
    }

    /// f16 scratch `i`, grown to hold at least `elems` halves (what it held is forgotten).
    fn half_scratch(&mut self, i: usize, elems: usize) -> Result<Buffer> {
        self.split.half_src[i] = None;
        let bytes = vkllm_kernels::to_f16::packed_bytes(elems);
        match &self.split.half[i] {
            Some(b) if b.size() >= bytes => Ok(b.clone()),
            _ => {
                let b = self
                    .device()
                    .create_buffer("matmul f16 X", bytes, MemoryKind::Device)?;
                self.split.half[i] = Some(b.clone());
                Ok(b)
            }
        }
    }

    /// Notes that f16 scratch `i` now holds `x`'s first `elems` values (call right after
    /// recording the dispatch that wrote it: a later recorded write to `x` drops the note).
    fn half_written(&mut self, i: usize, x: BufSlice<'_>, elems: usize) {
        self.split.half_src[i] = Some((x.buffer.raw(), x.offset, elems));
    }

    /// A producer's f16 copy of its output, step 1 of 2: the scratch that the next
    /// cooperative-matrix matmul reading that output as X would convert it into
    /// ([`Recorder::half_x`]), with room for `elems` halves. Bind `packed_bytes(elems)` of it
    /// as the producer's f16 output (rmsnorm, the gated activations and `attn_prefill_coop2`
    /// have one), record the producer, then call [`Recorder::half_copy_written`].
    pub fn half_copy_target(&mut self, elems: usize) -> Result<Buffer> {
        self.half_scratch(0, elems)
    }

    /// Step 2: the producer just recorded wrote `out`'s first `elems` values to the scratch
    /// as f16, so a matmul reading them skips its `to_f16` (until something writes `out`).
    pub fn half_copy_written(&mut self, out: BufSlice<'_>, elems: usize) {
        self.half_written(0, out, elems);
    }

    /// [`Recorder::half_copy_target`] into f16 scratch `i` (0 or 1): a producer that reads its
    /// own input as f16 from one scratch writes its copy to the other (the gated launch).
    /// Step 2 is [`Recorder::half_copy_written_in`].
    pub(crate) fn half_copy_target_in(&mut self, i: usize, elems: usize) -> Result<Buffer> {
        self.half_scratch(i, elems)
    }

    /// Step 2 of [`Recorder::half_copy_target_in`].
    pub(crate) fn half_copy_written_in(&mut self, i: usize, out: BufSlice<'_>, elems: usize) {
        self.half_written(i, out, elems);
    }

    /// Whether f16 scratch `i` is `b`.
    pub(crate) fn half_slot_is(&self, i: usize, b: &Buffer) -> bool {
        self.split.half[i]
            .as_ref()
            .is_some_and(|h| h.raw() == b.raw())
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

    /// The split is the most parts that fit in the target (at least 1), capped by 2 K steps
    /// per share and MAX_SPLIT (hand-computed grids of the Qwen3-0.6B projections at 512
    /// tokens).
    #[test]
    fn split_reaches_the_target() {
        let small = cfg(CoopTile::SMALL, 64);
        // 1024 rows x 512 tokens of 64 x 128: 8 x 8 = 64 groups; 128 -> 2, 256 -> 4.
        assert_eq!(with_split(small, 1024, 512, 1024, 128).split, 2);
        assert_eq!(with_split(small, 1024, 512, 3072, 256).split, 4);
        // 2048 rows: 128 groups, already at 128.
        assert_eq!(with_split(small, 2048, 512, 1024, 128).split, 1);
        // 3072 rows of 128 x 128: 24 x 4 = 96 groups; 256 -> 2 (rounded down), 128 -> 1.
        let large = cfg(CoopTile::LARGE, 64);
        assert_eq!(with_split(large, 3072, 512, 1024, 256).split, 2);
        assert_eq!(with_split(large, 3072, 512, 1024, 128).split, 1);
        // 64 tokens, 1024 rows: 8 groups; 256 -> 32, capped at 16.
        assert_eq!(with_split(small, 1024, 64, 4096, 256).split, MAX_SPLIT);
        // 192 columns at K step 64: 3 steps, at most 1 share of 2 steps.
        assert_eq!(with_split(small, 1024, 64, 192, 256).split, 1);
        // 256 columns: 4 steps, 2 shares.
        assert_eq!(with_split(small, 1024, 64, 256, 256).split, 2);
        // Target 0 or 1: no split.
        assert_eq!(with_split(small, 1024, 64, 4096, 1).split, 1);
    }

    /// The launches `auto_config` picks for the anchor models' projections at 512 tokens
    /// (subgroups of 32, 96 workgroups wanted; the default tuning), each from the rules it
    /// documents.
    #[test]
    fn auto_config_follows_its_rules() {
        let pick = |dt, rows, cols| {
            let c = auto_config(&Tuning::default(), dt, rows, 512, cols, 32, 96).expect("a launch");
            (c.tile, c.split, c.x_f16, c.bk)
        };
        let (f16, q8, f32) = (WeightType::F16, WeightType::Q8_0, WeightType::F32);
        // 8192 rows: 64 x 4 = 256 workgroups of 128 x 128 >= 192: the wide tiling; Q8_0:
        // 128 x 4 = 512 of 128 x 64 >= 192 over 2048 columns (other quantized types: wide).
        assert_eq!(pick(f16, 8192, 2048), (CoopTile::WIDE, 1, true, 64));
        assert_eq!(pick(q8, 8192, 2048), (CoopTile::TALL, 1, true, 64));
        assert_eq!(pick(WeightType::Q4_K, 8192, 2048).0, CoopTile::WIDE);
        assert_eq!(pick(WeightType::Q4_0, 3072, 1024).0, CoopTile::TALL);
        // f32 weights do not fit the wide tiling's registers: 128 x 128, 256 >= 96.
        assert_eq!(pick(f32, 8192, 2048).0, CoopTile::LARGE);
        // 3072 rows: 96 workgroups of 128 x 128, unsplit.
        assert_eq!(pick(f16, 3072, 1024), (CoopTile::LARGE, 1, true, 64));
        // 2048 x 8192: 64 of 128 x 128, long K: the wide tiling (64 groups) split to 256 -> 4.
        assert_eq!(pick(f16, 2048, 8192), (CoopTile::WIDE, 4, true, 64));
        // 1024 x 1024: 128 of 64 x 64 in 96..192, K 1024.
        assert_eq!(pick(f16, 1024, 1024).0, CoopTile::TINY);
        // 1024 x 3072: 32 of 128 x 128, split 128 / 32 = 4.
        assert_eq!(pick(f16, 1024, 3072), (CoopTile::LARGE, 4, true, 64));
        // 2048 x 2048: 64 of 128 x 128, split 2; 1536 x 2048: 48, 128 / 48 = 2 (not 3).
        assert_eq!(pick(f16, 2048, 2048), (CoopTile::LARGE, 2, true, 64));
        assert_eq!(pick(f16, 1536, 2048), (CoopTile::LARGE, 2, true, 64));
        // Quantized 128 x 64: 192 workgroups at 3072 rows; 128 over 1024 columns at 2048.
        assert_eq!(pick(q8, 3072, 1024), (CoopTile::TALL, 1, true, 64));
        assert_eq!(pick(q8, 2048, 1024), (CoopTile::TALL, 1, true, 64));
        // Otherwise 64 x 128, split 256 / groups rounded down (128 x 64 would make 128 here,
        // over 2048 columns).
        assert_eq!(pick(q8, 2048, 2048), (CoopTile::SMALL, 2, true, 64));
        assert_eq!(pick(q8, 512, 2048), (CoopTile::SMALL, 8, true, 64));
        // cols % 8 != 0: X stays f32.
        assert!(!pick(f16, 1000, 1004).2);
    }

    #[test]
    fn counter_region_keeps_partials_aligned() {
        assert_eq!(ctr_bytes(4), 256);
        assert_eq!(ctr_bytes(0), 256);
        assert_eq!(ctr_bytes(257), 512);
    }
}
