//! The error type of vkllm-models.

use std::path::PathBuf;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("config field `{field}`: {msg}")]
    Config { field: String, msg: String },
    #[error(
        "unsupported architecture `{arch}` (supported: {})",
        crate::family::supported_list()
    )]
    UnsupportedArch { arch: String },
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("weights: {0}")]
    Weights(#[from] vkllm_gguf::Error),
    #[error("tensor `{name}` is missing from the checkpoint")]
    MissingTensor { name: String },
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor `{name}` has type {ty}, which this backend cannot load")]
    UnsupportedTensorType { name: String, ty: String },
    #[error("vulkan: {0}")]
    Vulkan(#[from] vkllm_vk::Error),
    #[error("kernel: {0}")]
    Kernel(#[from] vkllm_kernels::Error),
    #[error(transparent)]
    Cpu(#[from] vkllm_cpu::CpuError),
    #[error("context full: position {pos} is past the {capacity}-token KV cache")]
    ContextFull { pos: usize, capacity: usize },
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error("empty input: at least one token is needed")]
    EmptyInput,
    #[error(
        "out of device memory: the {what} needs {} MiB, {} MiB are free (of {} MiB); lower the context or slots, or use an f16 KV cache",
        need / (1 << 20),
        available / (1 << 20),
        total / (1 << 20)
    )]
    OutOfMemory {
        what: String,
        need: u64,
        available: u64,
        total: u64,
    },
    #[error(
        "KV memory is full: {want} more pages of KV blocks wanted, {free} of the {limit} allowed \
         left"
    )]
    KvPagesFull {
        want: usize,
        free: usize,
        limit: usize,
    },
    #[error("unknown quantization `{name}` (known: {known})")]
    UnknownQuantScheme { name: String, known: String },
    #[error("quantizing tensor `{name}` to {ty}: {source}")]
    Quantize {
        name: String,
        ty: String,
        source: vkllm_cpu::CpuError,
    },
    #[error("unknown model shape `{name}` (known: {known})")]
    UnknownShape { name: String, known: String },
    #[error(
        "recurrent state is at position {expected}, a forward from {start} would skip or repeat tokens (restore a snapshot to go back)"
    )]
    StateOrder { expected: usize, start: usize },
    #[error("backend `{backend}` does not implement `{op}`")]
    UnsupportedOp { backend: String, op: &'static str },
    #[error("not supported: {0}")]
    Unsupported(String),
    #[error("capture {index} was made before its scratch buffers were replaced: capture it again")]
    CaptureStale { index: usize },
}
