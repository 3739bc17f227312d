//! Where keys and values go in a KV cache: the reference for `shaders/kv_append.wgsl`.
//!
//! A cache holds `slots` regions of `row_stride` rows; a region keeps `min(capacity, ring)` rows
//! and position `p` lives in row `p % ring` of it. Full-attention layers have `ring >= capacity`
//! (row = position); sliding-window layers keep a ring of their window plus a prefill chunk, so a
//! chunk never overwrites keys its own earlier queries still need.

/// The cache row of each token: token `t` at `positions[t]` goes to row
/// `region(t) * row_stride + positions[t] % ring`, where `region(t)` is `t` when `per_row` (the
/// batched decode step: token t is slot t) and `slot` otherwise. Positions `>= capacity` give
/// `None` (an idle slot writes nothing).
///
/// # Panics
/// If `ring` is 0 (a programming error).
pub fn kv_rows(
    positions: &[usize],
    capacity: usize,
    ring: usize,
    row_stride: usize,
    slot: usize,
    per_row: bool,
) -> Vec<Option<usize>> {
    assert!(ring > 0, "kv_rows: ring of 0 rows");
    positions
        .iter()
        .enumerate()
        .map(|(t, &p)| {
            let region = if per_row { t } else { slot };
            (p < capacity).then_some(region * row_stride + p % ring)
        })
        .collect()
}

/// Copies row `t` of `src` (`[n, width]`) into row `rows[t]` of `cache` (skipping `None`).
///
/// # Panics
/// If a row is out of range (a programming error).
pub fn kv_write(cache: &mut [f32], src: &[f32], width: usize, rows: &[Option<usize>]) {
    for (t, r) in rows.iter().enumerate() {
        let Some(r) = *r else { continue };
        cache[r * width..(r + 1) * width].copy_from_slice(&src[t * width..(t + 1) * width]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_wrap_and_skip_idle() {
        // Ring of 4 rows in a region of 8, slot 2: positions 0, 5, 9 -> rows 16, 17, 17.
        assert_eq!(
            kv_rows(&[0, 5, 9], 100, 4, 8, 2, false),
            vec![Some(16), Some(17), Some(17)]
        );
        // Per row: token t in region t; position >= capacity is skipped.
        assert_eq!(
            kv_rows(&[3, 100, 7], 100, 4, 8, 0, true),
            vec![Some(3), None, Some(19)]
        );
        // ring >= capacity: the row is the position.
        assert_eq!(kv_rows(&[6], 7, 7, 8, 1, false), vec![Some(14)]);
    }

    #[test]
    fn write_copies_rows() {
        let mut cache = vec![0.0; 8];
        kv_write(&mut cache, &[1.0, 2.0, 3.0, 4.0], 2, &[Some(3), None]);
        assert_eq!(cache, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0]);
    }
}
