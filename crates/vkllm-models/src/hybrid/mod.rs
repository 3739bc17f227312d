//! Hybrid (Gated DeltaNet + gated attention) and Mixture-of-Experts models: Qwen3.5 / Qwen3.6,
//! Qwen3.5 MoE, Qwen3-Next and Qwen3 MoE.

pub mod config;
pub mod forward;
pub mod marks;
pub mod snapshot;
pub mod weights;

pub use config::{HybridConfig, Mixer, MoeConfig};
pub use forward::{HybridModel, HybridState, LayerState};
pub use marks::RecurrentMarks;
pub use snapshot::{HostSnapshot, Snapshot};
pub use weights::HybridWeights;
