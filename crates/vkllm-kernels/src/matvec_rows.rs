//! `shaders/matvec_rows.wgsl`: the op of [`crate::matvec_fused`] (every weight type, `n`
//! columns, norm prologue, up to three parts, store / accumulate / gated epilogues) in the layout
//! that suits CPU Vulkan implementations (Mesa lavapipe): one invocation per weight row, the loop
//! over the row uniform across the subgroup. On llvmpipe it is several times faster than the
//! team-per-row kernel (see the shader's header for why); on GPUs it would be slow.
//!
//! Which layout runs an op is [`MatvecLayout`]; the runtime picks [`MatvecLayout::Rows`] for
//! devices that report `VK_PHYSICAL_DEVICE_TYPE_CPU` and [`MatvecLayout::Teams`] elsewhere.

use crate::matvec_fused::{MatvecFused, MatvecOp, MatvecTuning};
use crate::sources::MATVEC_ROWS as SRC;
use crate::spec::{rd, rw};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides, WeightType};

pub static MATVEC_ROWS: KernelSpec = KernelSpec {
    name: "matvec_rows",
    file: "matvec_rows.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("w0"), rd("x"), rw("y"), rd("w1"), rd("w2"), rd("norm_w")],
    push_size: 52,
    exact_fp: false,
    glsl: None,
};

/// Most invocations per workgroup of [`MATVEC_ROWS`].
pub const ROWS_WG: u32 = 32;

/// Invocations per workgroup of [`MATVEC_ROWS`] for `op`: 32, or 16 / 8 so a small matrix still
/// makes at least 8 workgroups where it can (a 192-row K/V projection is 12 workgroups of
/// 8 x 2 rows instead of 3 of 32 x 2, which 2 CPU threads would split 2:1).
pub fn rows_workgroup(op: &MatvecOp) -> u32 {
    let rows = op.parts.first().map_or(0, |p| p.rows);
    let per_lane = rows_per_invocation(op) as usize;
    let mut wg = ROWS_WG;
    while wg > 8 && rows.div_ceil(wg as usize * per_lane) < 8 {
        wg /= 2;
    }
    wg
}

/// Rows per invocation of [`MATVEC_ROWS`] for `op`: 2 (each x vec4 loaded and broadcast once
/// for two rows) for store / accumulate epilogues of up to 8 columns; 1 for gated ones (their
/// gate and up units already make two slots; four spill on llvmpipe).
pub fn rows_per_invocation(op: &MatvecOp) -> u32 {
    match op.epilogue {
        crate::matvec_fused::Epilogue::Gated { .. } => 1,
        _ if 2 * op.n_cols <= 16 => 2,
        _ => 1,
    }
}

/// The thread layout a [`MatvecOp`] runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatvecLayout {
    /// `matvec_fused.wgsl`: a team of lanes per row, 16-byte coalesced loads (GPUs).
    Teams,
    /// `matvec_rows.wgsl`: one invocation per row (CPU implementations such as lavapipe).
    Rows,
}

/// Elements per unit of the rows kernel: whole 32-element blocks for the formats it decodes
/// directly, 16 for the other block formats, a 16-byte word of a float row.
fn rows_unit(op: &MatvecOp) -> usize {
    match op.dtype {
        WeightType::Q4_0 | WeightType::Q4_1 | WeightType::Q8_0 => 32,
        _ => op.unit_elems(),
    }
}

impl<B: KernelBuffer> MatvecFused<B> {
    /// [`MatvecFused::dispatch`] of the same op on [`MATVEC_ROWS`] (`op.tuning` is ignored). The
    /// shape checks, push constants and grid are the fast kernel's, for [`rows_workgroup`]
    /// invocations of [`rows_per_invocation`] rows per workgroup.
    pub fn dispatch_rows(self, op: &MatvecOp) -> Result<Dispatch<B>, Error> {
        let r = rows_per_invocation(op);
        let wg = rows_workgroup(op);
        let mut teams = op.clone();
        // The fast kernel's grid for workgroups of `wg * r` rows (its workgroups are >= 32
        // invocations: 32 with teams of 32 / wg lanes make as many rows).
        teams.tuning = Some(MatvecTuning {
            wg: ROWS_WG,
            lanes: ROWS_WG / wg,
            rows_per_team: r,
        });
        let d = self.dispatch(&teams)?;
        let base = if op.dtype.is_quantized() {
            crate::mat_quant::format_overrides(op.dtype)
        } else {
            Overrides::new()
                .set("QTYPE", 0.0)
                .set("DTYPE", op.dtype.code())
        };
        let mut overrides = base
            .set("WG", wg as f64)
            .set("R", r as f64)
            .set("UE", rows_unit(op) as f64);
        for name in ["NC", "NPARTS", "NORM", "EPI"] {
            // Set by the fast kernel's dispatch for every op.
            let v = d.overrides.get(name).unwrap_or(0.0);
            overrides = overrides.set(name, v);
        }
        Ok(Dispatch {
            kernel: &MATVEC_ROWS,
            overrides,
            ..d
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_is_a_whole_block_for_the_direct_formats() {
        let op = |dtype| MatvecOp::plain(dtype, 4, 256);
        assert_eq!(rows_unit(&op(WeightType::Q8_0)), 32);
        assert_eq!(rows_unit(&op(WeightType::Q4_1)), 32);
        assert_eq!(rows_unit(&op(WeightType::Q4_K)), 16);
        assert_eq!(rows_unit(&op(WeightType::F16)), 8);
        assert_eq!(rows_unit(&op(WeightType::F32)), 4);
    }

    #[test]
    fn two_rows_per_invocation_unless_gated() {
        let mut op = MatvecOp::plain(WeightType::Q4_1, 64, 64);
        op.n_cols = 8;
        assert_eq!(rows_per_invocation(&op), 2);
        op.n_cols = 1;
        assert_eq!(rows_per_invocation(&op), 2);
        op.epilogue = crate::matvec_fused::Epilogue::Gated {
            act: crate::matvec_fused::GatedAct::Silu,
        };
        assert_eq!(rows_per_invocation(&op), 1);
    }

    #[test]
    fn small_matrices_get_smaller_workgroups() {
        // 2 rows per lane: 576 rows are 9 workgroups of 64; 320 rows 10 of 32; 192 rows 12 of
        // 16; 40 rows stay 3 of 16 (8 invocations is the least).
        assert_eq!(
            rows_workgroup(&MatvecOp::plain(WeightType::Q4_1, 576, 64)),
            32
        );
        assert_eq!(
            rows_workgroup(&MatvecOp::plain(WeightType::Q4_1, 320, 64)),
            16
        );
        assert_eq!(
            rows_workgroup(&MatvecOp::plain(WeightType::Q4_1, 192, 64)),
            8
        );
        assert_eq!(
            rows_workgroup(&MatvecOp::plain(WeightType::Q4_1, 40, 64)),
            8
        );
    }
}
