//! WGSL -> specialised SPIR-V with naga.

use std::borrow::Cow;

use crate::{Error, KernelSpec, Overrides};

/// Target properties that change the emitted SPIR-V.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpirvOptions {
    /// SPIR-V version (major, minor). 1.3 is the minimum for subgroup built-ins (Vulkan 1.1).
    pub version: (u8, u8),
    /// Apply the Vulkan-memory-model passes (`vmm.rs`: storage-buffer coherence on every module
    /// under that model, workgroup coherence on the kernels that rely on it); `false` keeps
    /// naga's output (the device tuning's `wg_coherent`).
    pub workgroup_coherent: bool,
    /// With `workgroup_coherent`, the workgroup pass on every module under the Vulkan memory
    /// model, not only the kernels listed as relying on it (the device tuning's
    /// `wg_coherent_all`; off: the others keep naga's workgroup accesses as measured).
    pub workgroup_coherent_all: bool,
    /// Drop the branches the resolved overrides make dead before writing SPIR-V (`prune.rs`);
    /// `false` (the default) keeps naga's output (the device tuning's `prune`).
    pub prune_dead_branches: bool,
}

impl Default for SpirvOptions {
    fn default() -> Self {
        SpirvOptions {
            version: (1, 3),
            workgroup_coherent: true,
            workgroup_coherent_all: false,
            prune_dead_branches: false,
        }
    }
}

/// Parses and validates `kernel`'s WGSL, resolves its `override` constants to `overrides`
/// (unset ones keep their WGSL defaults) and emits SPIR-V for its entry point alone; a GLSL
/// kernel's checked-in SPIR-V with its specialization constants set to `overrides` instead.
pub fn compile_spirv(
    kernel: &'static KernelSpec,
    overrides: &Overrides,
    opts: SpirvOptions,
) -> Result<Vec<u32>, Error> {
    if let Some(g) = kernel.glsl {
        return crate::glsl::specialize(kernel, g, overrides);
    }
    let module = naga::front::wgsl::parse_str(kernel.source).map_err(|e| Error::Parse {
        kernel: kernel.name,
        file: kernel.file,
        message: e.emit_to_string_with_path(kernel.source, kernel.file),
    })?;
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    );
    let info = validator.validate(&module).map_err(|e| Error::Validate {
        kernel: kernel.name,
        file: kernel.file,
        message: e.emit_to_string_with_path(kernel.source, kernel.file),
    })?;
    let mut constants = naga::back::PipelineConstants::default();
    for (name, value) in overrides.iter() {
        constants.insert(name.to_string(), value);
    }
    let stage = naga::ShaderStage::Compute;
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((stage, kernel.entry)),
        &constants,
    )
    .map_err(|e| Error::Override {
        kernel: kernel.name,
        overrides: overrides.to_string(),
        // The debug form names the failing expression (Display stops at the entry point).
        message: format!("{e} ({e:?})"),
    })?;
    let (module, info) = if opts.prune_dead_branches {
        let mut m = module.into_owned();
        if crate::prune::prune_constant_branches(&mut m) > 0 {
            let i = validator.validate(&m).map_err(|e| Error::Validate {
                kernel: kernel.name,
                file: kernel.file,
                message: format!(
                    "after pruning dead branches: {}",
                    e.emit_to_string_with_path(kernel.source, kernel.file)
                ),
            })?;
            (Cow::Owned(m), Cow::Owned(i))
        } else {
            (Cow::Owned(m), info)
        }
    } else {
        (module, info)
    };
    let options = naga::back::spv::Options {
        lang_version: opts.version,
        flags: naga::back::spv::WriterFlags::empty(),
        // Compute kernels have no shader I/O; lavapipe lacks StorageInputOutput16.
        use_storage_input_output_16: false,
        // With an empty binding map, "fake" means: keep the WGSL @group/@binding numbers.
        fake_missing_bindings: true,
        // Kernels check their own bounds; naga's clamps would hide out-of-range bugs and cost time.
        bounds_check_policies: naga::proc::BoundsCheckPolicies::default(),
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        emit_int_div_checks: false,
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: stage,
        entry_point: kernel.entry.to_string(),
    };
    let words =
        naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| {
            Error::Spirv {
                kernel: kernel.name,
                message: e.to_string(),
            }
        })?;
    // Under the Vulkan memory model (the cooperative-matrix kernels): every module gets the
    // storage-buffer pass that makes it valid there; kernels whose workgroup-memory traffic
    // relies on barriers also get the workgroup pass (see `vmm.rs`), the others keep naga's
    // workgroup accesses as measured.
    let vmm = opts.workgroup_coherent && crate::vmm::uses_vulkan_memory_model(&words);
    let malformed = |pass: &str| Error::Spirv {
        kernel: kernel.name,
        message: format!("malformed SPIR-V from naga ({pass} pass)"),
    };
    let words = if vmm && (opts.workgroup_coherent_all || COHERENT_WORKGROUP.contains(&kernel.name))
    {
        crate::vmm::workgroup_coherent(&words).ok_or_else(|| malformed("workgroup coherence"))?
    } else {
        words
    };
    let words = if vmm {
        crate::vmm::storage_coherent(&words).ok_or_else(|| malformed("storage coherence"))?
    } else {
        words
    };
    if kernel.exact_fp {
        no_contraction(&words).ok_or(Error::Spirv {
            kernel: kernel.name,
            message: "malformed SPIR-V from naga (NoContraction pass)".into(),
        })
    } else {
        Ok(words)
    }
}

/// Kernels that get `vmm::workgroup_coherent`.
const COHERENT_WORKGROUP: &[&str] = &["attn_prefill_coop2", "moe_grouped_coop"];

const OP_DECORATE: u32 = 71;
const OP_FADD: u32 = 129;
const OP_FSUB: u32 = 131;
const OP_FMUL: u32 = 133;
const OP_VECTOR_TIMES_SCALAR: u32 = 142;
const OP_DOT: u32 = 148;
const DECORATION_NO_CONTRACTION: u32 = 42;

/// Is `op` an annotation instruction (the section decorations must be added to)?
fn is_annotation(op: u32) -> bool {
    matches!(op, 71..=75 | 332 | 5632 | 5633)
}

/// Adds `OpDecorate %r NoContraction` for the result of every float add, subtract, multiply and
/// dot product, at the end of the module's annotation section. Returns `None` on a malformed
/// module.
pub(crate) fn no_contraction(words: &[u32]) -> Option<Vec<u32>> {
    const HEADER: usize = 5;
    if words.len() < HEADER {
        return None;
    }
    let mut results = Vec::new();
    let mut insert_at = None;
    let mut first_non_annotation_after = None;
    let mut i = HEADER;
    let mut seen_annotation = false;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let op = words[i] & 0xffff;
        if count == 0 || i + count > words.len() {
            return None;
        }
        if is_annotation(op) {
            seen_annotation = true;
            insert_at = Some(i + count);
        } else if !seen_annotation
            && first_non_annotation_after.is_none()
            && (op == 19 || op == 21 || op == 22 || (23..=39).contains(&op))
        {
            // First type declaration: decorations would go before it if there were none.
            first_non_annotation_after = Some(i);
        }
        if matches!(
            op,
            OP_FADD | OP_FSUB | OP_FMUL | OP_VECTOR_TIMES_SCALAR | OP_DOT
        ) && count >= 3
        {
            results.push(words[i + 2]);
        }
        i += count;
    }
    let at = insert_at.or(first_non_annotation_after)?;
    let mut out = Vec::with_capacity(words.len() + 3 * results.len());
    out.extend_from_slice(&words[..at]);
    for r in results {
        out.extend_from_slice(&[(3 << 16) | OP_DECORATE, r, DECORATION_NO_CONTRACTION]);
    }
    out.extend_from_slice(&words[at..]);
    Some(out)
}
