//! Parity case: the GPU sampler (v2, four passes) picks the CPU sampler's token, for every
//! filter combination, odd vocabularies, rows where everything ties, and 1, 7 and the automatic
//! number of parts per row (64: empty parts for the small vocabularies); and for batches of rows prep finishes alone (passes 2-4 launch no
//! workgroups).

use vkllm_cpu::SamplingParams;
use vkllm_kernels::sample::{Sample, SampleSettings, SampleShape};

use super::{Ctx, EXACT, KernelParityRow, Rng, row};
use vkllm_vk::Buffer;
use vkllm_vk::Device;
use vkllm_vk::Recorder;
use vkllm_vk::Result;

#[derive(Clone)]
struct Case {
    logits: Vec<f32>,
    counts: Vec<u32>,
    params: SamplingParams,
    seq_id: u64,
    step: u64,
    /// Allowed-token bits (structured outputs), when the row is masked.
    mask: Option<Vec<u32>>,
}

const TOP_K: [usize; 5] = [0, 1, 40, 2000, usize::MAX];
const TOP_P: [f32; 4] = [1.0, 0.95, 0.5, 0.0];
const MIN_P: [f32; 3] = [0.0, 0.05, 0.3];

/// Case `i` of a vocabulary of `v`: filter combination `i % 60` (top-k x top-p x min-p), a
/// logit spread from peaked to flat, penalties on even cases, bias on some.
fn make_case(rng: &mut Rng, v: usize, i: usize) -> Case {
    let spread = [30.0f32, 8.0, 2.0, 0.5][(i / 3) % 4];
    let mut logits = rng.vec(v, -spread, spread);
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
    let combo = i % (TOP_K.len() * TOP_P.len() * MIN_P.len());
    let top_k = TOP_K[combo % TOP_K.len()].min(v + 5);
    let top_p = TOP_P[(combo / TOP_K.len()) % TOP_P.len()];
    let min_p = MIN_P[combo / (TOP_K.len() * TOP_P.len())];
    let mut logit_bias = Vec::new();
    if i % 7 == 1 {
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
            temperature: pick(rng, &[0.25, 0.8, 1.0, 2.5]),
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
        step: rng.below(100_000) | (rng.below(2) << 32),
        mask: None,
    }
}

/// A mask allowing about one token in `1 / keep` (and always token `v - 1`, the last bit of a
/// partial word).
fn random_mask(rng: &mut Rng, v: usize, keep: u64) -> Vec<u32> {
    let mut m = vec![0u32; v.div_ceil(32)];
    for i in 0..v {
        if i == v - 1 || rng.below(keep) == 0 {
            m[i / 32] |= 1 << (i % 32);
        }
    }
    m
}

/// The cases of one vocabulary size: every filter combination, greedy rows, and the edges.
fn cases(rng: &mut Rng, v: usize) -> Vec<Case> {
    let mut cases: Vec<Case> = (0..60).map(|i| make_case(rng, v, i)).collect();
    for i in 0..4 {
        let mut g = make_case(rng, v, 1 + 2 * i);
        g.params.temperature = 0.0;
        if i < 2 {
            g.counts.clear();
            g.params.logit_bias.clear();
        }
        cases.push(g);
    }
    // A +inf logit wins outright; all -inf/NaN gives token 0.
    let mut inf = make_case(rng, v, 1);
    inf.logits[v / 2] = f32::INFINITY;
    cases.push(inf);
    let mut dead = make_case(rng, v, 3);
    dead.logits.iter_mut().enumerate().for_each(|(i, x)| {
        *x = if i % 2 == 0 {
            f32::NEG_INFINITY
        } else {
            f32::NAN
        }
    });
    dead.params.logit_bias.clear();
    cases.push(dead);
    // Everything ties: one bucket, one sort of the whole vocabulary; every filter.
    for (j, &(top_k, top_p, min_p)) in [
        (0, 1.0, 0.0),
        (0, 0.5, 0.0),
        (40, 0.9, 0.05),
        (0, 0.9, 0.5),
        (v / 2 + 1, 1.0, 0.0),
    ]
    .iter()
    .enumerate()
    {
        let mut t = make_case(rng, v, 1);
        t.counts.clear();
        t.params.logit_bias.clear();
        t.logits = vec![1.5; v];
        t.logits[(7 * j) % v] = f32::NEG_INFINITY;
        t.params.temperature = 0.7;
        t.params.top_k = top_k;
        t.params.top_p = top_p;
        t.params.min_p = min_p;
        cases.push(t);
    }
    // Every token within 1/32 nat of the top: one bucket, so top-p splits it into sub-buckets
    // and races the ones before the crossing (and min-p cuts inside it).
    for j in 0..4 {
        let mut t = make_case(rng, v, 1);
        t.counts.clear();
        t.params.logit_bias.clear();
        t.logits = rng.vec(v, 1.5, 1.52);
        t.params.temperature = 1.0;
        t.params.top_k = 0;
        t.params.top_p = [0.5, 0.9, 0.3, 0.7][j];
        t.params.min_p = [0.0, 0.0, 0.99, 0.985][j];
        cases.push(t);
    }
    // The k-th largest logit alone at the top of its part (a bound on it from the part maxima
    // that is one rank too high drops it; at temperature 4 it wins 26% of the draws).
    if v >= 3 {
        for _ in 0..30 {
            let mut t = make_case(rng, v, 1);
            t.counts.clear();
            t.params.logit_bias.clear();
            t.logits = rng.vec(v, -3.0, 0.0);
            t.logits[0] = 5.0;
            t.logits[v / 2] = 4.0;
            t.logits[v - 1] = 3.0;
            t.params.temperature = 4.0;
            t.params.top_k = 3;
            t.params.top_p = 1.0;
            t.params.min_p = 0.0;
            cases.push(t);
        }
    }
    // The row's best tokens crowded into its first ids: one part's list holds most of the top k
    // (at and above theta), so the last workgroup reads it far past its first entries.
    if v >= 200 {
        for (j, k) in [40usize, 128, 100].into_iter().enumerate() {
            let mut t = make_case(rng, v, 2 + 3 * j);
            t.counts.clear();
            t.params.logit_bias.clear();
            t.logits = rng.vec(v, -4.0, 0.0);
            for x in &mut t.logits[..150] {
                *x += 6.0;
            }
            t.params.temperature = 1.5;
            t.params.top_k = k;
            cases.push(t);
        }
    }
    // Top-p's cut inside a crowded sub-bucket with mass before it: 10 tokens just below the top,
    // then 100 within one sub-bucket (a few ulps apart), the rest far below; top-p keeps the 10
    // and about half of the crowd. 24 seeds each, so the draws cover the tokens near the cut.
    if v >= 200 {
        for (j, top_p) in [0.55f32, 0.3].into_iter().enumerate() {
            let mut base = make_case(rng, v, 1 + 3 * j);
            base.counts.clear();
            base.params.logit_bias.clear();
            base.logits = vec![-30.0; v];
            for i in 0..10 {
                base.logits[3 + 7 * i] = 1.0 - 0.001 * i as f32;
            }
            for i in 0..100 {
                base.logits[100 + i] = f32::from_bits(0.98f32.to_bits() - (i as u32 % 7));
            }
            base.params.temperature = 1.0;
            base.params.top_k = 0;
            base.params.top_p = top_p;
            base.params.min_p = 0.0;
            for _ in 0..24 {
                let mut t = base.clone();
                t.params.seed = rng.next_u64();
                cases.push(t);
            }
        }
    }
    // Structured outputs: masks from dense to a single token, on every filter kind and greedy;
    // a mask that bans the best token.
    for i in 0..24 {
        let mut t = make_case(rng, v, 7 + 5 * i);
        let keep = [2u64, 10, 200, 1_000_000][i % 4];
        t.mask = Some(random_mask(rng, v, keep));
        if i % 6 == 5 {
            t.params.temperature = 0.0;
        }
        cases.push(t);
    }
    let mut top = make_case(rng, v, 11);
    let best = (0..v)
        .max_by(|&a, &b| top.logits[a].total_cmp(&top.logits[b]))
        .unwrap_or(0);
    let mut m = vec![u32::MAX; v.div_ceil(32)];
    m[best / 32] &= !(1 << (best % 32));
    top.params.temperature = 0.0;
    top.mask = Some(m);
    cases.push(top);
    // Top-k at the limit of the rows prep finishes alone (k <= 128) and just past it.
    for (j, k) in [128usize, 129].into_iter().enumerate() {
        for i in 0..3 {
            let mut t = make_case(rng, v, 2 + 5 * i + 15 * j);
            t.params.top_k = k;
            cases.push(t);
        }
    }
    // Cuts that land exactly on a tie: 128 equal tokens (the rest banned), top-p 1/64 keeps
    // exactly the first two (P_j < top_p * Z, equality drops), top-k 3 the three lowest ids.
    if v >= 128 {
        for j in 0..8 {
            let mut t = make_case(rng, v, 1);
            t.counts.clear();
            t.params.logit_bias.clear();
            t.logits = vec![f32::NEG_INFINITY; v];
            for k in 0..128 {
                t.logits[(k * 37 + j) % v] = -2.25;
            }
            t.params.temperature = 1.0;
            t.params.top_k = if j < 6 { 0 } else { 3 };
            t.params.top_p = if j < 6 { 1.0 / 64.0 } else { 1.0 };
            t.params.min_p = 0.0;
            cases.push(t);
        }
    }
    cases
}

pub(crate) fn sample(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for v in [5003usize, 1, 130] {
        let cs = cases(&mut rng, v);
        for parts in [Some(1), Some(7), Some(64), None] {
            rows.push(run(dev, &cs, v, Launch::Passes(parts))?);
        }
        // Only rows pass 1 finishes (`SampleRow::prep_only`), launched alone: a row the host
        // calls prep-only that the shader sends to the later passes keeps its poisoned output.
        let fast: Vec<Case> = cs
            .iter()
            .filter(|c| settings(c).row().prep_only(v))
            .cloned()
            .collect();
        if v > 1 {
            rows.push(run(dev, &fast, v, Launch::PrepOnly)?);
        }
    }
    Ok(rows)
}

/// The kernel's settings for case `c`.
fn settings(c: &Case) -> SampleSettings {
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
        masked: c.mask.is_some(),
    }
}

/// How `run` launches the sampler.
#[derive(Clone, Copy, Debug)]
enum Launch {
    /// All four passes with this many parts (`None`: the automatic count).
    Passes(Option<usize>),
    /// `Sample::dispatch_prep` alone.
    PrepOnly,
}

/// Every case as one row of a single dispatch (the batched decode shape), so row offsets into
/// logits, counts, bias, scratch and counters are exercised too.
fn run(dev: &Device, cases: &[Case], v: usize, launch: Launch) -> Result<KernelParityRow> {
    let cx = Ctx { dev };
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
    let words = SampleShape::mask_words(v);
    // Unmasked rows' words are zero: a row that ignored `masked` would draw nothing valid.
    let mut mask = vec![0u32; rows * words];
    for (r, c) in cases.iter().enumerate() {
        if let Some(m) = &c.mask {
            mask[r * words..(r + 1) * words].copy_from_slice(m);
        }
        logits.extend_from_slice(&c.logits);
        if !c.counts.is_empty() {
            counts[r * v..(r + 1) * v].copy_from_slice(&c.counts);
        }
        for (j, &(id, b)) in c.params.logit_bias.iter().enumerate() {
            bias[(r * max_bias + j) * 2] = id;
            bias[(r * max_bias + j) * 2 + 1] = b.to_bits();
        }
        cfg.push(settings(c).row());
    }
    let (lb, cb, bb, gb) = (
        cx.input("logits", &logits)?,
        cx.input("counts", &counts)?,
        cx.input("bias", &bias)?,
        cx.input("cfg", bytemuck::cast_slice::<_, u32>(&cfg))?,
    );
    let mb = cx.input("mask", &mask)?;
    let scratch = cx.output(
        "scratch",
        Sample::<vkllm_vk::BufSlice<'_>>::scratch_bytes(v, rows) as usize / 4,
    )?;
    let ctr = cx.output(
        "ctr",
        Sample::<vkllm_vk::BufSlice<'_>>::ctr_bytes(rows) as usize / 4,
    )?;
    let out: Buffer = cx.output("out", rows)?;
    let shape = SampleShape {
        vocab: v,
        rows,
        max_bias,
        counts: true,
        mask: true,
    };
    // Everything poisoned but the counters the kernel requires zero once.
    let mut r = Recorder::new(dev)?;
    r.fill(out.all(), f32::NAN.to_bits())?;
    r.fill(scratch.all(), f32::NAN.to_bits())?;
    r.fill(ctr.all(), 0x5a5a_5a5a)?;
    for row in 0..rows {
        let w = Sample::<vkllm_vk::BufSlice<'_>>::ctr_counter_words(row);
        r.fill(ctr.slice(4 * w.start as u64, 4 * w.len() as u64)?, 0)?;
    }
    r.finish()?.submit()?;
    let mut r = Recorder::new(dev)?;
    let s = Sample {
        logits: lb.all(),
        counts: cb.all(),
        bias: bb.all(),
        cfg: gb.all(),
        scratch: scratch.all(),
        out: out.all(),
        ctr: ctr.all(),
        mask: mb.all(),
    };
    let passes = match launch {
        Launch::Passes(Some(n)) => s.dispatch_parts(&shape, n)?.to_vec(),
        Launch::Passes(None) => s.dispatch(&shape)?.to_vec(),
        Launch::PrepOnly => vec![s.dispatch_prep(&shape)?],
    };
    for d in passes {
        r.dispatch(d)?;
    }
    // Run twice: the second run starts from the counters the first left.
    let rec = r.finish()?;
    let mut got = Vec::new();
    let mut want = Vec::new();
    for run in 0..2 {
        rec.submit()?;
        if dev.validation() == vkllm_vk::Validation::On {
            dev.check_validation()?;
        }
        let g = dev.read_vec::<u32>(&out, rows)?;
        for (i, c) in cases.iter().enumerate() {
            let mut l = c.logits.clone();
            if let Some(m) = &c.mask {
                vkllm_cpu::sampler::apply_mask(&mut l, m);
            }
            let w = vkllm_cpu::sample(&l, &c.params, &c.counts, c.seq_id, c.step);
            if g[i] != w {
                eprintln!(
                    "sample mismatch, vocab {v} {launch:?} run {run}: case {i}: gpu {} cpu {w} ({:?})",
                    g[i], c.params
                );
            }
            got.push(g[i] as f32);
            want.push(w as f32);
        }
    }
    let left = dev.read_vec::<u32>(
        &ctr,
        Sample::<vkllm_vk::BufSlice<'_>>::ctr_bytes(rows) as usize / 4,
    )?;
    for row in 0..rows {
        for w in Sample::<vkllm_vk::BufSlice<'_>>::ctr_counter_words(row) {
            got.push(left[w] as f32);
            want.push(0.0);
        }
    }
    let parts = match launch {
        Launch::Passes(Some(n)) => format!("{n} parts"),
        Launch::Passes(None) => "auto parts".to_string(),
        Launch::PrepOnly => "pass 1 alone".to_string(),
    };
    Ok(row(
        "sample",
        format!("{} settings/seeds, {parts}", cases.len()),
        format!("vocab {v}"),
        &got,
        &want,
        EXACT,
    ))
}
