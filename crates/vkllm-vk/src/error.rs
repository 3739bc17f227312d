//! The crate's error type: every Vulkan failure, typed.

use ash::vk;

/// Errors of the Vulkan runtime. Nothing in this crate panics on a driver or user error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Tune(#[from] crate::tuning::TuneError),
    #[error(
        "the Vulkan loader (libvulkan.so.1) could not be loaded: {0}; install it (Debian: \
         libvulkan1) and a driver (mesa-vulkan-drivers gives the CPU driver lavapipe)"
    )]
    NoLoader(String),
    #[error(
        "no Vulkan device found (is a driver installed? Debian: mesa-vulkan-drivers gives \
         lavapipe; `vulkaninfo --summary` lists what the loader sees)"
    )]
    NoDevices,
    #[error("Vulkan device `{requested}` not found; available devices:\n{}", list(.available))]
    DeviceNotFound {
        requested: String,
        available: Vec<String>,
    },
    #[error(
        "validation was requested but VK_LAYER_KHRONOS_validation is not installed (Debian: \
         vulkan-validationlayers; or point VK_LAYER_PATH at it)"
    )]
    ValidationUnavailable,
    #[error("device `{device}` lacks {feature}")]
    MissingFeature { device: String, feature: String },
    #[error("the Vulkan device was lost during {during}")]
    DeviceLost { during: &'static str },
    #[error("out of device memory allocating {bytes} bytes for {what}")]
    OutOfDeviceMemory { what: &'static str, bytes: u64 },
    #[error("out of host memory in {call}")]
    OutOfHostMemory { call: &'static str },
    #[error("the page budget is spent: {want} pages wanted, {free} of {limit} left")]
    PageBudget {
        want: usize,
        free: usize,
        limit: usize,
    },
    #[error("GPU work did not finish within {ms} ms (fence wait timed out)")]
    Timeout { ms: u64 },
    #[error("{call} failed: {result}")]
    Vk {
        call: &'static str,
        result: vk::Result,
    },
    #[error(transparent)]
    Kernel(#[from] vkllm_kernels::Error),
    #[error("{what}: offset {offset} is not a multiple of the device's alignment {align}")]
    Misaligned {
        what: String,
        offset: u64,
        align: u64,
    },
    #[error("{what}: {len} bytes exceed the device's maxStorageBufferRange {max} (split it)")]
    BufferRange { what: String, len: u64, max: u64 },
    #[error("{what}: range {offset}+{len} is outside the buffer of {size} bytes")]
    OutOfBounds {
        what: String,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("{0}")]
    Shape(String),
    /// A fused matvec (several weights, or a gated epilogue) that cannot be one dispatch: mixed
    /// weight types or column counts, a row-split weight, or a shape the fast kernel does not
    /// take. The caller records the parts as separate matvecs instead.
    #[error("matvec over {weights}: not one fused dispatch: {reason}")]
    Unfusable { weights: String, reason: String },
    #[error("the Vulkan validation layer reported {} message(s):\n{}", .0.len(), list(.0))]
    Validation(Vec<String>),
    #[error("recording is finished or invalid: {0}")]
    Recording(&'static str),
    #[error("pipeline cache file {path}: {message}")]
    PipelineCacheIo { path: String, message: String },
}

fn list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("  {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Maps a `vk::Result` from `call` to the typed error.
pub(crate) fn vk_err(call: &'static str) -> impl Fn(vk::Result) -> Error {
    move |result| match result {
        vk::Result::ERROR_DEVICE_LOST => Error::DeviceLost { during: call },
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => Error::OutOfDeviceMemory {
            what: call,
            bytes: 0,
        },
        vk::Result::ERROR_OUT_OF_HOST_MEMORY => Error::OutOfHostMemory { call },
        result => Error::Vk { call, result },
    }
}

pub type Result<T> = std::result::Result<T, Error>;
