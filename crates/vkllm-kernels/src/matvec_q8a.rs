//! `shaders/matvec_q8a.wgsl`: the decode matvec on int8 dot products. The op, buffers and
//! parameters are [`crate::matvec_fused`]'s ([`MatvecOp`], [`MatvecFused::dispatch_q8a`]); the
//! kernel quantizes each activation column to int8 per 32 elements (a scale `amax / 127` and
//! round-half-even codes, as vkllm-cpu's `quantize_act_q8`) in shared memory and takes the weight
//! codes four at a time with `dot4I8Packed`.
//!
//! Not exact: the activations lose precision (relative error up to ~1/254 of each 32-element
//! block's largest magnitude), so the result is vkllm-cpu's `matvec_q8act` (the product with the
//! quantized activations), not `matvec_quant`. Selected by [`MatvecImpl::Int8`] only.
//!
//! [`MatvecFused::dispatch_q8a`]: crate::matvec_fused::MatvecFused::dispatch_q8a
//! [`MatvecImpl::Int8`]: crate::matvec_fused::MatvecImpl::Int8

use crate::matvec_fused::{Epilogue, Kind, MatvecFused, MatvecOp, MatvecTuning};
use crate::quantize_act_q8::ActQ8Layout;
use crate::sources::MATVEC_Q8A as SRC;
use crate::spec::{need, rd, rw, shape_err};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, WeightType};

pub static MATVEC_Q8A: KernelSpec = KernelSpec {
    name: "matvec_q8a",
    file: "matvec_q8a.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("w0"), rd("x"), rw("y"), rd("w1"), rd("w2"), rd("norm_w")],
    push_size: 56,
    exact_fp: false,
    glsl: None,
};

/// `main_qout` of the same file: the one-column accumulating product, then y quantized for the
/// next product's norm prologue ([`QuantOut`], `matvec_q8a_qout.inc.wgsl`).
pub static MATVEC_Q8A_QOUT: KernelSpec = KernelSpec {
    name: "matvec_q8a_qout",
    file: "matvec_q8a.wgsl",
    entry: "main_qout",
    source: SRC,
    bindings: &[
        rd("w0"),
        rd("x"),
        rw("y"),
        rd("w1"),
        rd("w2"),
        rd("norm_w"),
        rd("next_norm_w"),
        rw("codes"),
        rw("meta"),
        rw("ctl"),
    ],
    push_size: 56,
    exact_fp: false,
    glsl: None,
};

/// Most 32-row units one workgroup of `main_qout` may touch (the shader's `QO_UNITS`).
pub const QOUT_UNITS: usize = 64;

/// Where `main_qout` leaves y quantized: `codes` and `meta` as [`QuantizeActQ8`] writes one
/// column of `rows` elements with the norm weights `norm_w` (`[rows]`) and `offset`; `ctl`
/// ([`QuantOut::ctl_bytes`]) holds its counters, zero before the launch and after it.
///
/// [`QuantizeActQ8`]: crate::quantize_act_q8::QuantizeActQ8
pub struct QuantOut<B> {
    pub norm_w: B,
    pub offset: f32,
    pub codes: B,
    pub meta: B,
    pub ctl: B,
}

impl<B> QuantOut<B> {
    /// Bytes of counters, unit sums and row values for `rows` rows.
    pub fn ctl_bytes(rows: usize) -> u64 {
        let l = ActQ8Layout { cols: rows, n: 1 };
        4 * (2 * l.units() + l.chunks() + rows) as u64
    }
}

/// Whether `main_qout` takes `op`: one accumulating column of one part at y offset 0 without a
/// norm prologue, rows a multiple of 32, on the int8 kernel ([`supported`]), and workgroups
/// (under the op's tuning or [`default_tuning`]) whose rows span fewer than [`QOUT_UNITS`]
/// units (a workgroup's rows may start inside a unit).
pub fn qout_fits(op: &MatvecOp) -> bool {
    let rows = op.parts.first().map_or(0, |p| p.rows);
    let plain = op.n_cols == 1
        && op.norm.is_none()
        && op.epilogue == Epilogue::Accumulate
        && op.parts.len() == 1
        && op.parts[0].y_offset == 0
        && rows > 0
        && rows.is_multiple_of(32);
    if !plain || !supported(op) {
        return false;
    }
    let t = op.tuning.unwrap_or_else(|| default_tuning(op));
    if t.lanes == 0 || t.lanes > t.wg {
        return false;
    }
    let rows_per_wg = (t.wg / t.lanes * t.rows_per_team * groups_per_workgroup(op, t)) as usize;
    rows_per_wg.div_ceil(32) < QOUT_UNITS
}

impl<B: KernelBuffer + Copy> MatvecFused<B> {
    /// The accumulating one-column product `y += W x` of `op` (the int8 launch of
    /// [`MatvecFused::dispatch_q8a`], where [`qout_fits`]) and then `y` quantized into `q` for
    /// the next product: with `q.offset` and `q.norm_w` the norm's, `q.codes` and `q.meta` end
    /// as [`QuantizeActQ8`] of y with that norm would leave them.
    ///
    /// [`QuantizeActQ8`]: crate::quantize_act_q8::QuantizeActQ8
    pub fn dispatch_q8a_qout(self, op: &MatvecOp, q: QuantOut<B>) -> Result<Dispatch<B>, Error> {
        let k = &MATVEC_Q8A_QOUT;
        if !qout_fits(op) {
            return Err(shape_err(
                k,
                format!(
                    "{} x {} of {}, {} columns: not one accumulating int8 column without a norm, \
                     one part at offset 0 of rows a multiple of 32, in workgroups of fewer than \
                     {QOUT_UNITS} units",
                    op.parts.first().map_or(0, |p| p.rows),
                    op.cols,
                    op.dtype.name(),
                    op.n_cols
                ),
            ));
        }
        let rows = op.parts[0].rows;
        let l = ActQ8Layout { cols: rows, n: 1 };
        need(k, "next_norm_w", &q.norm_w, 4 * rows as u64)?;
        need(k, "codes", &q.codes, l.code_bytes())?;
        need(k, "meta", &q.meta, l.meta_bytes())?;
        need(k, "ctl", &q.ctl, QuantOut::<B>::ctl_bytes(rows))?;
        let extra = [q.norm_w, q.codes, q.meta, q.ctl];
        self.dispatch_on(op, Kind::Qout(q.offset), &extra)
    }
}

/// Most activation elements (columns x tokens) one dispatch takes: the kernel's shared copy of
/// the quantized x (16 KiB of int8, one scale and sum per 32).
pub const MAX_ELEMS: usize = 16384;

/// Shared memory the kernel declares (int8 x, unit scales and sums, reduction space): devices
/// with less (Vulkan guarantees 16 KiB) run the fast kernel.
pub const SHARED_BYTES: usize = MAX_ELEMS + 2 * 4 * (MAX_ELEMS / 32) + 4 * 1024;

/// The weight types the kernel decodes.
pub const TYPES: [WeightType; 4] = [
    WeightType::Q8_0,
    WeightType::Q4_0,
    WeightType::Q4_K,
    WeightType::Q6_K,
];

/// Whether `op` runs on `matvec_q8a.wgsl`: one of [`TYPES`], whole blocks, 1..=8 columns with
/// `n_cols * cols <= MAX_ELEMS`. (The device must also offer int8 dot products and subgroups of
/// at least 4 lanes: the caller checks.)
pub fn supported(op: &MatvecOp) -> bool {
    types_ok(op)
        && (1..=crate::matvec_fused::MAX_COLUMNS).contains(&op.n_cols)
        && op.n_cols * op.cols <= MAX_ELEMS
}

/// Most columns one launch on quantized x takes (the kernel's `XG`; 32 sums per invocation:
/// 16 columns of a gated pair).
pub const XG_MAX_COLUMNS: usize = 16;

/// The int8 kernel's launch rules (the device's tuning: `q8a_wide`, `q8a_quad`,
/// `q8a_workgroups`, `q8a_xg_lanes`, `q8a_xg_rows`); the defaults are the measured ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q8aRules {
    /// [`kquant_wide`]'s rule; `false`: the reference launch.
    pub wide: bool,
    /// [`quad`]'s rule; `false`: unit pairs (the reference).
    pub quad: bool,
    /// Workgroups [`groups_per_workgroup`] aims for; 0 picks per op: 4096 for [`kquant_wide`]
    /// ops, else 1024 (enough to keep every SM of a large GPU busy while each quantization of x
    /// serves as many rows as that allows).
    pub workgroups: u32,
    /// Two or more columns on quantized x (`XG`, one `quantize_act_q8` per product); `false`:
    /// the shared-memory launch where it fits, the float kernel elsewhere (the reference).
    pub xg: bool,
    /// Lanes per row of launches on quantized x ([`xg_tuning`]); 0: by row length.
    pub xg_lanes: u32,
    /// Rows per team of launches on quantized x; 0: two where that still makes
    /// [`XG_PAIR_MIN_GROUPS`] workgroups, else one.
    pub xg_rows: u32,
    /// With `xg`, which single-column products take quantized x ([`XgSingle`]); rows past
    /// [`MAX_ELEMS`] take it either way.
    pub xg_single: XgSingle,
    /// With `xg_single`, an accumulating one-column product whose output a norm product on
    /// quantized x reads next quantizes it for that product in the same launch
    /// ([`MATVEC_Q8A_QOUT`]); `false`: the norm product's own quantize launch (the reference).
    pub xg_produce: bool,
    /// A one-column norm product on quantized x skips its quantize launch when the int8 scratch
    /// still holds that quantization (an earlier product of the same normed x: a DeltaNet
    /// layer's z, b and a; with `xg_produce` always); `false`: a launch per product (the
    /// reference, unless `xg_produce`).
    pub xg_reuse: bool,
    /// Parts of different weight types in one launch (`MatvecOp::part_types`); `false`: the
    /// caller records one product per weight (the reference).
    pub mixed: bool,
    /// Invocations per workgroup of the shared-memory launch; 0: [`default_tuning`]'s rule
    /// (256, up to 1024 for ungated rows of [`WIDE_X_COLS`]+ elements).
    pub wg: u32,
}

impl Default for Q8aRules {
    fn default() -> Self {
        Q8aRules {
            wide: true,
            quad: true,
            workgroups: 0,
            xg: true,
            xg_lanes: 0,
            xg_rows: 0,
            xg_single: XgSingle::Norm(4096),
            xg_produce: false,
            xg_reuse: true,
            mixed: true,
            wg: 0,
        }
    }
}

/// Which single-column int8 products run on activations quantized by their own
/// `quantize_act_q8` launch (`XG`) rather than each workgroup quantizing x in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XgSingle {
    /// None (the reference).
    Shared,
    /// Those with a norm prologue over rows of at least this many elements. The default,
    /// 4096: the H100 measured Llama-3.1-8B's q/k/v and gate/up faster so, Llama-3.2-1B's
    /// (2048) slower.
    Norm(u32),
    /// Every one.
    All,
}

impl XgSingle {
    /// From the tuning's keys: `q8a_xg1` (every one) and `q8a_xg1_norm` (0: none with a norm).
    pub fn from_keys(all: bool, norm_min_cols: u32) -> Self {
        match (all, norm_min_cols) {
            (true, _) => XgSingle::All,
            (false, 0) => XgSingle::Shared,
            (false, n) => XgSingle::Norm(n),
        }
    }

    /// Whether a product over rows of `cols` elements, with a norm prologue or not, takes it.
    pub fn takes(self, norm: bool, cols: usize) -> bool {
        match self {
            XgSingle::Shared => false,
            XgSingle::Norm(n) => norm && cols >= n as usize,
            XgSingle::All => true,
        }
    }
}

/// Whether `op` runs on `matvec_q8a.wgsl` over quantized x (`XG`): one of [`TYPES`], whole
/// blocks, one or more columns (a launch takes up to [`xg_chunk`] of them).
pub fn supported_xg(op: &MatvecOp) -> bool {
    types_ok(op) && op.n_cols > 0
}

/// Every part's type one of [`TYPES`] and its rows whole blocks; mixed types only where the
/// op's rules allow them ([`Q8aRules::mixed`]) and the epilogue is not gated.
fn types_ok(op: &MatvecOp) -> bool {
    let each = (0..op.parts.len().max(1)).all(|i| {
        let t = op.part_type(i);
        TYPES.contains(&t) && op.cols > 0 && op.cols.is_multiple_of(t.block_size())
    });
    each && (!op.mixed() || (op.q8a.mixed && !is_gated(op)))
}

/// Elements of a lane step: 64 where every part is Q4_K or Q6_K (unit pairs), else 32.
fn lane_step(op: &MatvecOp) -> usize {
    let pairs = (0..op.parts.len().max(1))
        .all(|i| matches!(op.part_type(i), WeightType::Q4_K | WeightType::Q6_K));
    if pairs { 64 } else { 32 }
}

/// Launches on quantized x with two rows per team need this many workgroups (else one row per
/// team: small matrices fill the GPU first).
pub const XG_PAIR_MIN_GROUPS: usize = 256;

/// The launch on quantized x when the op names none: 128 invocations, teams of 16 lanes (fewer
/// for rows of fewer lane steps; `q8a.xg_lanes`) and two rows per team (`q8a.xg_rows`: each x
/// word loaded serves both) where that makes [`XG_PAIR_MIN_GROUPS`] workgroups. Found by
/// launch sweeps on the H200 (4, 8, 16, 32 lanes x 1, 2 rows over 2 to 16 columns;
/// docs/benchmarks.md).
pub fn xg_tuning(op: &MatvecOp) -> MatvecTuning {
    let step = lane_step(op);
    let lanes = match op.q8a.xg_lanes {
        0 => ((op.cols / step).max(1).next_power_of_two() as u32).clamp(4, 16),
        l => l,
    };
    MatvecTuning {
        wg: 128,
        lanes,
        rows_per_team: match op.q8a.xg_rows {
            0 if plain_rows(op).div_ceil(2 * (128 / lanes) as usize) >= XG_PAIR_MIN_GROUPS => 2,
            0 => 1,
            r => r,
        },
    }
}

/// Columns per launch on quantized x for `op` (all of its `n_cols` at most): as many as 32
/// sums per invocation allow with its tuning's rows per team, at most [`XG_MAX_COLUMNS`].
pub fn xg_chunk(op: &MatvecOp) -> usize {
    let t = op.tuning.unwrap_or_else(|| xg_tuning(op));
    let slots = op.slots(t.rows_per_team).max(1) as usize;
    (32 / slots).clamp(1, XG_MAX_COLUMNS)
}

/// The launch shape used when the op names none: 32 lanes per row (fewer when a row has fewer
/// than 32 steps of 32 elements, 64 for Q4_K and Q6_K, so no lane idles), 2 rows per team for
/// large matrices (x words reused twice), and 256-invocation workgroups (the shared quantization
/// of x is shared by more rows), up to 1024 for ungated rows of [`WIDE_X_COLS`]+ elements, or
/// the op's `q8a.wg`. Large K-quant matrices ([`kquant_wide`]: LM heads) take 8 lanes and one
/// row per team instead.
pub fn default_tuning(op: &MatvecOp) -> MatvecTuning {
    tuning_with_wg(op, op.q8a.wg)
}

/// [`default_tuning`] with `wg` in place of the op's `q8a.wg` (0: the rule).
pub fn tuning_with_wg(op: &MatvecOp, wg: u32) -> MatvecTuning {
    if kquant_wide(op) {
        return MatvecTuning {
            wg: 256,
            lanes: 8,
            rows_per_team: 1,
        };
    }
    // Q4_K and Q6_K lanes take 64-element steps (unit pairs).
    let step = lane_step(op);
    let units = (op.cols / step).max(1);
    let lanes = units.next_power_of_two().clamp(4, 32) as u32;
    let gated = is_gated(op);
    let slots2 = if gated { 4 } else { 2 };
    let r = if plain_rows(op) >= 16384 && slots2 * op.n_cols <= 16 {
        2
    } else {
        1
    };
    // Team sums use `red` (1024 words) for up to wg / 4 subgroups.
    let fits = |wg: u32| (wg / 4) as usize * op.slots(r) as usize * op.n_cols <= 1024;
    let groups = |wg: u32| plain_rows(op).div_ceil((wg / lanes * r) as usize);
    let wg = match wg {
        0 if op.cols >= WIDE_X_COLS && !gated => [1024, 512]
            .into_iter()
            .find(|&w| fits(w) && groups(w) >= WIDE_X_MIN_GROUPS)
            .unwrap_or(256),
        w if w != 0 && w >= lanes && fits(w) => w,
        _ => 256,
    };
    MatvecTuning {
        wg,
        lanes,
        rows_per_team: r,
    }
}

/// Ungated rows of at least this many elements take workgroups of up to 1024 invocations
/// ([`default_tuning`]): every workgroup quantizes all of x, so more rows per workgroup read and
/// quantize it fewer times (down projections; shorter rows and gated pairs measured slower).
pub const WIDE_X_COLS: usize = 8192;

/// ... while the grid keeps this many workgroups (about one per multiprocessor of a large GPU).
pub const WIDE_X_MIN_GROUPS: usize = 128;

/// Whether `op` ends in a gated activation (two parts, gate and up).
fn is_gated(op: &MatvecOp) -> bool {
    matches!(op.epilogue, crate::matvec_fused::Epilogue::Gated { .. })
}

/// The rows of `op`'s output (a gated op's: its first part).
fn plain_rows(op: &MatvecOp) -> usize {
    if is_gated(op) {
        op.parts.first().map_or(0, |p| p.rows)
    } else {
        op.parts.iter().map(|p| p.rows).sum()
    }
}

/// Q6_K matrices of at least 16384 rows and 1024 columns, and Q4_K ones up to 4096 columns (the
/// LM heads), ungated: their launch is 8 lanes x 1 row per team over about 4096 workgroups,
/// found faster for these shapes by a launch sweep; longer Q4_K rows, Q8_0 and Q4_0 lost with
/// it (docs/benchmarks.md). Off with `op.q8a.wide` false (the reference launch).
pub fn kquant_wide(op: &MatvecOp) -> bool {
    if !op.q8a.wide || op.mixed() {
        return false;
    }
    let gated = is_gated(op);
    let wide = match op.dtype {
        WeightType::Q6_K => op.cols >= 1024,
        WeightType::Q4_K => (1024..=4096).contains(&op.cols),
        _ => false,
    };
    wide && !gated && plain_rows(op) >= 16384
}

/// Whether a launch takes Q6_K weights half a super-block per lane step (the kernel's `QUAD`:
/// four units that share their qh bytes and header, from one 64-byte ql run, instead of a unit
/// pair): Q6_K, one row per team, ungated, and at least 8 such steps per lane (cols / 128 >= 8
/// lanes). Faster on long rows; with only one or two steps a lane has too few loads in flight,
/// so the LM heads of the small models keep pairs (docs/benchmarks.md). `op.q8a.quad` false
/// keeps unit pairs (the reference).
pub fn quad(op: &MatvecOp, t: MatvecTuning) -> bool {
    let gated = is_gated(op);
    op.dtype == WeightType::Q6_K
        && !op.mixed()
        && t.rows_per_team == 1
        && !gated
        && op.cols / 128 >= 8 * t.lanes as usize
        && op.q8a.quad
}

/// Row groups (of `wg / lanes * rows_per_team` rows) each workgroup walks (the kernel's `NIT`):
/// the quantization of x in every workgroup is amortized over them. 1 to 16, so the grid keeps
/// about [`Q8aRules::workgroups`] workgroups.
pub fn groups_per_workgroup(op: &MatvecOp, t: MatvecTuning) -> u32 {
    let per_group = (t.wg / t.lanes.max(1) * t.rows_per_team).max(1) as usize;
    let gated = is_gated(op);
    let groups: usize = op
        .parts
        .iter()
        .take(if gated { 1 } else { op.parts.len() })
        .map(|p| p.rows.div_ceil(per_group))
        .sum();
    let target = match op.q8a.workgroups {
        0 if kquant_wide(op) => 4096,
        0 => 1024,
        t => t as usize,
    };
    (groups / target).clamp(1, 16) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xg_pairs_rows_only_where_the_grid_stays_full() {
        let op = |rows, cols, xg_rows| {
            let mut op = MatvecOp::plain(WeightType::Q4_K, rows, cols);
            op.n_cols = 4;
            op.q8a.xg_rows = xg_rows;
            op
        };
        // 2048-wide rows take 16 lanes: 8 teams per workgroup, 16 rows with pairs. 2048 rows
        // would make 128 workgroups with pairs: one row per team; 4096 rows make 256: pairs.
        assert_eq!(xg_tuning(&op(2048, 2048, 0)).rows_per_team, 1);
        assert_eq!(xg_tuning(&op(4096, 2048, 0)).rows_per_team, 2);
        assert_eq!(xg_tuning(&op(128256, 4096, 0)).rows_per_team, 2);
        // The tuning's count wins either way.
        assert_eq!(xg_tuning(&op(2048, 2048, 2)).rows_per_team, 2);
        assert_eq!(xg_tuning(&op(4096, 2048, 1)).rows_per_team, 1);
    }

    #[test]
    fn single_column_rule_from_the_tuning_keys() {
        let default = XgSingle::from_keys(false, 4096);
        assert_eq!(default, Q8aRules::default().xg_single);
        assert!(default.takes(true, 4096) && default.takes(true, 14336));
        assert!(!default.takes(true, 2048) && !default.takes(false, 14336));
        let none = XgSingle::from_keys(false, 0);
        assert!(!none.takes(true, 1 << 20) && !none.takes(false, 1 << 20));
        // `q8a_xg1` takes every single column whatever the norm threshold says.
        let all = XgSingle::from_keys(true, 0);
        assert!(all.takes(false, 64) && all.takes(true, 64));
        assert_eq!(XgSingle::from_keys(true, 4096), all);
    }

    #[derive(Clone, Copy)]
    struct Fake(u64);
    impl KernelBuffer for Fake {
        fn byte_len(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn qout_takes_one_accumulating_column_in_workgroups_of_few_units() {
        let op = |rows, tuning| {
            let mut op = MatvecOp::plain(WeightType::Q4_K, rows, 4096);
            op.epilogue = Epilogue::Accumulate;
            op.tuning = tuning;
            op
        };
        assert!(qout_fits(&op(4096, None)));
        assert!(!qout_fits(&op(4100, None)), "rows not whole units");
        let mut store = op(4096, None);
        store.epilogue = Epilogue::Store;
        assert!(!qout_fits(&store));
        let mut two = op(4096, None);
        two.n_cols = 2;
        assert!(!qout_fits(&two));
        // 1024 invocations of one lane, 4 rows each: 4096+ rows (128+ units) per workgroup.
        let wide = MatvecTuning {
            wg: 1024,
            lanes: 1,
            rows_per_team: 4,
        };
        assert!(!qout_fits(&op(8192, Some(wide))));

        let rows = 4096;
        let bytes = |b: u64| Fake(b.next_multiple_of(16));
        let l = ActQ8Layout { cols: rows, n: 1 };
        let launch = |o: &MatvecOp| {
            let m = MatvecFused {
                w: vec![bytes(WeightType::Q4_K.storage_bytes((rows * 4096) as u64))],
                x: bytes(4 * 4096),
                y: bytes(4 * rows as u64),
                norm_w: None,
            };
            let q = QuantOut {
                norm_w: bytes(4 * rows as u64),
                offset: 0.0,
                codes: bytes(l.code_bytes()),
                meta: bytes(l.meta_bytes()),
                ctl: bytes(QuantOut::<Fake>::ctl_bytes(rows)),
            };
            m.dispatch_q8a_qout(o, q)
        };
        let d = launch(&op(rows, None)).expect("a fitting product");
        assert_eq!(d.kernel.name, MATVEC_Q8A_QOUT.name);
        assert_eq!(d.buffers.len(), MATVEC_Q8A_QOUT.bindings.len());
        match launch(&op(rows, Some(wide))) {
            Err(Error::Shape { kernel, .. }) => assert_eq!(kernel, "matvec_q8a_qout"),
            other => panic!("expected a shape error, got {:?}", other.map(|d| d.groups)),
        }
    }
}
