//! Resident f16 copies of quantized weights (`Device::keep_f16`, tuning `dequant_keep_mb`):
//! made once within the budget as the f16 rounding of the weight's values, the same buffer on
//! every later call, refused past the budget and for weights that are not quantized, and their
//! bytes given back when the weight drops.

use vkllm_cpu::QuantType;
use vkllm_vk::kernels::WeightType;
use vkllm_vk::{Buffer, Device, Tensor, Tuning};

use super::common;

const KIB: u64 = 1024;

/// A `rows x cols` weight of `dtype` quantized from seeded values, and its values as vkllm-cpu
/// dequantizes them.
fn weight(
    dev: &Device,
    dtype: WeightType,
    rows: usize,
    cols: usize,
    seed: u64,
) -> (Tensor, Vec<f32>) {
    let ty = QuantType::from_ggml_id(dtype.ggml_id()).unwrap();
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let x: Vec<f32> = (0..rows * cols)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect();
    let bytes = vkllm_cpu::quantize_rows(ty, &x, cols).unwrap();
    let want = vkllm_cpu::dequant_f16(ty, &bytes, rows, cols).unwrap();
    let t = Tensor::from_bytes(dev, "w", dtype, rows, cols, &bytes).unwrap();
    (t, want)
}

/// Every half of `copy` is one of the two f16 neighbours of the value it stands for.
fn assert_halves_of(dev: &Device, copy: &Buffer, want: &[f32]) {
    let got: Vec<u16> = dev.read_vec(copy, want.len()).unwrap();
    for (i, (&g, &v)) in got.iter().zip(want).enumerate() {
        let (lo, hi) = vkllm_cpu::f16_neighbours(v);
        assert!(
            g == lo.to_bits() || g == hi.to_bits(),
            "element {i}: {} for {v}",
            half::f16::from_bits(g)
        );
    }
}

/// A device with tuning `spec` (empty: the defaults), serialised with the other GPU tests.
fn open_with(spec: &str) -> (impl Drop, Device) {
    let serial = common::device();
    let mut opts = common::options();
    opts.tuning = Tuning::parse(spec).unwrap();
    (serial, common::open(&opts))
}

#[test]
fn resident_f16_copies_stay_within_the_budget() {
    let (_serial, dev) = open_with("dequant_keep_mb=1");
    assert_eq!(dev.kept_f16_bytes(), 0);

    // 256 x 1024 Q4_K: a 512 KiB copy.
    let (a, want_a) = weight(&dev, WeightType::Q4_K, 256, 1024, 1);
    let ka = dev.keep_f16(&a).unwrap().expect("512 KiB fits 1 MiB");
    assert_eq!(dev.kept_f16_bytes(), 512 * KIB);
    assert_halves_of(&dev, &ka, &want_a);
    let again = dev.keep_f16(&a).unwrap().expect("kept");
    assert_eq!(again.raw(), ka.raw(), "a second call returns the same copy");
    assert_eq!(dev.kept_f16_bytes(), 512 * KIB);

    // 192 x 1024 Q8_0: 384 KiB more (896 KiB held).
    let (b, want_b) = weight(&dev, WeightType::Q8_0, 192, 1024, 2);
    let kb = dev
        .keep_f16(&b)
        .unwrap()
        .expect("384 KiB fits the 512 KiB left");
    assert_halves_of(&dev, &kb, &want_b);
    assert_eq!(dev.kept_f16_bytes(), 896 * KIB);

    // 128 x 1024 Q4_K: 256 KiB, past the 128 KiB left.
    let (c, want_c) = weight(&dev, WeightType::Q4_K, 128, 1024, 3);
    assert!(dev.keep_f16(&c).unwrap().is_none());
    assert_eq!(dev.kept_f16_bytes(), 896 * KIB);

    // Not quantized: no copy.
    let f = Tensor::from_bytes(&dev, "f", WeightType::F16, 16, 64, &[0u8; 2 * 16 * 64]).unwrap();
    assert!(dev.keep_f16(&f).unwrap().is_none());

    // The first weight drops: its 512 KiB come back, and the third fits.
    drop((a, ka, again));
    assert_eq!(dev.kept_f16_bytes(), 384 * KIB);
    let kc = dev.keep_f16(&c).unwrap().expect("256 KiB fits now");
    assert_halves_of(&dev, &kc, &want_c);
    assert_eq!(dev.kept_f16_bytes(), 640 * KIB);
    let messages = dev.take_validation_messages();
    assert!(messages.is_empty(), "{messages:?}");
}

#[test]
fn no_resident_copies_without_a_budget() {
    let (_serial, dev) = open_with("dequant_keep_mb=0");
    let (a, _) = weight(&dev, WeightType::Q4_K, 64, 256, 4);
    assert!(dev.keep_f16(&a).unwrap().is_none());
    assert_eq!(dev.kept_f16_bytes(), 0);
}

#[test]
fn the_default_keeps_copies_while_the_heap_has_room() {
    let (_serial, dev) = open_with("");
    assert_eq!(dev.tuning().dequant_keep_mb, None);
    // A 64 KiB copy on a device that has allocated a few MiB of a heap of GiBs.
    let (a, want) = weight(&dev, WeightType::Q4_K, 64, 512, 5);
    let ka = dev.keep_f16(&a).unwrap().expect("room in the heap");
    assert_halves_of(&dev, &ka, &want);
    assert_eq!(dev.kept_f16_bytes(), 64 * KIB);
}

#[test]
fn released_copies_free_their_bytes_and_auto_makes_no_more() {
    let (_serial, dev) = open_with("");
    let (a, _) = weight(&dev, WeightType::Q4_K, 64, 512, 6);
    let (b, _) = weight(&dev, WeightType::Q8_0, 32, 512, 7);
    let ka = dev.keep_f16(&a).unwrap().expect("room in the heap");
    dev.keep_f16(&b).unwrap().expect("room in the heap");
    assert_eq!(dev.kept_f16_bytes(), 96 * KIB);
    // A copy still read by someone (here `ka`) is released from the weight all the same.
    assert_eq!(dev.release_kept_f16(), 96 * KIB);
    assert_eq!(dev.kept_f16_bytes(), 0);
    assert_eq!(dev.release_kept_f16(), 0, "nothing left to release");
    // After memory pressure `auto` makes no more copies; the weights work without them.
    assert!(dev.keep_f16(&a).unwrap().is_none());
    assert_eq!(dev.kept_f16_bytes(), 0);
    drop(ka);
    let messages = dev.take_validation_messages();
    assert!(messages.is_empty(), "{messages:?}");
}
