//! Parity cases: `matvec_q8a.wgsl`'s `main_qout` (an accumulating one-column int8 product that
//! then quantizes its output for the next product's norm prologue). Its y must equal the plain
//! launch's (`main`, the same product code and launch shape) bit for bit; its codes, scales,
//! sums and chunk sums of squares are checked against vkllm-cpu's `quantize_act_q8` of that y
//! times `offset + norm_w`, as `quantize_act_q8.wgsl`'s rows are. Launch shapes where a 32-row
//! unit spans several workgroups (8 rows each; 24, unaligned), where workgroups hold whole
//! units, and partial last chunks; two rounds on one counter buffer, which must end zero.

use vkllm_kernels::WeightType;
use vkllm_kernels::matvec_fused::{Epilogue, MatvecFused, MatvecOp};
use vkllm_kernels::matvec_q8a::{Q8aRules, QuantOut};
use vkllm_kernels::quantize_act_q8::ActQ8Layout;

use super::quant::weights;
use super::quantize_act_q8::compare;
use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, row};
use vkllm_vk::Result;
use vkllm_vk::{BufSlice, Buffer, Device};

const KERNEL: &str = "matvec_q8a_qout";

pub(crate) fn matvec_q8a_qout(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if !dev.int8_dot() || dev.info().min_subgroup_size < 4 {
        return Ok(vec![KernelParityRow::not_applicable(
            KERNEL,
            "all",
            "no integer dot products or subgroups of fewer than 4 lanes",
        )]);
    }
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    // (type, rows, cols, workgroups rule (0: the default), norm offset)
    for (dtype, rows, cols, wgs, offset) in [
        (WeightType::Q4_K, 1056, 2048, 0, 0.0),
        (WeightType::Q8_0, 1056, 1024, 44, 1.0),
        (WeightType::Q6_K, 2080, 512, 0, 0.0),
        (WeightType::Q4_0, 96, 32, 0, 0.0),
    ] {
        let mut op = MatvecOp::plain(dtype, rows, cols);
        op.epilogue = Epilogue::Accumulate;
        op.q8a = Q8aRules {
            workgroups: wgs,
            ..Q8aRules::default()
        };
        let (mut bytes, _) = weights(&mut rng, dtype, rows, cols, false)?;
        bytes.resize(bytes.len().next_multiple_of(16), 0);
        let wb = cx.input("w", &bytes)?;
        let nw = rng.vec(rows, -1.5, 1.5);
        let nwb = cx.input("next_norm_w", &nw)?;
        let l = ActQ8Layout { cols: rows, n: 1 };
        let ctl_words = (QuantOut::<()>::ctl_bytes(rows) / 4) as usize;
        let ctl = cx.input("ctl", &vec![0u32; ctl_words])?;
        for round in 0..2 {
            let x = rng.vec(cols, -1.0, 1.0);
            let y0 = rng.vec(rows, -2.0, 2.0);
            let xb = cx.input("x", &x)?;
            let y_plain = cx.input("y plain", &y0)?;
            let y = cx.input("y", &y0)?;
            let q = cx.output("codes", rows / 4)?;
            let m = cx.output("meta", (l.meta_bytes() / 4) as usize)?;
            cx.run(&[&q, &m], |r| {
                r.dispatch(launch(&wb, &xb, &y_plain).dispatch_q8a(&op)?)?;
                let qo = QuantOut {
                    norm_w: nwb.all(),
                    offset,
                    codes: q.all(),
                    meta: m.all(),
                    ctl: ctl.all(),
                };
                r.dispatch(launch(&wb, &xb, &y).dispatch_q8a_qout(&op, qo)?)
            })?;
            let want_y = cx.read(&y_plain, rows)?;
            let got_y = cx.read(&y, rows)?;
            let qw = dev.read_vec::<u32>(&q, rows / 4)?;
            let mw = dev.read_vec::<u32>(&m, (l.meta_bytes() / 4) as usize)?;
            // Sums of squares: eight terms per lane, the four lanes of a unit, up to 32 units.
            let c = compare(&qw, &mw, l, &got_y, Some((&nw, offset)), 8.0 + 2.0 + 32.0);
            let shape = format!("{} {rows} x {cols}, round {round}", dtype.name());
            let variant = |what: &str| format!("{what}, workgroups {wgs}, norm+{offset}");
            out.push(row(KERNEL, variant("y"), &shape, &got_y, &want_y, EXACT));
            for (what, (got, want)) in [("codes", &c.q), ("scales", &c.d), ("sums", &c.s)] {
                out.push(row(KERNEL, variant(what), &shape, got, want, EXACT));
            }
            let tol = Tol {
                max_abs: c.ss_tol,
                nmse: 1e-12,
            };
            out.push(row(
                KERNEL,
                variant("sum sq"),
                &shape,
                &c.ss.0,
                &c.ss.1,
                tol,
            ));
        }
        let left = dev.read_vec::<u32>(&ctl, ctl_words)?;
        let counters = l.units() + l.chunks();
        let got: Vec<f32> = left[..counters].iter().map(|&w| w as f32).collect();
        out.push(row(
            KERNEL,
            "counters back to zero",
            format!("{} {rows} x {cols}", dtype.name()),
            &got,
            &vec![0.0; counters],
            EXACT,
        ));
    }
    Ok(out)
}

/// The one-weight product of `x` into `y`.
fn launch<'a>(w: &'a Buffer, x: &'a Buffer, y: &'a Buffer) -> MatvecFused<BufSlice<'a>> {
    MatvecFused {
        w: vec![w.all()],
        x: x.all(),
        y: y.all(),
        norm_w: None,
    }
}
