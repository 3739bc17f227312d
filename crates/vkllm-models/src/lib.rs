//! # vkllm-models — layer 4: model families
//!
//! Reads a checkpoint's config into a [`ModelConfig`], loads its weights (plain structs of
//! backend tensors, [`Weights`]) and runs the forward graph ([`Model::forward`]), written once
//! over the [`Backend`] ops. The CPU backend ([`CpuBackend`]) executes them with the `vkllm-cpu`
//! reference ops and is checked against Hugging Face transformers goldens; the Vulkan backend
//! runs the same graph on the GPU.
//!
//! Feature `test-support`: the test fixtures (`fixtures`: tiny random models of every family
//! with their transformers goldens) and the model parity rows (`parity`), for tests and `cargo
//! xtask parity`.

mod any_model;
pub mod backend;
mod blocks;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod family;
#[cfg(feature = "test-support")]
pub mod fixtures;
pub mod forward;
pub mod gguf;
mod gguf_hybrid;
pub mod hybrid;
pub mod key_centre;
mod kv_cache;
mod kv_pages;
#[cfg(feature = "test-support")]
pub mod parity;
pub mod perplexity;
pub mod progress;
pub mod quantize;
pub mod safetensors;
pub mod synth;
pub mod weights;

pub use any_model::{AnyModel, AnyState};
pub use backend::cpu::CpuBackend;
pub use backend::vulkan::{
    ProfiledDispatch, SlotDecoderConfig, SlotDecoderId, SlotGraph, SlotStart, SlotSteps,
    TokenLogprobs, VulkanBackend,
};
pub use backend::{
    Backend, CaptureId, KeyCentre, KvRows, KvType, KvTypes, KvView, Linear, NormMlp, NormQkv,
    RopeKv, Tensor, norm_gated_mlp_unfused, norm_qkv_unfused, rope_kv_unfused,
};
pub use checkpoint::{Checkpoint, load_checkpoint};
pub use config::{LayerConfig, ModelConfig};
pub use error::ModelError;
pub use family::{Activation, FAMILIES, Family, FamilySpec};
pub use forward::{
    DEFAULT_CHUNK, KV_ROW_ALIGN, KvCache, KvLayer, KvSharing, LOGITS_ROWS, Logits, Model,
    SlicedCaptures,
};
pub use kv_pages::KvPagePlan;
pub use progress::LoadProgress;
pub use quantize::{QuantScheme, QuantizingSource};
pub use weights::{HostTensor, RawTensor, TensorSource, Weights};
