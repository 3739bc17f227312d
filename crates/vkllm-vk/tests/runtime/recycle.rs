//! Recording objects reused across recorders (`vkllm-vk/src/recycle.rs`).

use vkllm_vk::Recorder;
use vkllm_vk::kernels::elementwise::Add;

use super::common;

/// A dropped recording's command pool, fence and descriptor pools go to the device's spares and
/// the next recorder takes them: the reused descriptor pools (150 dispatches fill 3 of 64 sets)
/// are reset, and a longer recording adds pools to them; every sum comes out right.
#[test]
fn recorders_reuse_the_objects_of_dropped_recordings() {
    let dev = common::device();
    let n = 257;
    let one = dev.buffer_from("one", &vec![1.0f32; n]).unwrap();
    let x = dev.buffer_from("x", &vec![0.0f32; n]).unwrap();
    let y = dev.buffer_from("y", &vec![0.0f32; n]).unwrap();
    let keep = dev.tuning().recycle;
    let mut total = 0;
    for (round, adds) in [150usize, 200, 10].into_iter().enumerate() {
        let spares = dev.spare_recordings();
        let mut r = Recorder::new(&dev).unwrap();
        assert_eq!(
            dev.spare_recordings(),
            spares.saturating_sub(1),
            "round {round}"
        );
        // x -> y -> x ...: an even count leaves the sum in x.
        for i in 0..adds {
            let (src, dst) = if i % 2 == 0 { (&x, &y) } else { (&y, &x) };
            r.dispatch(
                Add {
                    a: src.all(),
                    b: one.all(),
                    out: dst.all(),
                }
                .dispatch(n)
                .unwrap(),
            )
            .unwrap();
        }
        let rec = r.finish().unwrap();
        rec.submit().unwrap();
        total += adds;
        let got: Vec<f32> = dev.read_vec(&x, n).unwrap();
        assert!(
            got.iter().all(|&v| v == total as f32),
            "round {round}: {} after {total} adds",
            got[0]
        );
        let before = dev.spare_recordings();
        drop(rec);
        let want = if keep {
            (before + 1).min(vkllm_vk::MAX_SPARES)
        } else {
            0
        };
        assert_eq!(dev.spare_recordings(), want, "round {round}");
    }
    dev.check_validation().unwrap();
}
