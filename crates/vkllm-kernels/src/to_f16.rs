//! `shaders/to_f16.wgsl`: f32 -> f16 (two halves per u32 word), the activations of
//! cooperative-matrix matmuls that read X as f16.

use crate::sources::TO_F16 as SRC;
use crate::spec::{grid_for, need, rd, rw, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

pub static TO_F16: KernelSpec = KernelSpec {
    name: "to_f16",
    file: "to_f16.wgsl",
    entry: "to_f16",
    source: SRC,
    bindings: &[rd("a"), rw("out")],
    push_size: 4,
    exact_fp: false,
    glsl: None,
};

/// Bytes of `n` halves packed two per word (the last word padded).
pub fn packed_bytes(n: usize) -> u64 {
    4 * n.div_ceil(2) as u64
}

/// `out` (u32 words) = `a` (`n` f32) rounded to f16, two per word.
pub struct ToF16<B> {
    pub a: B,
    pub out: B,
}

impl<B: KernelBuffer> ToF16<B> {
    pub fn dispatch(self, n: usize) -> Result<Dispatch<B>, Error> {
        let k = &TO_F16;
        need(k, "a", &self.a, 4 * n as u64)?;
        need(k, "out", &self.out, packed_bytes(n))?;
        let n32 = to_u32(k, "n", n)?;
        let groups = grid_for(k, (n.div_ceil(2) as u64).div_ceil(WG as u64))?;
        Ok(Dispatch::new(
            k,
            Overrides::new().set("WG", WG as f64),
            vec![self.a, self.out],
            &n32,
            groups,
        ))
    }
}
