//! A headless host sharing its GPU with a model. Every frame (default 16.6 ms) the host runs its
//! own compute work on its device, then gives the model a time budget (default 4 ms) through a
//! `FrameDecoder` on the same `VkDevice` and queue (vkllm attached to the host's handles with the
//! features the host enabled), then waits for the frame's end. Prints the host's frame-time
//! percentiles (its work plus the model's share), the model's tokens per second, and the model
//! running free for comparison.
//!
//! `cargo run --release -p vkllm --example frame_host -- [MODEL] [--frames N] [--budget-ms B]
//! [--frame-ms F] [--host-elems N] [--compare-own] [--fresh-slices] [--wait-head]` (default smollm2, 120
//! frames; `--compare-own`: also the recorded decoder on an attachment and on a device vkllm
//! opens itself; `--wait-head`: wait for the head's replay before sampling;
//! `--fresh-slices`: record every slice afresh instead of replaying captures). The host device here is
//! opened by `vkllm_vk::Device::new` for brevity; a real host passes its own handles and
//! `HostFeatures::from_create_info` of its device's create info.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use vkllm::engine::{FrameDecoder, FrameOptions, GenerateParams, LayerView, SlotSession};
use vkllm::models::{AnyModel, Backend, Checkpoint, KvType, VulkanBackend};
use vkllm::tokenizer::{EncodeOptions, Tokenizer};
use vkllm::vk::kernels::elementwise::Add;
use vkllm::vk::{Device, DeviceOptions, Instance, MemoryKind, PipelineCacheMode, Recorder};

/// The decoder's context (positions).
const CTX: usize = 4096;

struct Args {
    model: String,
    frames: usize,
    budget: Duration,
    frame: Duration,
    host_elems: usize,
    opts: FrameOptions,
}

fn args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut a = Args {
        model: "smollm2".into(),
        frames: 120,
        budget: Duration::from_millis(4),
        frame: Duration::from_micros(16_667),
        host_elems: 1 << 22,
        opts: FrameOptions::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(s) = it.next() {
        let mut value = || it.next().ok_or(format!("{s} needs a value"));
        match s.as_str() {
            "--frames" => a.frames = value()?.parse()?,
            "--budget-ms" => a.budget = Duration::from_secs_f64(value()?.parse::<f64>()? / 1e3),
            "--frame-ms" => a.frame = Duration::from_secs_f64(value()?.parse::<f64>()? / 1e3),
            "--host-elems" => a.host_elems = value()?.parse()?,
            "--compare-own" => {}
            "--fresh-slices" => a.opts.recorded = false,
            "--wait-head" => a.opts.overlap_head = false,
            m if !m.starts_with("--") => a.model = m.to_string(),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(a)
}

/// vkllm on the host's instance, device and queue, with the features the host enabled.
fn attach(host: &Device) -> Result<Device, Box<dyn std::error::Error>> {
    let family = host.info().compute_queue_family.ok_or("no compute queue")?;
    // SAFETY: the handles are the host's, which outlives the attached device (both live until
    // main returns, the attached one dropped first); the host and vkllm submit from this one
    // thread, never at the same time.
    let dev = unsafe {
        let inst = Instance::from_raw(
            host.instance().entry().clone(),
            host.instance().raw().clone(),
            host.instance().api_version(),
        );
        let queue = host.raw().get_device_queue(family, 0);
        Device::from_raw(
            inst,
            host.physical_device(),
            host.raw().clone(),
            queue,
            family,
            host.enabled_features(),
            &DeviceOptions {
                pipeline_cache: PipelineCacheMode::Off,
                ..DeviceOptions::from_env()?
            },
        )?
    };
    Ok(dev)
}

fn sampling_params() -> vkllm::cpu::sampler::SamplingParams {
    vkllm::cpu::sampler::SamplingParams {
        seed: 1,
        ..Default::default()
    }
}

/// Tokens per second of `dec` for about a second with a budget that never binds (while its
/// context has room).
fn free_running(dec: &mut FrameDecoder<VulkanBackend>) -> Result<f64, Box<dyn std::error::Error>> {
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < Duration::from_secs(1) && dec.history().len() + 2 < CTX {
        n += dec
            .step(Duration::from_millis(50), &mut |_, _| {})?
            .tokens
            .len();
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Tokens generated per run of `--compare-own`'s recorded decoder.
const COMPARE_TOKENS: usize = 256;

/// Decode tokens per second of the recorded slot decoder on `dev`: the model loaded there,
/// one untimed run, then `COMPARE_TOKENS` greedy tokens after `prompt`.
fn recorded_tps(
    dev: Device,
    path: &std::path::Path,
    ck: &Checkpoint,
    prompt: &[u32],
) -> Result<f64, Box<dyn std::error::Error>> {
    let mut b = VulkanBackend::new(dev);
    let chunk = b.prefill_chunk();
    let model = AnyModel::load_checkpoint(ck, None, &mut b, chunk, &mut |_| {})?;
    let mut s = SlotSession::new(b, model, Tokenizer::from_path(path)?, CTX, KvType::F16)?;
    let p = GenerateParams {
        sampling: vkllm::cpu::sampler::SamplingParams::default(),
        max_tokens: COMPARE_TOKENS,
        stop: Vec::new(),
        grammar: None,
    };
    let cancel = AtomicBool::new(false);
    s.generate_with(prompt, &p, &cancel, |_| {})?;
    s.reset();
    let u = s.generate_with(prompt, &p, &cancel, |_| {})?;
    Ok(u.decode_tokens_per_s)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let host = Device::new(&DeviceOptions::from_env()?)?;
    let dev = attach(&host)?;
    println!("host device: {}", host.info().summary());
    println!(
        "missing for vkllm's fast kernels: {:?}",
        dev.missing_features()
    );

    let path = vkllm::resolve(&a.model, "python3".as_ref())?;
    let ck = Checkpoint::open(&path)?;
    let tokenizer = Tokenizer::from_path(&path)?;
    let mut b = VulkanBackend::new(dev.clone());
    let chunk = b.prefill_chunk();
    let AnyModel::Dense(model) = AnyModel::load_checkpoint(&ck, None, &mut b, chunk, &mut |_| {})?
    else {
        return Err("frame-budget decoding runs dense models".into());
    };
    let layers = model.cfg.layers.len();
    let mut dec =
        FrameDecoder::with_options(b, model, CTX, KvType::F16, sampling_params(), 0, a.opts)?;
    let prompt = tokenizer.encode(
        "The capital of France is",
        EncodeOptions {
            add_special_tokens: true,
            ..Default::default()
        },
    )?;
    let mut out = vec![dec.prefill(&prompt)?];
    // One token in single slices first: pipelines built, costs per layer and head measured.
    loop {
        let t = dec.step(Duration::ZERO, &mut |_, _| {})?.tokens;
        if !t.is_empty() {
            out.extend(t);
            break;
        }
    }
    let warm = out.len();

    // The host's own work each frame: element-wise adds over its buffers.
    let n = a.host_elems;
    let x = host.buffer_from("host x", &vec![1.0f32; n])?;
    let y = host.buffer_from("host y", &vec![2.0f32; n])?;
    let z = host.create_buffer("host z", 4 * n as u64, MemoryKind::Device)?;
    let host_work = || -> Result<(), Box<dyn std::error::Error>> {
        let mut r = Recorder::new(&host)?;
        for _ in 0..8 {
            r.dispatch(
                Add {
                    a: x.all(),
                    b: y.all(),
                    out: z.all(),
                }
                .dispatch(n)?,
            )?;
        }
        r.finish()?.submit()?;
        Ok(())
    };

    let (mut busy, mut model_ms, mut hooks) = (Vec::new(), Vec::new(), 0usize);
    let mut hook = |_: &VulkanBackend, v: LayerView| {
        debug_assert!(v.layer < layers);
        hooks += 1;
    };
    let t_run = Instant::now();
    for _ in 0..a.frames {
        let t0 = Instant::now();
        host_work()?;
        let tm = Instant::now();
        let step = dec.step(a.budget, &mut hook)?;
        model_ms.push(tm.elapsed().as_secs_f64() * 1e3);
        out.extend(step.tokens);
        busy.push(t0.elapsed().as_secs_f64() * 1e3);
        if let Some(rest) = a.frame.checked_sub(t0.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    let secs = t_run.elapsed().as_secs_f64();
    let generated = out.len() - warm;
    busy.sort_by(f64::total_cmp);
    model_ms.sort_by(f64::total_cmp);
    println!(
        "{} frames of {:.1} ms, model budget {:.1} ms: frame work p50 {:.2} ms, p99 {:.2} ms, max \
         {:.2} ms; model share p50 {:.2} ms, p99 {:.2} ms; {} layer slices",
        a.frames,
        a.frame.as_secs_f64() * 1e3,
        a.budget.as_secs_f64() * 1e3,
        percentile(&busy, 0.5),
        percentile(&busy, 0.99),
        busy[busy.len() - 1],
        percentile(&model_ms, 0.5),
        percentile(&model_ms, 0.99),
        hooks,
    );
    println!(
        "budgeted: {generated} tokens in {secs:.2} s = {:.1} tok/s",
        generated as f64 / secs
    );
    let us = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
    println!(
        "slice cost estimate: {:.1} us + {:.1} us per layer ({})",
        us(dec.slice_overhead()),
        us(dec.layer_cost()),
        match dec.replays_captures() {
            true => "slices replayed from captures",
            false => "slices recorded afresh",
        }
    );

    // The model alone, no budget to speak of, for comparison.
    let free_tps = free_running(&mut dec)?;
    let share = a.budget.as_secs_f64() / a.frame.as_secs_f64();
    println!(
        "free-running: {free_tps:.1} tok/s; budgeted / (free x budget share {share:.3}) = {:.2}",
        generated as f64 / secs / (free_tps * share).max(1e-9)
    );
    println!("text: {}", tokenizer.decode(&out, true)?);
    if std::env::args().any(|a| a == "--compare-own") {
        // What attaching costs: the recorded decoder (what `generate` runs on a GPU) on a second
        // attachment to the host's device against a device vkllm opens itself, alternated.
        drop(dec);
        let (mut attached, mut own) = (Vec::new(), Vec::new());
        for round in 0..6 {
            let on_own = round % 2 == 1;
            let d = if on_own {
                Device::new(&DeviceOptions::from_env()?)?
            } else {
                attach(&host)?
            };
            let tps = recorded_tps(d, &path, &ck, &prompt)?;
            if on_own { &mut own } else { &mut attached }.push(tps);
        }
        attached.sort_by(f64::total_cmp);
        own.sort_by(f64::total_cmp);
        let (a50, o50) = (percentile(&attached, 0.5), percentile(&own, 0.5));
        println!(
            "recorded decoder, {COMPARE_TOKENS} tokens, 3 runs each (median): attached {a50:.1} \
             tok/s {attached:.1?}, own device {o50:.1} tok/s {own:.1?}; attached / own {:.3}",
            a50 / o50
        );
    } else {
        drop(dec);
    }
    drop(dev);
    host.check_validation()?;
    Ok(())
}
