//! GLSL kernels' specialization (`GlslKernel`): overrides set the specialization constants of
//! the checked-in SPIR-V (the fixture `data/spec_fill.comp`, compiled by glslc), and names or
//! values the module cannot take are errors naming the kernel.

#[path = "data/spec_fill.rs"]
mod spec_fill;

use spec_fill::FILL;
use vkllm_kernels::{GlslKernel, KernelSpec, Overrides, SpirvOptions, compile_spirv};

/// (spec id -> (opcode, value word)) of the module's specialization constants.
fn spec_constants(words: &[u32]) -> std::collections::HashMap<u32, (u32, u32)> {
    let mut ids = std::collections::HashMap::new();
    let mut consts = std::collections::HashMap::new();
    let mut i = 5;
    while i < words.len() {
        let (op, n) = (words[i] & 0xffff, (words[i] >> 16) as usize);
        if op == 71 && n == 4 && words[i + 2] == 1 {
            ids.insert(words[i + 1], words[i + 3]);
        }
        if (48..=50).contains(&op) {
            consts.insert(words[i + 2], (op, if op == 50 { words[i + 3] } else { 0 }));
        }
        i += n;
    }
    ids.into_iter()
        .map(|(target, id)| (id, consts[&target]))
        .collect()
}

#[test]
fn overrides_set_the_specialization_constants() {
    let base = compile_spirv(&FILL, &Overrides::new(), SpirvOptions::default()).unwrap();
    let c = spec_constants(&base);
    // glslc's defaults: the workgroup size 1, MUL 1, OFF 0, ADD 0.0, NEG false.
    assert_eq!(c[&0], (50, 1));
    assert_eq!(c[&1], (50, 1));
    assert_eq!(c[&2], (50, 0));
    assert_eq!(c[&3], (50, 0f32.to_bits()));
    assert_eq!(c[&4].0, 49);
    let o = Overrides::new()
        .set("WG", 64.0)
        .set("MUL", 3.0)
        .set("OFF", -7.0)
        .set("ADD", 0.25)
        .set("NEG", 1.0);
    let words = compile_spirv(&FILL, &o, SpirvOptions::default()).unwrap();
    let c = spec_constants(&words);
    assert_eq!(c[&0], (50, 64));
    assert_eq!(c[&1], (50, 3));
    assert_eq!(c[&2], (50, (-7i32) as u32));
    assert_eq!(c[&3], (50, 0.25f32.to_bits()));
    assert_eq!(c[&4].0, 48);
    // Everything else is the module as glslc wrote it.
    assert_eq!(words.len(), base.len());
    let changed = words.iter().zip(&base).filter(|(a, b)| a != b).count();
    assert_eq!(changed, 5);
}

#[test]
fn bad_overrides_are_errors_naming_the_kernel() {
    for o in [
        Overrides::new().set("NOPE", 1.0),
        Overrides::new().set("GONE", 1.0),
        Overrides::new().set("MUL", -1.0),
        Overrides::new().set("MUL", 1.5),
        Overrides::new().set("OFF", 3e9),
    ] {
        let e = compile_spirv(&FILL, &o, SpirvOptions::default()).unwrap_err();
        assert!(e.to_string().contains("spec_fill"), "{e}");
    }
}

#[test]
fn malformed_modules_are_errors() {
    static SHORT: GlslKernel = GlslKernel {
        spirv: &[3, 2, 35, 7, 0, 0],
        spec_ids: &[],
    };
    static TRUNCATED: GlslKernel = GlslKernel {
        spirv: &[
            3, 2, 35, 7, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 17, 0, 9, 0,
        ],
        spec_ids: &[],
    };
    for g in [&SHORT, &TRUNCATED] {
        let k: &'static KernelSpec = Box::leak(Box::new(KernelSpec {
            glsl: Some(g),
            ..clone_spec(&FILL)
        }));
        assert!(compile_spirv(k, &Overrides::new(), SpirvOptions::default()).is_err());
    }
}

fn clone_spec(k: &KernelSpec) -> KernelSpec {
    KernelSpec {
        name: k.name,
        file: k.file,
        entry: k.entry,
        source: k.source,
        bindings: k.bindings,
        push_size: k.push_size,
        exact_fp: k.exact_fp,
        glsl: k.glsl,
    }
}
