//! The few-token cooperative product (`matmul_narrow.wgsl`) specialises for every weight type it
//! takes, each token-tile count, split and X form, and rejects what it does not run.

use vkllm_kernels::matmul_coop::SplitScratch;
use vkllm_kernels::matmul_narrow::{MatmulNarrow, NarrowConfig, TYPES};
use vkllm_kernels::matvec::MatShape;
use vkllm_kernels::{KernelBuffer, SpirvOptions, WeightType, compile_spirv};

#[derive(Clone, Copy)]
struct Fake(u64);
impl KernelBuffer for Fake {
    fn byte_len(&self) -> u64 {
        self.0
    }
}

fn op() -> MatmulNarrow<Fake> {
    let big = Fake(1 << 30);
    MatmulNarrow {
        w: big,
        x: big,
        y: big,
    }
}

fn shape(dtype: WeightType, cols: usize) -> MatShape {
    MatShape {
        dtype,
        rows: 1000,
        cols,
        row_offset: 0,
        accumulate: false,
    }
}

fn scratch() -> SplitScratch<Fake> {
    SplitScratch {
        part: Fake(1 << 30),
        counters: Fake(1 << 20),
    }
}

#[test]
fn every_type_tile_count_and_split_specialises() {
    for t in TYPES {
        for (n, split, x_f16, sg, q6k_direct) in [
            (16, 1, false, 32, false),
            (33, 3, true, 32, true),
            (64, 2, false, 64, true),
            (5, 1, true, 32, false),
            (48, 1, false, 32, true),
        ] {
            let cfg = NarrowConfig {
                split,
                x_f16,
                q6k_direct,
            };
            let d = op()
                .dispatch(&shape(t, 4096), n, 1000, sg, &cfg, scratch())
                .unwrap();
            assert_eq!(d.groups, [16, 1, split]);
            // Q4_K with 128 invocations reads straight into registers (its own entry point);
            // Q6_K too where asked.
            let direct = t == WeightType::Q4_K && sg == 32;
            assert_eq!(d.kernel.entry == "main_q4k", direct, "{}", t.name());
            let direct6 = t == WeightType::Q6_K && sg == 32 && q6k_direct;
            assert_eq!(d.kernel.entry == "main_q6k", direct6, "{}", t.name());
            for prune in [false, true] {
                let opts = SpirvOptions {
                    prune_dead_branches: prune,
                    ..SpirvOptions::default()
                };
                let spv = compile_spirv(d.kernel, &d.overrides, opts);
                assert!(spv.is_ok(), "{} n {n}: {:?}", t.name(), spv.err());
            }
        }
    }
}

#[test]
fn rejects_what_it_does_not_run() {
    let cfg = NarrowConfig {
        split: 1,
        x_f16: false,
        q6k_direct: false,
    };
    let f16 = op().dispatch(&shape(WeightType::F16, 4096), 16, 1000, 32, &cfg, scratch());
    assert!(f16.is_err());
    let wide = op().dispatch(
        &shape(WeightType::Q4_K, 4096),
        65,
        1000,
        32,
        &cfg,
        scratch(),
    );
    assert!(wide.is_err());
    let small_part = SplitScratch {
        part: Fake(16),
        counters: Fake(16),
    };
    let short = op().dispatch(
        &shape(WeightType::Q4_K, 4096),
        16,
        1000,
        32,
        &cfg,
        small_part,
    );
    assert!(short.is_err());
    let too_split = NarrowConfig {
        split: 17,
        x_f16: false,
        q6k_direct: false,
    };
    let s = op().dispatch(
        &shape(WeightType::Q8_0, 4096),
        16,
        1000,
        32,
        &too_split,
        scratch(),
    );
    assert!(s.is_err());
}
