//! `shaders/elementwise.wgsl`: add, scale, copy, softcap, row-wise multiply over flat f32 arrays.

use crate::sources::ELEMENTWISE;
use crate::spec::{grid_for, need, rd, rw, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

const WG: u32 = 256;

macro_rules! spec {
    ($name:ident, $s:literal, $entry:literal) => {
        pub static $name: KernelSpec = KernelSpec {
            name: $s,
            file: "elementwise.wgsl",
            entry: $entry,
            source: ELEMENTWISE,
            bindings: &[rd("a"), rd("b"), rw("out")],
            push_size: 12,
            exact_fp: false,
            glsl: None,
        };
    };
}
spec!(ADD, "add", "add");
spec!(SCALE, "scale", "scale");
spec!(COPY, "copy", "copy");
spec!(SOFTCAP, "softcap", "softcap");
spec!(MUL_ROWS, "mul_rows", "mul_rows");

/// Push constants of every elementwise kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ElementwiseParams {
    pub n: u32,
    pub s: f32,
    /// Row length of `mul_rows` (1 elsewhere).
    pub m: u32,
}

fn build<B: KernelBuffer>(
    k: &'static KernelSpec,
    a: B,
    b: B,
    out: B,
    n: usize,
    s: f32,
    m: usize,
) -> Result<Dispatch<B>, Error> {
    let bytes = 4 * n as u64;
    need(k, "a", &a, bytes)?;
    let b_bytes = match () {
        _ if std::ptr::eq(k, &ADD) => bytes,
        _ if std::ptr::eq(k, &MUL_ROWS) => 4 * m as u64,
        _ => 0,
    };
    need(k, "b", &b, b_bytes)?;
    need(k, "out", &out, bytes)?;
    let p = ElementwiseParams {
        n: to_u32(k, "n", n)?,
        s,
        m: to_u32(k, "m", m)?,
    };
    let groups = grid_for(k, (n as u64).div_ceil(WG as u64))?;
    Ok(Dispatch::new(
        k,
        Overrides::new().set("WG", WG as f64),
        vec![a, b, out],
        &p,
        groups,
    ))
}

/// `out = a + b` over `n` elements (`out` may be `a` or `b`).
pub struct Add<B> {
    pub a: B,
    pub b: B,
    pub out: B,
}
impl<B: KernelBuffer> Add<B> {
    pub fn dispatch(self, n: usize) -> Result<Dispatch<B>, Error> {
        build(&ADD, self.a, self.b, self.out, n, 0.0, 1)
    }
}

/// `out = s * a` (`out` may be `a`).
pub struct Scale<B> {
    pub a: B,
    pub out: B,
}
impl<B: KernelBuffer> Scale<B> {
    pub fn dispatch(self, n: usize, s: f32) -> Result<Dispatch<B>, Error> {
        // `b` is not read by this entry point; `a` fills the slot.
        build(&SCALE, self.a, self.a, self.out, n, s, 1)
    }
}

/// `out = a`.
pub struct Copy<B> {
    pub a: B,
    pub out: B,
}
impl<B: KernelBuffer> Copy<B> {
    pub fn dispatch(self, n: usize) -> Result<Dispatch<B>, Error> {
        build(&COPY, self.a, self.a, self.out, n, 0.0, 1)
    }
}

/// `out = cap * tanh(a / cap)` (Gemma's logit soft-capping; `out` may be `a`).
pub struct Softcap<B> {
    pub a: B,
    pub out: B,
}
impl<B: KernelBuffer> Softcap<B> {
    pub fn dispatch(self, n: usize, cap: f32) -> Result<Dispatch<B>, Error> {
        if !(cap.is_finite() && cap > 0.0) {
            return Err(crate::spec::shape_err(
                &SOFTCAP,
                format!("cap {cap} must be > 0"),
            ));
        }
        build(&SOFTCAP, self.a, self.a, self.out, n, cap, 1)
    }
}

/// `out[r, c] = a[r, c] * b[c]` over `n` elements in rows of `m` (`out` may be `a`; `n` a
/// multiple of `m`): the query scaled by a centred key cache's scales.
pub struct MulRows<B> {
    pub a: B,
    pub b: B,
    pub out: B,
}
impl<B: KernelBuffer> MulRows<B> {
    pub fn dispatch(self, n: usize, m: usize) -> Result<Dispatch<B>, Error> {
        if m == 0 || !n.is_multiple_of(m) {
            return Err(crate::spec::shape_err(
                &MUL_ROWS,
                format!("{n} elements are not whole rows of {m}"),
            ));
        }
        build(&MUL_ROWS, self.a, self.b, self.out, n, 0.0, m)
    }
}
