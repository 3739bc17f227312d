//! Centred keys for quantized K caches (q8_0, q4_0, tq4): a model's keys carry a few channels far
//! larger than the rest (biases, outlier channels), and a block's codes follow its largest value.
//! Each K channel `c` is stored as `(k_c - shift_c) / scale_c`, with the shift (the channel's
//! mean) and scale (its standard deviation to the power [`SCALE_EXPONENT`]) measured once per
//! model from the keys of a calibration forward ([`calibration_ids`]). Attention takes the query
//! times the scales; the shift only moves every score of a query by the same `q . shift`, which
//! softmax ignores. Method and perplexity: docs/quantization.md.

use std::sync::OnceLock;

use vkllm_kernels::kv_append::KvTypes;

use crate::backend::{Backend, KeyCentre, Tensor};
use crate::config::ModelConfig;
use crate::error::ModelError;

/// Tokens of the calibration forward (positions 0..; the first row is left out of the
/// statistics: the first position's key is an attention sink, unlike the rest).
pub const CALIBRATION_TOKENS: usize = 256;

/// `scale_c = std_c ^ SCALE_EXPONENT`: 0.5 was the best of 0 / 0.5 / 0.75 / 1 in the perplexity
/// table (docs/quantization.md); 1 equalises the channels fully and loses to it.
pub const SCALE_EXPONENT: f32 = 0.5;

/// Positions of a model's calibration forward.
pub fn calibration_len(cfg: &ModelConfig) -> usize {
    CALIBRATION_TOKENS.min(cfg.max_position.max(2))
}

/// Whether a cache of `types` stores its keys centred: quantized keys (q8_0, q4_0, tq4).
pub fn centred(types: KvTypes) -> bool {
    types.k.is_quantized()
}

/// The calibration tokens: `n` ids spread over the vocabulary by a fixed linear congruential
/// sequence (no tokenizer at this layer; the statistics measured on them match those of English
/// text within the perplexity table's noise).
pub fn calibration_ids(vocab: usize, n: usize) -> Vec<u32> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) % vocab.max(1) as u64) as u32
        })
        .collect()
}

/// One layer's centring, host side: `shift` and `inv` (1 / scale) per K channel (`kv_dim`),
/// `q_scale` per query channel (`n_heads * head_dim`: each query head takes its KV head's
/// scales).
#[derive(Clone, Debug, PartialEq)]
pub struct CentreStats {
    pub shift: Vec<f32>,
    pub inv: Vec<f32>,
    pub q_scale: Vec<f32>,
}

/// The centring of keys `rows` (`[n, n_kv_heads * head_dim]`, f32): per channel the mean and
/// the standard deviation; the scales of each KV head are normalised to a mean of 1 (only
/// their ratios matter to the blocks) and kept above 1e-3 of the head's largest.
pub fn stats(rows: &[f32], n_heads: usize, n_kv_heads: usize, head_dim: usize) -> CentreStats {
    let kv_dim = n_kv_heads * head_dim;
    let n = rows.len() / kv_dim.max(1);
    let (mut sum, mut sq) = (vec![0f64; kv_dim], vec![0f64; kv_dim]);
    for row in rows.chunks_exact(kv_dim) {
        for (c, &x) in row.iter().enumerate() {
            sum[c] += f64::from(x);
            sq[c] += f64::from(x) * f64::from(x);
        }
    }
    let nf = n.max(1) as f64;
    let shift: Vec<f32> = sum.iter().map(|s| (s / nf) as f32).collect();
    let mut scale: Vec<f32> = (0..kv_dim)
        .map(|c| {
            let m = sum[c] / nf;
            let var = (sq[c] / nf - m * m).max(0.0);
            (var.sqrt() as f32).powf(SCALE_EXPONENT)
        })
        .collect();
    for head in scale.chunks_mut(head_dim.max(1)) {
        let top = head.iter().fold(0f32, |a, &b| a.max(b));
        if top <= 0.0 || !top.is_finite() {
            head.fill(1.0);
            continue;
        }
        head.iter_mut().for_each(|s| *s = s.max(top * 1e-3));
        let mean = head.iter().sum::<f32>() / head.len() as f32;
        head.iter_mut().for_each(|s| *s /= mean);
    }
    let inv = scale.iter().map(|s| 1.0 / s).collect();
    let group = (n_heads / n_kv_heads.max(1)).max(1);
    let q_scale = (0..n_heads * head_dim)
        .map(|i| scale[(i / head_dim / group) * head_dim + i % head_dim])
        .collect();
    CentreStats {
        shift,
        inv,
        q_scale,
    }
}

/// The model's centring, measured on first use and kept in `cell`: `run` feeds the calibration
/// ids through a fresh f32 state and returns, per layer, its key cache and the rows it kept
/// (`None`: a layer without attention).
pub fn measured<B: Backend>(
    cell: &OnceLock<Vec<Option<KeyCentre>>>,
    b: &mut B,
    cfg: &ModelConfig,
    run: impl FnOnce(&mut B, &[u32]) -> Result<Vec<Option<(Tensor, usize)>>, ModelError>,
) -> Result<Vec<Option<KeyCentre>>, ModelError> {
    if let Some(c) = cell.get() {
        return Ok(c.clone());
    }
    let ids = calibration_ids(cfg.vocab_size, calibration_len(cfg));
    let keys = run(b, &ids)?;
    let out = from_caches(b, &keys, cfg)?;
    Ok(cell.get_or_init(|| out).clone())
}

/// The centring of every layer from a calibration state's f32 key caches: `keys[l]` is layer
/// `l`'s cache and the rows it kept (`None`: a layer without attention), read from row 1.
pub fn from_caches<B: Backend>(
    b: &mut B,
    keys: &[Option<(Tensor, usize)>],
    cfg: &ModelConfig,
) -> Result<Vec<Option<KeyCentre>>, ModelError> {
    let kv_dim = cfg.kv_dim();
    let mut rows = Vec::new();
    keys.iter()
        .map(|k| {
            let Some((t, kept)) = *k else { return Ok(None) };
            rows.resize(kept * kv_dim, 0.0);
            b.read_f32(t, 0, &mut rows)?;
            let from = kv_dim.min(rows.len());
            let s = stats(&rows[from..], cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
            upload(b, &s).map(Some)
        })
        .collect()
}

/// Uploads one layer's centring to `b`.
pub fn upload<B: Backend>(b: &mut B, s: &CentreStats) -> Result<KeyCentre, ModelError> {
    let mut append = s.shift.clone();
    append.extend_from_slice(&s.inv);
    Ok(KeyCentre {
        append: b.upload_f32(&append)?,
        q_scale: b.upload_f32(&s.q_scale)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel with a large offset and spread is shifted to mean 0 and scaled down against
    /// the others; query heads of a group take their KV head's scales.
    #[test]
    fn stats_centre_outlier_channels() {
        let (n_heads, n_kv, hd) = (4, 2, 4);
        let kv_dim = n_kv * hd;
        let mut rows = Vec::new();
        for t in 0..64 {
            let sgn = if t % 2 == 0 { 1.0 } else { -1.0 };
            let mut row = vec![sgn; kv_dim];
            row[1] = 100.0 + 16.0 * sgn;
            row[5] = 0.0;
            rows.extend(row);
        }
        let s = stats(&rows, n_heads, n_kv, hd);
        assert!((s.shift[1] - 100.0).abs() < 1e-4, "{:?}", s.shift);
        assert!(s.shift[0].abs() < 1e-6);
        // std 16 vs 1: scales 4 : 1 (exponent 0.5), normalised to mean 1 over the head.
        let scale: Vec<f32> = s.inv.iter().map(|v| 1.0 / v).collect();
        assert!((scale[1] / scale[0] - 4.0).abs() < 1e-4, "{scale:?}");
        assert!((scale[..4].iter().sum::<f32>() / 4.0 - 1.0).abs() < 1e-5);
        // A dead channel keeps a scale above 1e-3 of its head's largest (no division by 0).
        assert!(scale[5] > 0.0 && scale[5].is_finite());
        // Query heads 0, 1 take KV head 0's scales, 2, 3 KV head 1's.
        assert_eq!(s.q_scale[hd + 1], scale[1]);
        assert_eq!(s.q_scale[2 * hd + 1], scale[hd + 1]);
        assert_eq!(s.q_scale.len(), n_heads * hd);
    }

    #[test]
    fn calibration_ids_stay_in_the_vocabulary() {
        let ids = calibration_ids(1000, 500);
        assert!(ids.iter().all(|&i| i < 1000));
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert!(distinct.len() > 300, "{} distinct ids", distinct.len());
        assert_eq!(ids, calibration_ids(1000, 500));
    }
}
