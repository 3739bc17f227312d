//! A GLSL kernel through the runtime: its checked-in SPIR-V (vkllm-kernels' test fixture
//! `spec_fill.comp`) specialized by overrides, bound, pushed and dispatched like a WGSL kernel.

use vkllm_vk::Recorder;
use vkllm_vk::kernels::{Dispatch, Overrides};

use super::common;

#[path = "../../../vkllm-kernels/tests/data/spec_fill.rs"]
mod spec_fill;

use spec_fill::FILL;

#[test]
fn glsl_kernel_runs_with_its_specialization() {
    let dev = common::device();
    let (n, len) = (100u32, 128usize);
    let y = dev.buffer_from("y", &vec![f32::NAN; len]).unwrap();
    for (mul, off, add, neg, wg) in [(3u32, -7i32, 0.25f32, true, 32u32), (1, 5, -0.5, false, 64)] {
        let d = Dispatch {
            kernel: &FILL,
            overrides: Overrides::new()
                .set("WG", wg as f64)
                .set("MUL", mul as f64)
                .set("OFF", off as f64)
                .set("ADD", add as f64)
                .set("NEG", neg as u32 as f64),
            buffers: vec![y.all()],
            push: n.to_le_bytes().to_vec(),
            groups: [n.div_ceil(wg), 1, 1],
            indirect: None,
        };
        let mut r = Recorder::new(&dev).unwrap();
        r.dispatch(d).unwrap();
        r.finish().unwrap().submit().unwrap();
        let got: Vec<f32> = dev.read_vec(&y, len).unwrap();
        for (i, g) in got.iter().enumerate() {
            if i < n as usize {
                let v = (i as i32 * mul as i32 + off) as f32 + add;
                assert_eq!(*g, if neg { -v } else { v }, "element {i}");
            } else {
                assert!(g.is_nan(), "element {i} past n was written");
            }
        }
    }
    dev.check_validation().unwrap();
}
