//! The fused attention input step, composed from the reference ops: per-head RMSNorm of q and k
//! (optional), RoPE on both, and the KV-cache append of k and v. The oracle of
//! `shaders/rope_kv_append.wgsl`.

use crate::{Rope, rmsnorm};

/// Shapes and settings of [`rope_kv_append`].
#[derive(Clone, Copy, Debug)]
pub struct RopeKvAppendSpec<'a> {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rope: &'a Rope,
    /// `(q_norm, k_norm, eps, weight_offset)` when q and k are normalised per head first.
    pub norm: Option<(&'a [f32], &'a [f32], f32, f32)>,
    /// Rows of a token's cache region; a position >= it marks an idle token (q rows NaN,
    /// nothing stored).
    pub max_tok: usize,
    /// Rows between tokens' regions (0: all tokens share one region; >= a region's rows:
    /// slot-major).
    pub row_stride: usize,
    /// Rows a region keeps: position p is stored in row p % ring.
    pub ring: usize,
}

/// For `n = positions.len()` tokens: `q_out = rope(norm(q))`, and row `t * row_stride + pos[t]`
/// of `k_cache`/`v_cache` (`[rows, n_kv_heads * head_dim]`) gets `rope(norm(k[t]))` / `v[t]`.
///
/// # Panics
/// If a slice length does not match the spec (programming errors).
#[allow(clippy::too_many_arguments)]
pub fn rope_kv_append(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    positions: &[u32],
    s: &RopeKvAppendSpec<'_>,
    q_out: &mut [f32],
    k_cache: &mut [f32],
    v_cache: &mut [f32],
) {
    let (n, hd) = (positions.len(), s.head_dim);
    let kv_dim = s.n_kv_heads * hd;
    assert_eq!(q.len(), n * s.n_heads * hd, "rope_kv_append: q shape");
    assert_eq!(k.len(), n * kv_dim, "rope_kv_append: k shape");
    assert_eq!(v.len(), n * kv_dim, "rope_kv_append: v shape");
    assert_eq!(q_out.len(), q.len(), "rope_kv_append: q_out shape");
    let mut kn = k.to_vec();
    match s.norm {
        Some((qw, kw, eps, off)) => {
            rmsnorm(q, qw, eps, off, q_out);
            rmsnorm(k, kw, eps, off, &mut kn);
        }
        None => q_out.copy_from_slice(q),
    }
    for (t, &p) in positions.iter().enumerate() {
        let qr = &mut q_out[t * s.n_heads * hd..(t + 1) * s.n_heads * hd];
        if p as usize >= s.max_tok {
            qr.fill(f32::NAN);
            continue;
        }
        s.rope.apply(qr, s.n_heads, hd, p as usize);
        let kr = &mut kn[t * kv_dim..(t + 1) * kv_dim];
        s.rope.apply(kr, s.n_kv_heads, hd, p as usize);
        let row = (t * s.row_stride + p as usize % s.ring) * kv_dim;
        k_cache[row..row + kv_dim].copy_from_slice(kr);
        v_cache[row..row + kv_dim].copy_from_slice(&v[t * kv_dim..(t + 1) * kv_dim]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RopeScaling, RopeStyle};

    #[test]
    fn by_hand_one_token() {
        // head_dim 2, one q and one kv head, rotary over both dims: angle = pos radians.
        let rope = Rope {
            theta: 10_000.0,
            rotary_dim: 2,
            style: RopeStyle::NeoX,
            scaling: RopeScaling::None,
        };
        let s = RopeKvAppendSpec {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 2,
            rope: &rope,
            norm: None,
            max_tok: 3,
            row_stride: 0,
            ring: 3,
        };
        let (mut qo, mut kc, mut vc) = ([0.0; 2], [9.0; 6], [9.0; 6]);
        rope_kv_append(
            &[1.0, 0.0],
            &[0.0, 2.0],
            &[5.0, 6.0],
            &[1],
            &s,
            &mut qo,
            &mut kc,
            &mut vc,
        );
        let (c, sn) = (1f32.cos(), 1f32.sin());
        assert!((qo[0] - c).abs() < 1e-6 && (qo[1] - sn).abs() < 1e-6);
        // k = (0, 2) rotated by 1 rad: (-2 sin 1, 2 cos 1), stored in row 1 only.
        assert!((kc[2] + 2.0 * sn).abs() < 1e-6 && (kc[3] - 2.0 * c).abs() < 1e-6);
        assert_eq!([kc[0], kc[1], kc[4], kc[5]], [9.0; 4]);
        assert_eq!(vc, [9.0, 9.0, 5.0, 6.0, 9.0, 9.0]);
        // An idle position: q is NaN, the cache is untouched.
        let mut kc2 = [9.0; 6];
        rope_kv_append(
            &[1.0, 0.0],
            &[0.0, 2.0],
            &[5.0, 6.0],
            &[3],
            &s,
            &mut qo,
            &mut kc2,
            &mut vc,
        );
        assert!(qo.iter().all(|x| x.is_nan()));
        assert_eq!(kc2, [9.0; 6]);
    }
}
