//! `shaders/attention_prefill_coop.wgsl`: causal prefill attention on cooperative matrices
//! (VK_KHR_cooperative_matrix, f16 x f16 -> f32, 16 x 16 x 16, subgroup scope), for devices that
//! have them; the contract of [`crate::attention::AttnPrefill`] for queries at consecutive
//! positions `pos0..pos0 + n_q`. The runtime picks it only when the device enables the
//! cooperative-matrix feature with that shape; the portable kernel stays the reference.

use crate::attention::{AttnPrefillParams, AttnShape};
use crate::sources::ATTENTION_PREFILL_COOP as SRC;
use crate::spec::{MAX_GROUPS_X, rd, rw, shape_err, to_u32};
use crate::{Dispatch, Error, KernelBuffer, KernelSpec, Overrides};

pub static ATTN_PREFILL_COOP: KernelSpec = KernelSpec {
    name: "attn_prefill_coop",
    file: "attention_prefill_coop.wgsl",
    entry: "main",
    source: SRC,
    bindings: &[rd("q"), rd("k"), rd("v"), rd("q_pos"), rw("out")],
    push_size: 36,
    exact_fp: false,
    glsl: None,
};

/// The portable prefill kernel's push constants, then the first query's position.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttnPrefillCoopParams {
    pub base: AttnPrefillParams,
    pub pos0: u32,
}

/// The shader's configuration for a head dim and subgroup size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoopAttnTile {
    /// Subgroups per workgroup (16 queries each).
    pub nsg: u32,
    /// Keys per step.
    pub bk: u32,
}

/// Shared memory one workgroup of the shader declares, bytes.
pub fn shared_bytes(head_dim: usize, t: CoopAttnTile) -> usize {
    let (hd, nsg, bk) = (head_dim, t.nsg as usize, t.bk as usize);
    let row = (hd / 4 + 2) * 8;
    let q = nsg * 16 * row;
    let kv = 2 * bk * row;
    let scratch = nsg * 16 * hd * 4;
    let p = nsg * 16 * (bk / 4 + 2) * 8;
    q + kv + scratch + p + 3 * nsg * 16 * 4
}

/// Most shared memory the configurations are allowed (the Vulkan minimum guarantee is 16 KiB;
/// devices with cooperative matrices have at least 32 KiB, the H200 48 KiB).
pub const MAX_SHARED: usize = 48 * 1024;

impl CoopAttnTile {
    /// The configuration for `head_dim` and subgroups of `subgroup_size`, if the shader runs it:
    /// head_dim a multiple of 16 in 32..=128; subgroups of 16..=64 lanes (power of two); four
    /// subgroups per workgroup up to head_dim 64, two above; 32 keys per step.
    pub fn for_shape(head_dim: usize, subgroup_size: u32) -> Option<CoopAttnTile> {
        if !head_dim.is_multiple_of(16) || !(32..=128).contains(&head_dim) {
            return None;
        }
        if !subgroup_size.is_power_of_two() || !(16..=64).contains(&subgroup_size) {
            return None;
        }
        let t = CoopAttnTile {
            nsg: if head_dim <= 64 { 4 } else { 2 },
            bk: 32,
        };
        (shared_bytes(head_dim, t) <= MAX_SHARED).then_some(t)
    }

    /// Queries per workgroup.
    pub fn bq(&self) -> usize {
        16 * self.nsg as usize
    }
}

/// Causal prefill attention on cooperative matrices.
pub struct AttnPrefillCoop<B> {
    pub q: B,
    pub k: B,
    pub v: B,
    pub q_pos: B,
    pub out: B,
}

impl<B: KernelBuffer> AttnPrefillCoop<B> {
    /// One dispatch for `s` (one cache: `kv_stride` 0) whose queries sit at positions
    /// `pos0..pos0 + n_q` (q_pos must hold exactly those), on subgroups of `subgroup_size`.
    pub fn dispatch(
        self,
        s: &AttnShape,
        pos0: usize,
        subgroup_size: u32,
    ) -> Result<Dispatch<B>, Error> {
        let k = &ATTN_PREFILL_COOP;
        s.check(k)?;
        s.check_unquantized(k)?;
        if s.kv_stride != 0 {
            return Err(shape_err(
                k,
                "prefill reads one cache (kv_stride must be 0)",
            ));
        }
        let Some(t) = CoopAttnTile::for_shape(s.head_dim, subgroup_size) else {
            return Err(shape_err(
                k,
                format!(
                    "head_dim {} with subgroups of {subgroup_size}: needs a multiple of 16 in \
                     32..=128 and 16..=64 lanes",
                    s.head_dim
                ),
            ));
        };
        crate::attention_prefill_coop2::check_queries(k, s, pos0)?;
        s.check_buffers(k, &self.q, &self.k, &self.v, &self.q_pos, &self.out)?;
        let tiles = s.n_q.div_ceil(t.bq());
        if tiles > MAX_GROUPS_X as usize || s.n_heads > MAX_GROUPS_X as usize {
            return Err(shape_err(k, "grid out of range"));
        }
        let p = AttnPrefillCoopParams {
            base: s.prefill_params(k)?,
            pos0: to_u32(k, "pos0", pos0)?,
        };
        Ok(Dispatch::new(
            k,
            Overrides::new()
                .set("HD", s.head_dim as f64)
                .set("BK", t.bk as f64)
                .set("NSG", t.nsg as f64)
                .set("SG", subgroup_size as f64)
                .set("WG", (t.nsg * subgroup_size) as f64)
                .set("KV_DTYPE", s.kv.code()),
            vec![self.q, self.k, self.v, self.q_pos, self.out],
            &p,
            [tiles as u32, s.n_heads as u32, 1],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_fit_shared_memory_for_supported_head_dims() {
        for hd in (32..=128).step_by(16) {
            for sg in [16, 32, 64] {
                let t = CoopAttnTile::for_shape(hd, sg).expect("supported");
                assert!(shared_bytes(hd, t) <= MAX_SHARED, "{hd} {sg}");
                // Outputs per lane fit the shader's 128-entry accumulator.
                assert!(16 * hd / sg as usize <= 128);
            }
        }
        // HD 128, 2 subgroups, 32 keys: 8704 + 2 x 8704 + 16384 + 2560 + 384 bytes.
        let t = CoopAttnTile::for_shape(128, 32).unwrap();
        assert_eq!(shared_bytes(128, t), 8704 * 3 + 16384 + 2560 + 384);
        assert_eq!(CoopAttnTile::for_shape(256, 32), None);
        assert_eq!(CoopAttnTile::for_shape(72, 32), None);
        assert_eq!(CoopAttnTile::for_shape(128, 8), None);
    }
}
