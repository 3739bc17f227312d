//! Quantized KV caches: the reference for `shaders/kv_quant.inc.wgsl` (the layout) and the
//! quantize-on-write of `shaders/kv_append.wgsl`.
//!
//! Values go in units of [`UNIT`] = 64 (two blocks of 32, one f16 scale each). A unit is the code
//! words (q8_0: 16, byte `i` of word `w` is value `4w + i` as an i8; q4_0: 8, nibble `i` of word
//! `w` is value `8w + i` plus 8) followed by one word holding the two blocks' scales (an f16 pair,
//! the first block in the low half). A value decodes to `scale * code`.
//!
//! Quantizing a block: q8_0 `scale = f16(amax * (1 / 127))`, `code = clamp(round(x / scale),
//! -127, 127)` (ties to even); q4_0 `m` = the value of largest magnitude (the first on a tie),
//! `code = clamp(floor(x / scale + 8.5), 0, 15)` and `scale` the one of least squared error
//! ([`KvQuant::block_error`]) among `f16(m / (-8.75 + j / 8))`, j = 0..16 (the first on a tie;
//! j = 6 is llama.cpp's rule, `m` exactly at code 0; finer scales clip `m`, coarser ones reach
//! further on the other side: ~11% less squared error on Gaussian blocks, docs/quantization.md
//! for real models). The codes are taken
//! against the stored (f16) scale, so each is the nearest the stored block can represent. A zero
//! scale gives code 0 (q4_0: 8, value 0). tq4 takes q4_0's layout for units that are always
//! rotated ([`rotate`]): `scale = f16(-m)` (q4_0's `m`: that value lands on level -1), the code
//! of the nearest of [`TQ4_LEVELS`] (the lower on a tie), value `scale * level`.

use half::f16;

/// Values per unit.
pub const UNIT: usize = 64;
/// Values per block (one scale).
pub const BLOCK: usize = 32;

/// A block's value of largest magnitude, signed (the first on a tie; 0 for an empty block).
pub fn largest_magnitude(block: &[f32]) -> f32 {
    block
        .iter()
        .fold(0.0f32, |m, &x| if x.abs() > m.abs() { x } else { m })
}

/// q4_0 scales tried per block (module docs).
pub const Q4_0_CANDIDATES: usize = 16;

/// q4_0's candidate scale `j` for a block whose value of largest magnitude is `m` (before the
/// f16 rounding): `m / (-8.75 + j / 8)`.
pub fn q4_0_candidate(m: f32, j: usize) -> f32 {
    m / (-8.75 + j as f32 * 0.125)
}

/// The fixed signs `D` of the K rotation, bit `j` set for `D_jj = -1`.
pub const ROT_SIGNS: u64 = 0xc936_49b6_4db2_6d92;

fn sign(j: usize) -> f32 {
    if (ROT_SIGNS >> j) & 1 == 1 { -1.0 } else { 1.0 }
}

fn hadamard(i: usize, j: usize) -> f32 {
    if (i & j).count_ones() % 2 == 1 {
        -1.0
    } else {
        1.0
    }
}

/// Rotates each 64-value unit of `x` as a rotated-K cache stores it: `y_i = (1/8) sum_j H_ij
/// D_jj x_j` (H the Walsh-Hadamard matrix, `H_ij = (-1)^popcount(i & j)`; sums in order j =
/// 0..63, every term exact).
///
/// # Panics
/// If `x.len()` is not a multiple of [`UNIT`].
pub fn rotate(x: &mut [f32]) {
    assert!(x.len().is_multiple_of(UNIT), "kv_quant: {} values", x.len());
    for unit in x.chunks_exact_mut(UNIT) {
        let d: Vec<f32> = unit.iter().enumerate().map(|(j, &v)| v * sign(j)).collect();
        for (i, y) in unit.iter_mut().enumerate() {
            let r = (0..UNIT).fold(0.0f32, |acc, j| acc + hadamard(i, j) * d[j]);
            *y = r * 0.125;
        }
    }
}

/// Centres a key row as a centred cache stores it (`shaders/kv_append.wgsl`'s KV_CENTRE, before
/// any rotation): `x_c = (x_c - shift_c) * inv_c`, `centre` holding shift (`x.len()` values)
/// then inv.
///
/// # Panics
/// If `centre` does not hold `2 * x.len()` values.
pub fn centre(x: &mut [f32], centre: &[f32]) {
    assert_eq!(
        centre.len(),
        2 * x.len(),
        "kv_quant: centre of a {}-value row",
        x.len()
    );
    let (shift, inv) = centre.split_at(x.len());
    for ((v, &m), &r) in x.iter_mut().zip(shift).zip(inv) {
        *v = (*v - m) * r;
    }
}

/// The inverse of [`rotate`]: `x_j = D_jj ((1/8) sum_i H_ji y_i)`.
///
/// # Panics
/// If `y.len()` is not a multiple of [`UNIT`].
pub fn unrotate(y: &mut [f32]) {
    assert!(y.len().is_multiple_of(UNIT), "kv_quant: {} values", y.len());
    for unit in y.chunks_exact_mut(UNIT) {
        let src = unit.to_vec();
        for (j, x) in unit.iter_mut().enumerate() {
            let r = (0..UNIT).fold(0.0f32, |acc, i| acc + hadamard(j, i) * src[i]);
            *x = r * 0.125 * sign(j);
        }
    }
}

/// TQ4's 16 levels in units of a block's scale, in code order: the Lloyd-Max quantizer of the
/// values of Gaussian blocks of 32 (what a rotated unit's values are close to) divided by the
/// negated value of largest magnitude, which is level -1 exactly.
pub const TQ4_LEVELS: [f32; 16] = [
    -1.0, -0.7975, -0.6371, -0.5008, -0.3798, -0.2686, -0.1638, -0.0628, 0.0365, 0.1359, 0.2373,
    0.3431, 0.4559, 0.5798, 0.7209, 0.8902,
];

/// A quantized KV format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvQuant {
    Q8_0,
    Q4_0,
    /// Rotated units ([`rotate`], keys and values), 4-bit codes into [`TQ4_LEVELS`] with one f16
    /// scale per block of 32: the block's root mean square.
    Tq4,
}

impl KvQuant {
    /// `q8_0`, `q4_0` or `tq4` (the names `--kv-type` takes); `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "q8_0" => Some(KvQuant::Q8_0),
            "q4_0" => Some(KvQuant::Q4_0),
            "tq4" => Some(KvQuant::Tq4),
            _ => None,
        }
    }

    /// Code words of a unit.
    pub fn code_words(self) -> usize {
        match self {
            KvQuant::Q8_0 => 16,
            KvQuant::Q4_0 | KvQuant::Tq4 => 8,
        }
    }

    /// Whether the units are stored rotated whatever they hold (tq4; a cache may rotate q8_0
    /// keys too, see [`KvQuant::round_trip`]).
    pub fn always_rotated(self) -> bool {
        self == KvQuant::Tq4
    }

    /// Words of a unit: the codes and the scale word.
    pub fn unit_words(self) -> usize {
        self.code_words() + 1
    }

    /// Values per code word.
    pub fn per_word(self) -> usize {
        UNIT / self.code_words()
    }

    fn bits(self) -> usize {
        32 / self.per_word()
    }

    /// The stored scale of a block.
    pub fn block_scale(self, block: &[f32]) -> f32 {
        let m = largest_magnitude(block);
        let d = match self {
            KvQuant::Q8_0 => m.abs() * (1.0 / 127.0),
            KvQuant::Q4_0 => return self.q4_0_scale(block, m),
            KvQuant::Tq4 => -m,
        };
        f16::from_f32(d).to_f32()
    }

    /// The q4_0 scale of least squared error among [`Q4_0_CANDIDATES`] (module docs).
    fn q4_0_scale(self, block: &[f32], m: f32) -> f32 {
        let mut best = (f32::INFINITY, 0.0);
        for j in 0..Q4_0_CANDIDATES {
            let d = f16::from_f32(q4_0_candidate(m, j)).to_f32();
            let e = self.block_error(block, d);
            if e < best.0 {
                best = (e, d);
            }
        }
        best.1
    }

    /// The squared error of `block` coded against scale `d`, summed in order.
    pub fn block_error(self, block: &[f32], d: f32) -> f32 {
        block.iter().fold(0.0f32, |acc, &x| {
            let e = x - d * self.code_value(self.encode(x, d));
            acc + e * e
        })
    }

    /// The stored bits of `x`'s code in a block of scale `d`.
    pub fn encode(self, x: f32, d: f32) -> u32 {
        match self {
            KvQuant::Q8_0 => {
                let q = if d != 0.0 {
                    (x / d).round_ties_even().clamp(-127.0, 127.0)
                } else {
                    0.0
                };
                (q as i32 as u32) & 0xff
            }
            KvQuant::Q4_0 => {
                let q = if d != 0.0 {
                    (x / d + 8.5).floor().clamp(0.0, 15.0)
                } else {
                    8.0
                };
                q as u32
            }
            KvQuant::Tq4 => {
                // The nearest level: the midpoints below x / d (the lower code on a tie).
                let r = if d != 0.0 { x / d } else { 0.0 };
                (0..15)
                    .filter(|&i| r > 0.5 * (TQ4_LEVELS[i] + TQ4_LEVELS[i + 1]))
                    .count() as u32
            }
        }
    }

    /// The value of stored code bits in units of the scale (q8_0: the i8; q4_0: nibble - 8;
    /// tq4: its level).
    pub fn code_value(self, bits: u32) -> f32 {
        match self {
            KvQuant::Q8_0 => bits as u8 as i8 as f32,
            KvQuant::Q4_0 => (bits & 0xf) as f32 - 8.0,
            KvQuant::Tq4 => TQ4_LEVELS[(bits & 0xf) as usize],
        }
    }

    /// Words of `n` values (`n` a multiple of [`UNIT`]).
    pub fn words(self, n: usize) -> usize {
        n / UNIT * self.unit_words()
    }

    /// Quantizes `x` (a multiple of [`UNIT`] values) into units.
    ///
    /// # Panics
    /// If `x.len()` is not a multiple of [`UNIT`].
    pub fn quantize(self, x: &[f32]) -> Vec<u32> {
        assert!(x.len().is_multiple_of(UNIT), "kv_quant: {} values", x.len());
        let mut out = Vec::with_capacity(self.words(x.len()));
        let per = self.per_word();
        for unit in x.chunks_exact(UNIT) {
            let d = [
                self.block_scale(&unit[..BLOCK]),
                self.block_scale(&unit[BLOCK..]),
            ];
            for w in unit.chunks_exact(per).enumerate() {
                let (wi, vals) = w;
                let word = vals.iter().enumerate().fold(0u32, |acc, (i, &v)| {
                    let e = wi * per + i;
                    acc | self.encode(v, d[e / BLOCK]) << (self.bits() * i)
                });
                out.push(word);
            }
            let lo = f16::from_f32(d[0]).to_bits() as u32;
            let hi = f16::from_f32(d[1]).to_bits() as u32;
            out.push(lo | hi << 16);
        }
        out
    }

    /// The scales and integer codes of `n` values stored in `words`: value `e` is `scales[e /
    /// 32] * codes[e]`.
    ///
    /// # Panics
    /// If `words` holds fewer than `n` values.
    pub fn unpack(self, words: &[u32], n: usize) -> (Vec<f32>, Vec<f32>) {
        assert!(
            words.len() >= self.words(n),
            "kv_quant: {} words",
            words.len()
        );
        let (mut scales, mut codes) = (Vec::new(), Vec::with_capacity(n));
        let (per, uw, bits) = (self.per_word(), self.unit_words(), self.bits());
        for u in 0..n / UNIT {
            let unit = &words[u * uw..(u + 1) * uw];
            let sw = unit[self.code_words()];
            scales.push(f16::from_bits(sw as u16).to_f32());
            scales.push(f16::from_bits((sw >> 16) as u16).to_f32());
            for e in 0..UNIT {
                let b = (unit[e / per] >> (bits * (e % per))) & ((1 << bits) - 1);
                codes.push(self.code_value(b));
            }
        }
        (scales, codes)
    }

    /// The `n` values stored in `words`.
    pub fn dequantize(self, words: &[u32], n: usize) -> Vec<f32> {
        let (scales, codes) = self.unpack(words, n);
        codes
            .iter()
            .enumerate()
            .map(|(e, &c)| scales[e / BLOCK] * c)
            .collect()
    }

    /// `x` replaced by what a cache of this format stores for it (the CPU backend's KV append);
    /// `rotated`: the units are stored rotated ([`rotate`], then [`unrotate`] on the way back).
    pub fn round_trip(self, x: &mut [f32], rotated: bool) {
        let rotated = rotated || self.always_rotated();
        if rotated {
            rotate(x);
        }
        let w = self.quantize(x);
        x.copy_from_slice(&self.dequantize(&w, x.len()));
        if rotated {
            unrotate(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Vec<f32> {
        (0..3 * UNIT)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173)
            .collect()
    }

    /// Every code is the nearest the stored scale represents: the round trip's error is at most
    /// half a step (q4_0's extreme value exactly), and q8_0's largest magnitude is within 1/254.
    #[test]
    fn round_trip_error_is_half_a_step() {
        let x = values();
        for q in [KvQuant::Q8_0, KvQuant::Q4_0] {
            let w = q.quantize(&x);
            assert_eq!(w.len(), q.words(x.len()));
            let (scales, _) = q.unpack(&w, x.len());
            let y = q.dequantize(&w, x.len());
            for (e, (a, b)) in x.iter().zip(&y).enumerate() {
                let d = scales[e / BLOCK].abs();
                // q4_0's codes reach 8 * d one way but only 7 * d the other: a value of the
                // opposite sign near the block's largest magnitude is up to amax - 7 d away.
                let amax = x[e / BLOCK * BLOCK..][..BLOCK]
                    .iter()
                    .fold(0.0f32, |m, v| m.max(v.abs()));
                let room = match q {
                    KvQuant::Q4_0 => (0.5 * d).max(amax - 7.0 * d),
                    KvQuant::Q8_0 => 0.5 * d,
                    KvQuant::Tq4 => unreachable!("checked by tq4_codes_are_the_nearest_levels"),
                };
                assert!(
                    (a - b).abs() <= room * 1.0001,
                    "{q:?} value {e}: {a} vs {b}"
                );
            }
        }
    }

    /// Hand-made units: q8_0 of a block 0..32 has scale f16(31/127) and codes round(i / d);
    /// q4_0 of a block with one -4.0 maps it to code 0 (value -8 * 0.5).
    #[test]
    fn known_blocks() {
        let mut x = vec![0.0f32; UNIT];
        for (i, v) in x.iter_mut().take(BLOCK).enumerate() {
            *v = i as f32;
        }
        let w = KvQuant::Q8_0.quantize(&x);
        let d = f16::from_f32(31.0 / 127.0).to_f32();
        assert_eq!(w[16] & 0xffff, f16::from_f32(d).to_bits() as u32);
        assert_eq!(w[16] >> 16, 0, "second block all zeros: scale 0");
        assert_eq!(w[7] >> 24, 127, "value 31 is code 127");
        assert_eq!((w[0] >> 8) & 0xff, (1.0 / d).round() as u32);
        let mut y = vec![0.0f32; UNIT];
        y[3] = -4.0;
        y[4] = 1.0;
        let w = KvQuant::Q4_0.quantize(&y);
        assert_eq!(w.len(), 9);
        assert_eq!((w[0] >> 12) & 0xf, 0, "-4 is code 0");
        assert_eq!(f16::from_bits(w[8] as u16).to_f32(), 0.5);
        assert_eq!(w[0] & 0xf, 8, "0 is code 8");
        assert_eq!(w[0] >> 16 & 0xf, 10, "1.0 is code 10 (value 2 * 0.5)");
        assert_eq!(KvQuant::Q4_0.dequantize(&w, UNIT)[3], -4.0);
    }

    /// tq4: a block's scale is its negated value of largest magnitude (f16), each code the
    /// nearest level to x / scale (checked against every level), an all-zero block decodes to
    /// zeros, and the round trip (rotated) keeps a Gaussian-like unit within the levels' error.
    #[test]
    fn tq4_codes_are_the_nearest_levels() {
        let q = KvQuant::Tq4;
        assert!(q.always_rotated() && KvQuant::from_name("tq4") == Some(q));
        let x = values();
        let w = q.quantize(&x);
        assert_eq!(w.len(), q.words(x.len()));
        let (scales, codes) = q.unpack(&w, x.len());
        for (b, block) in x.chunks(BLOCK).enumerate() {
            let m = largest_magnitude(block);
            assert_eq!(scales[b], f16::from_f32(-m).to_f32(), "block {b}");
        }
        for (e, &v) in x.iter().enumerate() {
            let r = v / scales[e / BLOCK];
            let best = TQ4_LEVELS
                .iter()
                .map(|l| (l - r).abs())
                .fold(f32::INFINITY, f32::min);
            assert_eq!(
                (codes[e] - r).abs(),
                best,
                "value {e}: {r} coded {}",
                codes[e]
            );
        }
        let zeros = q.dequantize(&q.quantize(&[0.0; UNIT]), UNIT);
        assert!(zeros.iter().all(|&v| v == 0.0));
        // Equal magnitudes: each block's first value is its m (level -1, exact), the opposite
        // sign takes the top level 0.8902.
        let flat: Vec<f32> = (0..UNIT)
            .map(|i| if i % 3 == 0 { -2.0 } else { 2.0 })
            .collect();
        let back = q.dequantize(&q.quantize(&flat), UNIT);
        for (i, (b, f)) in back.iter().zip(&flat).enumerate() {
            let first = flat[i / BLOCK * BLOCK];
            let want = if *f == first { *f } else { *f * 0.8902 };
            assert_eq!(*b, want, "value {i}");
        }
        let mut y = x.clone();
        q.round_trip(&mut y, false);
        let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
        let energy: f32 = x.iter().map(|a| a * a).sum();
        assert!(
            err / energy < 0.03,
            "relative squared error {}",
            err / energy
        );
    }

    /// The rotation is orthogonal: unrotate(rotate(x)) == x within f32 rounding, norms kept,
    /// and a single large channel is spread over the whole unit (|y_i| = |x_c| / 8).
    #[test]
    fn rotation_is_orthogonal_and_spreads_outliers() {
        let x = values();
        let mut y = x.clone();
        rotate(&mut y);
        let norm = |v: &[f32]| v.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
        for (a, b) in x.chunks(UNIT).zip(y.chunks(UNIT)) {
            assert!((norm(a) - norm(b)).abs() <= 1e-5 * norm(a));
        }
        unrotate(&mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
        }
        let mut spike = vec![0.0f32; UNIT];
        spike[17] = 80.0;
        rotate(&mut spike);
        assert!(spike.iter().all(|v| v.abs() == 10.0));
    }

    /// Gaussian values (Box-Muller over a seeded generator), blocks of 32 coded as they are:
    /// tq4's squared error is ~0.63% of their energy (simulated), under q4_0's (~0.74% with
    /// llama.cpp's scale, ~11% less with the searched one) and the first tq4 grid's ~0.89%
    /// (levels against each block's RMS).
    #[test]
    fn tq4_beats_q4_0_on_gaussian_blocks() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(44);
        let x: Vec<f32> = (0..256 * UNIT)
            .map(|_| {
                let (u, v): (f64, f64) = (1.0 - rng.random::<f64>(), rng.random());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
            })
            .collect();
        let energy: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
        let rel = |q: KvQuant| {
            let y = q.dequantize(&q.quantize(&x), x.len());
            let err: f64 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| f64::from(a - b).powi(2))
                .sum();
            err / energy
        };
        let (tq4, q4) = (rel(KvQuant::Tq4), rel(KvQuant::Q4_0));
        // q4_0 with llama.cpp's scale (candidate 6) for every block.
        let q4_largest = x
            .chunks_exact(BLOCK)
            .map(|b| {
                let d = f16::from_f32(q4_0_candidate(largest_magnitude(b), 6)).to_f32();
                f64::from(KvQuant::Q4_0.block_error(b, d))
            })
            .sum::<f64>()
            / energy;
        assert!((0.0055..0.0070).contains(&tq4), "tq4 {tq4}");
        assert!((0.0068..0.0080).contains(&q4_largest), "q4_0 {q4_largest}");
        assert!(q4 < 0.92 * q4_largest, "searched q4_0 {q4} vs {q4_largest}");
        assert!(tq4 < q4, "tq4 {tq4} vs q4_0 {q4}");
    }
}
