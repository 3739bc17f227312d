//! Progress of weight loading: [`Model::load_with_progress`] reports each tensor as it is read
//! and uploaded, for progress bars in front ends.
//!
//! It wraps the [`TensorSource`] rather than the loader, so the loading code stays as it is:
//! the loader asks the source for each tensor once (a matrix may be asked twice, raw then f32,
//! under the same name), and a tensor counts as done when the loader asks for the next one (its
//! upload has finished by then) or when loading returns.

use std::cell::RefCell;
use std::collections::HashSet;

use crate::backend::Backend;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::forward::Model;
use crate::weights::{HostTensor, RawTensor, TensorSource};

/// Where loading stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadProgress {
    /// Tensors read and uploaded so far.
    pub done: usize,
    /// Tensors the config calls for (an absent optional one, such as a tied `lm_head`, is
    /// counted as done when it is looked for).
    pub total: usize,
    /// The Hugging Face name of the tensor being loaded now (empty once done).
    pub current: String,
}

/// How many tensors [`Weights::load`](crate::Weights::load) looks up for `cfg`.
pub fn tensor_count(cfg: &ModelConfig) -> usize {
    let per_layer = 1 // input norm
        + 4 // q, k, v, o
        + if cfg.qkv_bias { 3 } else { 0 }
        + usize::from(cfg.o_bias)
        + if cfg.qk_norm { 2 } else { 0 }
        + if cfg.sandwich_norms { 2 } else { 0 }
        + 1 // pre-MLP norm
        + 3; // gate, up, down
    // embedding, final norm, lm_head (looked up even when tied)
    3 + cfg.n_layers * per_layer
}

struct Counting<'a> {
    inner: &'a dyn TensorSource,
    seen: RefCell<HashSet<String>>,
    total: usize,
    report: RefCell<&'a mut dyn FnMut(&LoadProgress)>,
}

impl Counting<'_> {
    fn note(&self, name: &str) {
        let mut seen = self.seen.borrow_mut();
        if seen.contains(name) {
            return;
        }
        let done = seen.len().min(self.total);
        seen.insert(name.to_string());
        drop(seen);
        (self.report.borrow_mut())(&LoadProgress {
            done,
            total: self.total,
            current: name.to_string(),
        });
    }
}

impl TensorSource for Counting<'_> {
    fn tensor_f32(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        self.note(name);
        self.inner.tensor_f32(name)
    }

    fn tensor_raw(&self, name: &str) -> Result<Option<RawTensor<'_>>, ModelError> {
        self.note(name);
        self.inner.tensor_raw(name)
    }
}

impl Model {
    /// [`Model::load`] that calls `on_progress` before each tensor is loaded and once at the
    /// end (with `done == total`).
    pub fn load_with_progress<B: Backend>(
        cfg: ModelConfig,
        src: &dyn TensorSource,
        b: &mut B,
        chunk: usize,
        on_progress: &mut dyn FnMut(&LoadProgress),
    ) -> Result<Self, ModelError> {
        let total = tensor_count(&cfg);
        let counting = Counting {
            inner: src,
            seen: RefCell::new(HashSet::new()),
            total,
            report: RefCell::new(on_progress),
        };
        let model = Model::load(cfg, &counting, b, chunk)?;
        (counting.report.into_inner())(&LoadProgress {
            done: total,
            total,
            current: String::new(),
        });
        Ok(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuBackend;
    use crate::fixtures::Fixture;

    /// Every fixture family: the count matches the tensors the loader asks for, progress only
    /// goes up, ends at total, and the model equals one loaded without progress.
    #[test]
    fn progress_counts_every_tensor_of_every_family() {
        for family in crate::Family::ALL.map(crate::Family::name) {
            let fx = Fixture::load(family).expect("fixture");
            let mut events = Vec::new();
            let mut b = CpuBackend::new();
            let model =
                Model::load_with_progress(fx.config.clone(), &fx.weights, &mut b, 16, &mut |p| {
                    events.push(p.clone())
                })
                .expect("load");
            let total = tensor_count(&fx.config);
            // The file holds exactly the tensors the loader reads; the loader also looks up
            // lm_head when the file has none (tied embeddings).
            let in_file = fx.weights.names().count();
            let want = in_file + usize::from(!has_lm_head(&fx));
            assert_eq!(total, want, "{family}");
            // One event per tensor looked up, then the final one.
            assert_eq!(events.len(), total + 1, "{family}");
            for (i, e) in events.iter().enumerate() {
                assert_eq!(e.done, i, "{family}: event {i}");
                assert_eq!(e.total, total);
            }
            let last = events.last().expect("events");
            assert!(last.current.is_empty());
            assert_eq!(events[0].current, "model.embed_tokens.weight");

            let mut b2 = CpuBackend::new();
            let plain = Model::load(fx.config.clone(), &fx.weights, &mut b2, 16).expect("load");
            let p = fx.prompt("short").expect("golden");
            let kv1 = model.new_kv(&mut b, 64).expect("kv");
            let kv2 = plain.new_kv(&mut b2, 64).expect("kv");
            let a = model
                .forward(&mut b, &kv1, &p.ids, 0, crate::Logits::Last)
                .expect("forward");
            let c = plain
                .forward(&mut b2, &kv2, &p.ids, 0, crate::Logits::Last)
                .expect("forward");
            assert_eq!(a, c, "{family}");
        }
    }

    fn has_lm_head(fx: &Fixture) -> bool {
        fx.weights.names().any(|n| n == "lm_head.weight")
    }
}
