//! The GLSL fixture kernel `spec_fill.comp` as a KernelSpec (shared by vkllm-kernels'
//! specialization tests and vkllm-vk's runtime test). `GONE` names a constant id the module
//! does not have.

use vkllm_kernels::{Access, BindingSpec, GlslKernel, KernelSpec};

pub static FILL_GLSL: GlslKernel = GlslKernel {
    spirv: include_bytes!("spec_fill.spv"),
    spec_ids: &[
        ("WG", 0),
        ("MUL", 1),
        ("OFF", 2),
        ("ADD", 3),
        ("NEG", 4),
        ("GONE", 9),
    ],
};

pub static FILL: KernelSpec = KernelSpec {
    name: "spec_fill",
    file: "spec_fill.comp",
    entry: "main",
    source: "",
    bindings: &[BindingSpec {
        name: "y",
        access: Access::Write,
    }],
    push_size: 4,
    exact_fp: false,
    glsl: Some(&FILL_GLSL),
};
