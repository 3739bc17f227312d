//! The grouped MoE expert products on cooperative matrices specialise for every quantized weight
//! type and subgroup size they accept, and reject subgroup sizes they do not run.

use vkllm_kernels::moe_experts_grouped::MoeExpertsGrouped;
use vkllm_kernels::moe_experts_quant::MoeQuantShape;
use vkllm_kernels::{KernelBuffer, SpirvOptions, WeightType, compile_spirv};

#[derive(Clone, Copy)]
struct Fake(u64);
impl KernelBuffer for Fake {
    fn byte_len(&self) -> u64 {
        self.0
    }
}

fn op() -> MoeExpertsGrouped<Fake> {
    let big = Fake(1 << 30);
    MoeExpertsGrouped {
        x: big,
        ids: big,
        weights: big,
        gate: big,
        up: big,
        down: big,
        act: big,
        y: big,
        lists: big,
        out: big,
    }
}

fn shape(t: WeightType) -> MoeQuantShape {
    MoeQuantShape {
        n: 77,
        top_k: 4,
        hidden: 768,
        ff: 512,
        n_experts: 16,
        gate: t,
        up: t,
        down: t,
    }
}

#[test]
fn every_weight_type_and_subgroup_size_specialises() {
    for t in WeightType::QUANTIZED {
        for sg in [16, 32, 64] {
            let ds = op().dispatch_coop(&shape(t), sg).unwrap();
            for d in &ds[1..4] {
                assert_eq!(d.kernel.name, "moe_grouped_coop");
                for prune in [false, true] {
                    let opts = SpirvOptions {
                        prune_dead_branches: prune,
                        ..SpirvOptions::default()
                    };
                    let spv = compile_spirv(d.kernel, &d.overrides, opts);
                    assert!(spv.is_ok(), "{} sg {sg}: {:?}", t.name(), spv.err());
                }
            }
        }
    }
}

#[test]
fn other_subgroup_sizes_are_refused() {
    for sg in [8, 128] {
        assert!(op().dispatch_coop(&shape(WeightType::Q4_K), sg).is_err());
    }
}
