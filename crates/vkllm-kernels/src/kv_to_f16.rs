//! `shaders/kv_to_f16.wgsl`: f16 copies of quantized K and V rows (q8_0, q4_0, tq4), for the
//! cooperative-matrix prefill attention.

use crate::kv_append::{KV_UNIT, KvRot, KvTypes};
use crate::sources::KV_TO_F16 as SRC;
use crate::spec::{grid_for, need, rd, rw, shape_err, to_u32};
use crate::to_f16::packed_bytes;
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

pub static KV_TO_F16: KernelSpec = KernelSpec {
    name: "kv_to_f16",
    file: "kv_to_f16.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("k"), rd("v"), rw("k_out"), rw("v_out"), rd("sink")],
    push_size: 8,
    exact_fp: false,
    glsl: None,
};

/// `k_out`, `v_out` = the first `n` values of the quantized caches `k`, `v` as f16 pairs.
pub struct KvToF16<B> {
    pub k: B,
    pub v: B,
    pub k_out: B,
    pub v_out: B,
    /// `(offset, m)`: the first `m` K values (the row of position 0 of centred keys) are copied
    /// plus `offset[..m]` (f32, added after the rotation back).
    pub sink: Option<(B, usize)>,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct KvToF16Params {
    n: u32,
    sink_n: u32,
}

impl<B: KernelBuffer> KvToF16<B> {
    /// `n`: a multiple of 64 (whole rows of a quantized cache of `types`); `rot`: the parts whose
    /// units are stored rotated (the copy rotates them back).
    pub fn dispatch(
        self,
        types: impl Into<KvTypes>,
        rot: KvRot,
        n: usize,
    ) -> Result<Dispatch<B>, Error> {
        let k = &KV_TO_F16;
        let types = types.into();
        let dtype = types.k;
        rot.check(types).map_err(|m| shape_err(k, m))?;
        if !dtype.is_quantized() || !types.v.is_quantized() {
            return Err(shape_err(
                k,
                format!("a {} cache is not quantized", types.name()),
            ));
        }
        if n == 0 || !n.is_multiple_of(KV_UNIT) {
            return Err(shape_err(
                k,
                format!("{n} values: not whole units of {KV_UNIT}"),
            ));
        }
        need(k, "k", &self.k, types.k.bytes(n as u64))?;
        need(k, "v", &self.v, types.v.bytes(n as u64))?;
        need(k, "k_out", &self.k_out, packed_bytes(n))?;
        need(k, "v_out", &self.v_out, packed_bytes(n))?;
        let sink_n = match &self.sink {
            Some((b, m)) if *m <= n => {
                need(k, "sink", b, 4 * *m as u64)?;
                *m
            }
            Some((_, m)) => {
                return Err(shape_err(
                    k,
                    format!("a sink of {m} values past the copy of {n}"),
                ));
            }
            None => 0,
        };
        let params = KvToF16Params {
            n: to_u32(k, "n", n)?,
            sink_n: to_u32(k, "sink_n", sink_n)?,
        };
        let sink = self.sink.as_ref().map(|s| s.0);
        let sinked = sink.is_some();
        Ok(Dispatch::new(
            k,
            Overrides::new()
                .set("KV_DTYPE", dtype.code())
                .set("KV_DTYPE_V", types.v.code())
                .set("KV_ROT_K", f64::from(u8::from(rot.k)))
                .set("KV_ROT_V", f64::from(u8::from(rot.v)))
                .set("KV_SINK", f64::from(u8::from(sinked))),
            // Any buffer where there is no sink (the shader does not read it).
            vec![
                self.k,
                self.v,
                self.k_out,
                self.v_out,
                sink.unwrap_or(self.k),
            ],
            &params,
            grid_for(k, (n / KV_UNIT) as u64)?,
        ))
    }
}
