//! # vkllm-vk — layer 3: the Vulkan runtime
//!
//! Runs the `vkllm-kernels` set on any Vulkan 1.1+ device (ash + vk-mem):
//! - [`Instance`] / [`list_devices`] / [`DeviceInfo`]: devices and their capabilities; selection
//!   by `VKLLM_DEVICE` (index or name substring) or the best discrete GPU, an absent device being a
//!   typed error that lists those present ([`Error::DeviceNotFound`]);
//! - [`Device`]: own or attached ([`Device::from_raw`], with the [`HostFeatures`] the host
//!   enabled) device, vk-mem allocator, pipelines
//!   specialised per (kernel, overrides) through a `VkPipelineCache` persisted in the user's
//!   cache directory, submissions waited with a timeout;
//! - [`Buffer`] / [`BufSlice`] / [`Tensor`]: memory, kernel arguments, weights split by rows to
//!   respect `maxStorageBufferRange`;
//! - [`Recorder`] / [`Recording`] / [`RecordingCache`]: dispatches batched into one command
//!   buffer with barriers only where data dependencies need them, replayable, optionally timed
//!   per dispatch with timestamp queries;
//! - validation: `VKLLM_VALIDATE=1` (or [`Validation::On`]) enables the Khronos layer with
//!   synchronization validation and records its messages ([`Device::check_validation`]);
//! - [`bench`](mod@bench): matvec/matmul bandwidth and throughput by timestamps.

mod attach;
mod buffer;
mod coop_dequant;
mod coop_split;
mod coopmat;
mod decode_route;
mod device;
mod error;
mod info;
mod instance;
mod matmul_cm2;
mod matmul_glu;
mod matmul_group;
mod matmul_narrow;
mod matvec_q8x;
mod paged;
mod pipeline;
mod pipeline_stats;
mod recorder;
mod recycle;
mod tensor;
mod tuning;

pub mod bench;

pub use attach::HostFeatures;
pub use buffer::{BufSlice, Buffer, MemoryKind};
pub use coop_dequant::{DEQUANT_SLOTS, DequantPolicy};
pub use coop_split::{
    DEFAULT_BK as COOP_DEFAULT_BK, SLOTS as COOP_SPLIT_SLOTS, SPLIT_TARGET_FLOAT,
    SPLIT_TARGET_QUANT, SplitSlots, auto_config as coop_auto_config,
    direct_wanted as coop_direct_wanted, half_x_wanted as coop_half_x_wanted,
    split_target as coop_split_target, with_split as coop_with_split,
};
pub use coopmat::{CoopComponent, CoopFlexShape, CoopMatShape};
pub use decode_route::{decode_columns_max, fused_matvec_impl, moe_q8a_runs};
pub use device::{Device, DeviceOptions};
pub use error::{Error, Result};
pub use info::{DeviceChoice, DeviceInfo, DeviceKind, Heap, Limits, list_devices, select};
pub use instance::{
    AllowedMessage, Instance, VALIDATION_ALLOW_LIST, Validation, ValidationMessage,
};
pub use matmul_glu::glu_config as coop_glu_config;
pub use matmul_group::{group_config as coop_group_config, group_step as coop_group_step};
pub use matmul_narrow::narrow_config;
pub use paged::{PageOwn, PageShare, PoolPages};
pub use pipeline::{Pipeline, PipelineCacheMode};
pub use recorder::{DispatchTiming, Recorder, Recording, RecordingCache};
pub use recycle::MAX_SPARES;
pub use tensor::{
    COOP_MIN_GROUPS, COOP_MIN_N, MatmulKernel, MatvecPlan, Tensor, TensorPart,
    default_matvec_layout,
};
pub use tuning::{
    CoopGroup, DecodeAttn, F32KvPrefill, PrefillAttn, SPLIT_SUBMIT_FIRST, SplitK, TUNING_KEYS,
    TuneError, Tuning, seed_from_env, tuning_from_env,
};
pub use vkllm_kernels as kernels;
