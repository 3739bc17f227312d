//! Attaching to a host application's device: what the host enabled (Vulkan reports what a device
//! supports, not what its creator enabled, so the host says it, or hands over its
//! `VkDeviceCreateInfo`), which of vkllm's fast paths that allows, and what it would need.

use std::ffi::CStr;

use ash::vk;

use crate::info::DeviceInfo;

/// The extensions and features a host enabled on the device it lends ([`crate::Device::from_raw`]).
/// The default enables nothing beyond Vulkan 1.1 (the portable kernels only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFeatures {
    /// Device extensions the host enabled.
    pub extensions: Vec<String>,
    /// `storageBuffer16BitAccess` and `uniformAndStorageBuffer16BitAccess`.
    pub storage_16bit: bool,
    /// `shaderFloat16`.
    pub shader_float16: bool,
    /// `vulkanMemoryModel` and `vulkanMemoryModelDeviceScope`.
    pub vulkan_memory_model: bool,
    /// `cooperativeMatrix` (VK_KHR_cooperative_matrix).
    pub cooperative_matrix: bool,
    /// `shaderIntegerDotProduct` (Vulkan 1.3 or VK_KHR_shader_integer_dot_product).
    pub integer_dot_product: bool,
    /// `timelineSemaphore` (Vulkan 1.2): [`crate::Device::timeline`] and
    /// [`crate::Device::wait_host_timeline`] order vkllm's submissions against the host's.
    pub timeline_semaphore: bool,
}

const COOP_EXT: &str = "VK_KHR_cooperative_matrix";

impl HostFeatures {
    /// What the host's `VkDeviceCreateInfo` enables: its extension names and the feature
    /// structs vkllm uses in its `pNext` chain (`VkPhysicalDeviceVulkan11/12/13Features` or the
    /// individual structs; other structs are skipped).
    ///
    /// # Safety
    /// `ci` must be a valid create info: its extension name pointers and its `pNext` chain (each
    /// struct of the type its `sType` says) readable.
    pub unsafe fn from_create_info(ci: &vk::DeviceCreateInfo<'_>) -> Self {
        let mut h = HostFeatures::default();
        if ci.enabled_extension_count > 0 && !ci.pp_enabled_extension_names.is_null() {
            // SAFETY: the caller guarantees count valid C-string pointers.
            let names = unsafe {
                std::slice::from_raw_parts(
                    ci.pp_enabled_extension_names,
                    ci.enabled_extension_count as usize,
                )
            };
            for &p in names {
                if !p.is_null() {
                    // SAFETY: a valid NUL-terminated name (caller).
                    let s = unsafe { CStr::from_ptr(p) };
                    h.extensions.push(s.to_string_lossy().into_owned());
                }
            }
        }
        let t = |b: vk::Bool32| b == vk::TRUE;
        let mut next = ci.p_next as *const vk::BaseInStructure<'_>;
        while !next.is_null() {
            // SAFETY: each chain element starts with sType/pNext and is the struct its sType
            // names (caller).
            let base = unsafe { &*next };
            unsafe {
                match base.s_type {
                    vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_1_FEATURES => {
                        let f = &*(next as *const vk::PhysicalDeviceVulkan11Features<'_>);
                        h.storage_16bit |= t(f.storage_buffer16_bit_access)
                            && t(f.uniform_and_storage_buffer16_bit_access);
                    }
                    vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES => {
                        let f = &*(next as *const vk::PhysicalDeviceVulkan12Features<'_>);
                        h.shader_float16 |= t(f.shader_float16);
                        h.vulkan_memory_model |=
                            t(f.vulkan_memory_model) && t(f.vulkan_memory_model_device_scope);
                        h.timeline_semaphore |= t(f.timeline_semaphore);
                    }
                    vk::StructureType::PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES => {
                        let f = &*(next as *const vk::PhysicalDeviceTimelineSemaphoreFeatures<'_>);
                        h.timeline_semaphore |= t(f.timeline_semaphore);
                    }
                    vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_3_FEATURES => {
                        let f = &*(next as *const vk::PhysicalDeviceVulkan13Features<'_>);
                        h.integer_dot_product |= t(f.shader_integer_dot_product);
                    }
                    vk::StructureType::PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES => {
                        let f = &*(next as *const vk::PhysicalDevice16BitStorageFeatures<'_>);
                        h.storage_16bit |= t(f.storage_buffer16_bit_access)
                            && t(f.uniform_and_storage_buffer16_bit_access);
                    }
                    vk::StructureType::PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES => {
                        let f = &*(next as *const vk::PhysicalDeviceShaderFloat16Int8Features<'_>);
                        h.shader_float16 |= t(f.shader_float16);
                    }
                    vk::StructureType::PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES => {
                        let f = &*(next as *const vk::PhysicalDeviceVulkanMemoryModelFeatures<'_>);
                        h.vulkan_memory_model |=
                            t(f.vulkan_memory_model) && t(f.vulkan_memory_model_device_scope);
                    }
                    vk::StructureType::PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR => {
                        let f =
                            &*(next as *const vk::PhysicalDeviceCooperativeMatrixFeaturesKHR<'_>);
                        h.cooperative_matrix |= t(f.cooperative_matrix);
                    }
                    vk::StructureType::PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES => {
                        let f = &*(next
                            as *const vk::PhysicalDeviceShaderIntegerDotProductFeatures<'_>);
                        h.integer_dot_product |= t(f.shader_integer_dot_product);
                    }
                    _ => {}
                }
            }
            next = base.p_next;
        }
        h
    }

    fn has_extension(&self, name: &str) -> bool {
        self.extensions.iter().any(|e| e == name)
    }

    /// Whether the cooperative-matrix kernels may run: the device supports them and the host
    /// enabled the extension and every feature they need.
    pub(crate) fn coopmat(&self, info: &DeviceInfo) -> bool {
        info.supports_coopmat_f16() && self.coop_enabled()
    }

    fn coop_enabled(&self) -> bool {
        self.has_extension(COOP_EXT)
            && self.cooperative_matrix
            && self.storage_16bit
            && self.shader_float16
            && self.vulkan_memory_model
    }

    /// Whether `matvec_q8a` may run: the device offers integer dot products (Vulkan 1.3) and
    /// the host enabled them.
    pub(crate) fn int8_dot(&self, info: &DeviceInfo) -> bool {
        info.int8_dot_product && info.api_version >= (1, 3, 0) && self.integer_dot_product
    }

    /// What vkllm would use on `info` but the host did not enable, by Vulkan name (empty when
    /// the attached device runs every kernel its own device would).
    pub fn missing(&self, info: &DeviceInfo) -> Vec<String> {
        let mut m = Vec::new();
        if info.supports_coopmat_f16() {
            if !self.has_extension(COOP_EXT) {
                m.push(COOP_EXT.to_string());
            }
            for (on, name) in [
                (self.cooperative_matrix, "cooperativeMatrix"),
                (self.storage_16bit, "storageBuffer16BitAccess"),
                (self.shader_float16, "shaderFloat16"),
                (self.vulkan_memory_model, "vulkanMemoryModelDeviceScope"),
            ] {
                if !on {
                    m.push(name.to_string());
                }
            }
        }
        if info.int8_dot_product && info.api_version >= (1, 3, 0) && !self.integer_dot_product {
            m.push("shaderIntegerDotProduct".to_string());
        }
        if info.timeline_semaphore && !self.timeline_semaphore {
            m.push("timelineSemaphore".to_string());
        }
        m
    }

    /// The features vkllm enables on a device it creates with these choices.
    pub(crate) fn own(coopmat: bool, int8_dot: bool, timeline: bool) -> Self {
        HostFeatures {
            extensions: if coopmat {
                vec![COOP_EXT.to_string()]
            } else {
                Vec::new()
            },
            storage_16bit: coopmat,
            shader_float16: coopmat,
            vulkan_memory_model: coopmat,
            cooperative_matrix: coopmat,
            integer_dot_product: int8_dot,
            timeline_semaphore: timeline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The create info's extensions and chained feature structs are read, both the
    /// Vulkan 1.x aggregate structs and the individual ones; other structs are skipped.
    #[test]
    fn reads_the_create_info_chain() {
        let exts = [c"VK_KHR_cooperative_matrix".as_ptr()];
        let mut v11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(true)
            .uniform_and_storage_buffer16_bit_access(true);
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(true)
            .vulkan_memory_model(true)
            .vulkan_memory_model_device_scope(true);
        let mut other = vk::PhysicalDeviceRobustness2FeaturesEXT::default().null_descriptor(true);
        let mut coop =
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let ci = vk::DeviceCreateInfo::default()
            .enabled_extension_names(&exts)
            .push_next(&mut v11)
            .push_next(&mut other)
            .push_next(&mut v12)
            .push_next(&mut coop);
        // SAFETY: every pointer of `ci` is live for the call.
        let h = unsafe { HostFeatures::from_create_info(&ci) };
        assert_eq!(h.extensions, vec![COOP_EXT.to_string()]);
        assert!(h.storage_16bit && h.shader_float16 && h.vulkan_memory_model);
        assert!(h.cooperative_matrix && h.coop_enabled());
        assert!(!h.integer_dot_product);

        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(true);
        let mut v12_half = vk::PhysicalDeviceVulkan12Features::default()
            .vulkan_memory_model(true)
            .vulkan_memory_model_device_scope(false);
        let ci = vk::DeviceCreateInfo::default()
            .push_next(&mut dot)
            .push_next(&mut v12_half);
        // SAFETY: as above.
        let h = unsafe { HostFeatures::from_create_info(&ci) };
        assert!(h.integer_dot_product);
        assert!(h.extensions.is_empty());
        // Device scope off: the memory model does not count (every kernel's storageBarrier
        // needs it once the model is on).
        assert!(!h.vulkan_memory_model);
        assert!(!h.coop_enabled());
    }
}
