//! Compute pipelines: naga-compiled SPIR-V per (kernel, overrides), created through a
//! `VkPipelineCache` persisted in the user's cache directory.

use std::path::PathBuf;
use std::sync::Arc;

use ash::vk;
use vkllm_kernels::{KernelSpec, Overrides, SpirvOptions};

use crate::Error;
use crate::device::Device;
use crate::error::{Result, vk_err};
use crate::info::DeviceInfo;
use vkllm_gguf::cache_dir;

/// Where the pipeline cache lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipelineCacheMode {
    /// Under [`vkllm_gguf::cache_dir`].
    UserCacheDir,
    /// This file.
    File(PathBuf),
    /// In memory only.
    Off,
}

pub(crate) struct PipelineCache {
    pub(crate) raw: vk::PipelineCache,
    path: Option<PathBuf>,
}

impl PipelineCache {
    pub(crate) fn open(
        dev: &ash::Device,
        info: &DeviceInfo,
        mode: &PipelineCacheMode,
    ) -> Result<Self> {
        let path = match mode {
            PipelineCacheMode::Off => None,
            PipelineCacheMode::File(p) => Some(p.clone()),
            PipelineCacheMode::UserCacheDir => Some(cache_dir().join(format!(
                    "pipelines-{:04x}-{:04x}-{}.bin",
                    info.vendor_id,
                    info.device_id,
                    info.driver
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                        .collect::<String>()
            ))),
        };
        // A stale or foreign file is harmless: the driver checks the header and ignores data
        // that is not its own; if creation still fails we start empty.
        let data = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .unwrap_or_default();
        let create = |bytes: &[u8]| {
            let ci = vk::PipelineCacheCreateInfo::default().initial_data(bytes);
            // SAFETY: valid device, data slice outlives the call.
            unsafe { dev.create_pipeline_cache(&ci, None) }
        };
        let raw = match create(&data) {
            Ok(c) => c,
            Err(_) => create(&[]).map_err(vk_err("vkCreatePipelineCache"))?,
        };
        Ok(PipelineCache { raw, path })
    }

    pub(crate) fn save(&self, dev: &ash::Device) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        // SAFETY: valid cache.
        let data = unsafe { dev.get_pipeline_cache_data(self.raw) }
            .map_err(vk_err("vkGetPipelineCacheData"))?;
        let io = |e: std::io::Error| Error::PipelineCacheIo {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &data).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// # Safety
    /// No pipeline creation may be in flight.
    pub(crate) unsafe fn save_and_destroy(&mut self, dev: &ash::Device) {
        // Best effort at teardown: a read-only cache dir must not turn a drop into a failure.
        let _ = self.save(dev);
        unsafe { dev.destroy_pipeline_cache(self.raw, None) };
        self.raw = vk::PipelineCache::null();
    }
}

/// One specialised compute pipeline with its layouts.
pub struct Pipeline {
    pub(crate) raw: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) kernel: &'static KernelSpec,
}

impl Pipeline {
    pub fn kernel(&self) -> &'static KernelSpec {
        self.kernel
    }

    /// # Safety
    /// The pipeline must not be in use by any pending command buffer.
    pub(crate) unsafe fn destroy(&self, dev: &ash::Device) {
        unsafe {
            dev.destroy_pipeline(self.raw, None);
            dev.destroy_pipeline_layout(self.layout, None);
            dev.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

impl Device {
    /// The pipeline of `kernel` specialised with `overrides`, compiled on first use.
    pub fn pipeline(
        &self,
        kernel: &'static KernelSpec,
        overrides: &Overrides,
    ) -> Result<Arc<Pipeline>> {
        let key = (kernel.name, overrides.clone());
        let poisoned = |_| Error::Recording("pipeline map lock poisoned");
        if let Some(p) = self.shared.pipelines.lock().map_err(poisoned)?.get(&key) {
            return Ok(p.clone());
        }
        let opts = SpirvOptions {
            workgroup_coherent: self.tuning().wg_coherent,
            workgroup_coherent_all: self.tuning().wg_coherent_all,
            prune_dead_branches: self.tuning().prune,
            ..SpirvOptions::default()
        };
        let spirv = vkllm_kernels::compile_spirv(kernel, overrides, opts)?;
        let p = Arc::new(self.create_pipeline(kernel, &spirv)?);
        if let Some(ext) = &self.shared.stats {
            crate::pipeline_stats::report(ext, p.raw, kernel.name, overrides);
        }
        let mut map = self.shared.pipelines.lock().map_err(poisoned)?;
        if let Some(existing) = map.get(&key) {
            // Another thread won the race: keep theirs.
            // SAFETY: ours was never used.
            unsafe { p.destroy(&self.shared.raw) };
            return Ok(existing.clone());
        }
        map.insert(key, p.clone());
        Ok(p)
    }

    /// Pipelines this device has created so far (one per kernel and overrides).
    pub fn pipelines_created(&self) -> usize {
        self.shared.pipelines.lock().map_or(0, |m| m.len())
    }

    /// Whether this device has created a pipeline of the kernel named `name` (any overrides).
    pub fn has_pipeline(&self, name: &str) -> bool {
        self.shared
            .pipelines
            .lock()
            .is_ok_and(|m| m.keys().any(|(n, _)| *n == name))
    }

    fn create_pipeline(&self, kernel: &'static KernelSpec, spirv: &[u32]) -> Result<Pipeline> {
        let dev = &self.shared.raw;
        let bindings: Vec<_> = (0..kernel.bindings.len() as u32)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        // SAFETY: valid device; all create infos outlive their calls; objects are destroyed on
        // the error paths.
        unsafe {
            let set_layout = dev
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .map_err(vk_err("vkCreateDescriptorSetLayout"))?;
            let set_layouts = [set_layout];
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size(kernel.push_size)];
            let mut li = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
            if kernel.push_size > 0 {
                li = li.push_constant_ranges(&ranges);
            }
            let layout = match dev.create_pipeline_layout(&li, None) {
                Ok(l) => l,
                Err(r) => {
                    dev.destroy_descriptor_set_layout(set_layout, None);
                    return Err(vk_err("vkCreatePipelineLayout")(r));
                }
            };
            let module = match dev
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(spirv), None)
            {
                Ok(m) => m,
                Err(r) => {
                    dev.destroy_pipeline_layout(layout, None);
                    dev.destroy_descriptor_set_layout(set_layout, None);
                    return Err(vk_err("vkCreateShaderModule")(r));
                }
            };
            let entry = std::ffi::CString::new(kernel.entry).map_err(|_| {
                Error::Shape(format!("kernel {}: entry name has a NUL", kernel.name))
            })?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(&entry);
            let flags = match self.shared.stats {
                Some(_) => vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR,
                None => vk::PipelineCreateFlags::empty(),
            };
            let ci = [vk::ComputePipelineCreateInfo::default()
                .flags(flags)
                .stage(stage)
                .layout(layout)];
            let res = dev.create_compute_pipelines(self.shared.cache.raw, &ci, None);
            dev.destroy_shader_module(module, None);
            match res {
                Ok(p) => Ok(Pipeline {
                    raw: p[0],
                    layout,
                    set_layout,
                    kernel,
                }),
                Err((_, r)) => {
                    dev.destroy_pipeline_layout(layout, None);
                    dev.destroy_descriptor_set_layout(set_layout, None);
                    Err(vk_err("vkCreateComputePipelines")(r))
                }
            }
        }
    }
}
