//! The Vulkan instance: loader, optional validation (Khronos layer with synchronization
//! validation) and a debug-utils messenger that records every warning and error it reports.

use std::ffi::{CStr, c_void};
use std::sync::{Arc, Mutex};

use ash::vk;

use crate::Error;
use crate::error::{Result, vk_err};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// A validation message that is not a bug of ours: its ID, a text it must contain ("" for any),
/// and why it is expected.
#[derive(Clone, Copy, Debug)]
pub struct AllowedMessage {
    pub id: &'static str,
    pub needle: &'static str,
    pub why: &'static str,
}

const fn allow(id: &'static str, needle: &'static str, why: &'static str) -> AllowedMessage {
    AllowedMessage { id, needle, why }
}

/// Messages the validation layer may report that are not bugs of ours. Every other warning or
/// error fails the tests (and [`crate::Device::check_validation`]).
pub const VALIDATION_ALLOW_LIST: &[AllowedMessage] = &[
    // Debian 12's layer (1.3.239) is older than current drivers: it calls structs it does not
    // know in a VkDeviceCreateInfo pNext chain (e.g. the cooperative-matrix feature struct on
    // NVIDIA's driver 580) "unknown". Expected, not a caller bug.
    allow(
        "VUID-VkDeviceCreateInfo-pNext-pNext",
        "",
        "layer older than the driver: newer feature structs are unknown to it",
    ),
    // Same cause for properties/features queries through vkGetPhysicalDevice*2 chains.
    allow(
        "VUID-VkPhysicalDeviceProperties2-pNext-pNext",
        "",
        "layer older than the driver: newer property structs are unknown to it",
    ),
    allow(
        "VUID-VkPhysicalDeviceFeatures2-pNext-pNext",
        "",
        "layer older than the driver: newer feature structs are unknown to it",
    ),
    // The same layer predates SPV_KHR_cooperative_matrix: its SPIR-V checks reject the
    // extension and its capability (CooperativeMatrixKHR = 6022) in shaders the device accepts
    // (the device enables VK_KHR_cooperative_matrix before such a shader is created).
    allow(
        "UNASSIGNED-CoreValidation-Shader-InconsistentSpirv",
        "Invalid capability operand: 6022",
        "layer older than SPV_KHR_cooperative_matrix",
    ),
    allow(
        "VUID-VkShaderModuleCreateInfo-pCode-01090",
        "(Unhandled OpCapability)",
        "layer older than SPV_KHR_cooperative_matrix: its capability is unknown to it",
    ),
    allow(
        "VUID-VkShaderModuleCreateInfo-pCode-04146",
        "(SPV_KHR_cooperative_matrix)",
        "layer older than SPV_KHR_cooperative_matrix",
    ),
    // And it warns once per device created with the extension enabled.
    allow(
        "VUID_Undefined",
        "Device Extension VK_KHR_cooperative_matrix is not supported by this layer",
        "layer older than VK_KHR_cooperative_matrix",
    ),
];

/// Whether the validation layer is enabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validation {
    Off,
    /// Khronos validation with synchronization validation; fails if the layer is missing.
    On,
}

/// One message of the validation layer.
#[derive(Clone, Debug)]
pub struct ValidationMessage {
    pub severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    pub id_name: String,
    pub text: String,
}

impl ValidationMessage {
    pub fn allowed(&self) -> bool {
        VALIDATION_ALLOW_LIST
            .iter()
            .any(|a| self.id_name == a.id && self.text.contains(a.needle))
    }
}

impl std::fmt::Display for ValidationMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:?}] {}: {}", self.severity, self.id_name, self.text)
    }
}

pub(crate) type MessageLog = Arc<Mutex<Vec<ValidationMessage>>>;

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if data.is_null() || user.is_null() {
        return vk::FALSE;
    }
    // SAFETY: the layer passes a valid callback-data struct; `user` is the `Mutex` inside the
    // `Arc` that the owning `Instance` keeps alive until the messenger is destroyed.
    unsafe {
        let data = &*data;
        let text = |p: *const std::ffi::c_char| {
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        let msg = ValidationMessage {
            severity,
            id_name: text(data.p_message_id_name),
            text: text(data.p_message),
        };
        let log = &*(user as *const Mutex<Vec<ValidationMessage>>);
        if let Ok(mut v) = log.lock() {
            v.push(msg);
        }
    }
    vk::FALSE
}

/// A Vulkan instance (owned, or borrowed from a host application).
pub struct Instance {
    pub(crate) entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    pub(crate) api_version: u32,
    pub(crate) debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    pub(crate) log: MessageLog,
    pub(crate) owned: bool,
    pub(crate) validation: Validation,
}

fn load_entry() -> Result<ash::Entry> {
    // SAFETY: loading the system Vulkan loader library; ash checks the symbols it needs.
    unsafe { ash::Entry::load() }.map_err(|e| Error::NoLoader(e.to_string()))
}

impl Instance {
    /// Creates an instance (Vulkan 1.3 where the loader has it, else the loader's version,
    /// at least 1.1), with the validation layer when `validation` is `On`.
    pub fn new(validation: Validation) -> Result<Self> {
        let entry = load_entry()?;
        // SAFETY: plain queries on a loaded entry.
        let loader_version = unsafe { entry.try_enumerate_instance_version() }
            .map_err(vk_err("vkEnumerateInstanceVersion"))?
            .unwrap_or(vk::API_VERSION_1_0);
        if loader_version < vk::API_VERSION_1_1 {
            return Err(Error::MissingFeature {
                device: "Vulkan loader".into(),
                feature: "Vulkan 1.1 (subgroup operations)".into(),
            });
        }
        let api_version = loader_version.min(vk::API_VERSION_1_3);
        let app = vk::ApplicationInfo::default()
            .application_name(c"vkllm")
            .engine_name(c"vkllm")
            .api_version(api_version);
        let layers_available = unsafe { entry.enumerate_instance_layer_properties() }
            .map_err(vk_err("vkEnumerateInstanceLayerProperties"))?;
        let exts_available = unsafe { entry.enumerate_instance_extension_properties(None) }
            .map_err(vk_err("vkEnumerateInstanceExtensionProperties"))?;
        let has_ext = |name: &CStr| {
            exts_available
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(name))
        };
        let mut layers = Vec::new();
        let mut exts = Vec::new();
        let on = validation == Validation::On;
        if on {
            if !layers_available
                .iter()
                .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER))
            {
                return Err(Error::ValidationUnavailable);
            }
            layers.push(VALIDATION_LAYER.as_ptr());
        }
        let debug_ext = ash::ext::debug_utils::NAME;
        let use_debug = on && has_ext(debug_ext);
        if on && !use_debug {
            return Err(Error::MissingFeature {
                device: "Vulkan loader".into(),
                feature: "VK_EXT_debug_utils (needed to collect validation messages)".into(),
            });
        }
        if use_debug {
            exts.push(debug_ext.as_ptr());
        }
        // The layer provides VK_EXT_validation_features (the struct that turns on
        // synchronization validation); name it so the layer honours the struct.
        if on {
            exts.push(c"VK_EXT_validation_features".as_ptr());
        }
        let portability = ash::khr::portability_enumeration::NAME;
        let mut flags = vk::InstanceCreateFlags::empty();
        if has_ext(portability) {
            exts.push(portability.as_ptr());
            flags |= vk::InstanceCreateFlags::ENUMERATE_PORTABILITY_KHR;
        }
        let log: MessageLog = Arc::new(Mutex::new(Vec::new()));
        let user = Arc::as_ptr(&log) as *mut c_void;
        let mut messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                    | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
            )
            // Validation and performance findings only: GENERAL messages are the loader's and
            // the layer's own chatter (e.g. a driver manifest it could not open), not API misuse.
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(on_message))
            .user_data(user);
        let enabled = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled);
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&exts)
            .flags(flags);
        if on {
            info = info.push_next(&mut messenger_info).push_next(&mut features);
        }
        // SAFETY: every pointer in `info` outlives the call.
        let raw = unsafe { entry.create_instance(&info, None) }.map_err(|r| match r {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => Error::NoDevices,
            r => vk_err("vkCreateInstance")(r),
        })?;
        let debug = if use_debug {
            let du = ash::ext::debug_utils::Instance::new(&entry, &raw);
            // SAFETY: valid instance; the callback's user data (the log) outlives the messenger.
            match unsafe { du.create_debug_utils_messenger(&messenger_info, None) } {
                Ok(m) => Some((du, m)),
                Err(r) => {
                    unsafe { raw.destroy_instance(None) };
                    return Err(vk_err("vkCreateDebugUtilsMessengerEXT")(r));
                }
            }
        } else {
            None
        };
        Ok(Instance {
            entry,
            raw,
            api_version,
            debug,
            log,
            owned: true,
            validation,
        })
    }

    /// Wraps a host application's instance (not destroyed on drop). `api_version` is the version
    /// the host created it with.
    ///
    /// # Safety
    /// `raw` must be a valid instance created from `entry` and outlive the returned value and
    /// everything made from it.
    pub unsafe fn from_raw(entry: ash::Entry, raw: ash::Instance, api_version: u32) -> Self {
        Instance {
            entry,
            raw,
            api_version,
            debug: None,
            log: Arc::new(Mutex::new(Vec::new())),
            owned: false,
            validation: Validation::Off,
        }
    }

    pub fn validation(&self) -> Validation {
        self.validation
    }

    /// The Vulkan API version the instance was created for.
    pub fn api_version(&self) -> u32 {
        self.api_version
    }

    pub fn entry(&self) -> &ash::Entry {
        &self.entry
    }

    pub fn raw(&self) -> &ash::Instance {
        &self.raw
    }

    /// Takes the messages recorded since the last call (allowed ones included).
    pub fn take_messages(&self) -> Vec<ValidationMessage> {
        match self.log.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: the messenger and instance were created by us; nothing uses them any more.
        unsafe {
            if let Some((du, m)) = self.debug.take() {
                du.destroy_debug_utils_messenger(m, None);
            }
            if self.owned {
                self.raw.destroy_instance(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str, text: &str) -> ValidationMessage {
        ValidationMessage {
            severity: vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
            id_name: id.to_string(),
            text: text.to_string(),
        }
    }

    #[test]
    fn old_layer_cooperative_matrix_reports_are_allowed_and_nothing_else() {
        // As the Debian 12 layer printed them on the H200 for matmul_coop.
        let coop = [
            msg(
                "UNASSIGNED-CoreValidation-Shader-InconsistentSpirv",
                "SPIR-V module not valid: Invalid capability operand: 6022",
            ),
            msg(
                "VUID-VkShaderModuleCreateInfo-pCode-01090",
                "vkCreateShaderModule(): A SPIR-V Capability (Unhandled OpCapability) was \
                 declared that is not supported by Vulkan.",
            ),
            msg(
                "VUID-VkShaderModuleCreateInfo-pCode-04146",
                "vkCreateShaderModule(): A SPIR-V Extension (SPV_KHR_cooperative_matrix) was \
                 declared that is not supported by Vulkan.",
            ),
            msg(
                "VUID_Undefined",
                "Validation Warning: [ VUID_Undefined ] | Device Extension \
                 VK_KHR_cooperative_matrix is not supported by this layer.  Using this extension \
                 may adversely affect validation results and/or produce undefined behavior.",
            ),
        ];
        assert!(coop.iter().all(|m| m.allowed()));
        // The same IDs about anything else still fail.
        let other = [
            msg(
                "UNASSIGNED-CoreValidation-Shader-InconsistentSpirv",
                "SPIR-V module not valid: Invalid capability operand: 5009",
            ),
            msg(
                "VUID-VkShaderModuleCreateInfo-pCode-01090",
                "vkCreateShaderModule(): A SPIR-V Capability (Int64Atomics) was declared that \
                 is not supported by Vulkan.",
            ),
            msg(
                "VUID-VkShaderModuleCreateInfo-pCode-04146",
                "vkCreateShaderModule(): A SPIR-V Extension (SPV_KHR_ray_query) was declared \
                 that is not supported by Vulkan.",
            ),
            msg("VUID-vkCmdDispatch-None-02697", "anything"),
            msg(
                "VUID_Undefined",
                "Device Extension VK_EXT_foo is not supported by this layer.",
            ),
        ];
        assert!(other.iter().all(|m| !m.allowed()));
    }
}
