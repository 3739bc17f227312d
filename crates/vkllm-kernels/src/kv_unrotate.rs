//! `shaders/kv_unrotate.wgsl`: the rotation of V units (q4_0, tq4) undone on attention's output.

use crate::kv_append::KV_UNIT;
use crate::sources::KV_UNROTATE as SRC;
use crate::spec::{grid_for, need, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

pub static KV_UNROTATE: KernelSpec = KernelSpec {
    name: "kv_unrotate",
    file: "kv_unrotate.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rw("x")],
    push_size: 4,
    exact_fp: false,
    glsl: None,
};

/// `x` (its first `n` values) rotated back unit by unit (`vkllm_cpu::kv_quant::unrotate`).
pub struct KvUnrotate<B> {
    pub x: B,
}

impl<B: KernelBuffer> KvUnrotate<B> {
    /// `n`: a positive multiple of 64.
    pub fn dispatch(self, n: usize) -> Result<Dispatch<B>, Error> {
        let k = &KV_UNROTATE;
        if n == 0 || !n.is_multiple_of(KV_UNIT) {
            return Err(shape_err(
                k,
                format!("{n} values: not whole units of {KV_UNIT}"),
            ));
        }
        need(k, "x", &self.x, 4 * n as u64)?;
        let n32 = to_u32(k, "n", n)?;
        Ok(Dispatch::new(
            k,
            Overrides::new(),
            vec![self.x],
            &n32,
            grid_for(k, (n / KV_UNIT) as u64)?,
        ))
    }
}
