//! Cooperative matrices (VK_KHR_cooperative_matrix): the shapes a device offers, and the device
//! features the cooperative-matrix kernels (`matmul_coop.wgsl`) need enabled.
//!
//! naga emits those kernels with the capabilities CooperativeMatrixKHR, VulkanMemoryModel (and
//! the Vulkan memory model), Float16 and 16-bit storage, so the device must enable
//! `cooperativeMatrix`, `vulkanMemoryModel`, `shaderFloat16`, `storageBuffer16BitAccess` and
//! `uniformAndStorageBuffer16BitAccess`, and offer the 16 x 16 x 16 f16 x f16 + f32 -> f32 shape
//! at subgroup scope to compute shaders.

use ash::vk;

/// Element type of a cooperative matrix (`VkComponentTypeKHR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoopComponent {
    F16,
    F32,
    F64,
    Bf16,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    /// A value this build does not name (newer extensions: fp8, ...).
    Other(i32),
}

impl CoopComponent {
    pub(crate) fn from_vk(c: vk::ComponentTypeKHR) -> Self {
        match c.as_raw() {
            0 => Self::F16,
            1 => Self::F32,
            2 => Self::F64,
            3 => Self::S8,
            4 => Self::S16,
            5 => Self::S32,
            6 => Self::S64,
            7 => Self::U8,
            8 => Self::U16,
            9 => Self::U32,
            10 => Self::U64,
            // VK_COMPONENT_TYPE_BFLOAT16_KHR (VK_KHR_shader_bfloat16).
            1_000_141_000 => Self::Bf16,
            r => Self::Other(r),
        }
    }

    pub fn name(self) -> String {
        match self {
            Self::F16 => "f16".into(),
            Self::F32 => "f32".into(),
            Self::F64 => "f64".into(),
            Self::Bf16 => "bf16".into(),
            Self::S8 => "s8".into(),
            Self::S16 => "s16".into(),
            Self::S32 => "s32".into(),
            Self::S64 => "s64".into(),
            Self::U8 => "u8".into(),
            Self::U16 => "u16".into(),
            Self::U32 => "u32".into(),
            Self::U64 => "u64".into(),
            Self::Other(r) => format!("type#{r}"),
        }
    }
}

/// One entry of `vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR`: `C[M, N] = A[M, K] B[K, N] +
/// C` with these element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopMatShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub a: CoopComponent,
    pub b: CoopComponent,
    pub c: CoopComponent,
    pub result: CoopComponent,
    pub saturating: bool,
    /// Subgroup scope (the only scope naga's WGSL emits); else workgroup, device or queue family.
    pub subgroup_scope: bool,
}

impl CoopMatShape {
    /// The shape `matmul_coop.wgsl` uses.
    pub fn is_f16_16x16x16_f32(&self) -> bool {
        (self.m, self.n, self.k) == (16, 16, 16)
            && self.a == CoopComponent::F16
            && self.b == CoopComponent::F16
            && self.c == CoopComponent::F32
            && self.result == CoopComponent::F32
            && self.subgroup_scope
    }
}

impl std::fmt::Display for CoopMatShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}x{} ", self.m, self.n, self.k)?;
        fmt_types(f, [self.a, self.b, self.c, self.result], self.saturating)?;
        match self.subgroup_scope {
            true => Ok(()),
            false => write!(f, " (non-subgroup scope)"),
        }
    }
}

/// The device's cooperative-matrix shapes for compute shaders (empty when the extension, its
/// feature or compute-stage support is missing).
///
/// # Safety
/// `pd` must belong to `inst`, and the device must expose `VK_KHR_cooperative_matrix`.
pub(crate) unsafe fn query_shapes(
    entry: &ash::Entry,
    inst: &ash::Instance,
    pd: vk::PhysicalDevice,
) -> Vec<CoopMatShape> {
    let ext = ash::khr::cooperative_matrix::Instance::new(entry, inst);
    // SAFETY: the caller guarantees the extension is present on `pd`.
    match unsafe { ext.get_physical_device_cooperative_matrix_properties(pd) } {
        Ok(props) => props
            .iter()
            .map(|p| CoopMatShape {
                m: p.m_size,
                n: p.n_size,
                k: p.k_size,
                a: CoopComponent::from_vk(p.a_type),
                b: CoopComponent::from_vk(p.b_type),
                c: CoopComponent::from_vk(p.c_type),
                result: CoopComponent::from_vk(p.result_type),
                saturating: p.saturating_accumulation == vk::TRUE,
                subgroup_scope: p.scope == vk::ScopeKHR::SUBGROUP,
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// `A*B+C->R` element types (and ` sat` when saturating), as both shape lists print them.
fn fmt_types(
    f: &mut std::fmt::Formatter<'_>,
    [a, b, c, r]: [CoopComponent; 4],
    saturating: bool,
) -> std::fmt::Result {
    let sat = if saturating { " sat" } else { "" };
    write!(
        f,
        "{}*{}+{}->{}{sat}",
        a.name(),
        b.name(),
        c.name(),
        r.name()
    )
}

/// One entry of `vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV`
/// (VK_NV_cooperative_matrix2): matrices of these element types whose rows (M), columns (N) and
/// K are multiples of the granularities, at this scope and workgroup size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopFlexShape {
    pub m_granularity: u32,
    pub n_granularity: u32,
    pub k_granularity: u32,
    pub a: CoopComponent,
    pub b: CoopComponent,
    pub c: CoopComponent,
    pub result: CoopComponent,
    pub saturating: bool,
    pub workgroup_scope: bool,
    /// Invocations of the workgroup (workgroup scope; 0 where it does not apply).
    pub invocations: u32,
}

impl CoopFlexShape {
    /// f16 x f16 + f32 -> f32 at workgroup scope with `invocations` invocations.
    pub fn is_f16_f32_workgroup(&self, invocations: u32) -> bool {
        self.a == CoopComponent::F16
            && self.b == CoopComponent::F16
            && self.c == CoopComponent::F32
            && self.result == CoopComponent::F32
            && self.workgroup_scope
            && self.invocations == invocations
    }
}

impl std::fmt::Display for CoopFlexShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (m, n, k) = (self.m_granularity, self.n_granularity, self.k_granularity);
        write!(f, "{m}x{n}x{k} ")?;
        fmt_types(f, [self.a, self.b, self.c, self.result], self.saturating)?;
        match self.workgroup_scope {
            true => write!(f, " /{}", self.invocations),
            false => write!(f, " (subgroup)"),
        }
    }
}

/// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV` (this ash release predates it).
#[repr(C)]
#[derive(Clone, Copy)]
struct FlexDimsRaw {
    s_type: vk::StructureType,
    p_next: *mut std::ffi::c_void,
    m_granularity: u32,
    n_granularity: u32,
    k_granularity: u32,
    a_type: vk::ComponentTypeKHR,
    b_type: vk::ComponentTypeKHR,
    c_type: vk::ComponentTypeKHR,
    result_type: vk::ComponentTypeKHR,
    saturating_accumulation: vk::Bool32,
    scope: vk::ScopeKHR,
    workgroup_invocations: u32,
}

impl Default for FlexDimsRaw {
    fn default() -> Self {
        FlexDimsRaw {
            s_type: vk::StructureType::from_raw(1_000_593_001),
            p_next: std::ptr::null_mut(),
            m_granularity: 0,
            n_granularity: 0,
            k_granularity: 0,
            a_type: vk::ComponentTypeKHR::FLOAT16,
            b_type: vk::ComponentTypeKHR::FLOAT16,
            c_type: vk::ComponentTypeKHR::FLOAT16,
            result_type: vk::ComponentTypeKHR::FLOAT16,
            saturating_accumulation: vk::FALSE,
            scope: vk::ScopeKHR::SUBGROUP,
            workgroup_invocations: 0,
        }
    }
}

/// Most flexible-dimension entries read (a driver reporting more is cut off, not trusted with an
/// allocation of its choosing).
const MAX_FLEX_ENTRIES: u32 = 256;

type FlexDimsFn =
    unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut FlexDimsRaw) -> vk::Result;

/// The device's flexible-dimension cooperative-matrix entries (empty where the driver does not
/// export the query or it fails).
///
/// # Safety
/// `pd` must belong to `inst`, and the device must expose `VK_NV_cooperative_matrix2`.
pub(crate) unsafe fn query_flexible(
    entry: &ash::Entry,
    inst: &ash::Instance,
    pd: vk::PhysicalDevice,
) -> Vec<CoopFlexShape> {
    let name = c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV";
    // SAFETY: a valid instance and a NUL-terminated name.
    let Some(f) = (unsafe { entry.get_instance_proc_addr(inst.handle(), name.as_ptr()) }) else {
        return Vec::new();
    };
    // SAFETY: the loader returned this command's entry point, whose signature FlexDimsFn is.
    let f: FlexDimsFn = unsafe { std::mem::transmute(f) };
    let mut n = 0u32;
    // SAFETY: the two-call idiom; the first call writes only the count.
    if unsafe { f(pd, &mut n, std::ptr::null_mut()) } != vk::Result::SUCCESS {
        return Vec::new();
    }
    let mut raw = vec![FlexDimsRaw::default(); n.min(MAX_FLEX_ENTRIES) as usize];
    let mut got = raw.len() as u32;
    // SAFETY: `raw` holds `got` initialised structs of the command's output type.
    let r = unsafe { f(pd, &mut got, raw.as_mut_ptr()) };
    if r != vk::Result::SUCCESS && r != vk::Result::INCOMPLETE {
        return Vec::new();
    }
    raw.truncate(got as usize);
    raw.iter()
        .map(|p| CoopFlexShape {
            m_granularity: p.m_granularity,
            n_granularity: p.n_granularity,
            k_granularity: p.k_granularity,
            a: CoopComponent::from_vk(p.a_type),
            b: CoopComponent::from_vk(p.b_type),
            c: CoopComponent::from_vk(p.c_type),
            result: CoopComponent::from_vk(p.result_type),
            saturating: p.saturating_accumulation == vk::TRUE,
            workgroup_scope: p.scope == vk::ScopeKHR::WORKGROUP,
            invocations: p.workgroup_invocations,
        })
        .collect()
}

/// The feature structs enabled at device creation for the cooperative-matrix kernels.
#[derive(Default)]
pub(crate) struct CoopFeatures {
    pub storage16: vk::PhysicalDevice16BitStorageFeatures<'static>,
    pub f16: vk::PhysicalDeviceShaderFloat16Int8Features<'static>,
    pub memory_model: vk::PhysicalDeviceVulkanMemoryModelFeatures<'static>,
    pub coop: vk::PhysicalDeviceCooperativeMatrixFeaturesKHR<'static>,
}

impl CoopFeatures {
    pub(crate) fn enabled() -> Self {
        CoopFeatures {
            storage16: vk::PhysicalDevice16BitStorageFeatures::default()
                .storage_buffer16_bit_access(true)
                .uniform_and_storage_buffer16_bit_access(true),
            f16: vk::PhysicalDeviceShaderFloat16Int8Features::default().shader_float16(true),
            // Device scope too: with the memory model on, every kernel's device-scope barriers
            // (storageBarrier) need it (VUID-RuntimeSpirv-vulkanMemoryModel-06265).
            memory_model: vk::PhysicalDeviceVulkanMemoryModelFeatures::default()
                .vulkan_memory_model(true)
                .vulkan_memory_model_device_scope(true),
            coop: vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default()
                .cooperative_matrix(true),
        }
    }
}

pub(crate) const EXTENSION: &std::ffi::CStr = c"VK_KHR_cooperative_matrix";

/// VK_NV_cooperative_matrix2 (workgroup-scope matrices, reductions, per-element operations,
/// tensor addressing): the prefill attention `attention_prefill_cm2.comp` runs on it.
pub(crate) const EXTENSION_2: &std::ffi::CStr = c"VK_NV_cooperative_matrix2";

/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV` (this ash release predates the extension).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Coop2Features {
    s_type: vk::StructureType,
    p_next: *mut std::ffi::c_void,
    pub workgroup_scope: vk::Bool32,
    pub flexible_dimensions: vk::Bool32,
    pub reductions: vk::Bool32,
    pub conversions: vk::Bool32,
    pub per_element_operations: vk::Bool32,
    pub tensor_addressing: vk::Bool32,
    pub block_loads: vk::Bool32,
}

// SAFETY: the struct has the layout of VkPhysicalDeviceCooperativeMatrix2FeaturesNV, which
// extends both chains.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Coop2Features {}
unsafe impl vk::ExtendsDeviceCreateInfo for Coop2Features {}

impl Default for Coop2Features {
    fn default() -> Self {
        Coop2Features {
            s_type: vk::StructureType::from_raw(1_000_593_000),
            p_next: std::ptr::null_mut(),
            workgroup_scope: vk::FALSE,
            flexible_dimensions: vk::FALSE,
            reductions: vk::FALSE,
            conversions: vk::FALSE,
            per_element_operations: vk::FALSE,
            tensor_addressing: vk::FALSE,
            block_loads: vk::FALSE,
        }
    }
}

impl Coop2Features {
    /// Everything the cm2 kernels use, as reported by a device (block loads: not used).
    pub(crate) fn usable(&self) -> bool {
        [
            self.workgroup_scope,
            self.flexible_dimensions,
            self.reductions,
            self.conversions,
            self.per_element_operations,
            self.tensor_addressing,
        ]
        .iter()
        .all(|&f| f == vk::TRUE)
    }

    /// The features to enable at device creation.
    pub(crate) fn enabled() -> Self {
        Coop2Features {
            workgroup_scope: vk::TRUE,
            flexible_dimensions: vk::TRUE,
            reductions: vk::TRUE,
            conversions: vk::TRUE,
            per_element_operations: vk::TRUE,
            tensor_addressing: vk::TRUE,
            ..Default::default()
        }
    }
}
