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
};

/// Invocations (rows) per workgroup of [`MATVEC_ROWS`]: 32 rows keep 18 workgroups for a
/// 576-row matrix, enough to balance a few CPU threads.
pub const ROWS_WG: u32 = 32;

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
    /// shape checks, push constants and grid are the fast kernel's with one row per invocation
    /// and [`ROWS_WG`] rows per workgroup.
    pub fn dispatch_rows(self, op: &MatvecOp) -> Result<Dispatch<B>, Error> {
        let mut teams = op.clone();
        teams.tuning = Some(MatvecTuning {
            wg: ROWS_WG,
            lanes: 1,
            rows_per_team: 1,
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
            .set("WG", ROWS_WG as f64)
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
}
