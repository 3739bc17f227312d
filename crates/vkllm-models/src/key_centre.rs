//! Centred keys for quantized K caches (q8_0, q4_0, tq4): a model's keys carry a few channels far
//! larger than the rest (biases, outlier channels), and a block's codes follow its largest value.
//! Each K channel `c` is stored as `(k_c - shift_c) / scale_c`, with the shift (the channel's
//! mean) and scale (its standard deviation to the power [`SCALE_EXPONENT`]) measured once per
//! model from the keys of a calibration forward ([`calibration_ids`]) with RoPE undone, then
//! averaged over the positions of the cache's span: a RoPE pair turns with the position, so its
//! mean over a long span shrinks and its spread grows ([`Calibration::moments`]). Attention
//! takes the query times the scales; the shift only moves every score of a query by the same
//! `q . shift`, which softmax ignores. The key at position 0, the attention sink, lies far from
//! the others: it is stored less a sink offset measured the same way (the calibration's
//! position-0 key, centred), and attention reads it plus that offset. Method and perplexity:
//! docs/quantization.md.

use std::sync::{Mutex, OnceLock};

use vkllm_kernels::kv_append::KvTypes;

use crate::backend::{Backend, KeyCentre, Tensor};
use crate::config::ModelConfig;
use crate::error::ModelError;

/// Tokens of the calibration forward (positions 0..; the first row is left out of the
/// statistics: the first position's key is an attention sink, unlike the rest, and gives the
/// sink offset).
pub const CALIBRATION_TOKENS: usize = 256;

/// `scale_c = std_c ^ SCALE_EXPONENT` for every quantized K type: 0.5 was the best of 0 / 0.25 /
/// 0.5 / 0.75 / 1 for q4_0 in the perplexity table (docs/quantization.md), 1 equalises the
/// channels fully and loses to it; tq4 keys too since their levels follow each block's largest
/// value (0.25 suited the first, RMS-scaled grid).
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

/// One layer's calibration, host side: per K channel the moments of the calibration keys with
/// RoPE undone (each key turned back by its position's angles, so the statistics hold at any
/// position), the RoPE pairs to turn them forward with, and the position-0 key the sink offset
/// comes from (`None`: no offset).
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    /// Mean of each channel.
    pub mean: Vec<f64>,
    /// Mean square of each channel (f64: a channel's variance is its difference with the
    /// squared mean, which can be far larger).
    pub sq: Vec<f64>,
    /// Mean product of each channel with its RoPE partner (0 for channels RoPE leaves alone).
    pub cross: Vec<f64>,
    /// The RoPE pairs of every head ([`rope_pairs`]; empty: keys not rotated).
    pub pairs: Vec<RopePair>,
    /// Channels per head.
    pub head_dim: usize,
    pub first: Option<Vec<f32>>,
}

/// A rotated pair of channels within a head: RoPE at position `p` turns `(a, b)` into
/// `(a cos - b sin, b cos + a sin)` of the angle `p * freq`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopePair {
    pub a: usize,
    pub b: usize,
    pub freq: f32,
}

/// The rotated pairs of one head under `rope` (frequencies with its scaling).
pub fn rope_pairs(rope: &vkllm_cpu::Rope, head_dim: usize) -> Vec<RopePair> {
    let half = rope.rotary_dim / 2;
    rope.inv_freq()
        .into_iter()
        .enumerate()
        .map(|(i, freq)| match rope.style {
            vkllm_cpu::RopeStyle::NeoX => RopePair {
                a: i,
                b: i + half,
                freq,
            },
            vkllm_cpu::RopeStyle::Interleaved => RopePair {
                a: 2 * i,
                b: 2 * i + 1,
                freq,
            },
        })
        .filter(|p| p.b < head_dim)
        .collect()
}

/// Means of `cos(p w)` and `sin(p w)` over positions `p` in `1..span` (closed form of the
/// geometric sum; position 0 is the sink, stored apart).
fn angle_means(w: f64, span: usize) -> (f64, f64) {
    let n = span.max(2) as f64;
    let half = w / 2.0;
    // sum_{p=0}^{n-1} e^{i p w} = e^{i (n - 1) w / 2} sin(n w / 2) / sin(w / 2)
    let (re, im) = match half.sin() {
        s if s.abs() < 1e-12 => (n, 0.0),
        s => {
            let r = (n * half).sin() / s;
            let a = (n - 1.0) * half;
            (r * a.cos(), r * a.sin())
        }
    };
    ((re - 1.0) / (n - 1.0), im / (n - 1.0))
}

impl Calibration {
    /// The statistics of keys `rows` (`[n, kv_dim]`, f32) at `positions` (one per row), RoPE
    /// undone with `pairs` (per head of `head_dim` channels).
    pub fn from_rows(
        rows: &[f32],
        positions: &[usize],
        kv_dim: usize,
        head_dim: usize,
        pairs: Vec<RopePair>,
    ) -> Self {
        let (kv_dim, head_dim) = (kv_dim.max(1), head_dim.max(1));
        let (mut sum, mut sq, mut cross) =
            (vec![0f64; kv_dim], vec![0f64; kv_dim], vec![0f64; kv_dim]);
        let mut y = vec![0f64; kv_dim];
        let mut n = 0usize;
        for (row, &pos) in rows.chunks_exact(kv_dim).zip(positions) {
            y.iter_mut().zip(row).for_each(|(y, &x)| *y = f64::from(x));
            for head in y.chunks_exact_mut(head_dim) {
                for p in &pairs {
                    // The forward's angle (an f32 product), turned back.
                    let (s, c) = f64::from(pos as f32 * p.freq).sin_cos();
                    let (xa, xb) = (head[p.a], head[p.b]);
                    (head[p.a], head[p.b]) = (xa * c + xb * s, xb * c - xa * s);
                }
            }
            for (h, head) in y.chunks_exact(head_dim).enumerate() {
                for p in &pairs {
                    let v = head[p.a] * head[p.b];
                    cross[h * head_dim + p.a] += v;
                    cross[h * head_dim + p.b] += v;
                }
            }
            for (c, &v) in y.iter().enumerate() {
                sum[c] += v;
                sq[c] += v * v;
            }
            n += 1;
        }
        let nf = n.max(1) as f64;
        let mean = |v: &[f64]| v.iter().map(|x| x / nf).collect::<Vec<_>>();
        Calibration {
            mean: mean(&sum),
            sq: mean(&sq),
            cross: mean(&cross),
            pairs,
            head_dim,
            first: None,
        }
    }

    /// Per K channel the mean and standard deviation of the keys over positions `1..span`
    /// (uniformly): a rotated pair's mean is its un-rotated mean turned by the average rotation,
    /// which shrinks towards zero as the pair turns through whole cycles within the span.
    pub fn moments(&self, span: usize) -> (Vec<f32>, Vec<f32>) {
        let mut shift = self.mean.clone();
        let mut second = self.sq.clone();
        for h in 0..self.mean.len() / self.head_dim {
            for p in &self.pairs {
                let (a, b) = (h * self.head_dim + p.a, h * self.head_dim + p.b);
                let w = f64::from(p.freq);
                let (c1, s1) = angle_means(w, span);
                let (c2, s2) = angle_means(2.0 * w, span);
                let (ma, mb) = (self.mean[a], self.mean[b]);
                let (sa, sb, x) = (second[a], second[b], self.cross[a]);
                shift[a] = c1 * ma - s1 * mb;
                shift[b] = s1 * ma + c1 * mb;
                let (iso, aniso) = ((sa + sb) / 2.0, (sa - sb) / 2.0);
                second[a] = iso + aniso * c2 - x * s2;
                second[b] = iso - aniso * c2 + x * s2;
            }
        }
        let std = second
            .iter()
            .zip(&shift)
            .map(|(q, m)| (q - m * m).max(0.0).sqrt() as f32)
            .collect();
        (shift.iter().map(|&m| m as f32).collect(), std)
    }

    /// The centring for keys over positions `1..span` with `scale_c = std_c ^ exponent`: the
    /// scales of each KV head are normalised to a mean of 1 (only their ratios matter to the
    /// blocks) and kept above 1e-3 of the head's largest.
    pub fn stats(
        &self,
        exponent: f32,
        n_heads: usize,
        n_kv_heads: usize,
        span: usize,
    ) -> CentreStats {
        let head_dim = self.head_dim;
        let (shift, std) = self.moments(span);
        let mut scale: Vec<f32> = std.iter().map(|s| s.powf(exponent)).collect();
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
            shift,
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

/// The centring of keys `rows` (`[n, n_kv_heads * head_dim]`, f32, RoPE left alone) with
/// [`SCALE_EXPONENT`] ([`Calibration::stats`]).
pub fn stats(rows: &[f32], n_heads: usize, n_kv_heads: usize, head_dim: usize) -> CentreStats {
    let n = rows.len() / (n_kv_heads * head_dim).max(1);
    let positions: Vec<usize> = (0..n).collect();
    Calibration::from_rows(
        rows,
        &positions,
        n_kv_heads * head_dim,
        head_dim,
        Vec::new(),
    )
    .stats(SCALE_EXPONENT, n_heads, n_kv_heads, n.max(2))
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
/// for each span ([`span_for`]).
#[derive(Debug, Default)]
pub struct Centres {
    calibration: OnceLock<Vec<Option<Calibration>>>,
    tables: Mutex<Vec<(usize, Vec<Option<KeyCentre>>)>>,
}

/// The span a cache of `capacity` positions is centred for: the next power of two (the
/// statistics change slowly with the span; this bounds the tables a model keeps).
pub fn span_for(capacity: usize) -> usize {
    capacity.clamp(2, 1 << 30).next_power_of_two()
}

/// The centring of a quantized K cache holding `capacity` positions per sequence for the
/// model whose cells `cells` are, measured on first use: `run` feeds ids at positions 0..
/// through a fresh f32 state and returns, per layer, its key cache and the rows it kept
/// (`None`: a layer without attention). The calibration sequence gives the statistics; where
/// `b` stores a sink offset ([`Backend::sink_keys`]), one-token runs of [`sink_tokens`] give it.
pub fn measured<B: Backend>(
    cells: &Centres,
    b: &mut B,
    cfg: &ModelConfig,
    capacity: usize,
    mut run: impl FnMut(&mut B, &[u32]) -> Result<Vec<Option<(Tensor, usize)>>, ModelError>,
) -> Result<Vec<Option<KeyCentre>>, ModelError> {
    let key = span_for(capacity);
    let lock = || cells.tables.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, t)) = lock().iter().find(|(k, _)| *k == key) {
        return Ok(t.clone());
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
                .map(|c| {
                    upload(
                        b,
                        &c.stats(SCALE_EXPONENT, cfg.n_heads, cfg.n_kv_heads, key),
                    )
                })
                .transpose()
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    let mut tables = lock();
    match tables.iter().find(|(k, _)| *k == key) {
        Some((_, t)) => Ok(t.clone()),
        None => {
            tables.push((key, out.clone()));
            Ok(out)
        }
    }
}

/// The calibration forwards of [`measured`].
fn calibrate<B: Backend>(
    b: &mut B,
    cfg: &ModelConfig,
    run: &mut impl FnMut(&mut B, &[u32]) -> Result<Vec<Option<(Tensor, usize)>>, ModelError>,
) -> Result<Vec<Option<Calibration>>, ModelError> {
    let ids = calibration_tokens(cfg);
    let keys = run(b, &ids)?;
    let mut calib = from_caches(b, &keys, ids.len(), cfg)?;
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

/// The calibration of every layer from a calibration state's f32 key caches after `n` tokens
/// at positions 0..n: `keys[l]` is layer `l`'s cache and the rows it kept (`None`: a layer
/// without attention; a ring keeps its last positions), position 0 left out (no sink offset
/// yet).
pub fn from_caches<B: Backend>(
    b: &mut B,
    keys: &[Option<(Tensor, usize)>],
    n: usize,
    cfg: &ModelConfig,
) -> Result<Vec<Option<Calibration>>, ModelError> {
    let kv_dim = cfg.kv_dim();
    let mut rows = Vec::new();
    keys.iter()
        .enumerate()
        .map(|(l, k)| {
            let Some((t, kept)) = *k else { return Ok(None) };
            rows.resize(kept * kv_dim, 0.0);
            b.read_f32(t, 0, &mut rows)?;
            let positions = ring_positions(n, kept);
            let (rows, positions): (Vec<&[f32]>, Vec<usize>) = rows
                .chunks_exact(kv_dim.max(1))
                .zip(positions)
                .filter(|&(_, p)| p > 0)
                .unzip();
            let pairs = cfg
                .layers
                .get(l)
                .map(|lc| rope_pairs(&lc.rope, cfg.head_dim))
                .unwrap_or_default();
            Ok(Some(Calibration::from_rows(
                &rows.concat(),
                &positions,
                kv_dim,
                cfg.head_dim,
                pairs,
            )))
        })
        .collect()
}

/// The position each row of a cache holds after `n` tokens at positions 0..n when it keeps
/// `kept` rows: row `r` holds the `p` in `n - kept..n` with `p = r (mod kept)`.
fn ring_positions(n: usize, kept: usize) -> Vec<usize> {
    let first = n.saturating_sub(kept);
    (0..kept)
        .map(|r| first + (r + kept - first % kept) % kept)
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

    /// Every key type takes the same exponent: std 16 vs 1 gives scales 4 : 1 at 0.5; the
    /// first key becomes the offset.
    #[test]
    fn keys_take_the_square_root_of_the_spread() {
        let rows: Vec<f32> = (0..64)
            .flat_map(|t| {
                let sgn = if t % 2 == 0 { 1.0 } else { -1.0 };
                [16.0 * sgn, sgn]
            })
            .collect();
        let positions: Vec<usize> = (1..=64).collect();
        let mut c = Calibration::from_rows(&rows, &positions, 2, 2, Vec::new());
        c.first = Some(vec![32.0, 0.0]);
        let s = c.stats(SCALE_EXPONENT, 1, 1, 64);
        assert!((s.inv[1] / s.inv[0] - 4.0).abs() < 1e-4, "{:?}", s.inv);
        assert!((s.sink[0] - 32.0 * s.inv[0]).abs() < 1e-4, "{:?}", s.sink);
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

    /// A ring of 4 rows after 10 tokens holds positions 8, 9, 6, 7; an unwrapped cache row r
    /// holds position r.
    #[test]
    fn ring_rows_map_to_their_positions() {
        assert_eq!(ring_positions(10, 4), vec![8, 9, 6, 7]);
        assert_eq!(ring_positions(3, 3), vec![0, 1, 2]);
        assert_eq!(ring_positions(8, 4), vec![4, 5, 6, 7]);
    }

    /// Keys whose pre-RoPE distribution does not depend on the position (a large offset, as a
    /// K bias gives, plus noise), rotated by RoPE: calibrated on positions 1..256, the moments
    /// predicted for a span match the keys' measured mean and spread over that span, where
    /// the positions 1..256 alone do not (a slow pair turns a quarter cycle by 4096).
    #[test]
    fn moments_follow_the_rotation_over_the_span() {
        let pairs = vec![
            RopePair {
                a: 0,
                b: 2,
                freq: 1.0,
            },
            RopePair {
                a: 1,
                b: 3,
                freq: 4e-4,
            },
        ];
        let (hd, offset) = (4usize, [3.0f32, -2.0, 1.0, 5.0]);
        let key = |p: usize| -> [f32; 4] {
            let mut x = offset;
            for (c, v) in x.iter_mut().enumerate() {
                let u = ((p * 7919 + c * 104_729) % 1000) as f32 / 1000.0;
                *v += u - 0.5;
            }
            for q in &pairs {
                let (s, c) = f64::from(p as f32 * q.freq).sin_cos();
                let (a, b) = (f64::from(x[q.a]), f64::from(x[q.b]));
                x[q.a] = (a * c - b * s) as f32;
                x[q.b] = (b * c + a * s) as f32;
            }
            x
        };
        let positions: Vec<usize> = (1..256).collect();
        let rows: Vec<f32> = positions.iter().flat_map(|&p| key(p)).collect();
        let c = Calibration::from_rows(&rows, &positions, hd, hd, pairs.clone());
        let plain = Calibration::from_rows(&rows, &positions, hd, hd, Vec::new());
        for span in [256usize, 4096, 65536] {
            let all: Vec<f32> = (1..span).flat_map(key).collect();
            let want =
                Calibration::from_rows(&all, &(1..span).collect::<Vec<_>>(), hd, hd, Vec::new())
                    .moments(2);
            let (mean, std) = c.moments(span);
            for ch in 0..hd {
                assert!(
                    (mean[ch] - want.0[ch]).abs() < 0.05,
                    "span {span} ch {ch}: mean {mean:?} vs {:?}",
                    want.0
                );
                assert!(
                    (std[ch] - want.1[ch]).abs() < 0.05,
                    "span {span} ch {ch}: std {std:?} vs {:?}",
                    want.1
                );
            }
        }
        // Without the rotation undone, positions 1..256 mistake the slow pair's mean at 65536.
        let wide: Vec<f32> = (1..65536).flat_map(key).collect();
        let far =
            Calibration::from_rows(&wide, &(1..65536).collect::<Vec<_>>(), hd, hd, Vec::new())
                .moments(2);
        assert!(
            (plain.moments(2).0[1] - far.0[1]).abs() > 1.0,
            "{:?} vs {:?}",
            plain.moments(2),
            far
        );
    }
}
