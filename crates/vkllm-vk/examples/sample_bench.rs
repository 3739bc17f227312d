//! Sampler micro-benchmark: the four passes of `sample.wgsl` (prep, sieve, gather, finish) on
//! one vocabulary, per sampling setting and batch, by timestamp queries. Prints a markdown table
//! of the median GPU time of one call: each pass, their sum, the span from the first start to
//! the last end (gaps between dependent dispatches included), and for settings pass 1 finishes
//! alone the time of pass 1 launched alone (`Sample::dispatch_prep`, as a decode step runs it),
//! by its timestamps and "in a stream": the host time of 2N back-to-back calls (each after a
//! barrier, as in a decode step; no timestamps) minus that of N, over N.
//!
//! `cargo run --release -p vkllm-vk --example sample_bench -- [--vocab N] [--rows 1,4,16]
//! [--iters N] [--sigma S] [--parts 0,32,...] [--modes greedy,default,...]` (parts 0: the
//! automatic count).
//!
//! Logits are N(0, sigma^2) (default sigma 2: a real model's spread at temperature 1 is 1.5-3;
//! random-weight synth models sit near 1), the same for every row. Settings: greedy, default
//! (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), pure (temperature 1, no filter), top-p
//! (temperature 1, top-p 0.9), min-p (0.8, min-p 0.05). The device comes from `VKLLM_DEVICE`.

use vkllm_vk::kernels::sample::{Sample, SampleRow, SampleSettings, SampleShape};
use vkllm_vk::{BufSlice, Device, MemoryKind, Recorder};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn settings(t: f32, k: usize, p: f32, m: f32, seq: u64) -> SampleRow {
    SampleSettings {
        temperature: t,
        top_k: k,
        top_p: p,
        min_p: m,
        repetition_penalty: 1.0,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        seed: 7,
        seq_id: seq,
        step: 3,
        n_bias: 0,
        use_counts: false,
        masked: false,
    }
    .row()
}

/// N(0, sigma^2) by Box-Muller over a 64-bit LCG.
fn normal_logits(n: usize, sigma: f32) -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut u = || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let r = (-2.0 * u().ln()).sqrt() * (2.0 * std::f64::consts::PI * u()).cos();
            (r * f64::from(sigma)) as f32
        })
        .collect()
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut vocab = 151_936usize;
    let mut rows_list = vec![1usize, 4, 16];
    let mut iters = 50u32;
    let mut sigma = 2.0f32;
    let mut parts_list = vec![0usize];
    let mut only: Option<Vec<String>> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--vocab" => vocab = value()?.parse()?,
            "--rows" => {
                rows_list = value()?
                    .split(',')
                    .map(|r| r.trim().parse())
                    .collect::<Result<_, _>>()?
            }
            "--iters" => iters = value()?.parse()?,
            "--sigma" => sigma = value()?.parse()?,
            "--parts" => {
                parts_list = value()?
                    .split(',')
                    .map(|r| r.trim().parse())
                    .collect::<Result<_, _>>()?
            }
            "--modes" => only = Some(value()?.split(',').map(str::to_string).collect()),
            s => return Err(format!("unknown argument {s}").into()),
        }
    }
    let dev = Device::from_env()?;
    println!("device: {}", dev.info().summary());
    println!("vocab {vocab}, logits N(0, {sigma}^2), {iters} calls per recording\n");
    println!(
        "| setting | rows | parts | prep | sieve | gather | finish | sum | span | span per row | pass 1 alone | in a stream |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let modes: [(&str, f32, usize, f32, f32); 5] = [
        ("greedy", 0.0, 0, 1.0, 0.0),
        ("default", 0.8, 40, 0.95, 0.05),
        ("pure", 1.0, 0, 1.0, 0.0),
        ("top-p", 1.0, 0, 0.9, 0.0),
        ("min-p", 0.8, 0, 1.0, 0.05),
    ];
    let one = normal_logits(vocab, sigma);
    for &rows in &rows_list {
        let logits: Vec<f32> = (0..rows).flat_map(|_| one.iter().copied()).collect();
        let lb = dev.buffer_from("logits", &logits)?;
        let scratch = dev.create_buffer(
            "scratch",
            Sample::<BufSlice<'_>>::scratch_bytes(vocab, rows),
            MemoryKind::Device,
        )?;
        let ctr = dev.create_buffer(
            "ctr",
            Sample::<BufSlice<'_>>::ctr_bytes(rows),
            MemoryKind::Device,
        )?;
        let out = dev.create_buffer("out", 4 * rows as u64, MemoryKind::Device)?;
        let mut z = Recorder::new(&dev)?;
        z.fill(ctr.all(), 0)?;
        z.finish()?.submit()?;
        for (&(name, t, k, p, m), &parts) in modes
            .iter()
            .filter(|m| only.as_ref().is_none_or(|o| o.iter().any(|x| x == m.0)))
            .flat_map(|m| parts_list.iter().map(move |p| (m, p)))
        {
            let parts = if parts == 0 {
                Sample::<BufSlice<'_>>::auto_parts(vocab)
            } else {
                parts
            };
            let cfg: Vec<SampleRow> = (0..rows).map(|r| settings(t, k, p, m, r as u64)).collect();
            let cb = dev.buffer_from("cfg", &cfg)?;
            let sample = || Sample {
                logits: lb.all(),
                counts: lb.all(),
                bias: lb.all(),
                cfg: cb.all(),
                scratch: scratch.all(),
                out: out.all(),
                ctr: ctr.all(),
                mask: lb.all(),
            };
            let shape = SampleShape {
                vocab,
                rows,
                max_bias: 0,
                counts: false,
                mask: false,
            };
            let mut r = Recorder::with_timestamps(&dev, 4 * iters)?;
            for _ in 0..iters {
                for d in sample().dispatch_parts(&shape, parts)? {
                    r.dispatch(d)?;
                }
            }
            let t4 = timed(&r.finish()?, 4)?;
            let (alone, stream) = if cfg[0].prep_only(vocab) {
                let mut r = Recorder::with_timestamps(&dev, iters)?;
                for _ in 0..iters {
                    let [prep, ..] = sample().dispatch_parts(&shape, parts)?;
                    r.dispatch(prep)?;
                }
                let alone = format!("{:.1}", timed(&r.finish()?, 1)?[0]);
                let mut host = [0.0f64; 2];
                for (h, n) in host.iter_mut().zip([10 * iters, 20 * iters]) {
                    let mut r = Recorder::new(&dev)?;
                    for _ in 0..n {
                        let [prep, ..] = sample().dispatch_parts(&shape, parts)?;
                        r.dispatch(prep)?;
                    }
                    *h = host_us(&r.finish()?)?;
                }
                let per = (host[1] - host[0]) / f64::from(10 * iters);
                (alone, format!("{per:.1}"))
            } else {
                ("-".to_string(), "-".to_string())
            };
            let sp = t4[5];
            println!(
                "| {name} | {rows} | {parts} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {sp:.1} | {:.1} | {alone} | {stream} |",
                t4[0],
                t4[1],
                t4[2],
                t4[3],
                t4[4],
                sp / rows as f64
            );
        }
    }
    dev.check_validation()?;
    Ok(())
}

/// The median host time of a submit-and-wait of `rec`, in us (after warm-up submits).
fn host_us(rec: &vkllm_vk::Recording) -> Result<f64, Box<dyn std::error::Error>> {
    for _ in 0..3 {
        rec.submit()?;
    }
    let mut t: Vec<f64> = (0..7)
        .map(|_| {
            let t0 = std::time::Instant::now();
            rec.submit().map(|()| t0.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<Result<_, _>>()?;
    t.sort_by(|a, b| a.total_cmp(b));
    Ok(t[t.len() / 2])
}

/// Replays `rec` (calls of `n` dispatches each) and returns the median us of each dispatch, of
/// their sum and of the span of a call.
fn timed(rec: &vkllm_vk::Recording, n: usize) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    for _ in 0..5 {
        rec.submit()?;
    }
    let mut cols = vec![Vec::new(); n + 2];
    for _ in 0..3 {
        rec.submit()?;
        let t = rec.timings()?;
        for c in t.chunks(n) {
            for (i, d) in c.iter().enumerate() {
                cols[i].push(d.ns);
            }
            cols[n].push(c.iter().map(|d| d.ns).sum::<f64>());
            cols[n + 1].push(c[n - 1].start_ns + c[n - 1].ns - c[0].start_ns);
        }
    }
    Ok(cols
        .iter_mut()
        .map(|v| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2] / 1e3
        })
        .collect())
}
