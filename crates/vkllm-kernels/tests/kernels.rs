//! Kernel-set tests that need no GPU: every entry point specialises and emits SPIR-V, and the
//! typed bindings reject bad shapes and small buffers.

use vkllm_kernels::matvec::{MatShape, Matvec};
use vkllm_kernels::{
    Error, KernelBuffer, Overrides, SpirvOptions, WeightType, all_kernels, compile_spirv,
};

#[derive(Clone, Copy)]
struct Fake(u64);
impl KernelBuffer for Fake {
    fn byte_len(&self) -> u64 {
        self.0
    }
}

#[test]
fn every_kernel_emits_spirv() {
    for k in all_kernels() {
        let words = compile_spirv(k, &Overrides::new(), SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(words[0], 0x0723_0203, "{}: not SPIR-V", k.name);
        assert!(words.len() > 50, "{}", k.name);
    }
}

#[test]
fn dtype_variants_emit_spirv() {
    for k in [
        &vkllm_kernels::matvec::MATVEC,
        &vkllm_kernels::matmul::MATMUL,
        &vkllm_kernels::embedding::EMBEDDING,
    ] {
        for dt in [WeightType::F32, WeightType::F16, WeightType::Bf16] {
            let o = Overrides::new().set("DTYPE", dt.code());
            compile_spirv(k, &o, SpirvOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        }
    }
    let o = Overrides::new()
        .set("HD", 256.0)
        .set("BK", 8.0)
        .set("KV_DTYPE", 1.0);
    compile_spirv(
        &vkllm_kernels::attention::ATTN_PREFILL,
        &o,
        SpirvOptions::default(),
    )
    .unwrap();
}

#[test]
fn unknown_override_is_an_error() {
    let o = Overrides::new().set("NO_SUCH_CONSTANT", 1.0);
    match compile_spirv(
        &vkllm_kernels::softmax::SOFTMAX,
        &o,
        SpirvOptions::default(),
    ) {
        Err(Error::Override {
            kernel: "softmax", ..
        }) => {}
        other => panic!(
            "expected an override error, got {:?}",
            other.map(|w| w.len())
        ),
    }
}

#[test]
fn overrides_are_order_independent() {
    let a = Overrides::new().set("A", 1.0).set("B", 2.0);
    let b = Overrides::new().set("B", 2.0).set("A", 1.0);
    assert_eq!(a, b);
    assert_eq!(a.to_string(), "{A=1,B=2}");
    assert_eq!(a.clone().set("A", 3.0).get("A"), Some(3.0));
}

#[test]
fn bindings_check_shapes_and_sizes() {
    let s = MatShape {
        dtype: WeightType::F16,
        rows: 4,
        cols: 7,
        row_offset: 0,
        accumulate: false,
    };
    let big = Fake(1 << 20);
    assert!(matches!(
        Matvec {
            w: big,
            x: big,
            y: big
        }
        .dispatch(&s),
        Err(Error::Shape {
            kernel: "matvec",
            ..
        })
    ));
    let s = MatShape { cols: 8, ..s };
    // 4 x 8 f16 = 64 bytes of weights.
    match (Matvec {
        w: Fake(60),
        x: big,
        y: big,
    })
    .dispatch(&s)
    {
        Err(Error::BufferTooSmall {
            binding: "w",
            need: 64,
            have: 60,
            ..
        }) => {}
        other => panic!("expected BufferTooSmall, got {:?}", other.map(|d| d.groups)),
    }
    let d = Matvec {
        w: Fake(64),
        x: big,
        y: big,
    }
    .dispatch(&s)
    .unwrap();
    assert_eq!(d.buffers.len(), d.kernel.bindings.len());
    assert_eq!(d.push.len() as u32, d.kernel.push_size);
    assert_eq!(d.groups, [2, 1, 1], "2 rows per workgroup");
}

#[test]
fn large_grids_fold_into_two_dimensions() {
    let k = &vkllm_kernels::softmax::SOFTMAX;
    assert_eq!(vkllm_kernels::grid_for(k, 151_936).unwrap(), [65535, 3, 1]);
    assert_eq!(vkllm_kernels::grid_for(k, 7).unwrap(), [7, 1, 1]);
    assert!(vkllm_kernels::grid_for(k, 0).is_err());
}

/// The sampler is compiled with NoContraction on every float add/sub/mul (no FMA fusion), other
/// kernels are not.
#[test]
fn exact_fp_kernels_forbid_contraction() {
    // OpDecorate (opcode 71, 3 words) with decoration NoContraction (42).
    let count = |w: &[u32]| {
        w.windows(3)
            .filter(|x| x[0] == (3 << 16 | 71) && x[2] == 42)
            .count()
    };
    let o = Overrides::new();
    let s = compile_spirv(&vkllm_kernels::sample::SAMPLE, &o, SpirvOptions::default()).unwrap();
    // OpFAdd/OpFSub/OpFMul results of the sampler: at least the 7 Horner steps of exp_s.
    assert!(
        count(&s) >= 14,
        "only {} NoContraction decorations",
        count(&s)
    );
    let m = compile_spirv(&vkllm_kernels::matvec::MATVEC, &o, SpirvOptions::default()).unwrap();
    assert_eq!(count(&m), 0);
}
