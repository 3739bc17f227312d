//! How the recurrent-state ops (`Backend::causal_conv1d`, `Backend::gated_delta_rule`) address
//! a Gated DeltaNet layer's state when it holds several sequences.

use super::{KvRows, Tensor};

/// One layer's recurrent state (the conv history or the delta-rule matrix) of `slots`
/// sequences, slot-major: slot `s` owns values `s * len .. (s + 1) * len` of `state`. `rows`
/// says which slot(s) an op uses: `Slot(s)` (every row a token of that sequence, in order) or
/// `PerRow` (row `i` is one token of slot `i`; a row whose `positions[i] >= capacity` is an idle
/// slot: its state is not touched and its output row is zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateView {
    pub state: Tensor,
    pub len: usize,
    pub slots: usize,
    pub rows: KvRows,
    /// u32 positions of the rows (read for `PerRow` only).
    pub positions: Tensor,
    pub capacity: usize,
}

impl StateView {
    /// Checks that the rows of an `n`-row op stay inside the state. Panics otherwise: the
    /// graph code builds views, so a bad one is a programming error.
    pub fn check(&self, n: usize) {
        let need = match self.rows {
            KvRows::Slot(s) => s + 1,
            KvRows::PerRow => n,
        };
        assert!(
            need <= self.slots,
            "recurrent state of {} slots addressed as {:?} with {n} rows",
            self.slots,
            self.rows
        );
    }
}
