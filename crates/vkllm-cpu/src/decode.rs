//! The bookkeeping between two decode steps of a batch of slots: the reference for the GPU's
//! `decode_advance` kernel (which runs it on the device so several steps go in one submit).

/// The position of an idle slot (and the ring entry of a step in which a slot was idle).
pub const IDLE: u32 = u32::MAX;

/// The per-slot state a decode step reads and the advance updates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotsState {
    /// The token each slot feeds to the next step.
    pub ids: Vec<u32>,
    /// The position of that token, or [`IDLE`].
    pub pos: Vec<u32>,
    /// The sampler's step counter per slot.
    pub steps: Vec<u64>,
    /// Whether the slot is sampled (cleared when the slot retires).
    pub live: Vec<bool>,
    /// Whether the slot counts its tokens for repetition penalties.
    pub use_counts: Vec<bool>,
    /// `[slots, vocab]` token counts.
    pub counts: Vec<u32>,
}

/// After a step sampled `sampled[r]` for every slot: each live-position slot appends its token to
/// `ring[step * slots + r]`, feeds it to the next step, counts it, advances its sampler step and
/// position, and retires (position [`IDLE`], not live) when the next position would reach
/// `capacity`; idle slots write [`IDLE`] into the ring. `step` is the ring step (nothing is
/// written to the ring when `step >= ring.len() / slots`).
pub fn advance(
    st: &mut SlotsState,
    sampled: &[u32],
    vocab: usize,
    capacity: usize,
    ring: &mut [u32],
    step: usize,
) {
    let slots = st.ids.len();
    let ring_steps = ring.len() / slots.max(1);
    for r in 0..slots {
        let mut out = IDLE;
        let ps = st.pos[r];
        if (ps as usize) < capacity && ps != IDLE {
            let id = sampled[r];
            out = id;
            st.ids[r] = id;
            if st.use_counts[r] && (id as usize) < vocab {
                st.counts[r * vocab + id as usize] += 1;
            }
            st.steps[r] = st.steps[r].wrapping_add(1);
            if ps as usize + 1 >= capacity {
                st.pos[r] = IDLE;
                st.live[r] = false;
            } else {
                st.pos[r] = ps + 1;
            }
        }
        if step < ring_steps {
            ring[step * slots + r] = out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_live_slots_and_retires_at_capacity() {
        let mut st = SlotsState {
            ids: vec![5, 6, 7],
            pos: vec![3, IDLE, 9],
            steps: vec![u32::MAX as u64, 0, 4],
            live: vec![true, false, true],
            use_counts: vec![true, false, false],
            counts: vec![0; 3 * 10],
        };
        let mut ring = vec![0u32; 2 * 3];
        advance(&mut st, &[8, 1, 2], 10, 10, &mut ring, 1);
        assert_eq!(ring, [0, 0, 0, 8, IDLE, 2]);
        assert_eq!(st.ids, [8, 6, 2]);
        assert_eq!(
            st.pos,
            [4, IDLE, IDLE],
            "slot 2 reached capacity 10 and retired"
        );
        assert_eq!(st.live, [true, false, false]);
        assert_eq!(st.steps, [1 << 32, 0, 5]);
        assert_eq!(st.counts[8], 1);
        assert_eq!(st.counts.iter().sum::<u32>(), 1, "only slot 0 counts");
    }
}
