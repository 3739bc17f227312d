//! Tunings are per device (`vkllm_vk::Tuning` in `DeviceOptions`), not process globals.

use vkllm_vk::kernels::WeightType;
use vkllm_vk::{MemoryKind, Recorder, Tensor, Tuning};

use super::common;

/// Two devices with two tunings in one process: the default matvec and `matvec=reference` each
/// record their own kernel for the same product (no process-global setting), and both give the
/// CPU's result.
#[test]
fn two_tunings_side_by_side() {
    let _serial = common::device();
    let reference = Tuning::parse("matvec=reference,recycle=0").unwrap();
    let mut opts = common::options();
    let default_dev = common::open(&opts);
    opts.tuning = reference.clone();
    let ref_dev = common::open(&opts);
    assert_eq!(ref_dev.tuning(), &reference);
    assert_eq!(default_dev.tuning(), &common::options().tuning);
    let (rows, cols) = (64usize, 128usize);
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let x: Vec<f32> = (0..cols).map(|i| ((i % 5) as f32 - 2.0) / 4.0).collect();
    let want: Vec<f32> = (0..rows)
        .map(|r| (0..cols).map(|c| w[r * cols + c] * x[c]).sum())
        .collect();
    let mut kernels = Vec::new();
    for dev in [&default_dev, &ref_dev] {
        let t = Tensor::from_bytes(
            dev,
            "w",
            WeightType::F32,
            rows,
            cols,
            bytemuck::cast_slice(&w),
        )
        .unwrap();
        let xb = dev.buffer_from("x", &x).unwrap();
        let y = dev
            .create_buffer("y", 4 * rows as u64, MemoryKind::Device)
            .unwrap();
        let mut r = Recorder::with_timestamps(dev, 8).unwrap();
        r.matvec(&t, xb.all(), y.all(), false).unwrap();
        let rec = r.finish().unwrap();
        rec.submit().unwrap();
        kernels.push(
            rec.timings()
                .unwrap()
                .iter()
                .map(|d| d.label)
                .collect::<Vec<_>>(),
        );
        let got: Vec<f32> = dev.read_vec(&y, rows).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
        }
        dev.check_validation().unwrap();
    }
    assert_ne!(
        kernels[0], kernels[1],
        "the two tunings recorded the same kernels"
    );
    assert!(
        kernels[1].iter().all(|k| k.starts_with("matvec")),
        "{kernels:?}"
    );
}
