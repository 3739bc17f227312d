//! Parity cases: embedding, norms, elementwise, activations, softmax, argmax, KV append.

use vkllm_kernels::WeightType;
use vkllm_kernels::activation::{Activation, GatedActivation};
use vkllm_kernels::argmax::Argmax;
use vkllm_kernels::elementwise::{Add, Copy as CopyK, MulRows, Scale, Softcap};
use vkllm_kernels::kv_append::{KvAppend, KvType};
use vkllm_kernels::rmsnorm::{AddRmsNorm, NormShape, RmsNorm};
use vkllm_kernels::softmax::Softmax;

use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, pack16, row, to_bf16, to_f16};
use vkllm_vk::Device;
use vkllm_vk::Result;
use vkllm_vk::Tensor;

/// Ops of a few f32 roundings on O(1) values: a few ulps of the largest output.
fn tol_f32(max_ref: f32) -> Tol {
    Tol {
        max_abs: 4e-6 * (max_ref.abs() as f64).max(1.0),
        nmse: 1e-7,
    }
}

fn max_abs(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

pub(crate) fn embedding(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let (vocab, dim, n) = (1000, 130, 37);
    let table = rng.vec(vocab * dim, -2.0, 2.0);
    let ids: Vec<u32> = (0..n).map(|_| rng.below(vocab as u64) as u32).collect();
    let mut rows = Vec::new();
    for dtype in [WeightType::F32, WeightType::F16, WeightType::Bf16] {
        let (bytes, values): (Vec<u8>, Vec<f32>) = match dtype {
            WeightType::F32 => (bytemuck::cast_slice(&table).to_vec(), table.clone()),
            WeightType::F16 => {
                let (h, b) = to_f16(&table);
                (bytemuck::cast_slice(&h).to_vec(), b)
            }
            WeightType::Bf16 => {
                let (h, b) = to_bf16(&table);
                (bytemuck::cast_slice(&h).to_vec(), b)
            }
            q => unreachable!("float tables only: {q:?}"),
        };
        let t = Tensor::from_bytes(dev, "table", dtype, vocab, dim, &bytes)?;
        let idb = cx.input("ids", &ids)?;
        let out = cx.output("out", n * dim)?;
        cx.run(&[&out], |r| r.embedding(&t, idb.all(), n, out.all()))?;
        let got = cx.read(&out, n * dim)?;
        let mut want = vec![0.0; n * dim];
        vkllm_cpu::embedding(&values, dim, &ids, &mut want)
            .map_err(|e| vkllm_vk::Error::Shape(e.to_string()))?;
        rows.push(row(
            "embedding",
            dtype.name(),
            format!("vocab {vocab} dim {dim} n {n}"),
            &got,
            &want,
            EXACT,
        ));
    }
    Ok(rows)
}

pub(crate) fn rmsnorm(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    // (rows, n, weight_offset, label): hidden norm, Gemma's (1 + w), q/k per-head norm.
    for (nr, n, off, label) in [
        (5usize, 1000usize, 0.0f32, "hidden"),
        (3, 1153, 1.0, "hidden gemma (1+w)"),
        (28, 64, 0.0, "q/k per-head (7 tok x 4 heads)"),
    ] {
        let x = rng.vec(nr * n, -3.0, 3.0);
        let w = rng.vec(n, -1.0, 1.0);
        let eps = 1e-6;
        let (xb, wb) = (cx.input("x", &x)?, cx.input("w", &w)?);
        let out = cx.output("out", nr * n)?;
        let s = NormShape {
            rows: nr,
            n,
            eps,
            weight_offset: off,
        };
        cx.run(&[&out], |r| {
            r.dispatch(
                RmsNorm {
                    x: xb.all(),
                    weight: wb.all(),
                    out: out.all(),
                }
                .dispatch(&s)?,
            )
        })?;
        let got = cx.read(&out, nr * n)?;
        let mut want = vec![0.0; nr * n];
        vkllm_cpu::rmsnorm(&x, &w, eps, off, &mut want);
        rows.push(row(
            "rmsnorm",
            label,
            format!("{nr} x {n}"),
            &got,
            &want,
            tol_f32(max_abs(&want)),
        ));
    }
    rows.extend(rmsnorm_half(&cx, &mut rng)?);
    // Fused residual add: two outputs (the new residual, exact; the norm).
    let (nr, n) = (3usize, 777usize);
    let x = rng.vec(nr * n, -2.0, 2.0);
    let res = rng.vec(nr * n, -2.0, 2.0);
    let w = rng.vec(n, -1.0, 1.0);
    let (xb, wb, rb) = (
        cx.input("x", &x)?,
        cx.input("w", &w)?,
        cx.input("res", &res)?,
    );
    let out = cx.output("out", nr * n)?;
    let s = NormShape {
        rows: nr,
        n,
        eps: 1e-5,
        weight_offset: 0.0,
    };
    cx.run(&[&out], |r| {
        r.dispatch(
            AddRmsNorm {
                x: xb.all(),
                residual: rb.all(),
                weight: wb.all(),
                out: out.all(),
            }
            .dispatch(&s)?,
        )
    })?;
    let mut want_res = res.clone();
    let mut want = vec![0.0; nr * n];
    vkllm_cpu::add_rmsnorm(&mut want_res, &x, &w, 1e-5, 0.0, &mut want);
    let got = cx.read(&out, nr * n)?;
    let got_res = cx.read(&rb, nr * n)?;
    rows.push(row(
        "add_rmsnorm",
        "residual",
        format!("{nr} x {n}"),
        &got_res,
        &want_res,
        EXACT,
    ));
    rows.push(row(
        "add_rmsnorm",
        "norm",
        format!("{nr} x {n}"),
        &got,
        &want,
        tol_f32(max_abs(&want)),
    ));
    Ok(rows)
}

/// `rmsnorm` with its f16 copy (HALF): the f32 rows as the CPU's (and identical to the plain
/// dispatch's), and the packed halves as [`halves_row`] checks them against the f32 output;
/// 9 rows of 1030 (odd rows, even length).
fn rmsnorm_half(cx: &Ctx<'_>, rng: &mut Rng) -> Result<Vec<KernelParityRow>> {
    let (nr, n) = (9usize, 1030usize);
    let x = rng.vec(nr * n, -3.0, 3.0);
    let w = rng.vec(n, -1.0, 1.0);
    let (xb, wb) = (cx.input("x", &x)?, cx.input("w", &w)?);
    let (out, plain) = (cx.output("out", nr * n)?, cx.output("plain", nr * n)?);
    let out16 = cx.output("out16", nr * n / 2)?;
    let s = NormShape {
        rows: nr,
        n,
        eps: 1e-6,
        weight_offset: 0.0,
    };
    cx.run(&[&out, &plain, &out16], |r| {
        let norm = |o| RmsNorm {
            x: xb.all(),
            weight: wb.all(),
            out: o,
        };
        r.dispatch(norm(plain.all()).dispatch(&s)?)?;
        r.dispatch(norm(out.all()).dispatch_with_half(&s, out16.all())?)
    })?;
    let got = cx.read(&out, nr * n)?;
    let mut want = vec![0.0; nr * n];
    vkllm_cpu::rmsnorm(&x, &w, 1e-6, 0.0, &mut want);
    let words = cx.dev.read_vec::<u32>(&out16, nr * n / 2)?;
    let shape = format!("{nr} x {n}");
    Ok(vec![
        row(
            "rmsnorm",
            "with f16 copy: f32 rows",
            shape.clone(),
            &got,
            &want,
            tol_f32(max_abs(&want)),
        ),
        row(
            "rmsnorm",
            "with f16 copy: f32 rows = plain dispatch",
            shape.clone(),
            &got,
            &cx.read(&plain, nr * n)?,
            EXACT,
        ),
        halves_row("rmsnorm", "with f16 copy: halves", shape, &words, &got),
    ])
}

pub(crate) fn elementwise(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let n = 10007;
    let a = rng.vec(n, -50.0, 50.0);
    let b = rng.vec(n, -50.0, 50.0);
    let (ab, bb) = (cx.input("a", &a)?, cx.input("b", &b)?);
    let out = cx.output("out", n)?;
    let shape = format!("n {n}");
    let mut rows = Vec::new();

    cx.run(&[&out], |r| {
        r.dispatch(
            Add {
                a: ab.all(),
                b: bb.all(),
                out: out.all(),
            }
            .dispatch(n)?,
        )
    })?;
    let mut want = vec![0.0; n];
    vkllm_cpu::add(&a, &b, &mut want);
    rows.push(row(
        "add",
        "f32",
        shape.clone(),
        &cx.read(&out, n)?,
        &want,
        EXACT,
    ));

    let s = rng.f32(0.1, 2.0);
    cx.run(&[&out], |r| {
        r.dispatch(
            Scale {
                a: ab.all(),
                out: out.all(),
            }
            .dispatch(n, s)?,
        )
    })?;
    let mut want = a.clone();
    vkllm_cpu::scale(&mut want, s);
    rows.push(row(
        "scale",
        "f32",
        shape.clone(),
        &cx.read(&out, n)?,
        &want,
        EXACT,
    ));

    cx.run(&[&out], |r| {
        r.dispatch(
            CopyK {
                a: ab.all(),
                out: out.all(),
            }
            .dispatch(n)?,
        )
    })?;
    rows.push(row(
        "copy",
        "f32",
        shape.clone(),
        &cx.read(&out, n)?,
        &a,
        EXACT,
    ));

    rows.push(to_f16_row(&cx, &a)?);

    // Rows of 96 (a query row of 3 heads by a centred cache's scales): the last 7 elements of a
    // are past the 104 whole rows and keep the output's poison.
    let m = 96;
    let nr = n / m * m;
    let scales = rng.vec(m, 0.05, 4.0);
    let sb = cx.input("scales", &scales)?;
    cx.run(&[&out], |r| {
        r.dispatch(
            MulRows {
                a: ab.all(),
                b: sb.all(),
                out: out.all(),
            }
            .dispatch(nr, m)?,
        )
    })?;
    let mut want = a[..nr].to_vec();
    vkllm_cpu::mul_rows(&mut want, &scales);
    let got = cx.read(&out, n)?;
    rows.push(row(
        "mul_rows",
        "f32 rows of 96",
        format!("n {nr}"),
        &got[..nr],
        &want,
        EXACT,
    ));
    // Past the rows: still poisoned (1 marks a written element).
    let touched: Vec<f32> = got[nr..]
        .iter()
        .map(|v| f32::from(u8::from(!v.is_nan())))
        .collect();
    rows.push(row(
        "mul_rows",
        "elements past the rows untouched",
        format!("{} elements", n - nr),
        &touched,
        &vec![0.0; n - nr],
        EXACT,
    ));

    let cap = 30.0;
    cx.run(&[&out], |r| {
        r.dispatch(
            Softcap {
                a: ab.all(),
                out: out.all(),
            }
            .dispatch(n, cap)?,
        )
    })?;
    let mut want = a.clone();
    vkllm_cpu::softcap(&mut want, cap);
    // tanh has no correctly-rounded guarantee in Vulkan: allow ~1e-6 relative of cap.
    let tol = Tol {
        max_abs: 4e-5,
        nmse: 1e-7,
    };
    rows.push(row(
        "softcap",
        "f32 cap 30",
        shape,
        &cx.read(&out, n)?,
        &want,
        tol,
    ));
    Ok(rows)
}

/// A row checking packed halves (`to_f16`'s layout: two per word, low first) against the f32
/// values they were rounded from: each must be one of the two f16 values around its value
/// (`vkllm_cpu::f16_neighbours`; the rounding direction is the device's), compared exactly; one
/// that is neither is compared against the lower, a failure. Halves past `values` must be 0.
pub(crate) fn halves_row(
    kernel: &'static str,
    variant: &str,
    shape: String,
    words: &[u32],
    values: &[f32],
) -> KernelParityRow {
    let halves: Vec<f32> = words
        .iter()
        .flat_map(|&v| [v as u16, (v >> 16) as u16])
        .map(|b| half::f16::from_bits(b).to_f32())
        .collect();
    let mut want: Vec<f32> = values
        .iter()
        .zip(&halves)
        .map(|(&v, &g)| {
            let (lo, hi) = vkllm_cpu::f16_neighbours(v);
            if g == hi.to_f32() { g } else { lo.to_f32() }
        })
        .collect();
    want.resize(halves.len(), 0.0);
    row(kernel, variant, shape, &halves, &want, EXACT)
}

/// `to_f16` over `a` (odd length): the halves as [`halves_row`] checks them, with the padding
/// half of the last word.
fn to_f16_row(cx: &Ctx<'_>, a: &[f32]) -> Result<KernelParityRow> {
    let n = a.len();
    let ab = cx.input("a", a)?;
    let words = n.div_ceil(2);
    let out = cx.output("out", words)?;
    cx.run(&[&out], |r| {
        r.dispatch(
            vkllm_kernels::to_f16::ToF16 {
                a: ab.all(),
                out: out.all(),
            }
            .dispatch(n)?,
        )
    })?;
    let w = cx.dev.read_vec::<u32>(&out, words)?;
    Ok(halves_row("to_f16", "f32 -> f16", format!("n {n}"), &w, a))
}

pub(crate) fn activation(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let n = 10007;
    let gate = rng.vec(n, -8.0, 8.0);
    let up = rng.vec(n, -4.0, 4.0);
    let (gb, ub) = (cx.input("gate", &gate)?, cx.input("up", &up)?);
    let out = cx.output("out", n)?;
    let mut rows = Vec::new();
    for act in [Activation::Silu, Activation::GeluTanh] {
        cx.run(&[&out], |r| {
            r.dispatch(
                GatedActivation {
                    gate: gb.all(),
                    up: ub.all(),
                    out: out.all(),
                }
                .dispatch(act, n)?,
            )
        })?;
        let mut want = vec![0.0; n];
        let name = match act {
            Activation::Silu => {
                vkllm_cpu::silu_mul(&gate, &up, &mut want);
                "silu_mul"
            }
            Activation::GeluTanh => {
                vkllm_cpu::gelu_tanh_mul(&gate, &up, &mut want);
                "gelu_tanh_mul"
            }
        };
        // exp/tanh are within a few ulps on real drivers (Vulkan allows more): 1e-5 relative to
        // the output scale (|out| <= 32 here).
        let tol = Tol {
            max_abs: 1e-5 * max_abs(&want) as f64,
            nmse: 1e-7,
        };
        rows.push(row(
            name,
            "f32",
            format!("n {n}"),
            &cx.read(&out, n)?,
            &want,
            tol,
        ));
        // With the f16 copy (HALF; even length): the f32 output as above, the halves as
        // `halves_row` checks them against it.
        let n2 = n - 1;
        let out16 = cx.output("out16", n2 / 2)?;
        cx.run(&[&out, &out16], |r| {
            r.dispatch(
                GatedActivation {
                    gate: gb.all(),
                    up: ub.all(),
                    out: out.all(),
                }
                .dispatch_with_half(act, n2, out16.all())?,
            )
        })?;
        let got = cx.read(&out, n2)?;
        rows.push(row(
            name,
            "with f16 copy: f32",
            format!("n {n2}"),
            &got,
            &want[..n2],
            tol,
        ));
        let words = cx.dev.read_vec::<u32>(&out16, n2 / 2)?;
        rows.push(halves_row(
            name,
            "with f16 copy: halves",
            format!("n {n2}"),
            &words,
            &got,
        ));
    }
    Ok(rows)
}

pub(crate) fn softmax(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let (nr, n) = (4usize, 5001usize);
    let mut x = rng.vec(nr * n, -10.0, 10.0);
    // Row 2 partly masked, row 3 fully masked (zeros expected).
    for v in &mut x[2 * n..2 * n + 2000] {
        *v = f32::NEG_INFINITY;
    }
    for v in &mut x[3 * n..] {
        *v = f32::NEG_INFINITY;
    }
    let xb = cx.input("x", &x)?;
    let out = cx.output("out", nr * n)?;
    cx.run(&[&out], |r| {
        r.dispatch(
            Softmax {
                x: xb.all(),
                out: out.all(),
            }
            .dispatch(nr, n)?,
        )
    })?;
    let mut want = x.clone();
    for r in want.chunks_exact_mut(n) {
        vkllm_cpu::softmax(r);
    }
    let tol = Tol {
        max_abs: 1e-6,
        nmse: 1e-7,
    };
    Ok(vec![row(
        "softmax",
        "f32 (masked rows)",
        format!("{nr} x {n}"),
        &cx.read(&out, nr * n)?,
        &want,
        tol,
    )])
}

pub(crate) fn argmax(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let (nr, n) = (5usize, 50021usize);
    let mut x = rng.vec(nr * n, -20.0, 20.0);
    // Row 1: a tie between two maxima (the lower index must win); row 2: NaNs around the max.
    let (i1, i2) = (
        7 + rng.below(20000) as usize,
        30000 + rng.below(20000) as usize,
    );
    x[n + i1] = 100.0;
    x[n + i2] = 100.0;
    for v in x[2 * n..3 * n].iter_mut().step_by(7) {
        *v = f32::NAN;
    }
    let xb = cx.input("x", &x)?;
    let out = cx.output("out", nr)?;
    cx.run(&[&out], |r| {
        r.dispatch(
            Argmax {
                logits: xb.all(),
                out: out.all(),
            }
            .dispatch(nr, n)?,
        )
    })?;
    let got: Vec<u32> = dev.read_vec(&out, nr)?;
    // Reference: first index of the largest non-NaN value.
    let want: Vec<f32> = x
        .chunks_exact(n)
        .map(|r| {
            let mut best = 0usize;
            let mut bv = f32::NEG_INFINITY;
            for (i, &v) in r.iter().enumerate() {
                if v > bv {
                    bv = v;
                    best = i;
                }
            }
            best as f32
        })
        .collect();
    let got: Vec<f32> = got.iter().map(|&i| i as f32).collect();
    Ok(vec![row(
        "argmax",
        "f32 (ties, NaN)",
        format!("{nr} x {n}"),
        &got,
        &want,
        EXACT,
    )])
}

pub(crate) fn kv_append(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let (n_tok, kv_dim, max_tok) = (3usize, 2 * 66usize, 50usize);
    let pos: Vec<u32> = vec![7, 8, 30 + rng.below(19) as u32];
    let k_new = rng.vec(n_tok * kv_dim, -4.0, 4.0);
    let v_new = rng.vec(n_tok * kv_dim, -4.0, 4.0);
    let mut rows = Vec::new();
    for dtype in [KvType::F32, KvType::F16] {
        // Existing cache content must survive outside the written rows.
        let init_k = rng.vec(max_tok * kv_dim, -1.0, 1.0);
        let init_v = rng.vec(max_tok * kv_dim, -1.0, 1.0);
        let (kb, vb, pb) = (
            cx.input("k", &k_new)?,
            cx.input("v", &v_new)?,
            cx.input("pos", &pos)?,
        );
        let conv = |x: &[f32]| -> (Vec<u32>, Vec<f32>) {
            match dtype {
                KvType::F32 => (bytemuck::cast_slice(x).to_vec(), x.to_vec()),
                KvType::F16 => {
                    let (h, b) = to_f16(x);
                    (pack16(&h), b)
                }
                KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
            }
        };
        let (ck, mut want_k) = conv(&init_k);
        let (cv, mut want_v) = conv(&init_v);
        let (kc, vc) = (cx.input("k_cache", &ck)?, cx.input("v_cache", &cv)?);
        cx.run(&[], |r| {
            r.dispatch(
                KvAppend {
                    k_new: kb.all(),
                    v_new: vb.all(),
                    pos: pb.all(),
                    k_cache: kc.all(),
                    v_cache: vc.all(),
                }
                .dispatch(dtype, n_tok, kv_dim, max_tok)?,
            )
        })?;
        let (nk, nv) = (conv(&k_new).1, conv(&v_new).1);
        for (t, &p) in pos.iter().enumerate() {
            let (d, s) = (p as usize * kv_dim, t * kv_dim);
            want_k[d..d + kv_dim].copy_from_slice(&nk[s..s + kv_dim]);
            want_v[d..d + kv_dim].copy_from_slice(&nv[s..s + kv_dim]);
        }
        let read = |b: &vkllm_vk::Buffer| -> Result<Vec<f32>> {
            Ok(match dtype {
                KvType::F32 => cx.read(b, max_tok * kv_dim)?,
                KvType::F16 => {
                    let w: Vec<u16> = dev.read_vec(b, max_tok * kv_dim)?;
                    w.iter()
                        .map(|&h| half::f16::from_bits(h).to_f32())
                        .collect()
                }
                KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
            })
        };
        // f16: the reference rounds to nearest even; the shader's pack2x16float should too. The
        // tolerance admits one f16 ulp at |x| < 4 (2^-9) in case a driver rounds differently.
        let tol = match dtype {
            KvType::F32 => EXACT,
            KvType::F16 => Tol {
                max_abs: 1.0 / 512.0,
                nmse: 1e-7,
            },
            KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
        };
        let shape = format!("{n_tok} tok, kv_dim {kv_dim}, cache {max_tok}");
        rows.push(row(
            "kv_append",
            format!("{} K", dtype.name()),
            shape.clone(),
            &read(&kc)?,
            &want_k,
            tol,
        ));
        rows.push(row(
            "kv_append",
            format!("{} V", dtype.name()),
            shape,
            &read(&vc)?,
            &want_v,
            tol,
        ));
    }
    Ok(rows)
}
