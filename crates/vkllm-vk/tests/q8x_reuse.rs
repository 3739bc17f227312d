//! Tuning `q8a_xg1_reuse`: two one-column norm products of the same x on quantized activations
//! (as a DeltaNet layer's q/k/v and z) share one `quantize_act_q8` launch, a write to x between
//! them brings the second launch back, and the outputs are those of a launch per product (the
//! same codes: bit-identical) and the CPU's within the int8 kernels' error. Q8_0 weights, odd
//! row counts, outputs poisoned with NaN first.

mod common;

use vkllm_cpu::quant::{QuantType, dequantize_row, quantize_row};
use vkllm_vk::kernels::WeightType;
use vkllm_vk::kernels::matvec_fused::{MatvecImpl, NormPrologue};
use vkllm_vk::{Buffer, Device, MatvecPlan, MemoryKind, Recorder, Tensor};

const COLS: usize = 256;
const ROWS: [usize; 2] = [96, 33];

fn device(reuse: bool) -> Device {
    let mut opts = common::options();
    opts.tuning.matvec = Some(MatvecImpl::Int8);
    opts.tuning.q8a_xg = true;
    opts.tuning.q8a_xg1_norm = 64;
    opts.tuning.q8a_xg1_produce = false;
    opts.tuning.q8a_xg1_reuse = reuse;
    let dev = common::open(&opts);
    assert!(
        dev.int8_dot(),
        "this test needs integer dot products (lavapipe has them)"
    );
    dev
}

/// Both products' outputs, and the launches they recorded; `touch`: x copied onto itself
/// between them (a write to the activations the scratch was quantized from).
fn run(dev: &Device, w: &[Vec<u8>], x: &[f32], nw: &[f32], touch: bool) -> (Vec<Vec<f32>>, usize) {
    let ts: Vec<Tensor> = w
        .iter()
        .zip(ROWS)
        .map(|(b, rows)| Tensor::from_bytes(dev, "w", WeightType::Q8_0, rows, COLS, b).unwrap())
        .collect();
    let xb = dev.buffer_from("x", x).unwrap();
    let x2 = dev.buffer_from("x copy", x).unwrap();
    let nwb = dev.buffer_from("norm", nw).unwrap();
    let ys: Vec<Buffer> = ROWS
        .iter()
        .map(|&rows| {
            dev.create_buffer("y", 4 * rows as u64, MemoryKind::Device)
                .unwrap()
        })
        .collect();
    let mut r = Recorder::new(dev).unwrap();
    for y in &ys {
        r.fill(y.all(), f32::NAN.to_bits()).unwrap();
    }
    let before = r.dispatches();
    for (i, (t, y)) in ts.iter().zip(&ys).enumerate() {
        if touch && i == 1 {
            r.copy(x2.all(), xb.all()).unwrap();
        }
        let offsets = [0];
        let mut plan = MatvecPlan::new(1, t.rows, &offsets);
        plan.norm = Some((
            nwb.all(),
            NormPrologue {
                eps: 1e-6,
                offset: 0.0,
            },
        ));
        r.matvec_fused(&[t], xb.all(), y.all(), &plan).unwrap();
    }
    let launches = r.dispatches() - before;
    r.finish().unwrap().submit().unwrap();
    let out = ys
        .iter()
        .zip(ROWS)
        .map(|(y, rows)| dev.read_vec(y, rows).unwrap())
        .collect();
    (out, launches)
}

#[test]
fn norm_products_of_one_x_share_its_quantization() {
    let mut s = common::seed();
    let x = common::rand(&mut s, COLS, 1.0);
    let nw: Vec<f32> = common::rand(&mut s, COLS, 0.2)
        .iter()
        .map(|v| 1.0 + v)
        .collect();
    let w: Vec<Vec<u8>> = ROWS
        .iter()
        .map(|&rows| {
            quantize_row(QuantType::Q8_0, &common::rand(&mut s, rows * COLS, 0.1)).unwrap()
        })
        .collect();
    let mut xn = vec![0.0; COLS];
    vkllm_cpu::rmsnorm(&x, &nw, 1e-6, 0.0, &mut xn);
    let want: Vec<Vec<f32>> = w
        .iter()
        .zip(ROWS)
        .map(|(b, rows)| {
            let mut f = vec![0.0; rows * COLS];
            dequantize_row(QuantType::Q8_0, b, &mut f).unwrap();
            let mut y = vec![0.0; rows];
            vkllm_cpu::matmul(&f, rows, COLS, &xn, 1, &mut y);
            y
        })
        .collect();

    let reuse = device(true);
    let (shared, n_shared) = run(&reuse, &w, &x, &nw, false);
    let (touched, n_touched) = run(&reuse, &w, &x, &nw, true);
    drop(reuse);
    let each = device(false);
    let (own, n_own) = run(&each, &w, &x, &nw, false);
    // A quantize launch and a product launch per product, less the one shared.
    assert_eq!(n_own, 4, "a quantize launch per product");
    assert_eq!(
        n_shared, 3,
        "the second product reuses the first's quantization"
    );
    assert_eq!(n_touched, 4, "x written between them: quantized again");
    for (i, rows) in ROWS.iter().enumerate() {
        assert_eq!(
            shared[i], own[i],
            "product {i}: reused codes against its own"
        );
        assert_eq!(
            touched[i], own[i],
            "product {i}: x rewritten with the same values"
        );
        let scale = want[i].iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
        let d = vkllm_cpu::compare::diff(&shared[i], &want[i]);
        assert!(
            d.non_finite == 0 && d.max_abs <= 0.03 * scale && d.nmse <= 1e-3,
            "product {i} ({rows} rows) against the CPU: {d:?}"
        );
    }
}
