//! Parity case: the GPU sampler picks the CPU sampler's token, over many seeds and settings.

use vkllm_cpu::SamplingParams;
use vkllm_kernels::sample::{Sample, SampleSettings, SampleShape};

use super::{Ctx, EXACT, KernelParityRow, Rng, row};
use crate::buffer::Buffer;
use crate::device::Device;
use crate::error::Result;
use crate::recorder::Recorder;

struct Case {
    logits: Vec<f32>,
    counts: Vec<u32>,
    params: SamplingParams,
    seq_id: u64,
    step: u64,
}

fn make_case(rng: &mut Rng, v: usize, i: usize) -> Case {
    // Logit spread: peaked (few candidates) to flat (every token a candidate).
    let spread = [30.0f32, 8.0, 2.0, 0.5][i % 4];
    let mut logits = rng.vec(v, -spread, spread);
    // Exact ties with the maximum, NaNs, banned tokens.
    let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    for _ in 0..2 {
        let j = rng.below(v as u64) as usize;
        logits[j] = m;
    }
    for _ in 0..(i % 3) {
        let j = rng.below(v as u64) as usize;
        logits[j] = f32::NAN;
    }
    if i.is_multiple_of(5) {
        let j = rng.below(v as u64) as usize;
        logits[j] = f32::NEG_INFINITY;
    }
    let counts = if i.is_multiple_of(2) {
        (0..v)
            .map(|_| {
                if rng.below(10) == 0 {
                    1 + rng.below(5) as u32
                } else {
                    0
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let pick = |rng: &mut Rng, xs: &[f32]| xs[rng.below(xs.len() as u64) as usize];
    let temperature = pick(rng, &[0.0, 0.25, 0.8, 1.0, 1.0, 2.5]);
    let top_k = [0usize, 1, 50, v + 5][rng.below(4) as usize];
    let top_p = pick(rng, &[1.0, 1.0, 0.95, 0.5, 0.0]);
    let min_p = pick(rng, &[0.0, 0.0, 0.05, 0.3]);
    let mut logit_bias = Vec::new();
    if i % 3 == 1 {
        let a = rng.below(v as u64) as u32;
        logit_bias = vec![
            (a, 3.5),
            (rng.below(v as u64) as u32, f32::NEG_INFINITY),
            (a, -1.25),
        ];
    }
    Case {
        logits,
        counts,
        params: SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty: pick(rng, &[1.0, 1.3, 0.8]),
            presence_penalty: pick(rng, &[0.0, 0.5]),
            frequency_penalty: pick(rng, &[0.0, 0.25]),
            logit_bias,
            seed: rng.next_u64(),
        },
        seq_id: rng.below(1 << 40),
        step: rng.below(100_000),
    }
}

pub(crate) fn sample(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let v = 5003;
    let n_cases = 64;
    let mut cases: Vec<Case> = (0..n_cases).map(|i| make_case(&mut rng, v, i)).collect();
    // Edge cases: a +inf logit wins outright; all -inf/NaN gives token 0.
    let mut inf = make_case(&mut rng, v, 1);
    inf.logits[77] = f32::INFINITY;
    inf.params.temperature = 1.0;
    cases.push(inf);
    let mut dead = make_case(&mut rng, v, 1);
    dead.logits.iter_mut().enumerate().for_each(|(i, x)| {
        *x = if i % 2 == 0 {
            f32::NEG_INFINITY
        } else {
            f32::NAN
        }
    });
    dead.params.temperature = 0.7;
    dead.params.logit_bias.clear();
    cases.push(dead);
    // Greedy rows the split argmax takes (no counts, no bias): the maximum tied across parts
    // (the lower id must win), NaNs, and a row whose maximum is in the last, short part.
    for k in 0..6 {
        let mut g = make_case(&mut rng, v, 1);
        g.counts.clear();
        g.params.logit_bias.clear();
        g.params.temperature = 0.0;
        let m = g.logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) + 1.0;
        let hi = rng.below(v as u64) as usize;
        let lo = rng.below(hi.max(1) as u64) as usize;
        match k {
            0 => g.logits[v - 1] = m,
            1 => g.logits[0] = m,
            _ => {
                g.logits[hi] = m;
                g.logits[lo] = m;
            }
        }
        if k == 3 {
            g.logits[lo.saturating_sub(1)] = f32::NAN;
        }
        cases.push(g);
    }

    // Every case is one row of a single dispatch (the batched decode shape), so row offsets into
    // logits, counts, bias and scratch are exercised too.
    let rows = cases.len();
    let max_bias = cases
        .iter()
        .map(|c| c.params.logit_bias.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut logits = Vec::with_capacity(rows * v);
    let mut counts = vec![0u32; rows * v];
    let mut bias = vec![0u32; rows * max_bias * 2];
    let mut cfg = Vec::with_capacity(rows);
    for (r, c) in cases.iter().enumerate() {
        logits.extend_from_slice(&c.logits);
        if !c.counts.is_empty() {
            counts[r * v..(r + 1) * v].copy_from_slice(&c.counts);
        }
        for (j, &(id, b)) in c.params.logit_bias.iter().enumerate() {
            bias[(r * max_bias + j) * 2] = id;
            bias[(r * max_bias + j) * 2 + 1] = b.to_bits();
        }
        cfg.push(
            SampleSettings {
                temperature: c.params.temperature,
                top_k: c.params.top_k,
                top_p: c.params.top_p,
                min_p: c.params.min_p,
                repetition_penalty: c.params.repetition_penalty,
                presence_penalty: c.params.presence_penalty,
                frequency_penalty: c.params.frequency_penalty,
                seed: c.params.seed,
                seq_id: c.seq_id,
                step: c.step,
                n_bias: c.params.logit_bias.len(),
                use_counts: !c.counts.is_empty(),
            }
            .row(),
        );
    }
    let (lb, cb, bb, gb) = (
        cx.input("logits", &logits)?,
        cx.input("counts", &counts)?,
        cx.input("bias", &bias)?,
        cx.input("cfg", bytemuck::cast_slice::<_, u32>(&cfg))?,
    );
    let scratch = cx.output(
        "scratch",
        Sample::<crate::BufSlice<'_>>::scratch_bytes(v, rows) as usize / 4,
    )?;
    let out: Buffer = cx.output("out", rows)?;
    let shape = SampleShape {
        vocab: v,
        rows,
        max_bias,
        counts: true,
    };
    // `split`: the two-pass greedy argmax (dispatch_split); else the one-workgroup reference.
    let run = |split: bool| -> Result<Vec<u32>> {
        let mut r = Recorder::new(dev)?;
        r.fill(out.all(), f32::NAN.to_bits())?;
        r.fill(scratch.all(), f32::NAN.to_bits())?;
        let s = Sample {
            logits: lb.all(),
            counts: cb.all(),
            bias: bb.all(),
            cfg: gb.all(),
            scratch: scratch.all(),
            out: out.all(),
        };
        if split {
            for d in s.dispatch_split(&shape)? {
                r.dispatch(d)?;
            }
        } else {
            r.dispatch(s.dispatch(&shape)?)?;
        }
        r.finish()?.submit()?;
        if dev.validation() == crate::Validation::On {
            dev.check_validation()?;
        }
        dev.read_vec(&out, rows)
    };
    let mut rows_out = Vec::new();
    for split in [false, true] {
        let g = run(split)?;
        rows_out.push(compare(&cases, &g, v, split));
    }
    Ok(rows_out)
}

fn compare(cases: &[Case], g: &[u32], v: usize, split: bool) -> KernelParityRow {
    let mut got = Vec::new();
    let mut want = Vec::new();
    let mut mismatches = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let w = vkllm_cpu::sample(&c.logits, &c.params, &c.counts, c.seq_id, c.step);
        if g[i] != w {
            mismatches.push(format!("case {i}: gpu {} cpu {w} ({:?})", g[i], c.params));
        }
        got.push(g[i] as f32);
        want.push(w as f32);
    }
    for m in &mismatches {
        eprintln!("sample mismatch: {m}");
    }
    row(
        "sample",
        format!(
            "{} settings/seeds{}",
            cases.len(),
            if split { " split argmax" } else { "" }
        ),
        format!("vocab {v}"),
        &got,
        &want,
        EXACT,
    )
}
