//! Depthwise causal 1-D convolution with a rolling state: the short convolution of a Gated
//! DeltaNet layer (transformers' `causal_conv1d_fn` / `causal_conv1d_update`).
//!
//! Layouts (row-major, token-major like every activation in vkllm):
//! - `x`, `out`: `[n, channels]`;
//! - `weight`: `[channels, kernel]` (the HF `conv1d.weight` `[channels, 1, kernel]` squeezed);
//! - `state`: `[kernel - 1, channels]`, the last `kernel - 1` inputs of the sequence so far,
//!   oldest first (zeros for a fresh sequence, which is the convolution's left zero padding).
//!
//! With `xe = state ++ x` (rows), `out[t, c] = act(sum_j weight[c, j] * xe[t + j, c])`, the sum in
//! f64 rounded once to f32, `act` SiLU in f32 (see [`crate::silu`]) or the identity. Afterwards
//! `state` holds the last `kernel - 1` rows of `xe`, so a prompt cut into pieces gives the same
//! outputs as the whole prompt at once.

use crate::activation::silu;

/// Runs the convolution over `x` and rolls `state` forward; see the module docs.
///
/// # Panics
/// If `channels` or `kernel` (`weight.len() / channels`) is zero, or a length does not match its
/// layout (programming errors).
pub fn causal_conv1d(
    x: &[f32],
    channels: usize,
    weight: &[f32],
    state: &mut [f32],
    apply_silu: bool,
    out: &mut [f32],
) {
    assert!(
        channels > 0 && !weight.is_empty(),
        "causal_conv1d: empty shape"
    );
    assert_eq!(
        weight.len() % channels,
        0,
        "causal_conv1d: weight is not [channels, kernel]"
    );
    let kernel = weight.len() / channels;
    let hist = kernel - 1;
    assert_eq!(
        state.len(),
        hist * channels,
        "causal_conv1d: state is not [kernel - 1, channels]"
    );
    assert_eq!(
        x.len() % channels,
        0,
        "causal_conv1d: x is not [n, channels]"
    );
    assert_eq!(out.len(), x.len(), "causal_conv1d: out and x differ");
    let n = x.len() / channels;
    // Row r of state ++ x.
    fn row<'a>(r: usize, hist: usize, c: usize, st: &'a [f32], x: &'a [f32]) -> &'a [f32] {
        if r < hist {
            &st[r * c..(r + 1) * c]
        } else {
            &x[(r - hist) * c..(r - hist + 1) * c]
        }
    }
    for t in 0..n {
        for c in 0..channels {
            let mut acc = 0f64;
            for j in 0..kernel {
                acc += f64::from(weight[c * kernel + j])
                    * f64::from(row(t + j, hist, channels, state, x)[c]);
            }
            let v = acc as f32;
            out[t * channels + c] = if apply_silu { silu(v) } else { v };
        }
    }
    // The new history: the last `hist` rows of state ++ x.
    let mut next = vec![0f32; hist * channels];
    for r in 0..hist {
        next[r * channels..(r + 1) * channels].copy_from_slice(row(
            n + r,
            hist,
            channels,
            state,
            x,
        ));
    }
    state.copy_from_slice(&next);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    #[test]
    fn hand_values() {
        // One channel, kernel 3, weights [1, 10, 100] (oldest tap first), fresh state:
        // out_t = x_{t-2} + 10 x_{t-1} + 100 x_t.
        let w = [1.0, 10.0, 100.0];
        let mut state = [0.0; 2];
        let mut out = [f32::NAN; 3];
        causal_conv1d(&[1.0, 2.0, 3.0], 1, &w, &mut state, false, &mut out);
        assert_eq!(out, [100.0, 210.0, 321.0]);
        assert_eq!(state, [2.0, 3.0]);
        // Continue with one token: 2 + 30 + 400.
        let mut one = [f32::NAN];
        causal_conv1d(&[4.0], 1, &w, &mut state, false, &mut one);
        assert_eq!(one, [432.0]);
        assert_eq!(state, [3.0, 4.0]);
        // SiLU on top: silu(-1) = -1 / (1 + e).
        let mut st = [0.0; 2];
        let mut o = [f32::NAN];
        causal_conv1d(&[-0.01], 1, &w, &mut st, true, &mut o);
        let want = -1.0 / (1.0 + std::f64::consts::E);
        assert!((f64::from(o[0]) - want).abs() < 1e-7, "{}", o[0]);
    }

    #[test]
    fn channels_are_independent() {
        // Two channels, kernel 2: channel 0 weights [0, 1] (identity), channel 1 [1, -1]
        // (difference with the previous input).
        let w = [0.0, 1.0, 1.0, -1.0];
        let mut state = [0.0, 5.0];
        let mut out = [f32::NAN; 4];
        causal_conv1d(&[1.0, 2.0, 3.0, 7.0], 2, &w, &mut state, false, &mut out);
        assert_eq!(out, [1.0, 3.0, 3.0, -5.0]);
        assert_eq!(state, [3.0, 7.0]);
    }

    #[test]
    fn split_sequence_equals_whole() {
        let mut rng = Rng::new(11);
        let (c, k, n) = (7, 4, 13);
        let w = rng.vec(c * k);
        let x = rng.vec(n * c);
        let mut s_whole = vec![0.0; (k - 1) * c];
        let mut whole = vec![f32::NAN; n * c];
        causal_conv1d(&x, c, &w, &mut s_whole, true, &mut whole);
        // f64 reference with explicit zero padding.
        for t in 0..n {
            for ch in 0..c {
                let mut acc = 0f64;
                for j in 0..k {
                    let src = t as isize + j as isize - (k as isize - 1);
                    if src >= 0 {
                        acc += f64::from(w[ch * k + j]) * f64::from(x[src as usize * c + ch]);
                    }
                }
                let want = acc / (1.0 + (-acc).exp());
                let got = f64::from(whole[t * c + ch]);
                assert!((got - want).abs() < 1e-6, "t {t} c {ch}: {got} {want}");
            }
        }
        // Pieces of 1, 2, 5 and 5 tokens.
        let mut s = vec![0.0; (k - 1) * c];
        let mut pieces = Vec::new();
        let mut t0 = 0;
        for len in [1, 2, 5, 5] {
            let mut o = vec![f32::NAN; len * c];
            causal_conv1d(&x[t0 * c..(t0 + len) * c], c, &w, &mut s, true, &mut o);
            pieces.extend(o);
            t0 += len;
        }
        assert_eq!(pieces, whole);
        assert_eq!(s, s_whole);
    }
}
