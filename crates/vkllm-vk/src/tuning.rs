//! Tuning: every kernel and launch choice of the Vulkan runtime and of the model backends built
//! on it, as one typed value a [`crate::Device`] carries (from [`crate::DeviceOptions`]), so two
//! devices in one process can run two settings side by side. Defaults are the measured choices
//! (docs/benchmarks.md); each non-default value selects the reference or an alternative path.
//!
//! This is also vkllm-vk's one options module: the only place the crate reads the environment
//! (`VKLLM_DEVICE`, `VKLLM_VALIDATE`, the developers' `VKLLM_TUNE="key=value,..."`, the cache
//! directory `VKLLM_CACHE` and the parity seed `VKLLM_SEED`).

use std::fmt;

use vkllm_kernels::matmul_coop::CoopTile;
use vkllm_kernels::matvec_fused::MatvecImpl;
use vkllm_kernels::matvec_rows::MatvecLayout;

use crate::coop_dequant::DequantPolicy;
use crate::info::DeviceChoice;
use crate::instance::Validation;

/// The split-K rule of automatic cooperative-matrix launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitK {
    /// Per weight type: [`crate::SPLIT_TARGET_FLOAT`] or [`crate::SPLIT_TARGET_QUANT`]
    /// workgroups.
    Auto,
    /// No split-K: the kernel's original launch (the reference).
    Off,
    /// This many target workgroups for every type.
    Target(usize),
}

/// Which graph steps group their cooperative-matrix products into one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoopGroup {
    /// q/k/v only (grouped gate + up lose: the two products overlap on the GPU otherwise).
    Qkv,
    /// gate + up only.
    Mlp,
    /// Both.
    All,
    /// Neither: one launch per weight (the reference).
    None,
}

/// The decode attention of the model backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeAttn {
    /// Split over key chunks, then a merge (two launches).
    Split,
    /// Split and merge in one launch (the last workgroup merges).
    Fused,
    /// One workgroup per head over every key (the reference).
    Reference,
}

/// The prefill attention kernel on devices with cooperative matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillAttn {
    /// The second cooperative-matrix kernel where its shapes allow, else the first.
    Auto,
    /// Always the first cooperative-matrix kernel.
    Coop1,
    /// The portable tiled kernel (the reference).
    Portable,
}

/// Every tuning choice; see the module docs. `Tuning::default()` is the measured default.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// Decode matrix-vector kernel; `None`: per device (int8 dot products on GPUs that have
    /// them, else the fast kernel). Key `matvec` = auto | reference | fast | int8.
    pub matvec: Option<MatvecImpl>,
    /// Fast matvec layout; `None`: per device (teams on GPUs, rows on CPU devices). Key
    /// `matvec_layout` = auto | teams | rows.
    pub matvec_layout: Option<MatvecLayout>,
    /// int8 matvec: wide teams for K-quant weights where measured faster. Key `q8a_wide`.
    pub q8a_wide: bool,
    /// int8 matvec: four rows per team where it fits. Key `q8a_quad`.
    pub q8a_quad: bool,
    /// int8 matvec: workgroups a launch aims for; 0 picks per op. Key `q8a_workgroups`.
    pub q8a_workgroups: u32,
    /// Batched decode steps (2 or more rows) run the int8 matvec on activations quantized once
    /// per product into a buffer every workgroup reads (`quantize_act_q8`), up to
    /// `decode_int8_max_n` rows; `false`: each workgroup quantizes in shared memory where that
    /// fits (at most 16384 elements), the float kernel elsewhere (the reference). Prompt
    /// prefill keeps the reference either way. Key `q8a_xg`.
    pub q8a_xg: bool,
    /// Lanes per row of those launches; 0 by row length. Key `q8a_xg_lanes`.
    pub q8a_xg_lanes: u32,
    /// Rows per team of those launches; 0 the default (2). Key `q8a_xg_rows`.
    pub q8a_xg_rows: u32,
    /// Decode products of at most this many tokens take the int8 matvec (16 columns per
    /// launch) where the weights and device allow, more take the matmul; values up to 8 keep
    /// the earlier bound of the multi-column matvec. Key `decode_int8_max_n`.
    pub decode_int8_max_n: u32,
    /// Cooperative-matrix prefill matmuls where the device has them; `false` keeps the portable
    /// kernels (the reference). Key `coopmat`.
    pub coopmat: bool,
    /// Key `splitk` = auto | off | N (target workgroups).
    pub splitk: SplitK,
    /// K step of automatic cooperative launches (32 or 64). Key `coop_bk`.
    pub coop_bk: u32,
    /// Direct epilogue for split-K and accumulating launches (else through shared memory, the
    /// reference). Key `coop_direct`.
    pub coop_direct: bool,
    /// Split float weights' short grids to the float target (else the earlier tilings). Key
    /// `coop_float_split`.
    pub coop_float_split: bool,
    /// Read X as f16 converted once per source (else f32). Key `coop_x_f16`.
    pub coop_x_f16: bool,
    /// One tiling for every automatic launch where it fits; `None`: per shape. Key `coop_tile` =
    /// auto | tiny | small | large | wide | tall.
    pub coop_tile: Option<CoopTile>,
    /// Gated MLP up-projections (gate and up) in one cooperative launch. Key `coop_glu`.
    pub coop_glu: bool,
    /// The gated launch writes its product as f16. Key `coop_glu_half`.
    pub coop_glu_half: bool,
    /// Key `coop_group` = qkv | mlp | all | none.
    pub coop_group: CoopGroup,
    /// Quantized prefill weights multiplied through an f16 copy. Keys `dequant` = auto | off |
    /// all, `dequant_min` (weight elements), `dequant_tokens`.
    pub dequant: DequantPolicy,
    /// Workgroup-memory coherence pass on the kernels that rely on it (else naga's output). Key
    /// `wg_coherent`.
    pub wg_coherent: bool,
    /// Drop the branches resolved overrides make dead before writing SPIR-V (off: it slowed the
    /// cooperative prefill attention at head_dim 64). Key `prune`.
    pub prune: bool,
    /// Reuse command pools, fences and descriptor pools of dropped recordings. Key `recycle`.
    pub recycle: bool,
    /// How long a submit polls its fence before blocking, in microseconds; `None`: 50 ms on GPUs,
    /// 0 on CPU devices. Key `fence_spin_us`.
    pub fence_spin_us: Option<u64>,
    /// Print every pipeline's driver statistics (registers, spills) when it is created. Key
    /// `pipeline_stats`.
    pub pipeline_stats: bool,
    /// Model backends: decode attention. Key `attn` = split | fused | reference.
    pub attn: DecodeAttn,
    /// Model backends: keys per chunk of split attention (a power of two in 8..=256); `None`:
    /// from the context length. Key `attn_chunk`.
    pub attn_chunk: Option<usize>,
    /// Model backends: recorded decode steps pick each query's chunk of the grouped split from
    /// its position on the device (`false`: the chunk sized for the whole cache). Key
    /// `attn_adaptive`.
    pub attn_adaptive: bool,
    /// Model backends: the grouped split over f16 caches reads 16-byte slots with the queries in
    /// registers (`shaders/attention_wide.wgsl`; `false`: the grouped split, its reference). Key
    /// `attn_wide`.
    pub attn_wide: bool,
    /// Model backends: key `attn_prefill` = auto | coop1 | portable.
    pub attn_prefill: PrefillAttn,
    /// Model backends: subgroups per workgroup of the second prefill kernel (1..=4). Key
    /// `attn_coop_nsg`.
    pub attn_coop_nsg: u32,
    /// Model backends: workgroups the second prefill kernel splits a heavy query tile's keys
    /// over (1..=4; 1 is the reference). Key `attn_coop_split`.
    pub attn_coop_split: u32,
    /// Model backends: fused decode launches (norm into matvec, gated MLP, ...); `false` runs
    /// one op per launch (the reference). Key `fused`.
    pub fused: bool,
    /// Model backends: tokens per workgroup of the prefill RoPE + KV append; `None`: the pair
    /// layout. Key `rope_kv_tpw` = auto | 1..=4.
    pub rope_kv_tpw: Option<usize>,
    /// Model backends: hybrid prompts take the chunked gated-delta form (else the recurrence,
    /// the reference). Key `delta_chunked`.
    pub delta_chunked: bool,
    /// Model backends: the gated delta rule's recurrent form (decode steps) keeps the state in
    /// registers over 256-invocation workgroups (`main_wide`); `false`: one invocation per
    /// column walking it twice per token (the reference). Key `delta_wide`.
    pub delta_wide: bool,
    /// Model backends: decode steps on the register-resident delta rule (`delta_wide`) write
    /// each head's output through the layer's gated RMSNorm in the same launch (value heads up
    /// to 128); `false`: a separate `gated_rmsnorm` launch (the reference). Key `delta_norm`.
    pub delta_norm: bool,
    /// Model backends: the chunked gated delta rule (prompts) keeps the state in registers
    /// over 256-invocation workgroups (`main_wide`); `false`: one invocation per column walking
    /// it twice per chunk (the reference). Key `delta_chunked_wide`.
    pub delta_chunked_wide: bool,
    /// Model backends: MoE expert products over at least this many tokens group the tokens by
    /// expert (tiled products reading each expert's weights once per tile); fewer, or 0, run
    /// one workgroup per output row (the reference). Key `moe_grouped_min`.
    pub moe_grouped_min: u32,
    /// Model backends: invocations per output row of the per-row MoE expert products (a power
    /// of two <= 128, 128 / lanes rows per workgroup); 0: one 64-invocation workgroup per row
    /// (the reference). Key `moe_lanes`.
    pub moe_lanes: u32,
    /// Model backends: per-row MoE expert products of block-format weights run on int8 dot
    /// products (`matvec_q8a`'s MoE launches) where the device runs the int8 matvec; `false`:
    /// the float kernel of `moe_lanes`. Key `moe_q8a`.
    pub moe_q8a: bool,
    /// Model backends: a MoE block's shared expert as wide as the routed ones is stacked with
    /// them and routed as one more expert (one set of expert launches); `false`: its own gated
    /// MLP, gate and residual adds (the reference). Key `moe_shared`.
    pub moe_shared: bool,
    /// Model backends: the grouped MoE expert products (prompts) run on cooperative matrices
    /// (`moe_experts_coop.wgsl`) where the device runs them; `false`: the scalar f32 tiles of
    /// `moe_experts_grouped.wgsl` (the reference). Key `moe_coop`.
    pub moe_coop: bool,
    /// Model backends: a forward's dispatches share one submit where possible. Key `one_submit`.
    pub one_submit: bool,
    /// Model backends: dispatches in a forward's first submitted part (parts double up to 256);
    /// `None`: the whole forward in one submit. Key `split_submit` = 0 | N (N > 1).
    pub split_submit: Option<usize>,
}

/// The first part of a split forward submit by default.
pub const SPLIT_SUBMIT_FIRST: usize = 16;

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            matvec: None,
            matvec_layout: None,
            q8a_wide: true,
            q8a_quad: true,
            q8a_workgroups: 0,
            q8a_xg: true,
            q8a_xg_lanes: 0,
            q8a_xg_rows: 0,
            decode_int8_max_n: 16,
            coopmat: true,
            splitk: SplitK::Auto,
            coop_bk: 64,
            coop_direct: true,
            coop_float_split: true,
            coop_x_f16: true,
            coop_tile: None,
            coop_glu: true,
            coop_glu_half: true,
            coop_group: CoopGroup::Qkv,
            dequant: DequantPolicy::AUTO,
            wg_coherent: true,
            prune: false,
            recycle: true,
            fence_spin_us: None,
            pipeline_stats: false,
            attn: DecodeAttn::Split,
            attn_chunk: None,
            attn_adaptive: true,
            attn_wide: true,
            attn_prefill: PrefillAttn::Auto,
            attn_coop_nsg: 4,
            attn_coop_split: 2,
            fused: true,
            rope_kv_tpw: None,
            delta_chunked: true,
            delta_wide: true,
            delta_norm: true,
            delta_chunked_wide: true,
            moe_grouped_min: 16,
            moe_lanes: 16,
            moe_q8a: true,
            moe_shared: true,
            moe_coop: true,
            one_submit: true,
            split_submit: Some(SPLIT_SUBMIT_FIRST),
        }
    }
}

/// A `key=value` the tuning does not accept.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TuneError {
    #[error("tuning: `{0}` is not key=value")]
    Syntax(String),
    #[error("tuning: unknown key `{key}` (known: {known})")]
    UnknownKey { key: String, known: String },
    #[error("tuning: {key}={value}: expected {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
}

/// Every key [`Tuning::set`] accepts.
pub const TUNING_KEYS: &[&str] = &[
    "matvec",
    "matvec_layout",
    "q8a_wide",
    "q8a_quad",
    "q8a_workgroups",
    "q8a_xg",
    "q8a_xg_lanes",
    "q8a_xg_rows",
    "decode_int8_max_n",
    "coopmat",
    "splitk",
    "coop_bk",
    "coop_direct",
    "coop_float_split",
    "coop_x_f16",
    "coop_tile",
    "coop_glu",
    "coop_glu_half",
    "coop_group",
    "dequant",
    "dequant_min",
    "dequant_tokens",
    "wg_coherent",
    "prune",
    "recycle",
    "fence_spin_us",
    "pipeline_stats",
    "attn",
    "attn_chunk",
    "attn_adaptive",
    "attn_wide",
    "attn_prefill",
    "attn_coop_nsg",
    "attn_coop_split",
    "fused",
    "rope_kv_tpw",
    "delta_chunked",
    "delta_wide",
    "delta_norm",
    "delta_chunked_wide",
    "moe_grouped_min",
    "moe_lanes",
    "moe_q8a",
    "moe_shared",
    "moe_coop",
    "one_submit",
    "split_submit",
];

fn tile_name(t: CoopTile) -> &'static str {
    [
        (CoopTile::TINY, "tiny"),
        (CoopTile::SMALL, "small"),
        (CoopTile::LARGE, "large"),
        (CoopTile::WIDE, "wide"),
        (CoopTile::TALL, "tall"),
    ]
    .iter()
    .find(|(c, _)| *c == t)
    .map_or("custom", |(_, n)| n)
}

impl Tuning {
    /// The defaults with `spec` applied: comma-separated `key=value` pairs (see [`TUNING_KEYS`];
    /// whitespace around items is ignored, an empty spec changes nothing).
    pub fn parse(spec: &str) -> Result<Tuning, TuneError> {
        let mut t = Tuning::default();
        t.apply(spec)?;
        Ok(t)
    }

    /// Applies `spec` (as [`Tuning::parse`]) on top of `self`.
    pub fn apply(&mut self, spec: &str) -> Result<(), TuneError> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| TuneError::Syntax(item.to_string()))?;
            self.set(k.trim(), v.trim())?;
        }
        Ok(())
    }

    /// Sets one key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), TuneError> {
        let bad = |expected: &'static str| TuneError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        let flag = || match value {
            "1" | "on" | "true" => Ok(true),
            "0" | "off" | "false" => Ok(false),
            _ => Err(bad("1 or 0")),
        };
        let num = || value.parse::<u64>().map_err(|_| bad("a number"));
        let in_range = |lo: u64, hi: u64| {
            num().and_then(|n| {
                if (lo..=hi).contains(&n) {
                    Ok(n)
                } else {
                    Err(bad("a number in range"))
                }
            })
        };
        match key {
            "matvec" => {
                self.matvec = match value {
                    "auto" => None,
                    "reference" => Some(MatvecImpl::Reference),
                    "fast" => Some(MatvecImpl::Fast),
                    "int8" => Some(MatvecImpl::Int8),
                    _ => return Err(bad("auto, reference, fast or int8")),
                }
            }
            "matvec_layout" => {
                self.matvec_layout = match value {
                    "auto" => None,
                    "teams" => Some(MatvecLayout::Teams),
                    "rows" => Some(MatvecLayout::Rows),
                    _ => return Err(bad("auto, teams or rows")),
                }
            }
            "q8a_wide" => self.q8a_wide = flag()?,
            "q8a_quad" => self.q8a_quad = flag()?,
            "q8a_workgroups" => self.q8a_workgroups = in_range(0, 1 << 20)? as u32,
            "q8a_xg" => self.q8a_xg = flag()?,
            "q8a_xg_lanes" => {
                let l = in_range(0, 32)? as u32;
                if l != 0 && !l.is_power_of_two() {
                    return Err(bad("0 or a power of two up to 32"));
                }
                self.q8a_xg_lanes = l;
            }
            "q8a_xg_rows" => self.q8a_xg_rows = in_range(0, 2)? as u32,
            "decode_int8_max_n" => self.decode_int8_max_n = in_range(1, 256)? as u32,
            "coopmat" => self.coopmat = flag()?,
            "splitk" => {
                self.splitk = match value {
                    "auto" => SplitK::Auto,
                    "off" | "0" => SplitK::Off,
                    _ => SplitK::Target(in_range(1, 1 << 16)? as usize),
                }
            }
            "coop_bk" => {
                self.coop_bk = match value {
                    "32" => 32,
                    "64" => 64,
                    _ => return Err(bad("32 or 64")),
                }
            }
            "coop_direct" => self.coop_direct = flag()?,
            "coop_float_split" => self.coop_float_split = flag()?,
            "coop_x_f16" => self.coop_x_f16 = flag()?,
            "coop_tile" => {
                self.coop_tile = match value {
                    "auto" => None,
                    "tiny" => Some(CoopTile::TINY),
                    "small" => Some(CoopTile::SMALL),
                    "large" => Some(CoopTile::LARGE),
                    "wide" => Some(CoopTile::WIDE),
                    "tall" => Some(CoopTile::TALL),
                    _ => return Err(bad("auto, tiny, small, large, wide or tall")),
                }
            }
            "coop_glu" => self.coop_glu = flag()?,
            "coop_glu_half" => self.coop_glu_half = flag()?,
            "coop_group" => {
                self.coop_group = match value {
                    "qkv" => CoopGroup::Qkv,
                    "mlp" => CoopGroup::Mlp,
                    "all" => CoopGroup::All,
                    "none" => CoopGroup::None,
                    _ => return Err(bad("qkv, mlp, all or none")),
                }
            }
            "dequant" => {
                self.dequant = match value {
                    "auto" => DequantPolicy::AUTO,
                    "off" => DequantPolicy::Off,
                    "all" => DequantPolicy::All,
                    _ => return Err(bad("auto, off or all")),
                }
            }
            "dequant_min" | "dequant_tokens" => {
                let n = num()? as usize;
                let (mut e, mut t) = match self.dequant {
                    DequantPolicy::Auto {
                        min_elements,
                        min_tokens,
                    } => (min_elements, min_tokens),
                    _ => return Err(bad("dequant=auto first")),
                };
                if key == "dequant_min" {
                    e = n;
                } else {
                    t = n;
                }
                self.dequant = DequantPolicy::Auto {
                    min_elements: e,
                    min_tokens: t,
                };
            }
            "wg_coherent" => self.wg_coherent = flag()?,
            "prune" => self.prune = flag()?,
            "recycle" => self.recycle = flag()?,
            "fence_spin_us" => {
                self.fence_spin_us = match value {
                    "auto" => None,
                    _ => Some(in_range(0, 10_000_000)?),
                }
            }
            "pipeline_stats" => self.pipeline_stats = flag()?,
            "attn" => {
                self.attn = match value {
                    "split" => DecodeAttn::Split,
                    "fused" => DecodeAttn::Fused,
                    "reference" => DecodeAttn::Reference,
                    _ => return Err(bad("split, fused or reference")),
                }
            }
            "attn_chunk" => {
                self.attn_chunk = match value {
                    "auto" => None,
                    _ => {
                        let c = in_range(8, 256)? as usize;
                        if !c.is_power_of_two() {
                            return Err(bad("auto or a power of two in 8..=256"));
                        }
                        Some(c)
                    }
                }
            }
            "attn_adaptive" => self.attn_adaptive = flag()?,
            "attn_wide" => self.attn_wide = flag()?,
            "attn_prefill" => {
                self.attn_prefill = match value {
                    "auto" => PrefillAttn::Auto,
                    "coop1" => PrefillAttn::Coop1,
                    "portable" => PrefillAttn::Portable,
                    _ => return Err(bad("auto, coop1 or portable")),
                }
            }
            "attn_coop_nsg" => self.attn_coop_nsg = in_range(1, 4)? as u32,
            "attn_coop_split" => self.attn_coop_split = in_range(1, 4)? as u32,
            "fused" => self.fused = flag()?,
            "rope_kv_tpw" => {
                self.rope_kv_tpw = match value {
                    "auto" => None,
                    _ => Some(in_range(1, 4)? as usize),
                }
            }
            "delta_chunked" => self.delta_chunked = flag()?,
            "delta_wide" => self.delta_wide = flag()?,
            "delta_norm" => self.delta_norm = flag()?,
            "delta_chunked_wide" => self.delta_chunked_wide = flag()?,
            "moe_grouped_min" => self.moe_grouped_min = in_range(0, 1 << 20)? as u32,
            "moe_lanes" => {
                let l = in_range(0, 128)? as u32;
                if l != 0 && !l.is_power_of_two() {
                    return Err(bad("0 or a power of two up to 128"));
                }
                self.moe_lanes = l;
            }
            "moe_q8a" => self.moe_q8a = flag()?,
            "moe_shared" => self.moe_shared = flag()?,
            "moe_coop" => self.moe_coop = flag()?,
            "one_submit" => self.one_submit = flag()?,
            "split_submit" => {
                self.split_submit = match num()? {
                    0 => None,
                    n if n > 1 => Some(n.min(1 << 20) as usize),
                    _ => return Err(bad("0 or a number > 1")),
                }
            }
            _ => {
                return Err(TuneError::UnknownKey {
                    key: key.to_string(),
                    known: TUNING_KEYS.join(", "),
                });
            }
        }
        Ok(())
    }

    /// The keys whose values differ from the defaults, as `key=value,...` (empty: the
    /// defaults); [`Tuning::parse`] of it gives `self` back.
    pub fn changes(&self) -> String {
        let all = self.to_string();
        let def = Tuning::default().to_string();
        let defaults: Vec<&str> = def.split(',').collect();
        all.split(',')
            .filter(|kv| !defaults.contains(kv))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Every key as `key=value`, comma-separated.
impl fmt::Display for Tuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = |x: bool| if x { "1" } else { "0" };
        let opt = |x: Option<String>| x.unwrap_or_else(|| "auto".to_string());
        let matvec = opt(self.matvec.map(|m| {
            match m {
                MatvecImpl::Reference => "reference",
                MatvecImpl::Fast => "fast",
                MatvecImpl::Int8 => "int8",
            }
            .to_string()
        }));
        let layout = opt(self.matvec_layout.map(|l| {
            match l {
                MatvecLayout::Teams => "teams",
                MatvecLayout::Rows => "rows",
            }
            .to_string()
        }));
        let splitk = match self.splitk {
            SplitK::Auto => "auto".to_string(),
            SplitK::Off => "off".to_string(),
            SplitK::Target(n) => n.to_string(),
        };
        let group = match self.coop_group {
            CoopGroup::Qkv => "qkv",
            CoopGroup::Mlp => "mlp",
            CoopGroup::All => "all",
            CoopGroup::None => "none",
        };
        let dequant = match self.dequant {
            DequantPolicy::Off => "dequant=off".to_string(),
            DequantPolicy::All => "dequant=all".to_string(),
            DequantPolicy::Auto {
                min_elements,
                min_tokens,
            } => format!("dequant=auto,dequant_min={min_elements},dequant_tokens={min_tokens}"),
        };
        let attn = match self.attn {
            DecodeAttn::Split => "split",
            DecodeAttn::Fused => "fused",
            DecodeAttn::Reference => "reference",
        };
        let prefill = match self.attn_prefill {
            PrefillAttn::Auto => "auto",
            PrefillAttn::Coop1 => "coop1",
            PrefillAttn::Portable => "portable",
        };
        write!(
            f,
            "matvec={matvec},matvec_layout={layout},q8a_wide={},q8a_quad={},q8a_workgroups={},\
             q8a_xg={},q8a_xg_lanes={},q8a_xg_rows={},decode_int8_max_n={},coopmat={},splitk={splitk},coop_bk={},coop_direct={},coop_float_split={},\
             coop_x_f16={},coop_tile={},coop_glu={},coop_glu_half={},coop_group={group},\
             {dequant},wg_coherent={},prune={},recycle={},fence_spin_us={},pipeline_stats={},\
             attn={attn},attn_chunk={},attn_adaptive={},attn_wide={},attn_prefill={prefill},attn_coop_nsg={},\
             attn_coop_split={},fused={},rope_kv_tpw={},delta_chunked={},delta_wide={},delta_norm={},delta_chunked_wide={},moe_grouped_min={},\
             moe_lanes={},moe_q8a={},moe_shared={},moe_coop={},one_submit={},split_submit={}",
            b(self.q8a_wide),
            b(self.q8a_quad),
            self.q8a_workgroups,
            b(self.q8a_xg),
            self.q8a_xg_lanes,
            self.q8a_xg_rows,
            self.decode_int8_max_n,
            b(self.coopmat),
            self.coop_bk,
            b(self.coop_direct),
            b(self.coop_float_split),
            b(self.coop_x_f16),
            self.coop_tile.map_or("auto", tile_name),
            b(self.coop_glu),
            b(self.coop_glu_half),
            b(self.wg_coherent),
            b(self.prune),
            b(self.recycle),
            opt(self.fence_spin_us.map(|u| u.to_string())),
            b(self.pipeline_stats),
            opt(self.attn_chunk.map(|c| c.to_string())),
            b(self.attn_adaptive),
            b(self.attn_wide),
            self.attn_coop_nsg,
            self.attn_coop_split,
            b(self.fused),
            opt(self.rope_kv_tpw.map(|t| t.to_string())),
            b(self.delta_chunked),
            b(self.delta_wide),
            b(self.delta_norm),
            b(self.delta_chunked_wide),
            self.moe_grouped_min,
            self.moe_lanes,
            b(self.moe_q8a),
            b(self.moe_shared),
            b(self.moe_coop),
            b(self.one_submit),
            self.split_submit.unwrap_or(0),
        )
    }
}

/// `VKLLM_TUNE` applied to the defaults (unset or empty: the defaults).
pub fn tuning_from_env() -> Result<Tuning, TuneError> {
    Tuning::parse(&std::env::var("VKLLM_TUNE").unwrap_or_default())
}

impl DeviceChoice {
    /// From `VKLLM_DEVICE` (a number is an index, anything else a name substring); `Auto` when
    /// unset or empty.
    pub fn from_env() -> Self {
        match std::env::var("VKLLM_DEVICE") {
            Ok(v) if !v.trim().is_empty() => Self::parse(v.trim()),
            _ => DeviceChoice::Auto,
        }
    }
}

impl Validation {
    /// `On` when `VKLLM_VALIDATE` is set to something other than `0` or empty.
    pub fn from_env() -> Self {
        match std::env::var("VKLLM_VALIDATE") {
            Ok(v) if !v.is_empty() && v != "0" => Validation::On,
            _ => Validation::Off,
        }
    }
}

/// The parity suite's seed: `VKLLM_SEED` when set to a number, else one from the clock.
pub fn seed_from_env() -> u64 {
    match std::env::var("VKLLM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => s,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_parses_back_for_every_key_changed() {
        let spec = "matvec=int8,matvec_layout=rows,q8a_wide=0,q8a_quad=0,q8a_workgroups=512,\
                    q8a_xg=0,q8a_xg_lanes=4,q8a_xg_rows=1,decode_int8_max_n=32,coopmat=0,splitk=96,coop_bk=32,coop_direct=0,coop_float_split=0,\
                    coop_x_f16=0,coop_tile=wide,coop_glu=0,coop_glu_half=0,coop_group=none,\
                    dequant=auto,dequant_min=4096,dequant_tokens=64,wg_coherent=0,prune=1,\
                    recycle=0,fence_spin_us=0,pipeline_stats=1,attn=fused,attn_chunk=64,attn_adaptive=0,attn_wide=0,\
                    attn_prefill=coop1,attn_coop_nsg=2,attn_coop_split=1,fused=0,\
                    rope_kv_tpw=3,delta_chunked=0,delta_wide=0,delta_norm=0,delta_chunked_wide=0,moe_grouped_min=0,moe_lanes=0,moe_q8a=0,moe_shared=0,moe_coop=0,one_submit=0,\
                    split_submit=0";
        let t = Tuning::parse(spec).unwrap();
        assert_ne!(t, Tuning::default());
        assert_eq!(Tuning::parse(&t.to_string()).unwrap(), t);
        assert_eq!(Tuning::parse(&t.changes()).unwrap(), t);
        // Every key of the list was set to a non-default value above (`dequant` stays `auto`
        // so that its bounds can change; `off` and `all` round-trip below).
        for k in TUNING_KEYS.iter().filter(|k| **k != "dequant") {
            assert!(
                t.changes().contains(&format!("{k}=")),
                "{k} not changed by the spec"
            );
        }
        for d in ["dequant=off", "dequant=all"] {
            let t = Tuning::parse(d).unwrap();
            assert_eq!(t.changes(), d);
            assert_eq!(Tuning::parse(&t.to_string()).unwrap(), t);
        }
        assert_eq!(Tuning::default().changes(), "");
        assert_eq!(Tuning::parse(" ").unwrap(), Tuning::default());
    }

    #[test]
    fn bad_specs_are_typed_errors() {
        assert!(matches!(Tuning::parse("splitk"), Err(TuneError::Syntax(_))));
        assert!(matches!(
            Tuning::parse("split_k=off"),
            Err(TuneError::UnknownKey { .. })
        ));
        for bad in [
            "coop_bk=48",
            "attn_chunk=48",
            "attn_chunk=512",
            "attn_coop_nsg=5",
            "q8a_wide=yes",
            "split_submit=1",
            "matvec=fastest",
            "dequant=off,dequant_min=5",
        ] {
            assert!(
                matches!(Tuning::parse(bad), Err(TuneError::BadValue { .. })),
                "{bad}"
            );
        }
    }
}
