//! One type for every loaded model: dense transformers ([`Model`], a KV cache) and the hybrid
//! (Gated DeltaNet) and MoE families ([`HybridModel`], KV caches and recurrent state), so a
//! session, a perplexity run or a command opens any checkpoint the same way.

use crate::KvTypes;
use crate::backend::Backend;
use crate::checkpoint::Checkpoint;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::forward::{KvCache, KvSharing, Logits, Model};
use crate::hybrid::{HybridModel, HybridState, RecurrentMarks};
use crate::progress::LoadProgress;
use crate::quantize::{QuantScheme, QuantizingSource};
use crate::weights::TensorSource;

/// A loaded model of any family.
pub enum AnyModel {
    Dense(Model),
    /// Hybrid (Gated DeltaNet) and MoE families.
    Hybrid(HybridModel),
}

/// The per-sequence state of an [`AnyModel`]: what its forward reads and writes.
pub enum AnyState {
    Kv(KvCache),
    Hybrid(HybridState),
}

impl AnyModel {
    /// Loads `cfg`'s weights from `src` onto `b` (prefill chunks of up to `chunk` tokens),
    /// reporting progress for dense models. Hybrid and MoE families load as stored.
    pub fn load<B: Backend>(
        cfg: ModelConfig,
        src: &dyn TensorSource,
        b: &mut B,
        chunk: usize,
        progress: &mut dyn FnMut(&LoadProgress),
    ) -> Result<AnyModel, ModelError> {
        if cfg.family.is_hybrid_or_moe() {
            Ok(AnyModel::Hybrid(HybridModel::load(cfg, src, b, chunk)?))
        } else {
            Ok(AnyModel::Dense(Model::load_with_progress(
                cfg, src, b, chunk, progress,
            )?))
        }
    }

    /// Loads `ck` onto `b`, quantized to `quant` when given (dense families only: a hybrid or
    /// MoE checkpoint with `quant` is [`ModelError::Unsupported`]).
    pub fn load_checkpoint<B: Backend>(
        ck: &Checkpoint,
        quant: Option<QuantScheme>,
        b: &mut B,
        chunk: usize,
        progress: &mut dyn FnMut(&LoadProgress),
    ) -> Result<AnyModel, ModelError> {
        let cfg = ck.config().clone();
        match quant {
            None => Self::load(cfg, ck.source(), b, chunk, progress),
            Some(_) if cfg.family.is_hybrid_or_moe() => Err(ModelError::Unsupported(format!(
                "quantizing at load (--quant) is not supported for the {} family",
                cfg.family.name()
            ))),
            Some(q) => {
                let src = QuantizingSource::new(ck.source(), &cfg, q).tied(ck.tied());
                Self::load(cfg, &src, b, chunk, progress)
            }
        }
    }

    /// The dense model, if this is one.
    pub fn as_dense(&self) -> Option<&Model> {
        match self {
            AnyModel::Dense(m) => Some(m),
            AnyModel::Hybrid(_) => None,
        }
    }

    pub fn cfg(&self) -> &ModelConfig {
        match self {
            AnyModel::Dense(m) => &m.cfg,
            AnyModel::Hybrid(m) => &m.cfg,
        }
    }

    /// A fresh state for one sequence of up to `ctx` positions, KV stored as `dtype` (for hybrid
    /// models the attention layers' KV; their recurrent states are f32).
    pub fn new_state<B: Backend>(
        &self,
        b: &mut B,
        ctx: usize,
        dtype: impl Into<KvTypes>,
    ) -> Result<AnyState, ModelError> {
        self.new_state_sharing(b, ctx, dtype, KvSharing::Copy)
    }

    /// [`AnyModel::new_state`] whose KV gives its prefix to other states as `sharing` says
    /// ([`KvCache::copy_prefix`]; hybrid models copy).
    pub fn new_state_sharing<B: Backend>(
        &self,
        b: &mut B,
        ctx: usize,
        dtype: impl Into<KvTypes>,
        sharing: KvSharing,
    ) -> Result<AnyState, ModelError> {
        match self {
            AnyModel::Dense(m) => Ok(AnyState::Kv(
                m.new_kv_slots_sharing(b, ctx, 1, dtype, sharing)?,
            )),
            AnyModel::Hybrid(m) => Ok(AnyState::Hybrid(m.new_state_kv(b, ctx, 1, dtype)?)),
        }
    }

    /// Runs `ids` at positions `start..` and returns the logits `want` asks for. A hybrid state
    /// continues from where it stopped (`start` must be the positions it has seen; see
    /// [`AnyState::reusable`] and [`AnyModel::rewind`]).
    pub fn forward<B: Backend>(
        &self,
        b: &mut B,
        st: &AnyState,
        ids: &[u32],
        start: usize,
        want: Logits,
    ) -> Result<Vec<f32>, ModelError> {
        match (self, st) {
            (AnyModel::Dense(m), AnyState::Kv(kv)) => m.forward(b, kv, ids, start, want),
            (AnyModel::Hybrid(m), AnyState::Hybrid(s)) => m.forward(b, s, ids, start, want),
            _ => Err(ModelError::Unsupported(
                "a state of another model kind".to_string(),
            )),
        }
    }

    /// Prepares `st` for a forward from position `to` (the caller keeps positions `..to`): a
    /// hybrid state cannot go back, so `to` must be 0 (it is reset) or the positions it holds.
    pub fn rewind<B: Backend>(
        &self,
        b: &mut B,
        st: &AnyState,
        to: usize,
    ) -> Result<(), ModelError> {
        match (self, st) {
            (AnyModel::Hybrid(m), AnyState::Hybrid(s)) => {
                let held = s.next[0].get();
                if to == 0 {
                    m.reset_slot(b, s, 0)
                } else if to == held {
                    Ok(())
                } else {
                    Err(ModelError::Unsupported(format!(
                        "rewinding a recurrent state from {held} to {to} positions"
                    )))
                }
            }
            _ => Ok(()),
        }
    }
}

/// Prefix reuse with recurrent marks ([`RecurrentMarks`]): a hybrid sequence may also restart
/// from the end of its last prompt. Dense states have no marks (`None` everywhere).
impl AnyModel {
    /// `per_slot` marks for a one-sequence hybrid state (`None` for a dense one, or without
    /// memory for them: reuse then keeps to whole-history continuations).
    pub fn new_marks<B: Backend>(
        &self,
        b: &mut B,
        st: &AnyState,
        per_slot: usize,
    ) -> Option<RecurrentMarks> {
        match (self, st) {
            (AnyModel::Hybrid(m), AnyState::Hybrid(s)) => m.new_marks_per_slot(b, s, per_slot).ok(),
            _ => None,
        }
    }

    /// `forward` of `ids` from `start` (the last token's logits) that, for a hybrid state with
    /// room for more than one mark, also marks the state at `branch` on the way (a position
    /// inside the run: where the prompt leaves a prefix another conversation holds).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_marking<B: Backend>(
        &self,
        b: &mut B,
        st: &AnyState,
        marks: Option<&mut RecurrentMarks>,
        ids: &[u32],
        start: usize,
        branch: Option<usize>,
    ) -> Result<Vec<f32>, ModelError> {
        let split = branch
            .filter(|&p| p > start && p < start + ids.len())
            .filter(|_| marks.as_ref().is_some_and(|m| m.per_slot() > 1));
        if let Some(p) = split {
            self.forward(b, st, &ids[..p - start], start, Logits::Last)?;
            self.mark(b, st, marks)?;
            return self.forward(b, st, &ids[p - start..], p, Logits::Last);
        }
        self.forward(b, st, ids, start, Logits::Last)
    }

    /// [`AnyModel::rewind`] that can also go back to the mark: restores it when `to` is the
    /// marked position and the state holds a different one; a reset forgets the mark.
    pub fn resume<B: Backend>(
        &self,
        b: &mut B,
        st: &AnyState,
        marks: Option<&mut RecurrentMarks>,
        to: usize,
    ) -> Result<(), ModelError> {
        if let (AnyModel::Hybrid(m), AnyState::Hybrid(s), Some(marks)) = (self, st, marks) {
            if to > 0 && to != s.next[0].get() && marks.has(0, to) {
                m.restore_mark(b, s, 0, to, marks)?;
                return Ok(());
            }
            if to == 0 {
                marks.forget(0);
            }
        }
        self.rewind(b, st, to)
    }

    /// Marks the state's current position (the end of a prompt) for a later [`resume`].
    ///
    /// [`resume`]: AnyModel::resume
    pub fn mark<B: Backend>(
        &self,
        b: &mut B,
        st: &AnyState,
        marks: Option<&mut RecurrentMarks>,
    ) -> Result<(), ModelError> {
        match (self, st, marks) {
            (AnyModel::Hybrid(m), AnyState::Hybrid(s), Some(marks)) => m.mark_slot(b, s, 0, marks),
            _ => Ok(()),
        }
    }
}

impl AnyState {
    /// [`AnyState::reusable`], or the mark's position when longer and usable for a prompt of
    /// `len` tokens sharing `common` with the history (the last prompt token is always
    /// recomputed).
    pub fn reusable_marked(
        &self,
        marks: Option<&RecurrentMarks>,
        written: usize,
        held: usize,
        common: usize,
        len: usize,
    ) -> usize {
        let marked = marks
            .and_then(|m| m.best(0, common.min(len.saturating_sub(1))))
            .unwrap_or(0);
        self.reusable(written, held, common.min(len.saturating_sub(1)))
            .max(marked)
    }

    /// Positions a sequence can hold.
    pub fn capacity(&self) -> usize {
        match self {
            AnyState::Kv(kv) => kv.capacity,
            AnyState::Hybrid(s) => s.capacity,
        }
    }

    /// How many of the `common` leading positions a new forward may keep, of the `held` the
    /// state holds (the furthest position written was `written`): a KV cache keeps them unless a
    /// sliding-window ring lost what they need ([`KvCache::reusable`]); a recurrent state only
    /// when it holds exactly those positions (it cannot be cut back), else none.
    pub fn reusable(&self, written: usize, held: usize, common: usize) -> usize {
        match self {
            AnyState::Kv(kv) => kv.reusable(written, common),
            AnyState::Hybrid(_) if common == held => common,
            AnyState::Hybrid(_) => 0,
        }
    }
}

impl From<Model> for AnyModel {
    fn from(m: Model) -> Self {
        AnyModel::Dense(m)
    }
}

impl From<HybridModel> for AnyModel {
    fn from(m: HybridModel) -> Self {
        AnyModel::Hybrid(m)
    }
}
