//! `shaders/attention_prefill_coop2.wgsl`: the second cooperative-matrix prefill attention
//! (same contract as [`crate::attention_prefill_coop`]), organised for latency: one workgroup
//! per (query tile, kv head) covering all heads of the GQA group, K/V loaded with 16-byte word
//! groups one step ahead, the softmax on all lanes, the output accumulator kept in cooperative
//! matrices with lazy rescaling, the per-key mask only on steps that need it; optionally the
//! key range of heavy (late) query tiles split over several workgroups and merged by the last.

use crate::attention::AttnShape;
use crate::attention_prefill_coop::{AttnPrefillCoop, AttnPrefillCoopParams, MAX_SHARED};
use crate::kv_append::KvType;
use crate::sources::ATTENTION_PREFILL_COOP2 as SRC;
use crate::spec::{MAX_GROUPS_X, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

pub static ATTN_PREFILL_COOP2: KernelSpec = KernelSpec {
    name: "attn_prefill_coop2",
    file: "attention_prefill_coop2.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[
        rd("q"),
        rd("k"),
        rd("v"),
        rd("q_pos"),
        rw("out"),
        rw("out16"),
        rw("kv_part"),
        rw("kv_ctr"),
    ],
    push_size: 44,
    exact_fp: false,
    glsl: None,
};

/// The shader's K/V register slots per invocation.
const MAX_SPT: usize = 16;

/// Largest head dim (past 128: a multiple of 32, two workgroups per tile over the value columns).
pub const MAX_HEAD_DIM: usize = 256;

/// Most workgroups one tile's keys are split over.
pub const MAX_SPLIT: u32 = 16;

/// Workgroups [`CoopAttn2Tile::auto_split`] aims a launch at (a few per SM of a large GPU), and
/// the fewest key steps it leaves each part.
pub const SPLIT_TARGET_WGS: usize = 512;
const SPLIT_MIN_STEPS: usize = 8;

/// The shader's push constants: the first kernel's, then the fewest steps of a split tile and
/// the split (a push constant, so that every split shares one pipeline).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    base: AttnPrefillCoopParams,
    split_min: u32,
    split: u32,
}

/// Scratch of a split launch ([`CoopAttn2Tile::split`] > 1): `part` holds
/// [`CoopAttn2Tile::part_bytes`], `ctr` [`CoopAttn2Tile::counter_bytes`] of u32 counters that
/// are zero before the dispatch (it leaves them zero).
pub struct CoopAttn2Scratch<B> {
    pub part: B,
    pub ctr: B,
}

/// The default lazy-rescale threshold: a row's running max is kept until a step's max exceeds
/// it by more than this (natural-log units), so probabilities stay below e^8 ~ 2981, well
/// inside f16.
pub const RESCALE_T: f32 = 8.0;

/// The second kernel's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoopAttn2Tile {
    /// Subgroups per workgroup (16 rows each; rows are (query, head) pairs), 1..=4.
    pub nsg: u32,
    /// Lazy-rescale threshold (>= 0; 0 rescales whenever a row's max grows).
    pub rescale_t: f32,
    /// Workgroups a split tile's keys are walked by (1 ..= [`MAX_SPLIT`]; 1: no split).
    pub split: u32,
    /// Fewest key steps of a tile that is split (>= 1).
    pub split_min: u32,
    /// Keys per step: 32, or 64 (head dims up to 128 over f16 K/V; the queries then stay in
    /// cooperative-matrix registers instead of shared memory).
    pub bk: u32,
    /// V loaded into registers one step ahead (as K is); `false`: each step loads its V as it
    /// stages it (64 fewer registers per invocation at head dim 256).
    pub v_ahead: bool,
    /// Timing diagnostics: parts of every step left out, a mask of [`SKIP_EXP`], [`SKIP_KV_LOADS`],
    /// [`SKIP_QK`] and [`SKIP_PV`] (the output is then wrong). 0 computes attention.
    pub skip: u32,
}

/// [`CoopAttn2Tile::skip`]: probabilities without `exp` (the scores themselves).
pub const SKIP_EXP: u32 = 1;
/// [`CoopAttn2Tile::skip`]: no K/V loads from the cache (zeros are staged).
pub const SKIP_KV_LOADS: u32 = 2;
/// [`CoopAttn2Tile::skip`]: no Q K^T products (zero scores).
pub const SKIP_QK: u32 = 4;
/// [`CoopAttn2Tile::skip`]: no P V products.
pub const SKIP_PV: u32 = 8;

impl CoopAttn2Tile {
    /// The default configuration (4 subgroups, threshold [`RESCALE_T`]) for `head_dim`, GQA
    /// `group` (query heads per kv head), subgroups of `subgroup_size` and KV type `kv`, if the
    /// shader runs it: head_dim a multiple of 16 in 32..=128, group 1..=16, subgroups of
    /// 16..=64 lanes (power of two).
    pub fn for_shape(
        head_dim: usize,
        group: usize,
        subgroup_size: u32,
        kv: KvType,
    ) -> Option<CoopAttn2Tile> {
        // Four subgroups where they fit (head dims past 128 need fewer: shared memory).
        (1..=4)
            .rev()
            .find_map(|nsg| Self::with_nsg(nsg, head_dim, group, subgroup_size, kv))
    }

    /// [`Self::for_shape`] with `nsg` subgroups per workgroup (1..=4).
    pub fn with_nsg(
        nsg: u32,
        head_dim: usize,
        group: usize,
        subgroup_size: u32,
        kv: KvType,
    ) -> Option<CoopAttn2Tile> {
        let step = if head_dim > 128 { 32 } else { 16 };
        if !head_dim.is_multiple_of(step) || !(32..=MAX_HEAD_DIM).contains(&head_dim) {
            return None;
        }
        if !subgroup_size.is_power_of_two() || !(16..=64).contains(&subgroup_size) {
            return None;
        }
        if !(1..=16).contains(&group) || !(1..=4).contains(&nsg) {
            return None;
        }
        let t = CoopAttn2Tile {
            nsg,
            rescale_t: RESCALE_T,
            split: 1,
            split_min: 1,
            bk: 32,
            v_ahead: true,
            skip: 0,
        };
        let ok = t.slots(head_dim, subgroup_size, kv) <= MAX_SPT
            && shared_bytes(head_dim, t) <= MAX_SHARED;
        ok.then_some(t)
    }

    /// This configuration with `bk` keys per step (32 or 64), if the shader runs it for
    /// `head_dim`, subgroups of `subgroup_size` and KV type `kv`: 64 needs head_dim <= 128, f16
    /// K/V and subgroups of at least 32 lanes (each lane's share of a score row is at most 32).
    pub fn with_bk(
        self,
        bk: u32,
        head_dim: usize,
        subgroup_size: u32,
        kv: KvType,
    ) -> Option<CoopAttn2Tile> {
        let t = CoopAttn2Tile { bk, ..self };
        let ok = match bk {
            32 => true,
            64 => head_dim <= 128 && kv == KvType::F16 && subgroup_size >= 32,
            _ => false,
        };
        let ok = ok
            && t.slots(head_dim, subgroup_size, kv) <= MAX_SPT
            && shared_bytes(head_dim, t) <= MAX_SHARED;
        ok.then_some(t)
    }

    /// The split for `s` whose queries start at `pos0` on a GPU of `compute_units`
    /// multiprocessors (`None`: unknown). Known: the split whose launch fills whole waves of
    /// resident workgroups best ([`Self::wave`]): the fewest of ceil(workgroups x split / wave)
    /// / split (time in units of an unsplit tile), the smaller split on ties, among splits up to
    /// the first that reaches one full wave (past it every part adds merge work: measured
    /// slower), each part at least 8 steps of the heaviest tile, at most [`MAX_SPLIT`]. Unknown:
    /// enough parts that the launch reaches [`SPLIT_TARGET_WGS`] workgroups, at least 2 (the
    /// first rule, measured before the wave one).
    pub fn auto_split(&self, s: &AttnShape, pos0: usize, compute_units: Option<u32>) -> u32 {
        let group = s.n_heads / s.n_kv_heads.max(1);
        let tiles = s.n_q.div_ceil(self.bq(group).max(1));
        let cols = s.head_dim / Self::value_cols(s.head_dim).max(1);
        let wgs = (tiles * s.n_kv_heads * cols).max(1);
        let steps = (pos0 + s.n_q).div_ceil(self.bk as usize);
        let Some(cu) = compute_units else {
            let by_grid = SPLIT_TARGET_WGS.div_ceil(wgs);
            let by_steps = (steps / SPLIT_MIN_STEPS).max(2);
            return by_grid.min(by_steps).clamp(2, MAX_SPLIT as usize) as u32;
        };
        wave_split(wgs, steps, self.wave(cu))
    }

    /// Workgroups of this configuration resident at once on `compute_units` multiprocessors:
    /// eight subgroups per multiprocessor (the kernel's ~185-255 registers per invocation allow
    /// two 4-subgroup workgroups on an H200 SM), at least one workgroup each.
    pub fn wave(&self, compute_units: u32) -> usize {
        compute_units.max(1) as usize * (8 / self.nsg.max(1) as usize).max(1)
    }

    /// This configuration with tiles split `split` ways where they take more than
    /// `ceil(steps / split)` steps, `steps` being the heaviest tile's of `n_q` queries at
    /// `pos0..` (so no part is longer than that), or unsplit where no tile can be split.
    pub fn with_split(self, split: u32, n_q: usize, pos0: usize) -> CoopAttn2Tile {
        let steps = (pos0 + n_q).div_ceil(self.bk as usize) as u32;
        let (split, split_min) = split_parts(split, steps);
        CoopAttn2Tile {
            split,
            split_min,
            ..self
        }
    }

    /// Bytes of `part` a split launch of `s` needs: per (kv head, query tile, part) the
    /// workgroup's 16 NSG rows of head_dim + 2 f32.
    pub fn part_bytes(&self, s: &AttnShape) -> u64 {
        let tiles = s.n_q.div_ceil(self.bq(s.n_heads / s.n_kv_heads.max(1)));
        let rows = (s.n_kv_heads * tiles) as u64 * self.split as u64 * 16 * self.nsg as u64;
        rows * (s.head_dim as u64 + 2) * 4
    }

    /// Bytes of `ctr` a split launch of `s` needs: one u32 per (value-column group, kv head,
    /// query tile).
    pub fn counter_bytes(&self, s: &AttnShape) -> u64 {
        let tiles = s.n_q.div_ceil(self.bq(s.n_heads / s.n_kv_heads.max(1)));
        let cols = s.head_dim / Self::value_cols(s.head_dim).max(1);
        4 * (cols * s.n_kv_heads * tiles) as u64
    }

    /// Output columns per workgroup for `head_dim`: all of them up to 128, else half (the
    /// shader's VD: at most 8 accumulator tiles per subgroup).
    pub fn value_cols(head_dim: usize) -> usize {
        if head_dim > 128 {
            head_dim / 2
        } else {
            head_dim
        }
    }

    /// Queries per workgroup for GQA `group`.
    pub fn bq(&self, group: usize) -> usize {
        16 * self.nsg as usize / group
    }

    /// 16-byte K (and V) slots each invocation loads per step.
    fn slots(&self, head_dim: usize, subgroup_size: u32, kv: KvType) -> usize {
        let per = match kv {
            KvType::F32 => 4,
            // Quantized caches are refused before (check_unquantized).
            KvType::F16 | KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => 8,
        };
        (self.bk as usize * head_dim / per).div_ceil(self.nsg as usize * subgroup_size as usize)
    }
}

/// Shared memory one workgroup of the shader declares, bytes.
pub fn shared_bytes(head_dim: usize, t: CoopAttn2Tile) -> usize {
    let (hd, rows, bk) = (head_dim, 16 * t.nsg as usize, t.bk as usize);
    let row = (hd / 4 + 2) * 8;
    // With 64 keys per step Q stays in registers (one unused row is declared).
    let q = if bk == 64 { row } else { rows * row };
    let kv = bk * row;
    let scores = rows * (bk / 4 + 1) * 16;
    let p = rows * (bk / 4 + 2) * 8;
    q + kv + scores + p + 2 * rows * 4 + 16
}

/// `split` parts for a heaviest tile of `steps` key steps: (split, fewest steps of a split
/// tile), each part at most ceil(steps / split) steps, or (1, 1) where no tile can be split.
pub(crate) fn split_parts(split: u32, steps: u32) -> (u32, u32) {
    let split = split.clamp(1, MAX_SPLIT);
    let min = steps.div_ceil(split) + 1;
    match split > 1 && steps >= min {
        true => (split, min),
        false => (1, 1),
    }
}

/// The split of `wgs` unsplit workgroups whose heaviest tile takes `steps` steps on a GPU
/// holding `wave` of them at once: the fewest of ceil(wgs x split / wave) / split (time in
/// units of an unsplit tile), the smaller split on ties, up to the first split reaching one
/// full wave, each part at least [`SPLIT_MIN_STEPS`] steps, at most [`MAX_SPLIT`].
pub(crate) fn wave_split(wgs: usize, steps: usize, wave: usize) -> u32 {
    let most = (steps / SPLIT_MIN_STEPS)
        .min(wave.div_ceil(wgs))
        .clamp(1, MAX_SPLIT as usize);
    // Waves per part, compared as fractions ceil(w s / wave) / s.
    let waves = |sp: usize| (wgs * sp).div_ceil(wave);
    (1..=most)
        .min_by(|&a, &b| (waves(a) * b).cmp(&(waves(b) * a)).then(a.cmp(&b)))
        .unwrap_or(1) as u32
}

/// The prefill kernels' check of queries at `pos0..` against the cache.
pub(crate) fn check_queries(
    k: &'static KernelSpec,
    s: &AttnShape,
    pos0: usize,
) -> Result<(), Error> {
    match pos0 + s.n_q > s.n_kv {
        true => Err(shape_err(
            k,
            format!(
                "queries at {pos0}..{} see keys past n_kv {}",
                pos0 + s.n_q,
                s.n_kv
            ),
        )),
        false => Ok(()),
    }
}

/// [`check_queries`] and the check of a split.
pub(crate) fn check_queries_and_split(
    k: &'static KernelSpec,
    s: &AttnShape,
    pos0: usize,
    split: u32,
    split_min: u32,
) -> Result<(), Error> {
    check_queries(k, s, pos0)?;
    if !(1..=MAX_SPLIT).contains(&split) || split_min == 0 {
        return Err(shape_err(
            k,
            format!("split {split} (1..={MAX_SPLIT}) from {split_min} steps (>= 1)"),
        ));
    }
    Ok(())
}

/// The `kv_part` and `kv_ctr` bindings of a launch split `split` ways: `scratch` checked
/// against (part, counter) `bytes`, or `out` twice (never touched) when unsplit.
pub(crate) fn split_bindings<B: KernelBuffer>(
    k: &'static KernelSpec,
    split: u32,
    bytes: (u64, u64),
    scratch: Option<CoopAttn2Scratch<B>>,
    out: B,
) -> Result<(B, B), Error> {
    match (scratch, split) {
        (_, 1) => Ok((out, out)),
        (Some(sc), _) => {
            crate::spec::need(k, "kv_part", &sc.part, bytes.0)?;
            crate::spec::need(k, "kv_ctr", &sc.ctr, bytes.1)?;
            Ok((sc.part, sc.ctr))
        }
        (None, _) => Err(shape_err(
            k,
            format!("split {split} needs its scratch (part, ctr)"),
        )),
    }
}

impl<B: KernelBuffer> AttnPrefillCoop<B> {
    /// The second kernel: one dispatch for `s` (one cache: `kv_stride` 0) whose queries sit at
    /// positions `pos0..pos0 + n_q` (q_pos must hold exactly those), on subgroups of
    /// `subgroup_size`, with configuration `t` (from [`CoopAttn2Tile::for_shape`]).
    pub fn dispatch_v2(
        self,
        s: &AttnShape,
        pos0: usize,
        subgroup_size: u32,
        t: CoopAttn2Tile,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_v2_full(s, pos0, subgroup_size, t, None, None)
    }

    /// [`AttnPrefillCoop::dispatch_v2`] that also writes the output as f16 pairs to `out16`
    /// (`n_q * n_heads * head_dim / 2` u32 words, the layout of `to_f16`).
    pub fn dispatch_v2_with_half(
        self,
        s: &AttnShape,
        pos0: usize,
        subgroup_size: u32,
        t: CoopAttn2Tile,
        out16: B,
    ) -> Result<Dispatch<B>, Error> {
        self.dispatch_v2_full(s, pos0, subgroup_size, t, Some(out16), None)
    }

    /// [`AttnPrefillCoop::dispatch_v2`] with the optional f16 output copy and, for a split
    /// configuration (`t.split > 1`, required then), its scratch.
    pub fn dispatch_v2_full(
        self,
        s: &AttnShape,
        pos0: usize,
        subgroup_size: u32,
        t: CoopAttn2Tile,
        out16: Option<B>,
        scratch: Option<CoopAttn2Scratch<B>>,
    ) -> Result<Dispatch<B>, Error> {
        let k = &ATTN_PREFILL_COOP2;
        s.check(k)?;
        s.check_unquantized(k)?;
        if s.kv_stride != 0 {
            return Err(shape_err(
                k,
                "prefill reads one cache (kv_stride must be 0)",
            ));
        }
        let group = s.n_heads / s.n_kv_heads;
        if CoopAttn2Tile::with_nsg(t.nsg, s.head_dim, group, subgroup_size, s.kv).is_none() {
            return Err(shape_err(
                k,
                format!(
                    "head_dim {} with GQA group {group}, {} subgroups of {subgroup_size}: needs \
                     a multiple of 16 in 32..=128 (or of 32 up to {MAX_HEAD_DIM}), a group of \
                     1..=16, 1..=4 subgroups of 16..=64 lanes within the shared memory",
                    s.head_dim, t.nsg
                ),
            ));
        }
        if t.with_bk(t.bk, s.head_dim, subgroup_size, s.kv).is_none() {
            return Err(shape_err(
                k,
                format!(
                    "{} keys per step at head dim {} over {} K/V, subgroups of {subgroup_size}: \
                     32, or 64 up to head dim 128 over f16 with subgroups of 32+",
                    t.bk,
                    s.head_dim,
                    s.kv.name()
                ),
            ));
        }
        if t.skip > SKIP_EXP | SKIP_KV_LOADS | SKIP_QK | SKIP_PV {
            return Err(shape_err(k, format!("skip mask {} outside 0..=15", t.skip)));
        }
        if !(t.rescale_t >= 0.0 && t.rescale_t <= 10.0) {
            return Err(shape_err(
                k,
                format!("rescale threshold {} outside 0..=10", t.rescale_t),
            ));
        }
        check_queries_and_split(k, s, pos0, t.split, t.split_min)?;
        s.check_buffers(k, &self.q, &self.k, &self.v, &self.q_pos, &self.out)?;
        let tiles = s.n_q.div_ceil(t.bq(group));
        let groups_x = tiles * t.split as usize;
        let vd = CoopAttn2Tile::value_cols(s.head_dim);
        if groups_x > MAX_GROUPS_X as usize || s.n_kv_heads > MAX_GROUPS_X as usize {
            return Err(shape_err(k, "grid out of range"));
        }
        let bytes = (t.part_bytes(s), t.counter_bytes(s));
        let (part, ctr) = split_bindings(k, t.split, bytes, scratch, self.out)?;
        let p = Params {
            base: AttnPrefillCoopParams {
                base: s.prefill_params(k)?,
                pos0: to_u32(k, "pos0", pos0)?,
            },
            split_min: t.split_min,
            split: t.split,
        };
        let spt = t.slots(s.head_dim, subgroup_size, s.kv);
        let o = Overrides::new()
            .set("HD", s.head_dim as f64)
            .set("VD", vd as f64)
            .set("NSG", t.nsg as f64)
            .set("SG", subgroup_size as f64)
            .set("WG", (t.nsg * subgroup_size) as f64)
            .set("KV_DTYPE", s.kv.code())
            .set("SPT", spt as f64)
            .set("BK", t.bk as f64)
            .set("VAHEAD", f64::from(u8::from(t.v_ahead)))
            .set("RESCALE_T", t.rescale_t as f64)
            .set("SPLIT_ON", f64::from(u8::from(t.split > 1)))
            .set("SKIP", t.skip as f64);
        let grid = [
            groups_x as u32,
            s.n_kv_heads as u32,
            (s.head_dim / vd) as u32,
        ];
        self.bind_v2(k, s, o, out16, (part, ctr), &p, grid)
    }

    /// A dispatch of `k` on the second kernel's bindings (q, k, v, q_pos, out, out16, kv_part,
    /// kv_ctr), with HALF set where `out16` (the f16 copy of the output, size checked) is given.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bind_v2<P: bytemuck::Pod>(
        self,
        k: &'static KernelSpec,
        s: &AttnShape,
        mut o: Overrides,
        out16: Option<B>,
        (part, ctr): (B, B),
        push: &P,
        grid: [u32; 3],
    ) -> Result<Dispatch<B>, Error> {
        if let Some(h) = &out16 {
            crate::spec::need(k, "out16", h, 2 * (s.n_q * s.n_heads * s.head_dim) as u64)?;
            o = o.set("HALF", 1.0);
        }
        let out16 = out16.unwrap_or(self.out);
        let bufs = vec![
            self.q, self.k, self.v, self.q_pos, self.out, out16, part, ctr,
        ];
        Ok(Dispatch::new(k, o, bufs, push, grid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_fit_shared_memory_and_registers() {
        for hd in (32..=128).step_by(16) {
            for sg in [16, 32, 64] {
                for kv in [KvType::F32, KvType::F16] {
                    for group in [1, 2, 3, 4, 8, 16] {
                        let t = CoopAttn2Tile::for_shape(hd, group, sg, kv).expect("supported");
                        assert!(shared_bytes(hd, t) <= MAX_SHARED, "{hd} {sg}");
                        assert!(t.slots(hd, sg, kv) <= MAX_SPT);
                        assert!(t.bq(group) >= 1);
                    }
                }
            }
        }
        // HD 128, 4 subgroups: Q 64 x 272, K/V 32 x 272, scores 64 x 144, P 64 x 80 bytes,
        // row factors and sums 2 x 64 x 4, the rescale flag padded to 16.
        let t = CoopAttn2Tile::for_shape(128, 2, 32, KvType::F32).unwrap();
        assert_eq!(shared_bytes(128, t), 17408 + 8704 + 9216 + 5120 + 512 + 16);
        // f32 K at HD 128: 32 keys x 32 slots over 128 invocations.
        assert_eq!(t.slots(128, 32, KvType::F32), 8);
        assert_eq!(t.slots(128, 32, KvType::F16), 4);
        assert_eq!(t.bq(2), 32);
        assert_eq!(t.bq(3), 21);
        // One subgroup of 16 lanes would need 64 f32 slots per invocation.
        assert_eq!(CoopAttn2Tile::with_nsg(1, 128, 1, 16, KvType::F32), None);
        // HD 256 (f16 K): two subgroups (four would need 65 KiB), 16 K slots per invocation,
        // half the value columns per workgroup; f32 K would need 32 slots.
        let t = CoopAttn2Tile::for_shape(256, 8, 32, KvType::F16).unwrap();
        assert_eq!(t.nsg, 2);
        assert_eq!(t.slots(256, 32, KvType::F16), 16);
        assert_eq!(shared_bytes(256, t), 16896 + 16896 + 4608 + 2560 + 256 + 16);
        assert_eq!(CoopAttn2Tile::value_cols(256), 128);
        assert_eq!(CoopAttn2Tile::value_cols(128), 128);
        assert_eq!(CoopAttn2Tile::for_shape(256, 2, 32, KvType::F32), None);
        assert_eq!(CoopAttn2Tile::for_shape(144, 2, 32, KvType::F16), None);
        assert_eq!(CoopAttn2Tile::for_shape(288, 2, 32, KvType::F16), None);
        // Value halves split too.
        assert_eq!(t.with_split(4, 512, 0).split, 4);
        assert_eq!(CoopAttn2Tile::for_shape(72, 2, 32, KvType::F16), None);
        assert_eq!(CoopAttn2Tile::for_shape(128, 17, 32, KvType::F16), None);
        assert_eq!(CoopAttn2Tile::with_nsg(5, 128, 2, 32, KvType::F16), None);
    }

    #[test]
    fn wide_key_steps_fit_where_the_shader_runs_them() {
        // HD 128, 4 subgroups, 64 keys: Q in registers (one unused 272-byte row), K/V 64 x 272,
        // scores 64 x 272, P 64 x 144, row factors and sums, the flags: under 48 KiB.
        let t = CoopAttn2Tile::for_shape(128, 4, 32, KvType::F16).unwrap();
        let w = t
            .with_bk(64, 128, 32, KvType::F16)
            .expect("64 keys at HD 128");
        assert_eq!(shared_bytes(128, w), 272 + 17408 + 17408 + 9216 + 512 + 16);
        assert!(shared_bytes(128, w) <= MAX_SHARED);
        assert_eq!(w.slots(128, 32, KvType::F16), 8);
        // Steps of 64 keys halve the split's step count.
        assert_eq!(t.with_split(2, 512, 0).split_min, 9);
        assert_eq!(w.with_split(2, 512, 0).split_min, 5);
        // Not past head dim 128, not over f32, not on 16-lane subgroups, only 32 or 64.
        let t256 = CoopAttn2Tile::for_shape(256, 8, 32, KvType::F16).unwrap();
        assert_eq!(t256.with_bk(64, 256, 32, KvType::F16), None);
        let t32 = CoopAttn2Tile::for_shape(128, 4, 32, KvType::F32).unwrap();
        assert_eq!(t32.with_bk(64, 128, 32, KvType::F32), None);
        let t16 = CoopAttn2Tile::for_shape(64, 4, 16, KvType::F16).unwrap();
        assert_eq!(t16.with_bk(64, 64, 16, KvType::F16), None);
        assert_eq!(t.with_bk(48, 128, 32, KvType::F16), None);
        assert_eq!(t.with_bk(32, 128, 32, KvType::F16), Some(t));
    }
}
