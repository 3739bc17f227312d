//! The micro-benchmarks (`vkllm_vk::bench`) run and report positive rates.

use vkllm_vk::kernels::WeightType;

use super::common;

#[test]
fn bench_reports_positive_rates() {
    let dev = common::device();
    let r = vkllm_vk::bench::bench_matmul(&dev, WeightType::F16, 256, 512, 1, 2).unwrap();
    assert!(
        r.ns > 0.0 && r.gb_per_s > 0.0 && r.gflop_per_s > 0.0,
        "{r:?}"
    );
    assert!(r.markdown_row().starts_with("| matvec | f16 | 256x512"));
    let d = vkllm_vk::bench::bench_dequant(&dev, WeightType::Q8_0, 64, 256, 2).unwrap();
    assert!(d.ns > 0.0 && d.gb_per_s > 0.0, "{d:?}");
    assert!(
        d.markdown_row()
            .starts_with("| dequant_f16 | q8_0 | 64x256")
    );
    dev.check_validation().unwrap();
}

#[test]
fn bench_matvec_reports_positive_rates() {
    use vkllm_vk::bench::{MatvecBench, MatvecFusion, bench_matvec};
    use vkllm_vk::kernels::matvec_fused::MatvecImpl;
    let dev = common::device();
    for (imp, fusion, n, copies) in [
        (MatvecImpl::Reference, MatvecFusion::Plain, 1, 1),
        (MatvecImpl::Fast, MatvecFusion::Plain, 3, 1),
        (MatvecImpl::Fast, MatvecFusion::Qkv, 1, 3),
        (MatvecImpl::Fast, MatvecFusion::GateUp, 2, 2),
    ] {
        let b = MatvecBench {
            last_only: false,
            dtype: WeightType::Q8_0,
            rows: 256,
            cols: 512,
            n,
            imp,
            fusion,
            tuning: None,
            iters: 4,
            copies,
        };
        let r = bench_matvec(&dev, &b).unwrap();
        assert!(r.ns > 0.0 && r.gb_per_s > 0.0, "{r:?}");
    }
    assert!(vkllm_vk::bench::bench_copy(&dev, 1 << 20, 2).unwrap() > 0.0);
    dev.check_validation().unwrap();
}
