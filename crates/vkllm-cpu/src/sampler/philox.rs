//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
//! counter-based generator of the sampler: a pure function of (counter, key), so a GPU thread can
//! compute the draw of any (sequence, step) without state.

/// Multiplier applied to counter word 0.
pub const PHILOX_M0: u32 = 0xD251_1F53;
/// Multiplier applied to counter word 2.
pub const PHILOX_M1: u32 = 0xCD9E_8D57;
/// Key schedule increment of key word 0 (golden ratio).
pub const PHILOX_W0: u32 = 0x9E37_79B9;
/// Key schedule increment of key word 1 (sqrt(3) - 1).
pub const PHILOX_W1: u32 = 0xBB67_AE85;

#[inline]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// Ten Philox rounds. Round `r` (0-based) uses the key bumped `r` times by
/// `(PHILOX_W0, PHILOX_W1)` (wrapping); each round maps `c` to
/// `[hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1, lo(M0*c0)]`.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = ctr;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(PHILOX_W0);
            k[1] = k[1].wrapping_add(PHILOX_W1);
        }
        let (hi0, lo0) = mulhilo(PHILOX_M0, c[0]);
        let (hi1, lo1) = mulhilo(PHILOX_M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The four words drawn for `(seed, seq_id, step)`: key `[seed lo, seed hi]`, counter
/// `[seq_id lo, seq_id hi, step lo, step hi]`.
pub fn philox_draw(seed: u64, seq_id: u64, step: u64) -> [u32; 4] {
    let key = [seed as u32, (seed >> 32) as u32];
    let ctr = [
        seq_id as u32,
        (seq_id >> 32) as u32,
        step as u32,
        (step >> 32) as u32,
    ];
    philox4x32_10(ctr, key)
}

/// The sampler's uniform in `[0, 1)`: `(word0 >> 8) as f32 * 2^-24` (exact: 24 bits).
pub fn uniform(seed: u64, seq_id: u64, step: u64) -> f32 {
    let w = philox_draw(seed, seq_id, step)[0];
    (w >> 8) as f32 * (1.0 / 16_777_216.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123 `tests/kat_vectors`, the three "philox4x32 10" lines (counter, key, output).
    #[test]
    fn random123_known_answers() {
        let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0, 0, 0, 0],
                [0, 0],
                [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
            ),
            (
                [0xffff_ffff; 4],
                [0xffff_ffff; 2],
                [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
            ),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (ctr, key, want) in kat {
            assert_eq!(philox4x32_10(ctr, key), want);
        }
    }

    #[test]
    fn draw_layout() {
        // seed/seq/step map to key and counter words low word first.
        let seed = 0x299f_31d0_a409_3822u64;
        let seq = 0x85a3_08d3_243f_6a88u64;
        let step = 0x0370_7344_1319_8a2eu64;
        assert_eq!(
            philox_draw(seed, seq, step),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
        // word0 = 0x6627e8d5 -> 0x6627e8 / 2^24
        assert_eq!(uniform(0, 0, 0), 0x0066_27e8 as f32 / 16_777_216.0);
        assert_eq!(
            uniform(u64::MAX, u64::MAX, u64::MAX),
            0x0040_8f27 as f32 / 16_777_216.0
        );
    }

    #[test]
    fn uniform_is_in_range_and_roughly_uniform() {
        let n = 100_000u64;
        let mut bins = [0u32; 10];
        for step in 0..n {
            let u = uniform(42, 7, step);
            assert!((0.0..1.0).contains(&u));
            bins[(u * 10.0) as usize] += 1;
        }
        // Expected 10000 per bin, sd ~95: 5 sd is 475.
        for b in bins {
            assert!((i64::from(b) - 10_000).abs() < 500, "{bins:?}");
        }
    }
}
