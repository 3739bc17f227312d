//! Physical-device listing, capabilities and selection (`VKLLM_DEVICE`).

use ash::vk;

use crate::coopmat::{
    Coop2Features, CoopFlexShape, CoopMatShape, EXTENSION_2, query_flexible, query_shapes,
};
use crate::error::{Result, vk_err};
use crate::{Error, Instance};

/// Kind of device, best first for automatic selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceKind {
    Discrete,
    Integrated,
    Virtual,
    Cpu,
    Other,
}

/// One memory heap.
#[derive(Clone, Copy, Debug)]
pub struct Heap {
    pub size: u64,
    pub device_local: bool,
}

/// The limits the runtime and kernels care about.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_storage_buffer_range: u64,
    pub max_allocation_size: u64,
    pub min_storage_buffer_offset_alignment: u64,
    pub max_shared_memory: u32,
    pub max_workgroup_invocations: u32,
    pub max_workgroup_count: [u32; 3],
    pub max_push_constants: u32,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period_ns: f32,
}

/// What a device is and can do.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Position in the loader's enumeration (what `VKLLM_DEVICE=<index>` selects).
    pub index: usize,
    pub name: String,
    pub kind: DeviceKind,
    pub vendor_id: u32,
    pub device_id: u32,
    pub api_version: (u32, u32, u32),
    pub driver: String,
    pub subgroup_size: u32,
    pub min_subgroup_size: u32,
    pub max_subgroup_size: u32,
    /// Subgroup arithmetic (subgroupAdd/Max) in compute shaders: required by the kernels.
    pub subgroup_arithmetic: bool,
    pub shader_f16: bool,
    pub shader_int8: bool,
    pub storage_16bit: bool,
    /// `uniformAndStorageBuffer16BitAccess` (naga's f16 kernels declare it).
    pub uniform_storage_16bit: bool,
    pub int8_dot_product: bool,
    /// `vulkanMemoryModel` (naga emits cooperative-matrix kernels in the Vulkan memory model).
    pub vulkan_memory_model: bool,
    /// ... with device-scope memory operations (needed once the memory model is enabled).
    pub vulkan_memory_model_device_scope: bool,
    /// Timeline semaphores (`timelineSemaphore`, Vulkan 1.2).
    pub timeline_semaphore: bool,
    /// VK_KHR_cooperative_matrix with its `cooperativeMatrix` feature, usable in compute shaders.
    pub cooperative_matrix: bool,
    /// The cooperative-matrix shapes offered (`vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR`;
    /// empty without the extension).
    pub cooperative_matrix_shapes: Vec<CoopMatShape>,
    /// VK_NV_cooperative_matrix2 with workgroup scope, flexible dimensions, reductions,
    /// conversions, per-element operations and tensor addressing (the cm2 prefill attention).
    pub cooperative_matrix2: bool,
    /// Its flexible-dimension entries (granularities per element types, scope and workgroup
    /// size; empty without the extension or where the driver does not report them).
    pub cooperative_matrix2_flexible: Vec<CoopFlexShape>,
    pub heaps: Vec<Heap>,
    pub limits: Limits,
    /// A queue family with compute, and whether it supports timestamps.
    pub compute_queue_family: Option<u32>,
    /// Sparse, aliased buffers on that family's queue (`sparseBinding`, `sparseResidencyBuffer`,
    /// `sparseResidencyAliased` and a queue with sparse binding): paged buffers
    /// ([`crate::Device::page_bytes`]).
    pub sparse_aliased: bool,
    pub timestamps: bool,
    pub extensions: Vec<String>,
    /// Streaming multiprocessors / compute units, where the driver says (VK_NV_shader_sm_builtins,
    /// VK_AMD_shader_core_properties): launches sized to fill whole waves use it.
    pub compute_units: Option<u32>,
}

impl DeviceInfo {
    /// Bytes of device-local memory (largest device-local heap).
    pub fn device_local_bytes(&self) -> u64 {
        self.heaps
            .iter()
            .filter(|h| h.device_local)
            .map(|h| h.size)
            .max()
            .unwrap_or(0)
    }

    /// Whether workgroup-scope f16 x f16 + f32 -> f32 accumulators of `rows` x `cols` fit the
    /// device's flexible-dimension M and N granularities at `invocations` invocations (NVIDIA:
    /// 32 x 16 at 128, 32 x 32 at 256); true where the driver reports no entry for them (the
    /// kernels' own multiples of 16 then apply).
    pub fn cm2_fits(&self, rows: u32, cols: u32, invocations: u32) -> bool {
        let mut entries = self
            .cooperative_matrix2_flexible
            .iter()
            .filter(|e| e.is_f16_f32_workgroup(invocations))
            .peekable();
        entries.peek().is_none()
            || entries.any(|e| {
                e.m_granularity > 0
                    && e.n_granularity > 0
                    && rows.is_multiple_of(e.m_granularity)
                    && cols.is_multiple_of(e.n_granularity)
            })
    }

    /// Whether `matmul_cm2`'s accumulator tile (weight rows x tokens) fits [`Self::cm2_fits`].
    pub fn cm2_matmul_fits(&self, t: &vkllm_kernels::matmul_cm2::CmTile) -> bool {
        self.cm2_fits(t.bm, t.bn, vkllm_kernels::matmul_cm2::WG)
    }

    /// Whether `attn_prefill_cm2`'s scores (rows x keys) and output (rows x `head_dim`) fit
    /// [`Self::cm2_fits`].
    pub fn cm2_attn_fits(
        &self,
        t: &vkllm_kernels::attention_prefill_cm2::CmAttnTile,
        head_dim: usize,
    ) -> bool {
        let wg = vkllm_kernels::attention_prefill_cm2::WG;
        self.cm2_fits(t.br, t.bc, wg) && self.cm2_fits(t.br, head_dim as u32, wg)
    }

    pub fn has_extension(&self, name: &str) -> bool {
        self.extensions.iter().any(|e| e == name)
    }

    /// Everything `matmul_coop.wgsl` needs: the cooperative-matrix feature with the 16 x 16 x 16
    /// f16 x f16 + f32 -> f32 subgroup shape, f16 arithmetic, 16-bit storage, the Vulkan memory
    /// model, Vulkan 1.2, and shared memory for its tiles.
    pub fn supports_coopmat_f16(&self) -> bool {
        self.cooperative_matrix
            && self.api_version >= (1, 2, 0)
            && self.shader_f16
            && self.storage_16bit
            && self.uniform_storage_16bit
            && self.vulkan_memory_model
            && self.vulkan_memory_model_device_scope
            && self.limits.max_shared_memory >= vkllm_kernels::matmul_coop::SHARED_BYTES
            && self
                .cooperative_matrix_shapes
                .iter()
                .any(CoopMatShape::is_f16_16x16x16_f32)
    }

    /// One line: `index: name (kind, driver, Vulkan x.y, subgroup n)`.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} ({:?}, {}, Vulkan {}.{}.{}, subgroup {})",
            self.index,
            self.name,
            self.kind,
            self.driver,
            self.api_version.0,
            self.api_version.1,
            self.api_version.2,
            self.subgroup_size
        )
    }
}

fn cstr_array(a: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = a
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(crate) fn query(inst: &Instance, index: usize, pd: vk::PhysicalDevice) -> Result<DeviceInfo> {
    let raw = &inst.raw;
    // SAFETY: `pd` comes from this instance's enumeration; every chained struct outlives the call.
    unsafe {
        let props = raw.get_physical_device_properties(pd);
        let api = props.api_version;
        let exts: Vec<String> = raw
            .enumerate_device_extension_properties(pd)
            .map_err(vk_err("vkEnumerateDeviceExtensionProperties"))?
            .iter()
            .map(|e| cstr_array(&e.extension_name))
            .collect();
        let has = |n: &str| exts.iter().any(|e| e == n);
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut sg_control = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        let v12 = api >= vk::API_VERSION_1_2 && inst.api_version >= vk::API_VERSION_1_2;
        let sgc = (api >= vk::API_VERSION_1_3 && inst.api_version >= vk::API_VERSION_1_3)
            || has("VK_EXT_subgroup_size_control");
        let mut p2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut subgroup)
            .push_next(&mut maint3);
        if v12 {
            p2 = p2.push_next(&mut driver);
        }
        if sgc {
            p2 = p2.push_next(&mut sg_control);
        }
        let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
        let has_sm = has("VK_NV_shader_sm_builtins");
        if has_sm {
            p2 = p2.push_next(&mut sm);
        }
        let mut amd = vk::PhysicalDeviceShaderCorePropertiesAMD::default();
        let has_amd = has("VK_AMD_shader_core_properties");
        if has_amd {
            p2 = p2.push_next(&mut amd);
        }
        raw.get_physical_device_properties2(pd, &mut p2);
        let props = p2.properties;
        let compute_units = if has_sm {
            Some(sm.shader_sm_count)
        } else if has_amd {
            Some(
                amd.shader_engine_count
                    * amd.shader_arrays_per_engine_count
                    * amd.compute_units_per_shader_array,
            )
        } else {
            None
        }
        .filter(|&n| n > 0);

        let mut f11 = vk::PhysicalDevice16BitStorageFeatures::default();
        let mut f12 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        let has_dot = (api >= vk::API_VERSION_1_3 && inst.api_version >= vk::API_VERSION_1_3)
            || has("VK_KHR_shader_integer_dot_product");
        let mut mm = vk::PhysicalDeviceVulkanMemoryModelFeatures::default();
        let has_coop = has("VK_KHR_cooperative_matrix");
        let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        let has_coop2 = has_coop && has(&EXTENSION_2.to_string_lossy());
        let mut coop2 = Coop2Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f11);
        if v12 || has("VK_KHR_shader_float16_int8") {
            f2 = f2.push_next(&mut f12);
        }
        if has_dot {
            f2 = f2.push_next(&mut dot);
        }
        if v12 || has("VK_KHR_vulkan_memory_model") {
            f2 = f2.push_next(&mut mm);
        }
        if has_coop {
            f2 = f2.push_next(&mut coop);
        }
        if has_coop2 {
            f2 = f2.push_next(&mut coop2);
        }
        let mut timeline = vk::PhysicalDeviceTimelineSemaphoreFeatures::default();
        if v12 {
            f2 = f2.push_next(&mut timeline);
        }
        raw.get_physical_device_features2(pd, &mut f2);
        let base = f2.features;
        let mut coop_props = vk::PhysicalDeviceCooperativeMatrixPropertiesKHR::default();
        if has_coop {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut coop_props);
            raw.get_physical_device_properties2(pd, &mut p2);
        }
        let coop_usable = has_coop
            && coop.cooperative_matrix == vk::TRUE
            && coop_props
                .cooperative_matrix_supported_stages
                .contains(vk::ShaderStageFlags::COMPUTE);
        let coop_shapes = if has_coop {
            query_shapes(&inst.entry, raw, pd)
        } else {
            Vec::new()
        };
        let flex_shapes = if has_coop2 {
            query_flexible(&inst.entry, raw, pd)
        } else {
            Vec::new()
        };

        let mem = raw.get_physical_device_memory_properties(pd);
        let heaps = mem.memory_heaps[..mem.memory_heap_count as usize]
            .iter()
            .map(|h| Heap {
                size: h.size,
                device_local: h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
            })
            .collect();
        let families = raw.get_physical_device_queue_family_properties(pd);
        // Prefer a compute family without graphics (dedicated compute), else any with compute.
        let compute = families
            .iter()
            .enumerate()
            .filter(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .min_by_key(|(_, f)| f.queue_flags.contains(vk::QueueFlags::GRAPHICS) as u8)
            .map(|(i, f)| {
                (
                    i as u32,
                    f.timestamp_valid_bits > 0,
                    f.queue_flags.contains(vk::QueueFlags::SPARSE_BINDING),
                )
            });
        let l = &props.limits;
        let kind = match props.device_type {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceKind::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceKind::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceKind::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceKind::Cpu,
            _ => DeviceKind::Other,
        };
        let (min_sg, max_sg) = if sgc {
            (sg_control.min_subgroup_size, sg_control.max_subgroup_size)
        } else {
            (subgroup.subgroup_size, subgroup.subgroup_size)
        };
        let arith = subgroup
            .supported_operations
            .contains(vk::SubgroupFeatureFlags::ARITHMETIC | vk::SubgroupFeatureFlags::BASIC)
            && subgroup
                .supported_stages
                .contains(vk::ShaderStageFlags::COMPUTE);
        Ok(DeviceInfo {
            index,
            name: cstr_array(&props.device_name),
            kind,
            vendor_id: props.vendor_id,
            device_id: props.device_id,
            api_version: (
                vk::api_version_major(api),
                vk::api_version_minor(api),
                vk::api_version_patch(api),
            ),
            driver: if v12 {
                format!(
                    "{} {}",
                    cstr_array(&driver.driver_name),
                    cstr_array(&driver.driver_info)
                )
                .trim()
                .to_string()
            } else {
                format!("driver {:#x}", props.driver_version)
            },
            subgroup_size: subgroup.subgroup_size,
            min_subgroup_size: min_sg,
            max_subgroup_size: max_sg,
            subgroup_arithmetic: arith,
            shader_f16: f12.shader_float16 == vk::TRUE,
            shader_int8: f12.shader_int8 == vk::TRUE,
            storage_16bit: f11.storage_buffer16_bit_access == vk::TRUE,
            uniform_storage_16bit: f11.uniform_and_storage_buffer16_bit_access == vk::TRUE,
            int8_dot_product: has_dot && dot.shader_integer_dot_product == vk::TRUE,
            vulkan_memory_model: mm.vulkan_memory_model == vk::TRUE,
            vulkan_memory_model_device_scope: mm.vulkan_memory_model_device_scope == vk::TRUE,
            timeline_semaphore: v12 && timeline.timeline_semaphore == vk::TRUE,
            cooperative_matrix: coop_usable,
            cooperative_matrix_shapes: coop_shapes,
            cooperative_matrix2: coop_usable && has_coop2 && coop2.usable(),
            cooperative_matrix2_flexible: flex_shapes,
            heaps,
            limits: Limits {
                max_storage_buffer_range: l.max_storage_buffer_range as u64,
                max_allocation_size: maint3.max_memory_allocation_size,
                min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
                max_shared_memory: l.max_compute_shared_memory_size,
                max_workgroup_invocations: l.max_compute_work_group_invocations,
                max_workgroup_count: l.max_compute_work_group_count,
                max_push_constants: l.max_push_constants_size,
                timestamp_period_ns: l.timestamp_period,
            },
            compute_queue_family: compute.map(|c| c.0),
            timestamps: compute.is_some_and(|c| c.1),
            sparse_aliased: compute.is_some_and(|c| c.2)
                && base.sparse_binding == vk::TRUE
                && base.sparse_residency_buffer == vk::TRUE
                && base.sparse_residency_aliased == vk::TRUE,
            extensions: exts,
            compute_units,
        })
    }
}

/// Every physical device the loader reports, with its capabilities.
pub fn list_devices(inst: &Instance) -> Result<Vec<DeviceInfo>> {
    Ok(physical_devices(inst)?
        .into_iter()
        .map(|(_, i)| i)
        .collect())
}

pub(crate) fn physical_devices(inst: &Instance) -> Result<Vec<(vk::PhysicalDevice, DeviceInfo)>> {
    // SAFETY: valid instance.
    let pds = unsafe { inst.raw.enumerate_physical_devices() }
        .map_err(vk_err("vkEnumeratePhysicalDevices"))?;
    pds.into_iter()
        .enumerate()
        .map(|(i, pd)| Ok((pd, query(inst, i, pd)?)))
        .collect()
}

/// Which device to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The best usable device: discrete > integrated > virtual > CPU, then most device memory.
    Auto,
    /// By enumeration index.
    Index(usize),
    /// First device whose name contains this (case-insensitive).
    Name(String),
}

impl DeviceChoice {
    pub fn parse(s: &str) -> Self {
        match s.parse::<usize>() {
            Ok(i) => DeviceChoice::Index(i),
            Err(_) => DeviceChoice::Name(s.to_string()),
        }
    }
}

/// Position in `devices` of the chosen one; a typed error listing `devices` when it is absent.
pub fn select(devices: &[DeviceInfo], choice: &DeviceChoice) -> Result<usize> {
    if devices.is_empty() {
        return Err(Error::NoDevices);
    }
    let not_found = |requested: String| Error::DeviceNotFound {
        requested,
        available: devices.iter().map(DeviceInfo::summary).collect(),
    };
    match choice {
        DeviceChoice::Index(i) => devices
            .iter()
            .position(|d| d.index == *i)
            .ok_or_else(|| not_found(format!("index {i}"))),
        DeviceChoice::Name(n) => {
            let n_low = n.to_lowercase();
            devices
                .iter()
                .position(|d| d.name.to_lowercase().contains(&n_low))
                .ok_or_else(|| not_found(format!("name containing \"{n}\"")))
        }
        DeviceChoice::Auto => devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.compute_queue_family.is_some())
            .min_by_key(|(_, d)| (d.kind, std::cmp::Reverse(d.device_local_bytes())))
            .map(|(i, _)| i)
            .ok_or_else(|| not_found("any device with a compute queue".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CoopComponent;

    fn fake(index: usize, name: &str, kind: DeviceKind, mem: u64) -> DeviceInfo {
        DeviceInfo {
            index,
            name: name.into(),
            kind,
            vendor_id: 0,
            device_id: 0,
            api_version: (1, 3, 0),
            driver: String::new(),
            subgroup_size: 32,
            min_subgroup_size: 32,
            max_subgroup_size: 32,
            subgroup_arithmetic: true,
            shader_f16: false,
            shader_int8: false,
            storage_16bit: false,
            uniform_storage_16bit: false,
            int8_dot_product: false,
            vulkan_memory_model: false,
            vulkan_memory_model_device_scope: false,
            timeline_semaphore: false,
            cooperative_matrix: false,
            cooperative_matrix_shapes: Vec::new(),
            cooperative_matrix2: false,
            cooperative_matrix2_flexible: Vec::new(),
            heaps: vec![Heap {
                size: mem,
                device_local: true,
            }],
            limits: Limits {
                max_storage_buffer_range: 1 << 27,
                max_allocation_size: 1 << 31,
                min_storage_buffer_offset_alignment: 16,
                max_shared_memory: 32768,
                max_workgroup_invocations: 1024,
                max_workgroup_count: [65535; 3],
                max_push_constants: 128,
                timestamp_period_ns: 1.0,
            },
            compute_queue_family: Some(0),
            sparse_aliased: false,
            timestamps: true,
            extensions: Vec::new(),
            compute_units: None,
        }
    }

    #[test]
    fn auto_prefers_discrete_then_memory() {
        let devs = [
            fake(0, "llvmpipe", DeviceKind::Cpu, 1 << 34),
            fake(1, "small dGPU", DeviceKind::Discrete, 8 << 30),
            fake(2, "iGPU", DeviceKind::Integrated, 1 << 35),
            fake(3, "NVIDIA H200", DeviceKind::Discrete, 140 << 30),
        ];
        assert_eq!(select(&devs, &DeviceChoice::Auto).unwrap(), 3);
        assert_eq!(select(&devs, &DeviceChoice::Index(2)).unwrap(), 2);
        assert_eq!(
            select(&devs, &DeviceChoice::Name("h200".into())).unwrap(),
            3
        );
        match select(&devs, &DeviceChoice::Name("radeon".into())) {
            Err(Error::DeviceNotFound {
                requested,
                available,
            }) => {
                assert!(requested.contains("radeon"));
                assert_eq!(available.len(), 4);
                assert!(available[3].starts_with("3: NVIDIA H200"));
            }
            other => panic!("expected DeviceNotFound, got {other:?}"),
        }
        assert!(matches!(
            select(&[], &DeviceChoice::Auto),
            Err(Error::NoDevices)
        ));
    }

    /// The flexible-dimension entries the H100 (NVIDIA 580.159.04) reports for f16 x f16 + f32
    /// at workgroup scope: 32 x 16 x 16 at 128 invocations, 32 x 32 x 16 at 256.
    #[test]
    fn cm2_tiles_follow_the_reported_granularities() {
        let entry = |m, n, invocations, c| CoopFlexShape {
            m_granularity: m,
            n_granularity: n,
            k_granularity: 16,
            a: CoopComponent::F16,
            b: CoopComponent::F16,
            c,
            result: c,
            saturating: false,
            workgroup_scope: true,
            invocations,
        };
        let mut d = fake(0, "NVIDIA H100", DeviceKind::Discrete, 80 << 30);
        // Nothing reported: the kernels' own rules apply.
        assert!(d.cm2_fits(16, 16, 128));
        d.cooperative_matrix2_flexible = vec![
            entry(16, 16, 32, CoopComponent::F32),
            entry(16, 16, 128, CoopComponent::F16),
            entry(32, 16, 128, CoopComponent::F32),
            entry(32, 32, 256, CoopComponent::F32),
        ];
        assert!(d.cm2_fits(32, 32, 128));
        assert!(d.cm2_fits(64, 16, 128));
        assert!(!d.cm2_fits(16, 32, 128), "16 rows at 128 invocations");
        assert!(d.cm2_fits(128, 128, 256));
        assert!(!d.cm2_fits(64, 48, 256), "48 columns at 256 invocations");
        assert!(!d.cm2_fits(48, 64, 256));
        // No entry for this workgroup size: allowed.
        assert!(d.cm2_fits(16, 16, 512));
        assert_eq!(
            d.cooperative_matrix2_flexible[2].to_string(),
            "32x16x16 f16*f16+f32->f32 /128"
        );
    }
}
