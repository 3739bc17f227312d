//! Centred keys for quantized K caches (q8_0, q4_0, tq4): a model's keys carry a few channels far
//! larger than the rest (biases, outlier channels), and a block's codes follow its largest value.
//! Each K channel `c` is stored as `(k_c - shift_c) / scale_c`, with the shift (the channel's
//! mean) and scale (its standard deviation to the power [`SCALE_EXPONENT`]) measured once per
//! model from the keys of a calibration forward ([`calibration_ids`]). Attention takes the query
//! times the scales; the shift only moves every score of a query by the same `q . shift`, which
//! softmax ignores. The key at position 0, the attention sink, lies far from the others: it is
//! stored less a sink offset measured the same way (the calibration's position-0 key, centred),
//! and attention reads it plus that offset. Method and perplexity: docs/quantization.md.

use std::sync::OnceLock;

use vkllm_kernels::kv_append::{KvType, KvTypes};

use crate::backend::{Backend, KeyCentre, Tensor};
use crate::config::ModelConfig;
use crate::error::ModelError;

/// Tokens of the calibration forward (positions 0..; the first row is left out of the
/// statistics: the first position's key is an attention sink, unlike the rest, and gives the
/// sink offset).
pub const CALIBRATION_TOKENS: usize = 256;

/// `scale_c = std_c ^ SCALE_EXPONENT` for q8_0 and q4_0 keys: 0.5 was the best of 0 / 0.25 /
/// 0.5 / 0.75 / 1 for q4_0 in the perplexity table (docs/quantization.md); 1 equalises the
/// channels fully and loses to it.
pub const SCALE_EXPONENT: f32 = 0.5;

/// The exponent for tq4 keys (rotated, coded against each block's RMS): 0.25 beat 0.5 on SmolLM2
/// and Gemma 3 (docs/quantization.md).
pub const TQ4_SCALE_EXPONENT: f32 = 0.25;

/// The scale exponent of a K cache of type `k`.
pub fn scale_exponent(k: KvType) -> f32 {
    match k {
        KvType::Tq4 => TQ4_SCALE_EXPONENT,
        _ => SCALE_EXPONENT,
    }
}

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

/// The calibration sequence: [`calibration_ids`], starting with BOS where the model's prompts
/// do (their later keys are those of a sequence with that sink; measured: Gemma 3's tq4 keys
/// +2.1% against +4.3% from a random first token).
pub fn calibration_tokens(cfg: &ModelConfig) -> Vec<u32> {
    let mut ids = calibration_ids(cfg.vocab_size, calibration_len(cfg));
    if let (Some(first), Some(bos)) = (ids.first_mut(), first_bos(cfg)) {
        *first = bos;
    }
    ids
}

/// The BOS token where the model's prompts start with it.
fn first_bos(cfg: &ModelConfig) -> Option<u32> {
    cfg.bos_token_id
        .filter(|&b| cfg.add_bos && (b as usize) < cfg.vocab_size)
}

/// First tokens whose position-0 keys the sink offset averages where prompts do not start
/// with BOS (one-token forwards).
pub const SINK_SAMPLES: usize = 16;

/// The first tokens the sink offset is measured from: the model's BOS where its prompts start
/// with it (every sequence's key at position 0 is then that one), else [`SINK_SAMPLES`] ids of
/// the calibration sequence (their mean position-0 key; measured: a random first token's key
/// alone made Gemma 3's 4-bit keys worse than no offset, docs/quantization.md).
pub fn sink_tokens(cfg: &ModelConfig) -> Vec<u32> {
    match first_bos(cfg) {
        Some(bos) => vec![bos],
        None => calibration_ids(cfg.vocab_size, SINK_SAMPLES),
    }
}

/// One layer's centring, host side: `shift` and `inv` (1 / scale) per K channel (`kv_dim`),
/// `sink` per K channel (the offset the key at position 0 is stored less, centred and scaled;
/// zeros for none), `q_scale` per query channel (`n_heads * head_dim`: each query head takes
/// its KV head's scales).
#[derive(Clone, Debug, PartialEq)]
pub struct CentreStats {
    pub shift: Vec<f32>,
    pub inv: Vec<f32>,
    pub sink: Vec<f32>,
    pub q_scale: Vec<f32>,
}

/// One layer's calibration, host side: per K channel the mean and standard deviation of the
/// calibration keys, and the position-0 key the sink offset comes from (`None`: no offset).
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    pub first: Option<Vec<f32>>,
}

impl Calibration {
    /// The statistics of keys `rows` (`[n, kv_dim]`, f32).
    pub fn from_rows(rows: &[f32], kv_dim: usize) -> Self {
        let n = rows.len() / kv_dim.max(1);
        let (mut sum, mut sq) = (vec![0f64; kv_dim], vec![0f64; kv_dim]);
        for row in rows.chunks_exact(kv_dim.max(1)) {
            for (c, &x) in row.iter().enumerate() {
                sum[c] += f64::from(x);
                sq[c] += f64::from(x) * f64::from(x);
            }
        }
        let nf = n.max(1) as f64;
        let (mean, std) = sum
            .iter()
            .zip(&sq)
            .map(|(s, q)| {
                let m = s / nf;
                (m as f32, (q / nf - m * m).max(0.0).sqrt() as f32)
            })
            .unzip();
        Calibration {
            mean,
            std,
            first: None,
        }
    }

    /// The centring with `scale_c = std_c ^ exponent`: the scales of each KV head are
    /// normalised to a mean of 1 (only their ratios matter to the blocks) and kept above 1e-3 of
    /// the head's largest.
    pub fn stats(
        &self,
        exponent: f32,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
    ) -> CentreStats {
        let mut scale: Vec<f32> = self.std.iter().map(|s| s.powf(exponent)).collect();
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
        let mut s = CentreStats {
            shift: self.mean.clone(),
            inv,
            sink: vec![0.0; self.mean.len()],
            q_scale,
        };
        if let Some(first) = &self.first {
            s.set_sink(first);
        }
        s
    }
}

/// The centring of keys `rows` (`[n, n_kv_heads * head_dim]`, f32) with [`SCALE_EXPONENT`]
/// ([`Calibration::stats`]).
pub fn stats(rows: &[f32], n_heads: usize, n_kv_heads: usize, head_dim: usize) -> CentreStats {
    Calibration::from_rows(rows, n_kv_heads * head_dim).stats(
        SCALE_EXPONENT,
        n_heads,
        n_kv_heads,
        head_dim,
    )
}

impl CentreStats {
    /// Sets the sink offset from the key at position 0 (`[kv_dim]`), centred and scaled as the
    /// cache stores keys.
    pub fn set_sink(&mut self, first: &[f32]) {
        self.sink = first
            .iter()
            .zip(self.shift.iter().zip(&self.inv))
            .map(|(&k, (&m, &r))| (k - m) * r)
            .collect();
    }
}

/// A model's key centring, measured on first use: the calibration, and the uploaded tables
/// for each scale exponent (q8_0 and q4_0 keys, tq4 keys).
#[derive(Debug, Default)]
pub struct Centres {
    calibration: OnceLock<Vec<Option<Calibration>>>,
    tables: [OnceLock<Vec<Option<KeyCentre>>>; 2],
}

/// The centring of a K cache of type `k` for the model whose cells `cells` are, measured on
/// first use: `run` feeds ids at positions 0.. through a fresh f32 state and returns, per layer,
/// its key cache and the rows it kept (`None`: a layer without attention). The calibration
/// sequence gives the statistics; where `b` stores a sink offset ([`Backend::sink_keys`]),
/// one-token runs of [`sink_tokens`] give it.
pub fn measured<B: Backend>(
    cells: &Centres,
    b: &mut B,
    cfg: &ModelConfig,
    k: KvType,
    mut run: impl FnMut(&mut B, &[u32]) -> Result<Vec<Option<(Tensor, usize)>>, ModelError>,
) -> Result<Vec<Option<KeyCentre>>, ModelError> {
    // One table per exponent: the slot follows scale_exponent.
    let e = scale_exponent(k);
    let cell = &cells.tables[usize::from(e != SCALE_EXPONENT)];
    if let Some(c) = cell.get() {
        return Ok(c.clone());
    }
    let calib = match cells.calibration.get() {
        Some(c) => c,
        None => {
            let c = calibrate(b, cfg, &mut run)?;
            cells.calibration.get_or_init(|| c)
        }
    };
    let out = calib
        .iter()
        .map(|c| {
            c.as_ref()
                .map(|c| upload(b, &c.stats(e, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)))
                .transpose()
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    Ok(cell.get_or_init(|| out).clone())
}

/// The calibration forwards of [`measured`].
fn calibrate<B: Backend>(
    b: &mut B,
    cfg: &ModelConfig,
    run: &mut impl FnMut(&mut B, &[u32]) -> Result<Vec<Option<(Tensor, usize)>>, ModelError>,
) -> Result<Vec<Option<Calibration>>, ModelError> {
    let keys = run(b, &calibration_tokens(cfg))?;
    let mut calib = from_caches(b, &keys, cfg)?;
    if !b.sink_keys() {
        return Ok(calib);
    }
    let kv_dim = cfg.kv_dim();
    let firsts = sink_tokens(cfg);
    let mut sums: Vec<Vec<f64>> = vec![vec![0.0; kv_dim]; calib.len()];
    let mut row = vec![0.0; kv_dim];
    for &id in &firsts {
        for (l, k) in run(b, &[id])?.into_iter().enumerate() {
            let (Some((t, _)), Some(sum)) = (k, sums.get_mut(l)) else {
                continue;
            };
            b.read_f32(t, 0, &mut row)?;
            sum.iter_mut()
                .zip(&row)
                .for_each(|(s, &x)| *s += f64::from(x));
        }
    }
    for (c, sum) in calib.iter_mut().zip(&sums) {
        if let Some(c) = c {
            let n = firsts.len() as f64;
            c.first = Some(sum.iter().map(|x| (x / n) as f32).collect());
        }
    }
    Ok(calib)
}

/// The calibration of every layer from a calibration state's f32 key caches: `keys[l]` is
/// layer `l`'s cache and the rows it kept (`None`: a layer without attention), read from row 1
/// (no sink offset yet).
pub fn from_caches<B: Backend>(
    b: &mut B,
    keys: &[Option<(Tensor, usize)>],
    cfg: &ModelConfig,
) -> Result<Vec<Option<Calibration>>, ModelError> {
    let kv_dim = cfg.kv_dim();
    let mut rows = Vec::new();
    keys.iter()
        .map(|k| {
            let Some((t, kept)) = *k else { return Ok(None) };
            rows.resize(kept * kv_dim, 0.0);
            b.read_f32(t, 0, &mut rows)?;
            let from = kv_dim.min(rows.len());
            Ok(Some(Calibration::from_rows(&rows[from..], kv_dim)))
        })
        .collect()
}

/// Uploads one layer's centring to `b`: the table [`KeyCentre::table`] and the query scales.
pub fn upload<B: Backend>(b: &mut B, s: &CentreStats) -> Result<KeyCentre, ModelError> {
    let mut table = s.shift.clone();
    table.extend_from_slice(&s.inv);
    table.extend_from_slice(&s.sink);
    // The offset as caches with rotated keys read it (rotated like their 64-value units).
    let mut rotated = s.sink.clone();
    if rotated.len().is_multiple_of(vkllm_cpu::kv_quant::UNIT) {
        vkllm_cpu::kv_quant::rotate(&mut rotated);
    }
    table.extend_from_slice(&rotated);
    Ok(KeyCentre {
        table: b.upload_f32(&table)?,
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

    /// tq4 keys take the smaller exponent: std 16 vs 1 gives scales 4 : 1 at 0.5, 2 : 1 at 0.25;
    /// the first key becomes the offset in either.
    #[test]
    fn each_key_type_takes_its_exponent() {
        let rows: Vec<f32> = (0..64)
            .flat_map(|t| {
                let sgn = if t % 2 == 0 { 1.0 } else { -1.0 };
                [16.0 * sgn, sgn]
            })
            .collect();
        let mut c = Calibration::from_rows(&rows, 2);
        c.first = Some(vec![32.0, 0.0]);
        for (k, ratio) in [(KvType::Q4_0, 4.0), (KvType::Q8_0, 4.0), (KvType::Tq4, 2.0)] {
            let s = c.stats(scale_exponent(k), 1, 1, 2);
            assert!(
                (s.inv[1] / s.inv[0] - ratio).abs() < 1e-4,
                "{k:?}: {:?}",
                s.inv
            );
            assert!(
                (s.sink[0] - 32.0 * s.inv[0]).abs() < 1e-4,
                "{k:?}: {:?}",
                s.sink
            );
        }
    }

    /// The sink offset is the first key centred and scaled like the rest.
    #[test]
    fn sink_offset_is_the_first_key_centred() {
        let rows: Vec<f32> = (0..32)
            .map(|i| (i % 8) as f32 * if i % 3 == 0 { 2.0 } else { -1.0 })
            .collect();
        let mut s = stats(&rows, 2, 1, 8);
        assert_eq!(s.sink, vec![0.0; 8]);
        let first = [40.0, -3.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0];
        s.set_sink(&first);
        for (c, &k) in first.iter().enumerate() {
            let want = (k - s.shift[c]) * s.inv[c];
            assert!(
                (s.sink[c] - want).abs() < 1e-6,
                "{c}: {} vs {want}",
                s.sink[c]
            );
        }
        assert!(s.sink[0] > 10.0, "{:?}", s.sink);
    }

    /// Models whose prompts start with BOS calibrate from it; others average the first keys of
    /// several ids (a BOS id past the vocabulary is ignored).
    #[test]
    fn sink_tokens_follow_the_tokenizer() {
        let json = |add_bos: bool, bos: u32| {
            serde_json::json!({
                "model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
                "num_key_value_heads": 1, "rms_norm_eps": 1e-6, "bos_token_id": bos,
                "add_bos_token": add_bos,
            })
        };
        let cfg =
            |add_bos, bos| ModelConfig::from_hf_json(&json(add_bos, bos).to_string()).unwrap();
        let with = cfg(true, 7);
        assert_eq!(sink_tokens(&with), vec![7]);
        let ids = calibration_tokens(&with);
        assert_eq!((ids[0], ids.len()), (7, calibration_len(&with)));
        assert_eq!(ids[1..], calibration_ids(1000, ids.len())[1..]);
        for plain in [cfg(false, 7), cfg(true, 5000)] {
            assert_eq!(sink_tokens(&plain), calibration_ids(1000, SINK_SAMPLES));
            assert_eq!(
                calibration_tokens(&plain),
                calibration_ids(1000, calibration_len(&plain))
            );
        }
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
