//! The logical device: queue, memory allocator, pipelines, submission with bounded waits.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;

use crate::Error;
use crate::attach::HostFeatures;
use crate::coopmat::{self, Coop2Features, CoopFeatures};
use crate::error::{Result, vk_err};
use crate::info::{DeviceChoice, DeviceInfo, physical_devices, query, select};

/// Default [`Device::fence_spin`] on GPUs: a submit polls its fence for up to this long before
/// it sleeps in the driver (prefill chunks and multi-step decode submits finish well within it).
pub const FENCE_SPIN: Duration = Duration::from_millis(50);
use crate::instance::{Instance, Validation, ValidationMessage};
use crate::pipeline::{Pipeline, PipelineCache, PipelineCacheMode};
use crate::tuning::Tuning;

/// How to open a device.
#[derive(Clone, Debug)]
pub struct DeviceOptions {
    pub choice: DeviceChoice,
    pub validation: Validation,
    pub pipeline_cache: PipelineCacheMode,
    /// Longest wait for submitted work before [`Error::Timeout`].
    pub fence_timeout: Duration,
    /// Upper bound on one buffer (and so one tensor part), below the device's own limits; tests
    /// use a small value to exercise split tensors.
    pub max_buffer_bytes: Option<u64>,
    /// Kernel and launch choices (`tuning.coopmat` also decides whether the cooperative-matrix
    /// features are enabled).
    pub tuning: Tuning,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            choice: DeviceChoice::Auto,
            validation: Validation::Off,
            pipeline_cache: PipelineCacheMode::UserCacheDir,
            fence_timeout: Duration::from_secs(120),
            max_buffer_bytes: None,
            tuning: Tuning::default(),
        }
    }
}

impl DeviceOptions {
    /// Defaults with `VKLLM_DEVICE`, `VKLLM_VALIDATE` and `VKLLM_TUNE` applied.
    pub fn from_env() -> Result<Self> {
        Ok(DeviceOptions {
            choice: DeviceChoice::from_env(),
            validation: Validation::from_env(),
            tuning: crate::tuning::tuning_from_env()?,
            ..Default::default()
        })
    }
}

pub(crate) struct Shared {
    pub(crate) instance: Instance,
    pub(crate) physical: vk::PhysicalDevice,
    pub(crate) raw: ash::Device,
    owned: bool,
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    pub(crate) allocator: ManuallyDrop<vk_mem::Allocator>,
    pub(crate) cache: PipelineCache,
    pub(crate) pipelines: Mutex<HashMap<(&'static str, vkllm_kernels::Overrides), Arc<Pipeline>>>,
    pub(crate) info: DeviceInfo,
    pub(crate) fence_timeout: Duration,
    pub(crate) tuning: Tuning,
    pub(crate) max_part_bytes: u64,
    /// The cooperative-matrix features were enabled at creation (`matmul_coop` may run).
    pub(crate) coopmat: bool,
    /// VK_NV_cooperative_matrix2 was enabled at creation (the cm2 kernels may run).
    pub(crate) coopmat2: bool,
    /// Integer dot products were enabled at creation (`matvec_q8a` may run).
    pub(crate) int8_dot: bool,
    /// Pipeline statistics are reported (`pipeline_stats`).
    pub(crate) stats: Option<ash::khr::pipeline_executable_properties::Device>,
    /// The features enabled on the device (by vkllm, or by the host that lent it).
    pub(crate) enabled: HostFeatures,
    /// What vkllm would use on this device but an attaching host did not enable.
    pub(crate) missing: Vec<String>,
    /// Objects of finished recordings kept for the next recorder (`recycle`).
    pub(crate) spares: crate::recycle::Spares,
    /// vkllm's timeline semaphore (when timeline semaphores are enabled): every submission
    /// signals the next value; the last one submitted.
    timeline: Option<(vk::Semaphore, AtomicU64)>,
    /// A host timeline semaphore and value every submission waits for on the GPU.
    host_wait: Mutex<Option<(vk::Semaphore, u64)>>,
    /// Sparse, aliased buffers were enabled (paged buffers may be made).
    pub(crate) paged: bool,
    /// Pages of paged buffers (`paged.rs`).
    pub(crate) pages: Mutex<crate::paged::PagePool>,
    /// The weights' resident f16 copies (coop_dequant.rs, tuning `dequant_keep_mb`).
    pub(crate) kept_f16: crate::coop_dequant::KeptCopies,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: everything below was created from `raw`; Buffers and Recordings hold an Arc to
        // this struct, so none is alive any more.
        unsafe {
            let _ = self.raw.device_wait_idle();
            self.spares.clear(&self.raw);
            if let Ok(mut p) = self.pipelines.lock() {
                for (_, pl) in p.drain() {
                    pl.destroy(&self.raw);
                }
            }
            self.cache.save_and_destroy(&self.raw);
            if let Some((sem, _)) = &self.timeline {
                self.raw.destroy_semaphore(*sem, None);
            }
            if let Ok(mut p) = self.pages.lock() {
                p.release(&self.allocator);
            }
            ManuallyDrop::drop(&mut self.allocator);
            if self.owned {
                self.raw.destroy_device(None);
            }
        }
    }
}

/// A Vulkan device ready to run kernels. Cheap to clone (shared).
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<Shared>,
}

impl Device {
    /// Opens the device chosen by `opts` (its own instance).
    pub fn new(opts: &DeviceOptions) -> Result<Self> {
        let instance = Instance::new(opts.validation)?;
        let devices = physical_devices(&instance)?;
        let infos: Vec<DeviceInfo> = devices.iter().map(|(_, i)| i.clone()).collect();
        let pos = select(&infos, &opts.choice)?;
        let (pd, info) = devices[pos].clone();
        check_usable(&info)?;
        let family = info
            .compute_queue_family
            .ok_or_else(|| Error::MissingFeature {
                device: info.name.clone(),
                feature: "a compute queue".into(),
            })?;
        let prio = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&prio)];
        let use_coop = opts.tuning.coopmat && info.supports_coopmat_f16();
        let use_stats = opts.tuning.pipeline_stats
            && info.has_extension(&crate::pipeline_stats::EXTENSION.to_string_lossy());
        let use_coop2 = use_coop && info.cooperative_matrix2;
        let mut f = CoopFeatures::enabled();
        let mut f2 = Coop2Features::enabled();
        let mut exts = Vec::new();
        if use_coop {
            exts.push(coopmat::EXTENSION.as_ptr());
        }
        if use_coop2 {
            exts.push(coopmat::EXTENSION_2.as_ptr());
        }
        if use_stats {
            exts.push(crate::pipeline_stats::EXTENSION.as_ptr());
        }
        let mut stats_feature =
            vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
                .pipeline_executable_info(true);
        // Sparse, aliased buffers: KV pages shared in place between sequences (`paged.rs`).
        let use_paged = info.sparse_aliased && opts.tuning.sparse;
        let base = vk::PhysicalDeviceFeatures::default()
            .sparse_binding(use_paged)
            .sparse_residency_buffer(use_paged)
            .sparse_residency_aliased(use_paged);
        let mut dinfo = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&exts)
            .enabled_features(&base);
        if use_stats {
            dinfo = dinfo.push_next(&mut stats_feature);
        }
        if use_coop {
            dinfo = dinfo
                .push_next(&mut f.storage16)
                .push_next(&mut f.f16)
                .push_next(&mut f.memory_model)
                .push_next(&mut f.coop);
        }
        if use_coop2 {
            dinfo = dinfo.push_next(&mut f2);
        }
        // Integer dot products (core in Vulkan 1.3): dot4I8Packed in matvec_q8a.wgsl.
        let use_dot = info.int8_dot_product && info.api_version >= (1, 3, 0);
        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(true);
        if use_dot {
            dinfo = dinfo.push_next(&mut dot);
        }
        let use_timeline = info.timeline_semaphore;
        let mut timeline =
            vk::PhysicalDeviceTimelineSemaphoreFeatures::default().timeline_semaphore(true);
        if use_timeline {
            dinfo = dinfo.push_next(&mut timeline);
        }
        // SAFETY: `pd` belongs to `instance`; create info pointers outlive the call; the
        // features and extension enabled were reported supported by `info`.
        let raw = unsafe { instance.raw.create_device(pd, &dinfo, None) }
            .map_err(vk_err("vkCreateDevice"))?;
        // SAFETY: the queue family/index were requested above.
        let queue = unsafe { raw.get_device_queue(family, 0) };
        let stats = use_stats
            .then(|| ash::khr::pipeline_executable_properties::Device::new(&instance.raw, &raw));
        let mut enabled = HostFeatures::own(use_coop, use_dot, use_timeline);
        if use_coop2 {
            let name = coopmat::EXTENSION_2.to_string_lossy().into_owned();
            enabled.extensions.push(name);
        }
        Self::assemble(
            instance,
            pd,
            raw,
            true,
            queue,
            family,
            info,
            opts,
            (enabled, Vec::new()),
            stats,
        )
    }

    /// Whether prefill matmuls may run on cooperative matrices (`matmul_coop.wgsl`): the device
    /// offers them and they were enabled at creation ([`Tuning::coopmat`]) or by the host that
    /// lent it.
    pub fn coopmat(&self) -> bool {
        self.shared.coopmat
    }

    /// Whether the workgroup-scope cooperative-matrix kernels (VK_NV_cooperative_matrix2: the
    /// cm2 prefill attention) may run: the device offers the extension with the features they
    /// use, and vkllm enabled it with the cooperative matrices on its own device.
    pub fn coopmat2(&self) -> bool {
        self.shared.coopmat2
    }

    /// Whether `matvec_q8a` (int8 dot products over quantized activations) may run: the device
    /// offers integer dot products (Vulkan 1.3) and they were enabled at creation or by the host
    /// that lent it.
    pub fn int8_dot(&self) -> bool {
        self.shared.int8_dot
    }

    /// Opens the device chosen by `VKLLM_DEVICE` / `VKLLM_VALIDATE`, tuned by `VKLLM_TUNE`.
    pub fn from_env() -> Result<Self> {
        Self::new(&DeviceOptions::from_env()?)
    }

    /// The kernel and launch choices this device was opened with.
    pub fn tuning(&self) -> &Tuning {
        &self.shared.tuning
    }

    /// Attaches to a host application's Vulkan objects (nothing of theirs is destroyed on drop;
    /// no queue or device of its own is created). `host` says what the host enabled on `device`
    /// ([`HostFeatures::from_create_info`] reads it from the host's create info): the
    /// cooperative-matrix and int8 kernels run when it enabled what they need (and the tuning
    /// allows them), else the portable ones; [`Device::missing_features`] lists what was lacking.
    ///
    /// # Safety
    /// All handles must be valid, `device` created from `physical` of `instance` with at least
    /// what `host` says, `queue` from `queue_family`, and all must outlive the returned `Device`
    /// and its buffers. The host must not use `queue` concurrently with this `Device`'s
    /// submissions.
    pub unsafe fn from_raw(
        instance: Instance,
        physical: vk::PhysicalDevice,
        device: ash::Device,
        queue: vk::Queue,
        queue_family: u32,
        host: &HostFeatures,
        opts: &DeviceOptions,
    ) -> Result<Self> {
        let mut info = query(&instance, 0, physical)?;
        check_usable(&info)?;
        info.compute_queue_family = Some(queue_family);
        let coop = opts.tuning.coopmat && host.coopmat(&info);
        let dot = host.int8_dot(&info);
        let missing = host.missing(&info);
        let enabled = HostFeatures {
            cooperative_matrix: coop,
            integer_dot_product: dot,
            timeline_semaphore: host.timeline_semaphore && info.timeline_semaphore,
            ..host.clone()
        };
        Self::assemble(
            instance,
            physical,
            device,
            false,
            queue,
            queue_family,
            info,
            opts,
            (enabled, missing),
            None,
        )
    }

    /// The features this device runs with: those vkllm enabled on its own device, or those of
    /// an attaching host that its kernels use.
    pub fn enabled_features(&self) -> &HostFeatures {
        &self.shared.enabled
    }

    /// What vkllm would use on this device but the host that lent it did not enable (Vulkan
    /// extension and feature names; empty for vkllm's own devices).
    pub fn missing_features(&self) -> &[String] {
        &self.shared.missing
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        instance: Instance,
        physical: vk::PhysicalDevice,
        raw: ash::Device,
        owned: bool,
        queue: vk::Queue,
        queue_family: u32,
        info: DeviceInfo,
        opts: &DeviceOptions,
        (enabled, missing): (HostFeatures, Vec<String>),
        stats: Option<ash::khr::pipeline_executable_properties::Device>,
    ) -> Result<Self> {
        let (coopmat, int8_dot) = (enabled.cooperative_matrix, enabled.integer_dot_product);
        // cm2 kernels on vkllm's own devices only (a host would have to enable the extension
        // and its features, which `HostFeatures` does not describe).
        let coopmat2 = owned
            && coopmat
            && info.cooperative_matrix2
            && (enabled.extensions.iter()).any(|e| *e == coopmat::EXTENSION_2.to_string_lossy());
        let destroy = |raw: &ash::Device| {
            if owned {
                unsafe { raw.destroy_device(None) };
            }
        };
        let mut ainfo = vk_mem::AllocatorCreateInfo::new(&instance.raw, &raw, physical);
        ainfo.vulkan_api_version = instance.api_version.min(vk::API_VERSION_1_3);
        // SAFETY: instance, device and physical device are valid and outlive the allocator.
        let allocator = match unsafe { vk_mem::Allocator::new(ainfo) } {
            Ok(a) => a,
            Err(r) => {
                destroy(&raw);
                return Err(vk_err("vmaCreateAllocator")(r));
            }
        };
        let mut cache = match PipelineCache::open(&raw, &info, &opts.pipeline_cache) {
            Ok(c) => c,
            Err(e) => {
                drop(allocator);
                destroy(&raw);
                return Err(e);
            }
        };
        let timeline = if enabled.timeline_semaphore {
            let mut ty = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(0);
            let ci = vk::SemaphoreCreateInfo::default().push_next(&mut ty);
            // SAFETY: valid device with timelineSemaphore enabled.
            match unsafe { raw.create_semaphore(&ci, None) } {
                Ok(sem) => Some((sem, AtomicU64::new(0))),
                Err(r) => {
                    // SAFETY: created above from `raw`, unused.
                    unsafe { cache.save_and_destroy(&raw) };
                    drop(allocator);
                    destroy(&raw);
                    return Err(vk_err("vkCreateSemaphore")(r));
                }
            }
        } else {
            None
        };
        // An attached device has what its host enabled: paged buffers only on vkllm's own.
        let paged = owned && info.sparse_aliased && opts.tuning.sparse;
        let l = &info.limits;
        let mut max_part = l.max_storage_buffer_range.min(l.max_allocation_size);
        if let Some(m) = opts.max_buffer_bytes {
            max_part = max_part.min(m.max(256));
        }
        // Whole 256-byte units, so rounding a buffer up to 4 bytes never crosses the limit
        // (NVIDIA reports 2^32 - 1).
        max_part &= !255;
        Ok(Device {
            shared: Arc::new(Shared {
                instance,
                physical,
                raw,
                owned,
                queue: Mutex::new(queue),
                queue_family,
                allocator: ManuallyDrop::new(allocator),
                cache,
                pipelines: Mutex::new(HashMap::new()),
                info,
                fence_timeout: opts.fence_timeout,
                tuning: opts.tuning.clone(),
                max_part_bytes: max_part,
                coopmat,
                coopmat2,
                int8_dot,
                stats,
                enabled,
                missing,
                spares: Default::default(),
                timeline,
                host_wait: Mutex::new(None),
                paged,
                pages: Default::default(),
                kept_f16: Default::default(),
            }),
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    /// Command pools (with their fence and descriptor pools) of dropped recordings kept for
    /// the next recorders (at most [`crate::MAX_SPARES`]; see `recycle.rs`).
    pub fn spare_recordings(&self) -> usize {
        self.shared.spares.len()
    }

    /// Bytes held by the weights' resident f16 copies ([`Device::keep_f16`]).
    pub fn kept_f16_bytes(&self) -> u64 {
        self.shared.kept_f16.bytes.load(Ordering::Relaxed)
    }

    /// Largest byte size of one buffer / tensor part (storage-buffer range, allocation size and
    /// the configured cap).
    pub fn max_buffer_bytes(&self) -> u64 {
        self.shared.max_part_bytes
    }

    pub fn raw(&self) -> &ash::Device {
        &self.shared.raw
    }

    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.shared.physical
    }

    pub fn instance(&self) -> &Instance {
        &self.shared.instance
    }

    pub fn validation(&self) -> Validation {
        self.shared.instance.validation
    }

    /// Validation messages recorded since the last call, minus the allow-listed ones.
    pub fn take_validation_messages(&self) -> Vec<ValidationMessage> {
        self.shared
            .instance
            .take_messages()
            .into_iter()
            .filter(|m| !m.allowed())
            .collect()
    }

    /// `Err(Error::Validation)` if the layer reported anything not on the allow-list.
    pub fn check_validation(&self) -> Result<()> {
        let msgs = self.take_validation_messages();
        if msgs.is_empty() {
            Ok(())
        } else {
            Err(Error::Validation(
                msgs.iter().map(|m| m.to_string()).collect(),
            ))
        }
    }

    /// Writes the pipeline cache to its file now (it is also written when the device drops).
    pub fn save_pipeline_cache(&self) -> Result<()> {
        self.shared.cache.save(&self.shared.raw)
    }

    /// Waits for all submitted work.
    pub fn wait_idle(&self) -> Result<()> {
        // SAFETY: valid device; queue access is serialised by the queue lock.
        let _q = self
            .shared
            .queue
            .lock()
            .map_err(|_| Error::Recording("queue lock poisoned"))?;
        unsafe { self.shared.raw.device_wait_idle() }.map_err(vk_err("vkDeviceWaitIdle"))
    }

    /// How long a submit polls its fence before it blocks in the driver: [`Tuning::fence_spin_us`],
    /// else `FENCE_SPIN` on GPUs and 0 on CPU devices (lavapipe runs the work on this
    /// machine's cores, which polling would compete for).
    pub fn fence_spin(&self) -> Duration {
        match self.tuning().fence_spin_us {
            Some(us) => Duration::from_micros(us),
            None if self.info().kind == crate::info::DeviceKind::Cpu => Duration::ZERO,
            None => FENCE_SPIN,
        }
    }

    /// Submits `cb` and waits on `fence` (reset first) for at most the fence timeout; with
    /// validation on, a validation message recorded by then turns into [`Error::Validation`].
    pub(crate) fn submit_and_wait(&self, cb: vk::CommandBuffer, fence: vk::Fence) -> Result<()> {
        self.submit(cb, fence)?;
        self.wait_fence(fence)
    }

    /// Submits `cb` to signal `fence` (reset first) and returns without waiting. With timeline
    /// semaphores on, the batch also signals vkllm's timeline's next value and waits for the
    /// host timeline value set by [`Device::wait_host_timeline`].
    pub(crate) fn submit(&self, cb: vk::CommandBuffer, fence: vk::Fence) -> Result<()> {
        self.submit_all(&[cb], fence)
    }

    /// [`Device::submit`] of several command buffers in one batch (executed in order; `fence`
    /// signals when all are done).
    pub(crate) fn submit_all(&self, cbs: &[vk::CommandBuffer], fence: vk::Fence) -> Result<()> {
        let raw = &self.shared.raw;
        let host_wait = *self
            .shared
            .host_wait
            .lock()
            .map_err(|_| Error::Recording("host timeline lock poisoned"))?;
        let q = self
            .shared
            .queue
            .lock()
            .map_err(|_| Error::Recording("queue lock poisoned"))?;
        // Under the queue lock: values reach the queue in the order they are taken.
        let signal = self
            .shared
            .timeline
            .as_ref()
            .map(|(sem, last)| ([*sem], [last.load(Ordering::Acquire) + 1]));
        let wait = host_wait.map(|(sem, v)| ([sem], [v], [vk::PipelineStageFlags::ALL_COMMANDS]));
        let mut values = vk::TimelineSemaphoreSubmitInfo::default();
        let mut submit = vk::SubmitInfo::default().command_buffers(cbs);
        if let Some((sems, vals)) = &signal {
            submit = submit.signal_semaphores(sems);
            values = values.signal_semaphore_values(vals);
        }
        if let Some((sems, vals, stages)) = &wait {
            submit = submit.wait_semaphores(sems).wait_dst_stage_mask(stages);
            values = values.wait_semaphore_values(vals);
        }
        if signal.is_some() || wait.is_some() {
            submit = submit.push_next(&mut values);
        }
        // SAFETY: the cbs are fully recorded and not pending (we always wait before resubmitting);
        // the fence is unsignalled after the reset; the semaphores are timeline semaphores of
        // this device and the signalled value exceeds every earlier one.
        unsafe {
            raw.reset_fences(&[fence])
                .map_err(vk_err("vkResetFences"))?;
            raw.queue_submit(*q, &[submit], fence)
                .map_err(vk_err("vkQueueSubmit"))?;
        }
        if let (Some((_, last)), Some((_, [v]))) = (&self.shared.timeline, &signal) {
            last.store(*v, Ordering::Release);
        }
        Ok(())
    }

    /// vkllm's timeline semaphore and the value its latest submission signals when done (0
    /// before the first): a host sharing the device waits on it (on the GPU, in its own
    /// submissions, or with `vkWaitSemaphores`) to order its work after vkllm's. `None` unless
    /// timeline semaphores are enabled (by vkllm on its own device, by the host that lent it).
    pub fn timeline(&self) -> Option<(vk::Semaphore, u64)> {
        let (sem, last) = self.shared.timeline.as_ref()?;
        Some((*sem, last.load(Ordering::Acquire)))
    }

    /// Makes every later submission wait on the GPU until the host's timeline semaphore `sem`
    /// reaches `value` (`None`: no wait), e.g. the value the host's frame work signals. Errors
    /// when timeline semaphores are not enabled.
    ///
    /// # Safety
    /// `sem` must be a timeline semaphore of this device, outliving every submission made while
    /// it is set; the host must eventually signal `value` (else vkllm's waits end in
    /// [`Error::Timeout`] after the fence timeout).
    pub unsafe fn wait_host_timeline(&self, wait: Option<(vk::Semaphore, u64)>) -> Result<()> {
        if wait.is_some() && self.shared.timeline.is_none() {
            return Err(Error::MissingFeature {
                device: self.info().name.clone(),
                feature: "timelineSemaphore".into(),
            });
        }
        *self
            .shared
            .host_wait
            .lock()
            .map_err(|_| Error::Recording("host timeline lock poisoned"))? = wait;
        Ok(())
    }

    /// The lock on the queue vkllm submits to: a host sharing that queue (an attached
    /// [`Device::from_raw`]) holds the guard while it submits, so the two never use it at once.
    pub fn lock_queue(&self) -> Result<std::sync::MutexGuard<'_, vk::Queue>> {
        self.shared
            .queue
            .lock()
            .map_err(|_| Error::Recording("queue lock poisoned"))
    }

    /// Waits for `fence` (polling first, see [`Device::fence_spin`]), bounded by the device's
    /// fence timeout.
    pub(crate) fn wait_fence(&self, fence: vk::Fence) -> Result<()> {
        let raw = &self.shared.raw;
        let ns = self.shared.fence_timeout.as_nanos().min(u64::MAX as u128) as u64;
        // Poll first (see `fence_spin`): the work is usually done long before a sleeping wait
        // would wake up again.
        let spin = self.fence_spin();
        if !spin.is_zero() {
            let t0 = std::time::Instant::now();
            // SAFETY: valid fence.
            while !unsafe { raw.get_fence_status(fence) }.map_err(vk_err("vkGetFenceStatus"))? {
                if t0.elapsed() >= spin {
                    break;
                }
                std::thread::yield_now();
            }
        }
        // SAFETY: valid fence.
        match unsafe { raw.wait_for_fences(&[fence], true, ns) } {
            // With validation on (VKLLM_VALIDATE=1), any message fails the submission.
            Ok(()) if self.validation() == Validation::On => self.check_validation(),
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => Err(Error::Timeout {
                ms: self.shared.fence_timeout.as_millis() as u64,
            }),
            Err(r) => Err(vk_err("vkWaitForFences")(r)),
        }
    }
}

fn check_usable(info: &DeviceInfo) -> Result<()> {
    let missing = |feature: &str| {
        Err(Error::MissingFeature {
            device: info.name.clone(),
            feature: feature.into(),
        })
    };
    if info.api_version < (1, 1, 0) {
        return missing("Vulkan 1.1");
    }
    if !info.subgroup_arithmetic {
        return missing("subgroup arithmetic operations in compute shaders");
    }
    if info.limits.max_push_constants < 128 {
        return missing("128 bytes of push constants");
    }
    if info.limits.max_shared_memory < 16384 || info.limits.max_workgroup_invocations < 256 {
        return missing("16 KiB shared memory and 256-invocation workgroups");
    }
    Ok(())
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.shared.info.summary())
    }
}
