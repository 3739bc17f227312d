//! `vkllm bench`: prefill and decode speed of a model on a Vulkan device, measured through the
//! same paths generation uses (chunked prefill; the recorded multi-step slot decoder with GPU
//! sampling), with warm-up (the first runs compile pipelines and wake the GPU: never timed), repetitions,
//! median and spread, the device's copy bandwidth for reference, and an optional per-region
//! profile of one decode step from GPU timestamps.

use std::time::Instant;

use vkllm_cpu::sampler::SamplingParams;
use vkllm_models::hybrid::weights::{FfnWeights, MixerWeights, MlpWeights};
use vkllm_models::hybrid::{HybridModel, HybridState};
use vkllm_models::{
    KvCache, KvSharing, KvType, KvTypes, Logits, Model, ModelError, ProfiledDispatch,
    SlotDecoderConfig, SlotGraph, SlotStart, VulkanBackend,
};
use vkllm_vk::kernels::elementwise::Copy;
use vkllm_vk::{MemoryKind, Recorder};

mod report;
mod restore;
mod sampling;

use report::by_region;
pub use sampling::BenchSampling;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Prompt lengths for the prefill tests (`ppN`).
    pub pp: Vec<usize>,
    /// Tokens per sequence for the decode tests (`tgN`); 0 skips them.
    pub tg: usize,
    /// Concurrent sequences for the decode tests.
    pub batches: Vec<usize>,
    /// Timed repetitions of each test (after an untimed warm-up of at least [`WARM_UP`];
    /// [`FIRST_WARM_UP`] for the first test).
    pub reps: usize,
    /// Decode steps per submit (default 16: faster than 4 or 8, as fast as 32;
    /// docs/benchmarks.md).
    pub steps_per_submit: usize,
    /// The KV cache's types (one for keys and values, or each its own).
    pub kv: KvTypes,
    /// Also time one decode step per graph region (with as many live rows as the largest
    /// batch).
    pub profile: bool,
    /// Profile rows per kernel instead of per graph region.
    pub profile_by_kernel: bool,
    /// Sampling settings of the decode tests, one row each (default: greedy and the CLI's
    /// default sampling).
    pub sampling: Vec<BenchSampling>,
    /// Tokens already in the cache before each prefill and decode test, one set of rows per
    /// depth (llama-bench's `-d`; default: 0 only).
    pub depths: Vec<usize>,
    /// [`KvSharing::InPlace`]: dense caches are paged, and in the decode tests at a depth the
    /// sequences after the first take its depth rows in place (one prefix read by all, as
    /// behind a shared system prompt) instead of prefilling their own.
    pub kv_sharing: KvSharing,
}

impl BenchOptions {
    fn max_depth(&self) -> usize {
        self.depths.iter().copied().max().unwrap_or(0)
    }
}

/// A test's name at a depth, as llama-bench prints it (`pp512 @ d4096`).
fn at_depth(test: String, d: usize) -> String {
    if d == 0 {
        test
    } else {
        format!("{test} @ d{d}")
    }
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            pp: vec![512],
            tg: 128,
            batches: vec![1],
            reps: 3,
            steps_per_submit: 16,
            kv: KvType::F32.into(),
            profile: false,
            profile_by_kernel: false,
            sampling: vec![BenchSampling::Greedy, BenchSampling::Default],
            depths: vec![0],
            kv_sharing: KvSharing::Copy,
        }
    }
}

/// One measured test.
#[derive(Clone, Debug)]
pub struct BenchRow {
    /// `pp512`, `tg128`, `pp512+tg128`.
    pub test: String,
    pub batch: usize,
    /// The decode tests' sampling setting (`-` for prefill).
    pub sampling: &'static str,
    /// Tokens processed per repetition (all sequences).
    pub tokens: usize,
    /// Seconds per repetition: median, min, max.
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    /// Tokens per second at the median (all sequences together).
    pub tok_s: f64,
    /// Milliseconds per decode step (decode tests).
    pub ms_per_step: Option<f64>,
    /// Weight bytes read per decode step / step time, GB/s (decode tests).
    pub eff_gb_s: Option<f64>,
    /// Time to first token (pp+tg test), ms.
    pub ttft_ms: Option<f64>,
}

/// A profile line: one graph region of a decode step.
#[derive(Clone, Debug)]
pub struct ProfileRow {
    pub region: &'static str,
    pub dispatches: usize,
    pub us: f64,
}

/// Everything a bench run measured.
#[derive(Clone, Debug)]
pub struct BenchReport {
    pub rows: Vec<BenchRow>,
    /// Device-to-device copy bandwidth (bytes read + written per second), GB/s.
    pub copy_gb_s: f64,
    /// Bytes of weights one decode step reads (every matrix but an untied embedding table).
    pub weight_bytes: u64,
    /// Device memory held by resident f16 weight copies at the end (tuning `dequant_keep_mb`).
    pub kept_f16_bytes: u64,
    pub profile: Vec<ProfileRow>,
    /// GPU time of the profiled step: sum of dispatch times and first-start-to-last-end, µs.
    pub profile_busy_us: f64,
    pub profile_span_us: f64,
    /// The same for one prefill chunk of the pp prompt (`--profile`).
    pub prefill_profile: Vec<ProfileRow>,
    pub prefill_busy_us: f64,
    pub prefill_span_us: f64,
    /// How the decode tests' caches shared prefixes (in place only where they were paged).
    pub kv_sharing: KvSharing,
}

fn median_spread(mut t: Vec<f64>) -> (f64, f64, f64) {
    t.sort_by(f64::total_cmp);
    let n = t.len();
    let med = if n % 2 == 1 {
        t[n / 2]
    } else {
        0.5 * (t[n / 2 - 1] + t[n / 2])
    };
    (med, t[0], t[n - 1])
}

/// `n` token ids in `3..vocab` from a fixed LCG.
fn ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            3 + ((s >> 33) as u32) % (vocab as u32 - 3)
        })
        .collect()
}

/// Copy bandwidth of the device as shaders see it: the `copy` kernel over 256 MiB, 8 times in
/// one submit (bytes read + written per second).
pub fn copy_bandwidth(b: &VulkanBackend) -> Result<f64, ModelError> {
    let dev = b.device();
    let bytes = (256u64 << 20).min(dev.max_buffer_bytes() / 2 * 2);
    let src = dev.create_buffer("bench copy src", bytes, MemoryKind::Device)?;
    let dst = dev.create_buffer("bench copy dst", bytes, MemoryKind::Device)?;
    let record = |n: usize| -> Result<vkllm_vk::Recording, ModelError> {
        let mut r = Recorder::new(dev)?;
        let words = (bytes / 4) as usize;
        for _ in 0..n {
            r.dispatch(
                Copy {
                    a: src.all(),
                    out: dst.all(),
                }
                .dispatch(words)?,
            )?;
            r.dispatch(
                Copy {
                    a: dst.all(),
                    out: src.all(),
                }
                .dispatch(words)?,
            )?;
        }
        Ok(r.finish()?)
    };
    let (one, many) = (record(1)?, record(8)?);
    one.submit()?;
    let t0 = Instant::now();
    one.submit()?;
    let t1 = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    many.submit()?;
    let t8 = t0.elapsed().as_secs_f64();
    // The difference removes the submit overhead: 7 x 2 copies of `bytes`, read + written.
    Ok(2.0 * 14.0 * bytes as f64 / (t8 - t1).max(1e-9) / 1e9)
}

/// Bytes of weights a decode step reads: every matrix except an untied embedding table (of
/// which one row is gathered).
pub fn decode_weight_bytes(b: &VulkanBackend, model: &Model) -> u64 {
    let w = &model.weights;
    let mut bytes: u64 = w
        .layers
        .iter()
        .flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down])
        .map(|lin| b.matrix_bytes(lin.weight))
        .sum();
    bytes += b.matrix_bytes(w.lm_head.weight);
    bytes
}

/// [`decode_weight_bytes`] of a hybrid / MoE model: every matrix of the mixers and MLPs, the
/// router, shared expert and `top_k` of the experts of MoE layers (at their average size; f32
/// experts, kept as plain buffers, are not counted), and the output matrix.
pub fn hybrid_decode_weight_bytes(b: &VulkanBackend, model: &HybridModel) -> u64 {
    let w = &model.weights;
    let m = |l: &vkllm_models::Linear| b.matrix_bytes(l.weight);
    let mlp = |x: &MlpWeights| m(&x.gate) + m(&x.up) + m(&x.down);
    let mut bytes = m(&w.lm_head);
    for l in &w.layers {
        bytes += match &l.mixer {
            MixerWeights::Attention(a) => {
                m(&a.q) + a.gate.as_ref().map_or(0, m) + m(&a.k) + m(&a.v) + m(&a.o)
            }
            MixerWeights::DeltaNet(d) => m(&d.qkv) + m(&d.z) + m(&d.b) + m(&d.a) + m(&d.out),
        };
        bytes += match &l.ffn {
            FfnWeights::Dense(x) => mlp(x),
            FfnWeights::Moe(moe) => {
                let shared = moe.shared.as_ref().map_or(0, |s| mlp(&s.mlp) + m(&s.gate));
                let cfg = model.cfg.moe.as_ref();
                let (k, n) = cfg.map_or((1, 1), |c| (c.top_k, c.n_experts.max(1)));
                let e = &moe.experts;
                let all = b.matrix_bytes(e.gate) + b.matrix_bytes(e.up) + b.matrix_bytes(e.down);
                m(&moe.router) + shared + all * k as u64 / n as u64
            }
        };
    }
    bytes
}

/// A model with its state, as the benchmark drives it.
trait Net {
    fn chunk(&self) -> usize;
    /// Prefills `ids` from position 0 in `slot` (starting the slot's sequence over); the last
    /// row's logits.
    /// Prefills `ids` into `slot` from position `pos` (a hybrid's state restarts at 0).
    fn prefill(
        &self,
        b: &mut VulkanBackend,
        slot: usize,
        ids: &[u32],
        pos: usize,
    ) -> Result<Vec<f32>, ModelError>;
    fn graph(&self) -> &dyn SlotGraph;
    /// Gives slot `to` the first `rows` positions of slot `from` in place where the state is
    /// paged; false where it is not (the caller prefills instead).
    fn share_prefix(
        &self,
        b: &mut VulkanBackend,
        from: usize,
        to: usize,
        rows: usize,
    ) -> Result<bool, ModelError>;
    /// GPU timestamps of one prefill chunk, where the model has that profile.
    fn prefill_profile(
        &self,
        b: &mut VulkanBackend,
        ids: &[u32],
    ) -> Result<Vec<ProfiledDispatch>, ModelError>;
}

struct DenseNet<'a> {
    g: (&'a Model, &'a KvCache),
}

impl Net for DenseNet<'_> {
    fn chunk(&self) -> usize {
        self.g.0.chunk_size()
    }
    fn prefill(
        &self,
        b: &mut VulkanBackend,
        slot: usize,
        ids: &[u32],
        pos: usize,
    ) -> Result<Vec<f32>, ModelError> {
        self.g
            .0
            .forward_slot(b, self.g.1, slot, ids, pos, Logits::Last)
    }
    fn graph(&self) -> &dyn SlotGraph {
        &self.g
    }
    fn share_prefix(
        &self,
        b: &mut VulkanBackend,
        from: usize,
        to: usize,
        rows: usize,
    ) -> Result<bool, ModelError> {
        let kv = self.g.1;
        if kv.sharing() != KvSharing::InPlace {
            return Ok(false);
        }
        kv.copy_prefix(b, from, kv, to, rows, rows)?;
        Ok(true)
    }
    fn prefill_profile(
        &self,
        b: &mut VulkanBackend,
        ids: &[u32],
    ) -> Result<Vec<ProfiledDispatch>, ModelError> {
        b.forward_profile(self.g.0, self.g.1, ids)
    }
}

struct HybridNet<'a> {
    g: (&'a HybridModel, &'a HybridState),
}

impl Net for HybridNet<'_> {
    fn chunk(&self) -> usize {
        self.g.0.chunk_size()
    }
    fn prefill(
        &self,
        b: &mut VulkanBackend,
        slot: usize,
        ids: &[u32],
        pos: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let (model, st) = self.g;
        if pos == 0 {
            model.reset_slot(b, st, slot)?;
        }
        model.forward_slot(b, st, slot, ids, pos, Logits::Last)
    }
    fn graph(&self) -> &dyn SlotGraph {
        &self.g
    }
    fn share_prefix(
        &self,
        _: &mut VulkanBackend,
        _: usize,
        _: usize,
        _: usize,
    ) -> Result<bool, ModelError> {
        Ok(false)
    }
    fn prefill_profile(
        &self,
        b: &mut VulkanBackend,
        ids: &[u32],
    ) -> Result<Vec<ProfiledDispatch>, ModelError> {
        b.hybrid_forward_profile(self.g.0, self.g.1, ids)
    }
}

/// Positions each sequence needs, and the sequences.
fn state_size(o: &BenchOptions) -> (usize, usize) {
    let max_pp = o.pp.iter().copied().max().unwrap_or(0);
    let slots = o.batches.iter().copied().max().unwrap_or(1).max(1);
    (
        (o.max_depth() + max_pp + o.tg + 1).max(PROMPT + o.tg + 1),
        slots,
    )
}

/// Positions of the decode tests' own state: the `tgN` tests run in a cache sized for their
/// prompt and N tokens (as llama-bench sizes each test's context), not for the longest `pp`
/// (a recorded decode step's attention grid covers the whole slot).
pub fn decode_ctx(o: &BenchOptions) -> usize {
    o.max_depth() + PROMPT + o.tg + 1
}

/// Prompt of the decode tests.
pub const PROMPT: usize = 16;

/// Runs the benchmark of `model` (loaded on `b`).
pub fn run(
    b: &mut VulkanBackend,
    model: &Model,
    o: &BenchOptions,
) -> Result<BenchReport, ModelError> {
    let (ctx, slots) = state_size(o);
    // The benchmark binds no memory on demand: its caches are resident.
    let sharing = match o.kv_sharing {
        KvSharing::OnDemand => KvSharing::InPlace,
        s => s,
    };
    let kv = model.new_kv_slots_sharing(b, ctx, slots, o.kv, sharing)?;
    let kv_tg = model.new_kv_slots_sharing(b, decode_ctx(o), slots, o.kv, sharing)?;
    let weight_bytes = decode_weight_bytes(b, model);
    let nets = [
        DenseNet { g: (model, &kv) },
        DenseNet { g: (model, &kv_tg) },
    ];
    let mut r = run_net(b, &nets[0], &nets[1], weight_bytes, o)?;
    r.kv_sharing = kv_tg.sharing();
    Ok(r)
}

/// [`run`] for a hybrid (Gated DeltaNet) or MoE model: f32 KV next to the recurrent state; no
/// prefill profile.
pub fn run_hybrid(
    b: &mut VulkanBackend,
    model: &HybridModel,
    o: &BenchOptions,
) -> Result<BenchReport, ModelError> {
    let (ctx, slots) = state_size(o);
    let st = model.new_state_kv(b, ctx, slots, o.kv)?;
    let st_tg = model.new_state_kv(b, decode_ctx(o), slots, o.kv)?;
    let weight_bytes = hybrid_decode_weight_bytes(b, model);
    let nets = [
        HybridNet { g: (model, &st) },
        HybridNet { g: (model, &st_tg) },
    ];
    let mut r = run_net(b, &nets[0], &nets[1], weight_bytes, o)?;
    if let Some(d) = o.depths.iter().copied().filter(|&d| d > 0).max() {
        r.rows.push(restore::restore_row(b, &nets[0], d, o.reps)?);
    }
    Ok(r)
}

/// Least wall time of each test's untimed warm-up (at least one run: the first compiles
/// pipelines).
pub const WARM_UP: std::time::Duration = std::time::Duration::from_millis(300);

/// Least wall time of the untimed runs before a process's first test: in a process whose
/// pipelines the driver had to compile itself (cold shader disk cache) the host side of every
/// forward ran several times slower for a second or more after the compiles, while the GPU time
/// was unchanged (docs/benchmarks-history.md).
pub const FIRST_WARM_UP: std::time::Duration = std::time::Duration::from_secs(3);

/// Runs `f` once, then again until `least` has passed since the start, or, when that first run
/// created pipelines on `dev` (a test at a new size compiles launches of its own), until
/// [`FIRST_WARM_UP`] has passed since it ended: after fresh compiles a short warm-up left the
/// first process's prefill tests at a third of their speed (docs/benchmarks-history.md).
fn warm_up(
    dev: &vkllm_vk::Device,
    least: std::time::Duration,
    f: impl FnMut() -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    warm_up_with(|| dev.pipelines_created(), least, FIRST_WARM_UP, f).map(drop)
}

/// [`warm_up`] with the pipeline count from `created` and `after_compile` for the wait after a
/// run that created pipelines; returns the runs made.
fn warm_up_with(
    created: impl Fn() -> usize,
    least: std::time::Duration,
    after_compile: std::time::Duration,
    mut f: impl FnMut() -> Result<(), ModelError>,
) -> Result<usize, ModelError> {
    let before = created();
    let t0 = Instant::now();
    f()?;
    let (t0, least) = match created() > before {
        true => (Instant::now(), least.max(after_compile)),
        false => (t0, least),
    };
    let mut runs = 1;
    while t0.elapsed() < least {
        f()?;
        runs += 1;
    }
    Ok(runs)
}

/// The tests: `net` runs the prefill tests and `ppN+tgN`, `net_tg` (the same model with state
/// for [`decode_ctx`] positions) the `tgN` tests and the decode profile.
fn run_net(
    b: &mut VulkanBackend,
    net: &dyn Net,
    net_tg: &dyn Net,
    weight_bytes: u64,
    o: &BenchOptions,
) -> Result<BenchReport, ModelError> {
    let vocab = net.graph().vocab();
    let dev = b.device().clone();
    let reps = o.reps.max(1);
    let max_pp = o.pp.iter().copied().max().unwrap_or(0);
    let prompt = PROMPT;
    let mut rows = Vec::new();
    // The first test's warm-up is FIRST_WARM_UP, the others' WARM_UP.
    let mut first = true;
    let mut least = move || match std::mem::take(&mut first) {
        true => FIRST_WARM_UP,
        false => WARM_UP,
    };

    for (&d, &n) in o
        .depths
        .iter()
        .flat_map(|d| o.pp.iter().map(move |n| (d, n)))
    {
        let p = ids(n, vocab, n as u64);
        let fill = ids(d, vocab, 77);
        // The depth's tokens go in untimed before each run (a hybrid's state moves on).
        let one = |b: &mut VulkanBackend| -> Result<f64, ModelError> {
            if d > 0 {
                net.prefill(b, 0, &fill, 0)?;
            }
            let t0 = Instant::now();
            net.prefill(b, 0, &p, d)?;
            Ok(t0.elapsed().as_secs_f64())
        };
        warm_up(&dev, least(), || one(b).map(drop))?;
        let mut times = Vec::new();
        for _ in 0..reps {
            times.push(one(b)?);
        }
        let (med, min, max) = median_spread(times);
        rows.push(BenchRow {
            test: at_depth(format!("pp{n}"), d),
            batch: 1,
            sampling: "-",
            tokens: n,
            median_s: med,
            min_s: min,
            max_s: max,
            tok_s: n as f64 / med,
            ms_per_step: None,
            eff_gb_s: None,
            ttft_ms: None,
        });
    }

    if o.tg > 0 {
        let cfg = SlotDecoderConfig {
            max_bias: 1,
            max_top: 0,
            logprobs: false,
            counts: false,
            max_steps: o.steps_per_submit.max(1),
            split_step: false,
        };
        let dec = b.slot_decoder_for(net_tg.graph(), cfg)?;
        let greedy = SamplingParams::default();
        // Decode `tg` tokens in each of `batch` slots of `net` (decoder `dec`) after a
        // `pp`-token prefill (the first `shared` positions of slots after the first taken from
        // it in place where the state is paged); returns the decode time and the time to the
        // first token.
        let decode = |b: &mut VulkanBackend,
                      net: &dyn Net,
                      dec,
                      batch: usize,
                      (pp, shared): (usize, usize),
                      sampling: &SamplingParams|
         -> Result<(f64, f64), ModelError> {
            let t_start = Instant::now();
            let mut ttft = 0.0;
            for s in 0..batch {
                let p = ids(pp, vocab, 1000 + s as u64);
                let logits = if s > 0 && shared > 0 && net.share_prefix(b, 0, s, shared)? {
                    net.prefill(b, s, &p[shared..], shared)?
                } else {
                    net.prefill(b, s, &p, 0)?
                };
                if s == 0 {
                    ttft = t_start.elapsed().as_secs_f64();
                }
                let first = vkllm_cpu::sampler::sample(&logits, sampling, &[], s as u64, 0);
                b.slot_start(
                    dec,
                    s,
                    &SlotStart {
                        token: first,
                        pos: pp,
                        sampling,
                        seq_id: s as u64,
                        step: 1,
                        counts: None,
                        logprobs: None,
                    },
                )?;
            }
            let t0 = Instant::now();
            let mut done = 1;
            while done < o.tg {
                let got = b.slots_run(dec, (o.tg - done).min(cfg.max_steps))?;
                done += got.steps;
            }
            let t = t0.elapsed().as_secs_f64();
            for s in 0..batch {
                b.slot_stop(dec, s)?;
            }
            Ok((t, ttft))
        };
        for (d, mode, &batch) in o.depths.iter().flat_map(|&d| {
            o.sampling
                .iter()
                .flat_map(move |m| o.batches.iter().map(move |b| (d, *m, b)))
        }) {
            let sp = mode.params();
            // The depth's tokens are part of each sequence's (untimed) prompt; shared in place
            // with `kv_sharing`.
            let prompt = (d + prompt, d);
            warm_up(&dev, least(), || {
                decode(b, net_tg, dec, batch, prompt, &sp).map(drop)
            })?;
            let mut times = Vec::new();
            for _ in 0..reps {
                times.push(decode(b, net_tg, dec, batch, prompt, &sp)?.0);
            }
            let (med, min, max) = median_spread(times);
            let steps = (o.tg - 1) as f64;
            rows.push(BenchRow {
                test: at_depth(format!("tg{}", o.tg), d),
                batch,
                sampling: mode.name(),
                tokens: batch * (o.tg - 1),
                median_s: med,
                min_s: min,
                max_s: max,
                tok_s: batch as f64 * steps / med,
                ms_per_step: Some(1e3 * med / steps),
                eff_gb_s: Some(weight_bytes as f64 * steps / med / 1e9),
                ttft_ms: None,
            });
        }
        if let Some(&pp) = o.pp.first() {
            let dec_pp = b.slot_decoder_for(net.graph(), cfg)?;
            let mut times = Vec::new();
            let mut ttfts = Vec::new();
            warm_up(&dev, least(), || {
                decode(b, net, dec_pp, 1, (pp, 0), &greedy).map(drop)
            })?;
            for _ in 0..reps {
                let t0 = Instant::now();
                let (_, ttft) = decode(b, net, dec_pp, 1, (pp, 0), &greedy)?;
                times.push(t0.elapsed().as_secs_f64());
                ttfts.push(ttft);
            }
            let (med, min, max) = median_spread(times);
            rows.push(BenchRow {
                test: format!("pp{pp}+tg{}", o.tg),
                batch: 1,
                sampling: "greedy",
                tokens: pp + o.tg,
                median_s: med,
                min_s: min,
                max_s: max,
                tok_s: (pp + o.tg) as f64 / med,
                ms_per_step: None,
                eff_gb_s: None,
                ttft_ms: Some(1e3 * median_spread(ttfts).0),
            });
        }
        let mut report_profile = Vec::new();
        let (mut busy, mut span) = (0.0, 0.0);
        let mut prefill = (Vec::new(), 0.0, 0.0);
        if o.profile {
            // The decode step with the last sampling setting asked for (the sampler's regions).
            let greedy = o
                .sampling
                .last()
                .map_or_else(SamplingParams::default, |m| m.params());
            // As many live rows as the largest `--batch` (the batched step is what it shows),
            // each at the deepest `--depth` (attention's cost grows with the keys it reads).
            let rows = o.batches.iter().copied().max().unwrap_or(1).max(1);
            let at = o.max_depth() + prompt;
            for s in 0..rows {
                let p = ids(at, vocab, 7 + s as u64);
                let logits = net_tg.prefill(b, s, &p, 0)?;
                let first = vkllm_cpu::sampler::sample(&logits, &greedy, &[], s as u64, 0);
                b.slot_start(
                    dec,
                    s,
                    &SlotStart {
                        token: first,
                        pos: at,
                        sampling: &greedy,
                        seq_id: s as u64,
                        step: 1,
                        counts: None,
                        logprobs: None,
                    },
                )?;
            }
            let t = b.slot_profile_for(dec, net_tg.graph(), 5)?;
            for s in 0..rows {
                b.slot_stop(dec, s)?;
            }
            (report_profile, busy, span) = by_region(&t, o.profile_by_kernel);
            prefill = chunk_profile(b, net, max_pp.max(prompt), o.profile_by_kernel)?;
        }
        return Ok(BenchReport {
            rows,
            copy_gb_s: copy_bandwidth(b)?,
            weight_bytes,
            kept_f16_bytes: b.device().kept_f16_bytes(),
            profile: report_profile,
            profile_busy_us: busy,
            profile_span_us: span,
            prefill_profile: prefill.0,
            prefill_busy_us: prefill.1,
            prefill_span_us: prefill.2,
            kv_sharing: KvSharing::Copy,
        });
    }
    // No decode tests: `--profile` still shows the prefill chunk.
    let prefill = match o.profile {
        true => chunk_profile(b, net, max_pp.max(prompt), o.profile_by_kernel)?,
        false => (Vec::new(), 0.0, 0.0),
    };
    Ok(BenchReport {
        rows,
        copy_gb_s: copy_bandwidth(b)?,
        weight_bytes,
        kept_f16_bytes: b.device().kept_f16_bytes(),
        profile: Vec::new(),
        profile_busy_us: 0.0,
        profile_span_us: 0.0,
        prefill_profile: prefill.0,
        prefill_busy_us: prefill.1,
        prefill_span_us: prefill.2,
        kv_sharing: KvSharing::Copy,
    })
}

/// GPU timestamps of one prefill chunk of a `tokens`-token prompt (its first chunk when it is
/// longer), by region or by kernel: (rows, busy us, span us).
fn chunk_profile(
    b: &mut VulkanBackend,
    net: &dyn Net,
    tokens: usize,
    by_kernel: bool,
) -> Result<(Vec<ProfileRow>, f64, f64), ModelError> {
    let pre = ids(tokens.min(net.chunk()), net.graph().vocab(), 11);
    let t = net.prefill_profile(b, &pre)?;
    Ok(by_region(&t, by_kernel))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    use super::warm_up_with;

    /// A first run that creates pipelines extends the warm-up to `after_compile` from its end;
    /// otherwise one run suffices when `least` is zero.
    #[test]
    fn warm_up_waits_after_compiles() {
        let made = Cell::new(0usize);
        let run = || {
            if made.get() == 0 {
                made.set(3);
            }
            Ok(())
        };
        let t0 = Instant::now();
        let runs = warm_up_with(
            || made.get(),
            Duration::ZERO,
            Duration::from_millis(40),
            run,
        )
        .expect("warm-up");
        assert!(runs > 1, "{runs}");
        assert!(t0.elapsed() >= Duration::from_millis(40));
        let runs = warm_up_with(
            || made.get(),
            Duration::ZERO,
            Duration::from_secs(60),
            || Ok(()),
        )
        .expect("warm-up");
        assert_eq!(runs, 1);
    }
}
