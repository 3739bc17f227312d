//! Random-weight GGUF files of real model shapes (`vkllm synth`), so any engine can be
//! benchmarked on the same file without the real weights: the tensor names, shapes, metadata
//! keys and per-tensor quantization layout llama.cpp would write for that model (its converter
//! for the f16 file, `llama-quantize`'s rules for the quantized ones, [`crate::quantize::mix`]),
//! with a synthetic vocabulary ([`vocab`]) and seeded random weights.
//!
//! Weights: matrices and biases N(0, 0.02), norm weights 1 + N(0, 0.02) (GGUF stores norm
//! weights as used, Gemma's `1 + w` included), so activations stay finite through the stack;
//! Llama 3's `rope_freqs.weight` holds the real scaling factors. Every row has its own generator
//! seeded from (seed, tensor, row): the file depends only on the seed, never on thread count.
//! Tensors are generated, quantized and written slab by slab (tens of MiB), on every core.

pub mod shapes;
pub mod vocab;

use std::io::Write;
use std::path::Path;

use vkllm_cpu::QuantType;
use vkllm_cpu::quant::quantize_row_into;
use vkllm_gguf::writer::GgufWriter;
use vkllm_gguf::{GgmlType, MetaArray, MetaValue};

use crate::error::ModelError;
use crate::quantize::QuantScheme;
use crate::quantize::mix::{self, MixModel, TensorDesc};
pub use shapes::{HybridShape, Llama3Rope, MoeShape, SHAPES, SynthShape};
use vocab::VocabKind;

/// The shape called `name`.
pub fn shape(name: &str) -> Result<&'static SynthShape, ModelError> {
    SHAPES
        .iter()
        .find(|s| s.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| ModelError::UnknownShape {
            name: name.to_string(),
            known: SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", "),
        })
}

/// How a tensor's values are made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// N(0, std).
    Normal(f32),
    /// 1 + N(0, std) (norm weights).
    OnePlusNormal(f32),
    /// Llama 3's per-frequency RoPE factors for RoPE base `theta` (one row of head_dim / 2).
    RopeFreqs(Llama3Rope, f32),
    /// Uniform in `[lo, hi)` (Gated DeltaNet's `ssm_a = -exp(A_log)`, which must be negative).
    Uniform(f32, f32),
}

/// One tensor of the file.
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    pub name: String,
    /// ggml order: the row length first.
    pub dims: Vec<u64>,
    pub ty: QuantType,
    pub init: Init,
}

impl PlannedTensor {
    fn cols(&self) -> usize {
        self.dims[0] as usize
    }

    fn rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }

    /// Bytes the tensor takes.
    pub fn n_bytes(&self) -> u64 {
        (self.rows() * self.ty.row_bytes(self.cols()).unwrap_or(0)) as u64
    }
}

/// How the quantized matrices' blocks are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fill {
    /// Every row drawn and quantized on its own (the default).
    #[default]
    Exact,
    /// Rows assembled from a seeded pool of [`POOL_BLOCKS`] blocks per tensor (each drawn and
    /// quantized as in `Exact`), picked at random: the same types, layout and value
    /// distribution per block, with none of the per-row quantization cost (most of a large
    /// synth's time). For benchmark files; float tensors are always exact.
    Pool,
}

/// Distinct blocks per tensor with [`Fill::Pool`].
pub const POOL_BLOCKS: usize = 1024;

/// Everything the file will hold.
pub struct SynthPlan {
    pub shape: SynthShape,
    pub scheme: QuantScheme,
    pub seed: u64,
    pub fill: Fill,
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<PlannedTensor>,
}

const STD: f32 = 0.02;

impl SynthPlan {
    /// The plan for `shape` in `scheme`.
    pub fn new(shape: &SynthShape, scheme: QuantScheme, seed: u64) -> Self {
        let tensors = plan_tensors(shape, scheme);
        let metadata = plan_metadata(shape, scheme);
        SynthPlan {
            shape: *shape,
            scheme,
            seed,
            fill: Fill::Exact,
            metadata,
            tensors,
        }
    }

    /// The same plan with its quantized blocks made by `fill`.
    pub fn with_fill(mut self, fill: Fill) -> Self {
        self.fill = fill;
        self
    }

    /// Parameters (elements of every tensor).
    pub fn n_params(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.dims.iter().product::<u64>())
            .sum()
    }

    /// Bytes of tensor data.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(PlannedTensor::n_bytes).sum()
    }

    /// Writes the file; `progress(done, total)` is called after every slab with tensor bytes.
    pub fn write(
        &self,
        path: impl AsRef<Path>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, ModelError> {
        let path = path.as_ref();
        let total = self.tensor_bytes();
        let done = std::cell::Cell::new(0u64);
        let progress = std::cell::RefCell::new(progress);
        let mut w = GgufWriter::new();
        for (k, v) in &self.metadata {
            w.add_metadata(k.clone(), v.clone())
                .map_err(vkllm_gguf::Error::from)?;
        }
        for (index, t) in self.tensors.iter().enumerate() {
            let ty = GgmlType::from_id(t.ty.ggml_id()).ok_or_else(|| {
                ModelError::UnsupportedTensorType {
                    name: t.name.clone(),
                    ty: t.ty.name().to_string(),
                }
            })?;
            let (seed, mode, done, progress) = (self.seed, self.fill, &done, &progress);
            let fill = move |out: &mut dyn Write| -> std::io::Result<()> {
                write_tensor(t, seed, mode, index as u64, out, &mut |n| {
                    done.set(done.get() + n);
                    if let Ok(mut p) = progress.try_borrow_mut() {
                        p(done.get(), total);
                    }
                })
            };
            w.add_tensor_fill(t.name.clone(), ty, &t.dims, Box::new(fill))
                .map_err(vkllm_gguf::Error::from)?;
        }
        let n = w.write_file(path).map_err(vkllm_gguf::Error::from)?;
        Ok(n)
    }
}

/// Tensor names, dims and types, in `llama-quantize`'s output order (tensors outside the
/// blocks first, then block by block, names sorted within each).
fn plan_tensors(s: &SynthShape, scheme: QuantScheme) -> Vec<PlannedTensor> {
    let (h, hd, vocab) = (s.hidden as u64, s.head_dim as u64, s.vocab as u64);
    let normal = Init::Normal(STD);
    let norm = Init::OnePlusNormal(STD);
    let mut globals: Vec<(String, Vec<u64>, Init)> = vec![
        ("token_embd.weight".into(), vec![h, vocab], normal),
        ("output_norm.weight".into(), vec![h], norm),
    ];
    if !s.tied {
        globals.push(("output.weight".into(), vec![h, vocab], normal));
    }
    if let Some(r) = s.rope_llama3 {
        let init = Init::RopeFreqs(r, s.rope_theta);
        globals.push(("rope_freqs.weight".into(), vec![hd / 2], init));
    }
    globals.sort_by(|a, b| a.0.cmp(&b.0));
    let m = MixModel {
        n_layers: s.layers,
        tied: s.tied,
    };
    let typed = |name: String, dims: Vec<u64>, init: Init, counter: usize| {
        let desc = TensorDesc {
            name: &name,
            cols: dims[0] as usize,
            n_dims: dims.len(),
            counter,
        };
        let ty = mix::tensor_type(scheme, &desc, &m);
        PlannedTensor {
            name,
            dims,
            ty,
            init,
        }
    };
    let mut out: Vec<PlannedTensor> = globals
        .into_iter()
        .map(|(n, d, i)| typed(n, d, i, 0))
        .collect();
    for l in 0..s.layers {
        for (n, d, i) in layer_tensors(s, l) {
            out.push(typed(format!("blk.{l}.{n}"), d, i, l));
        }
    }
    out
}

/// The tensors of block `l` (names without the `blk.N.` prefix), sorted by name.
fn layer_tensors(s: &SynthShape, l: usize) -> Vec<(&'static str, Vec<u64>, Init)> {
    let (h, ff, hd) = (s.hidden as u64, s.ff as u64, s.head_dim as u64);
    let (q, kv) = (s.q_dim() as u64, s.kv_dim() as u64);
    let normal = Init::Normal(STD);
    let norm = Init::OnePlusNormal(STD);
    let mut layer: Vec<(&str, Vec<u64>, Init)> = vec![("attn_norm.weight", vec![h], norm)];
    match s.moe {
        None => layer.extend([
            ("ffn_gate.weight", vec![h, ff], normal),
            ("ffn_up.weight", vec![h, ff], normal),
            ("ffn_down.weight", vec![ff, h], normal),
        ]),
        Some(m) => {
            // Experts stacked as llama.cpp writes them: [cols, rows, experts].
            let (e, eff) = (m.experts as u64, m.expert_ff as u64);
            layer.extend([
                ("ffn_gate_inp.weight", vec![h, e], normal),
                ("ffn_gate_exps.weight", vec![h, eff, e], normal),
                ("ffn_up_exps.weight", vec![h, eff, e], normal),
                ("ffn_down_exps.weight", vec![eff, h, e], normal),
            ]);
            if let Some(sff) = m.shared_ff {
                let sff = sff as u64;
                layer.extend([
                    ("ffn_gate_inp_shexp.weight", vec![h], normal),
                    ("ffn_gate_shexp.weight", vec![h, sff], normal),
                    ("ffn_up_shexp.weight", vec![h, sff], normal),
                    ("ffn_down_shexp.weight", vec![sff, h], normal),
                ]);
            }
        }
    }
    match s.hybrid {
        Some(hy) if !hy.is_full(l) => {
            // Gated DeltaNet: llama.cpp's qwen35 names (see gguf_hybrid.rs).
            let (conv, vw, hv) = (hy.conv_dim() as u64, hy.v_width() as u64, hy.v_heads as u64);
            layer.extend([
                ("post_attention_norm.weight", vec![h], norm),
                ("attn_qkv.weight", vec![h, conv], normal),
                ("attn_gate.weight", vec![h, vw], normal),
                ("ssm_beta.weight", vec![h, hv], normal),
                ("ssm_alpha.weight", vec![h, hv], normal),
                ("ssm_a", vec![hv], Init::Uniform(-8.0, -0.5)),
                ("ssm_dt.bias", vec![hv], norm),
                (
                    "ssm_conv1d.weight",
                    vec![hy.conv_kernel as u64, conv],
                    normal,
                ),
                ("ssm_norm.weight", vec![hy.v_dim as u64], norm),
                ("ssm_out.weight", vec![vw, h], normal),
            ]);
        }
        Some(_) => {
            // Gated full attention: the query and its gate in one projection.
            layer.extend([
                ("post_attention_norm.weight", vec![h], norm),
                ("attn_q.weight", vec![h, 2 * q], normal),
                ("attn_k.weight", vec![h, kv], normal),
                ("attn_v.weight", vec![h, kv], normal),
                ("attn_output.weight", vec![q, h], normal),
                ("attn_q_norm.weight", vec![hd], norm),
                ("attn_k_norm.weight", vec![hd], norm),
            ]);
        }
        None => {
            layer.extend([
                ("attn_q.weight", vec![h, q], normal),
                ("attn_k.weight", vec![h, kv], normal),
                ("attn_v.weight", vec![h, kv], normal),
                ("attn_output.weight", vec![q, h], normal),
                ("ffn_norm.weight", vec![h], norm),
            ]);
            if s.arch == "qwen2" {
                layer.push(("attn_q.bias", vec![q], normal));
                layer.push(("attn_k.bias", vec![kv], normal));
                layer.push(("attn_v.bias", vec![kv], normal));
            }
            if matches!(s.arch, "qwen3" | "qwen3moe" | "gemma3") {
                layer.push(("attn_q_norm.weight", vec![hd], norm));
                layer.push(("attn_k_norm.weight", vec![hd], norm));
            }
            if s.arch == "gemma3" {
                layer.push(("post_attention_norm.weight", vec![h], norm));
                layer.push(("post_ffw_norm.weight", vec![h], norm));
            }
        }
    }
    layer.sort_by(|a, b| a.0.cmp(b.0));
    layer
}

fn s(v: &str) -> MetaValue {
    MetaValue::String(v.to_string())
}

/// The metadata keys llama.cpp's converter (and `llama-quantize`) write for the shape.
fn plan_metadata(sh: &SynthShape, scheme: QuantScheme) -> Vec<(String, MetaValue)> {
    let a = sh.arch;
    let mut m: Vec<(String, MetaValue)> = vec![
        ("general.architecture".into(), s(a)),
        ("general.type".into(), s("model")),
    ];
    for (k, v) in sh.general {
        m.push((k.to_string(), s(v)));
    }
    for (k, v) in sh.general_arrays {
        let arr = v.iter().map(|x| x.to_string()).collect();
        m.push((k.to_string(), MetaValue::Array(MetaArray::String(arr))));
    }
    let u = |v: usize| MetaValue::U32(v as u32);
    let mut arch: Vec<(&str, MetaValue)> = vec![
        ("block_count", u(sh.layers)),
        ("context_length", MetaValue::U32(sh.context)),
        ("embedding_length", u(sh.hidden)),
        ("feed_forward_length", u(sh.ff)),
        ("attention.head_count", u(sh.heads)),
        ("attention.head_count_kv", u(sh.kv_heads)),
        ("rope.freq_base", MetaValue::F32(sh.rope_theta)),
        (
            "attention.layer_norm_rms_epsilon",
            MetaValue::F32(sh.rms_eps),
        ),
    ];
    if sh.explicit_head_dim {
        arch.push(("attention.key_length", u(sh.head_dim)));
        arch.push(("attention.value_length", u(sh.head_dim)));
    }
    if let Some(w) = sh.sliding_window {
        arch.push(("attention.sliding_window", MetaValue::U32(w)));
    }
    if let Some(f) = sh.rope_linear {
        arch.push(("rope.scaling.type", s("linear")));
        arch.push(("rope.scaling.factor", MetaValue::F32(f)));
    }
    if a == "llama" {
        arch.push(("vocab_size", u(sh.vocab)));
        arch.push(("rope.dimension_count", u(sh.head_dim)));
    }
    if let Some(hy) = sh.hybrid {
        let sections = hy.mrope_sections.to_vec();
        arch.extend([
            ("rope.dimension_count", u(hy.rotary_dim)),
            (
                "rope.dimension_sections",
                MetaValue::Array(MetaArray::U32(sections)),
            ),
            ("ssm.conv_kernel", u(hy.conv_kernel)),
            ("ssm.state_size", u(hy.k_dim)),
            ("ssm.group_count", u(hy.k_heads)),
            ("ssm.time_step_rank", u(hy.v_heads)),
            ("ssm.inner_size", u(hy.v_width())),
            ("full_attention_interval", u(hy.interval)),
        ]);
    }
    if let Some(moe) = sh.moe {
        arch.extend([
            ("expert_count", u(moe.experts)),
            ("expert_used_count", u(moe.used)),
            ("expert_feed_forward_length", u(moe.expert_ff)),
        ]);
        if let Some(sff) = moe.shared_ff {
            arch.push(("expert_shared_feed_forward_length", u(sff)));
        }
    }
    for (k, v) in arch {
        m.push((format!("{a}.{k}"), v));
    }
    m.push((
        "general.file_type".into(),
        MetaValue::U32(scheme.file_type()),
    ));

    let vocab = match sh.vocab_kind {
        VocabKind::Bpe {
            specials,
            special_base,
            n_pad,
            ..
        } => vocab::bpe(sh.vocab, specials, special_base, n_pad),
        VocabKind::Spm { head, controls } => vocab::spm(sh.vocab, head, controls),
    };
    let id = |t: &str| vocab.id(t).map(MetaValue::U32);
    let mut ids = Vec::new();
    for (key, tok) in [
        ("tokenizer.ggml.bos_token_id", sh.bos),
        ("tokenizer.ggml.eos_token_id", Some(sh.eos)),
        ("tokenizer.ggml.unknown_token_id", sh.unk),
        ("tokenizer.ggml.padding_token_id", sh.pad),
    ] {
        if let Some(v) = tok.and_then(id) {
            ids.push((key.to_string(), v));
        }
    }
    let (model, pre) = match sh.vocab_kind {
        VocabKind::Bpe { pre, .. } => ("gpt2", pre),
        VocabKind::Spm { .. } => ("llama", "default"),
    };
    if let Some(p) = sh.add_space_prefix.filter(|_| model == "gpt2") {
        m.push(("tokenizer.ggml.add_space_prefix".into(), MetaValue::Bool(p)));
    }
    m.push(("tokenizer.ggml.model".into(), s(model)));
    m.push(("tokenizer.ggml.pre".into(), s(pre)));
    for (k, v) in vocab.metadata() {
        m.push((k.to_string(), v));
    }
    m.extend(ids);
    m.push((
        "tokenizer.ggml.add_bos_token".into(),
        MetaValue::Bool(sh.add_bos),
    ));
    if model == "llama" {
        m.push((
            "tokenizer.ggml.add_sep_token".into(),
            MetaValue::Bool(false),
        ));
        m.push((
            "tokenizer.ggml.add_eos_token".into(),
            MetaValue::Bool(false),
        ));
        if let Some(p) = sh.add_space_prefix {
            m.push(("tokenizer.ggml.add_space_prefix".into(), MetaValue::Bool(p)));
        }
    }
    if let Some(t) = sh.chat_template {
        m.push(("tokenizer.chat_template".into(), s(t)));
    }
    m.push(("general.quantization_version".into(), MetaValue::U32(2)));
    m
}

/// SplitMix64 finaliser (seeds) and generator.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256+ for the values (fast; quality ample for random weights).
struct Xoshiro([u64; 4]);

impl Xoshiro {
    fn new(seed: u64) -> Self {
        let a = splitmix(seed);
        let b = splitmix(a);
        let c = splitmix(b);
        let d = splitmix(c);
        Xoshiro([a, b, c, d | 1])
    }

    fn next(&mut self) -> u64 {
        let s = &mut self.0;
        let r = s[0].wrapping_add(s[3]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 + 1.0) * (1.0 / (1u64 << 24) as f32)
    }

    /// Two N(0, 1) draws (Box-Muller).
    fn normal2(&mut self) -> (f32, f32) {
        let r = (-2.0 * self.unit().ln()).sqrt();
        let (s, c) = (std::f32::consts::TAU * self.unit()).sin_cos();
        (r * c, r * s)
    }
}

/// One row's f32 values.
fn fill_row(init: Init, seed: u64, tensor: u64, row: u64, out: &mut [f32]) {
    match init {
        Init::Normal(std) | Init::OnePlusNormal(std) => {
            let base = if matches!(init, Init::OnePlusNormal(_)) {
                1.0
            } else {
                0.0
            };
            let mut rng = Xoshiro::new(seed ^ splitmix(tensor << 40 ^ row));
            for pair in out.chunks_mut(2) {
                let (a, b) = rng.normal2();
                pair[0] = base + std * a;
                if let Some(x) = pair.get_mut(1) {
                    *x = base + std * b;
                }
            }
        }
        Init::RopeFreqs(r, theta) => {
            let f = llama3_rope_factors(&r, theta, out.len() * 2);
            out.copy_from_slice(&f);
        }
        Init::Uniform(lo, hi) => {
            let mut rng = Xoshiro::new(seed ^ splitmix(tensor << 40 ^ row));
            for x in out.iter_mut() {
                *x = lo + (hi - lo) * rng.unit();
            }
        }
    }
}

/// The factors `convert_hf_to_gguf.py` writes as `rope_freqs.weight` for Llama 3.1+ RoPE
/// scaling (llama.cpp divides each frequency by its factor): 1 for wavelengths below
/// `original / high`, `factor` above `original / low`, and `1 / ((1 - s) / factor + s)` with
/// `s = (original / wavelen - low) / (high - low)` in between.
pub fn llama3_rope_factors(r: &Llama3Rope, theta: f32, head_dim: usize) -> Vec<f32> {
    let orig = r.original_max_position as f64;
    let (low, high) = (f64::from(r.low_freq_factor), f64::from(r.high_freq_factor));
    let factor = f64::from(r.factor);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / f64::from(theta).powf((2 * i) as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelen < orig / high {
                1.0
            } else if wavelen > orig / low {
                factor
            } else {
                let s = (orig / wavelen - low) / (high - low);
                1.0 / ((1.0 - s) / factor + s)
            };
            f as f32
        })
        .collect()
}

/// `POOL_BLOCKS` blocks of `t`'s type drawn like its rows (pool block k is the first block of
/// a row `u64::MAX - k`, outside the tensor's own rows), or `None` where `Fill::Pool` does not
/// apply (float types, non-normal values).
fn block_pool(t: &PlannedTensor, seed: u64, index: u64) -> std::io::Result<Option<Vec<u8>>> {
    let normal = matches!(t.init, Init::Normal(_) | Init::OnePlusNormal(_));
    if !normal || matches!(t.ty, QuantType::F32 | QuantType::F16 | QuantType::BF16) {
        return Ok(None);
    }
    let (be, ts) = (t.ty.block_size(), t.ty.type_size());
    let mut pool = vec![0u8; POOL_BLOCKS * ts];
    let mut x = vec![0f32; be];
    for (k, dst) in pool.chunks_exact_mut(ts).enumerate() {
        fill_row(t.init, seed, index, u64::MAX - k as u64, &mut x);
        quantize_row_into(t.ty, &x, dst).map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    Ok(Some(pool))
}

/// Row `row` of a pooled tensor: its blocks picked from `pool` by a generator seeded like
/// `fill_row`'s.
fn pool_row(pool: &[u8], ts: usize, seed: u64, tensor: u64, row: u64, dst: &mut [u8]) {
    let mut rng = Xoshiro::new(seed ^ splitmix(tensor << 40 ^ row));
    for blk in dst.chunks_exact_mut(ts) {
        let k = (rng.next() >> 32) as usize % POOL_BLOCKS;
        blk.copy_from_slice(&pool[k * ts..(k + 1) * ts]);
    }
}

/// Generates, quantizes and writes one tensor in slabs.
fn write_tensor(
    t: &PlannedTensor,
    seed: u64,
    mode: Fill,
    index: u64,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> std::io::Result<()> {
    let (rows, cols) = (t.rows(), t.cols());
    let row_bytes =
        t.ty.row_bytes(cols)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
    let pool = match mode {
        Fill::Pool => block_pool(t, seed, index)?,
        Fill::Exact => None,
    };
    let slab_rows = ((32usize << 20) / row_bytes.max(1)).clamp(1, rows.max(1));
    let per_part = ((1usize << 18) / cols.max(1)).max(1);
    let mut buf = vec![0u8; slab_rows * row_bytes];
    let mut r0 = 0;
    while r0 < rows {
        let n = slab_rows.min(rows - r0);
        let slab = &mut buf[..n * row_bytes];
        let ok = std::sync::atomic::AtomicBool::new(true);
        vkllm_cpu::threads::for_each_part(slab, row_bytes, per_part, |first, part| {
            let mut x = vec![0f32; if pool.is_some() { 0 } else { cols }];
            for (i, dst) in part.chunks_exact_mut(row_bytes).enumerate() {
                let row = (r0 + first + i) as u64;
                if let Some(pool) = &pool {
                    pool_row(pool, t.ty.type_size(), seed, index, row, dst);
                    continue;
                }
                fill_row(t.init, seed, index, row, &mut x);
                if quantize_row_into(t.ty, &x, dst).is_err() {
                    ok.store(false, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        if !ok.into_inner() {
            return Err(std::io::Error::other(format!(
                "{}: cannot quantize rows of {cols} to {}",
                t.name, t.ty
            )));
        }
        out.write_all(slab)?;
        progress(slab.len() as u64);
        r0 += n;
    }
    Ok(())
}
