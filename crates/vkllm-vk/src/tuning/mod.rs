//! Tuning: every kernel and launch choice of the Vulkan runtime and of the model backends built
//! on it, as one typed value a [`crate::Device`] carries (from [`crate::DeviceOptions`]), so two
//! devices in one process can run two settings side by side. Defaults are the measured choices
//! (docs/benchmarks.md); each non-default value selects the reference or an alternative path.
//!
//! This is also vkllm-vk's one options module: the only place the crate reads the environment
//! (`VKLLM_DEVICE`, `VKLLM_VALIDATE`, the developers' `VKLLM_TUNE="key=value,..."`, the cache
//! directory `VKLLM_CACHE` and the parity seed `VKLLM_SEED`).

use vkllm_kernels::matmul_cm2::CmTile;
use vkllm_kernels::matmul_coop::CoopTile;
use vkllm_kernels::matvec_fused::MatvecImpl;
use vkllm_kernels::matvec_rows::MatvecLayout;

use crate::coop_dequant::DequantPolicy;
use crate::info::DeviceChoice;
use crate::instance::Validation;

mod text;

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
    /// The workgroup-scope kernel (`attention_prefill_cm2.comp`, VK_NV_cooperative_matrix2)
    /// where the device and shape allow it, else the second cooperative-matrix kernel where its
    /// shapes allow, else the first.
    Auto,
    /// As `Auto` (kept so that a tuning string naming it still parses).
    Cm2,
    /// The second cooperative-matrix kernel where its shapes allow, else the first: `Auto`'s
    /// reference on devices with VK_NV_cooperative_matrix2.
    Coop2,
    /// Always the first cooperative-matrix kernel.
    Coop1,
    /// The portable tiled kernel (the reference).
    Portable,
}

/// How the cooperative-matrix prefill attention reads an f32 KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F32KvPrefill {
    /// From an f16 copy of the visible rows (half the bytes per tile; every head dim the
    /// second kernel takes over f16).
    Half,
    /// In place where a coop kernel takes the f32 shape, else from the f16 copy.
    Auto,
    /// Never a copy (the reference): shapes no coop kernel takes over f32 run portable.
    Direct,
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
    /// With `q8a_xg`, single-token decode products on the quantized-x launch too (`false`: each
    /// workgroup quantizes x in shared memory, the reference; rows past 16384 elements take the
    /// quantized-x launch either way). Key `q8a_xg1`.
    pub q8a_xg1: bool,
    /// With `q8a_xg`, single-token decode products with a norm prologue (a layer's q/k/v and
    /// gate/up) over rows of at least this many elements on the quantized-x launch (0: none);
    /// the others as `q8a_xg1` says. Key `q8a_xg1_norm`.
    pub q8a_xg1_norm: u32,
    /// With those norm products on the quantized-x launch, the accumulating product before
    /// each (o_proj, down into the residual) quantizes its output for it in the same launch
    /// (`matvec_q8a.wgsl`'s `main_qout`), so the norm product has no quantize launch, and
    /// later products of the same normed x reuse one quantization; `false`:
    /// the quantize launch (the reference; the default until timed on a GPU). Key
    /// `q8a_xg1_produce`.
    pub q8a_xg1_produce: bool,
    /// With those norm products on the quantized-x launch, later products of the same normed
    /// x (a DeltaNet layer's z, b, a after its q/k/v) reuse its quantization; `false`: a
    /// quantize launch per product (the reference, unless `q8a_xg1_produce`). Key
    /// `q8a_xg1_reuse`.
    pub q8a_xg1_reuse: bool,
    /// int8 matvec: q/k/v of different weight types (Q4_K_M's Q6_K V) in one launch; `false`:
    /// the norm and one product per weight. Key `q8a_mixed`.
    pub q8a_mixed: bool,
    /// int8 matvec: invocations per workgroup of the launches that quantize x in shared memory;
    /// 0 by row length. Key `q8a_wg`.
    pub q8a_wg: u32,
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
    /// Quantized products of 2 to this many tokens (at most 64; 0: never) that reach the
    /// matmul take the few-token cooperative kernel (`matmul_narrow`) instead of `matmul_coop`.
    /// Key `coop_narrow`.
    pub coop_narrow: u32,
    /// Split-K of those launches; `None`: four workgroups per multiprocessor. Key
    /// `coop_narrow_split` = auto | 1..=16.
    pub coop_narrow_split: Option<u32>,
    /// Decode products of Q4_K weights (which `matmul_narrow` reads straight into registers) and
    /// Q6_K weights take it from this many tokens on (below: the int8 matvec up to
    /// `decode_int8_max_n`). Key `coop_narrow_min` (2..=65; 65: never in decode).
    pub coop_narrow_min: u32,
    /// `matmul_narrow` reads Q6_K rows straight into registers (`main_q6k`, the default: faster
    /// on the H200); `false` stages them through shared memory (the reference). Key
    /// `coop_narrow_q6k`.
    pub coop_narrow_q6k: bool,
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
    /// Prefill products of f16 weights (and quantized ones through their f16 copy) on the
    /// workgroup-scope kernel (`matmul_cm2.comp`) where the device runs it (`false`: the
    /// cooperative-matrix kernels above, the reference). Key `cm2_matmul`.
    pub cm2_matmul: bool,
    /// Fewest tokens of a product that takes it (fewer: the cooperative-matrix kernels, whose
    /// split-K suits short grids). Key `cm2_matmul_min_n`.
    pub cm2_matmul_min_n: usize,
    /// That kernel decodes Q4_K weights in its loads (`false`: through their f16 copy, the
    /// default: decoding measured slower). Key `cm2_matmul_decode`.
    pub cm2_matmul_decode: bool,
    /// That kernel's tile for every plain launch; `None`: per shape. Key `cm2_matmul_tile` =
    /// auto | MxNxK (weight rows x tokens x K step).
    pub cm2_matmul_tile: Option<CmTile>,
    /// The same for gated launches (two accumulators). Key `cm2_matmul_glu_tile`.
    pub cm2_matmul_glu_tile: Option<CmTile>,
    /// That kernel's grid walks the token tiles first ([`CmTile::tokens_first`]) in the
    /// launches it picks a tile for. Key `cm2_matmul_tokens_first`.
    pub cm2_matmul_tokens_first: bool,
    /// The grouped products of one X (q/k/v of a prefill layer) that the cm2 kernel takes run
    /// as one `matmul_cm2_group` launch; `false`: one launch each (the reference). Key
    /// `cm2_matmul_group`.
    pub cm2_matmul_group: bool,
    /// Key `coop_group` = qkv | mlp | all | none.
    pub coop_group: CoopGroup,
    /// Quantized prefill weights multiplied through an f16 copy. Keys `dequant` = auto | off |
    /// all, `dequant_min` (weight elements), `dequant_tokens`, `dequant_tokens_q8`.
    pub dequant: DequantPolicy,
    /// Megabytes of resident f16 copies of quantized weights (made once, read by every later
    /// prefill chunk instead of a copy per chunk; [`crate::Device::keep_f16`]); 0: none, every
    /// chunk copies; `None`: while the memory this device has allocated stays within 70% of its
    /// device-local heap ([`crate::Device::keep_f16`]). Key `dequant_keep_mb` = auto | MB.
    pub dequant_keep_mb: Option<usize>,
    /// The Vulkan-memory-model SPIR-V passes: storage-buffer coherence on every cooperative
    /// kernel, workgroup-memory coherence on those that rely on it (else naga's output). Key
    /// `wg_coherent`.
    pub wg_coherent: bool,
    /// With `wg_coherent`, the workgroup-memory pass on every cooperative kernel (their shared
    /// memory is then ordered by barriers as the Vulkan memory model asks; off: only the kernels
    /// listed as relying on it, the others as measured). Key `wg_coherent_all`.
    pub wg_coherent_all: bool,
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
    /// Enable sparse, aliased buffers at device creation where offered (paged KV: blocks
    /// shared in place, memory on demand); off: every KV cache copies. Key `sparse`.
    pub sparse: bool,
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
    /// Model backends: the wide split's last workgroup per (query, kv head) merges the partials
    /// (one dispatch; `false`: split then merge, the reference). Key `attn_wide_merge`.
    pub attn_wide_merge: bool,
    /// Model backends: with `attn_wide_merge`, a decode step's attention input (per-head norm,
    /// RoPE, KV append) runs inside the merging wide split (`shaders/attention_wide_rope.wgsl`;
    /// `false`: rope_kv then the split, the reference). Key `attn_wide_rope`.
    pub attn_wide_rope: bool,
    /// Model backends: key `attn_prefill` = auto | cm2 | coop2 | coop1 | portable.
    pub attn_prefill: PrefillAttn,
    /// Model backends: subgroups per workgroup of the second prefill kernel (1..=4). Key
    /// `attn_coop_nsg`.
    pub attn_coop_nsg: u32,
    /// Model backends: workgroups the second prefill kernel splits a heavy query tile's keys
    /// over (1..=16; 1 is the reference); `None`: enough for a full grid (`CoopAttn2Tile::
    /// auto_split`). Key `attn_coop_split` = auto | 1..=16.
    pub attn_coop_split: Option<u32>,
    /// Model backends: keys per step of the second prefill kernel, 32 (the reference) or 64
    /// (the default: head dims up to 128 over f16 caches; other shapes keep 32). Key
    /// `attn_coop_bk`.
    pub attn_coop_bk: u32,
    /// Model backends: the second prefill kernel loads V one step ahead into registers (`Some(true)`,
    /// the reference), or as it stages it (`Some(false)`); `None`: ahead (measured faster at
    /// head dims 128 and 256 since each workgroup loads only its value columns). Key
    /// `attn_coop_vahead` = auto | 0 | 1.
    pub attn_coop_vahead: Option<bool>,
    /// Model backends: rows x keys per step of the workgroup-scope prefill kernel
    /// (`attn_prefill=auto|cm2`); `None`: `CmAttnTile::for_shape`'s. Key `attn_cm2_tile` = auto |
    /// RxK (multiples of 16 up to 128).
    pub attn_cm2_tile: Option<(u32, u32)>,
    /// Model backends: that kernel's row sums as f16 probabilities times ones on the tensor
    /// cores (`false`: a reduction over the f32 ones, the reference). Key `attn_cm2_mma`.
    pub attn_cm2_mma: bool,
    /// Model backends: that kernel loads the next step's K and V tiles ahead. Key
    /// `attn_cm2_prefetch`.
    pub attn_cm2_prefetch: bool,
    /// Model backends: that kernel stages its queries with the scale folded in (scores in log2
    /// units; `false`: scaled each step, the reference). Key `attn_cm2_qscale`.
    pub attn_cm2_qscale: bool,
    /// Model backends: that kernel loads K and V of steps inside the cache through an
    /// unclamped layout (`false`: every load clamped, the reference). Key
    /// `attn_cm2_unclamped`.
    pub attn_cm2_unclamped: bool,
    /// Model backends: that kernel keeps its row statistics (running max and sum, rescale
    /// factors) as rows x 16 matrices (`false`: rows x keys, the reference). Key
    /// `attn_cm2_stats16`.
    pub attn_cm2_stats16: bool,
    /// Model backends: that kernel keeps its output as two column halves, each rescaled by a
    /// half-width factor (head dims a multiple of 32 up to 128; `false`: one matrix, the
    /// reference). Key `attn_cm2_ohalf`.
    pub attn_cm2_ohalf: bool,
    /// Quantized K caches (q8_0, q4_0, tq4) store their keys centred and scaled per channel
    /// (`vkllm_models::key_centre`; `false`: as they are, the reference). Key `kv_centre`.
    pub kv_centre: bool,
    /// Centred keys store the key at position 0 less the model's sink offset, and attention
    /// reads it plus that offset (`vkllm_models::key_centre`; `false`: centred like the rest,
    /// the reference). Key `kv_sink`.
    pub kv_sink: bool,
    /// q4_0 V caches store their 64-value units rotated where heads are whole units
    /// (`KvRot::for_types`; `false`: as they are, the reference). Key `kv_rot_v`.
    pub kv_rot_v: bool,
    /// Model backends: key `attn_f32_kv` = half | auto | direct.
    pub attn_f32_kv: F32KvPrefill,
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
    /// Model backends, where the per-token int8 expert launches run (`moe_q8a`): MoE expert
    /// products over at least this many tokens group the tokens by expert (tiled products
    /// reading each expert's weights once per tile); fewer, or 0, run one token's experts per
    /// workgroup row (the reference; on the H200 the faster up to 128 rows:
    /// docs/benchmarks.md). Key `moe_grouped_min`.
    pub moe_grouped_min: u32,
    /// The same where the int8 launches do not run (f32 rows per workgroup, which the tiles
    /// beat from far fewer tokens). Key `moe_grouped_min_f32`.
    pub moe_grouped_min_f32: u32,
    /// Model backends: MoE expert products over at least this many tokens (and fewer than
    /// `moe_grouped_min`) run on int8 dot products per expert over its listed slots, each
    /// routed expert's blocks read once per step (decode batches); 0, or fewer tokens: one
    /// token's experts per workgroup row (`moe_q8a`, the reference). Key `moe_q8g_min`.
    pub moe_q8g_min: u32,
    /// Slots per pass of those launches (1 to 8). Key `moe_q8g_cols`.
    pub moe_q8g_cols: u32,
    /// Workgroups per expert those launches aim for (each takes up to 16 row groups over one
    /// quantization of its slots); 0: one row group per workgroup. Key `moe_q8g_wpe`.
    pub moe_q8g_wpe: u32,
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
            q8a_xg1: false,
            q8a_xg1_norm: 4096,
            q8a_xg1_produce: false,
            q8a_xg1_reuse: true,
            q8a_mixed: true,
            q8a_wg: 0,
            q8a_xg_lanes: 0,
            q8a_xg_rows: 0,
            decode_int8_max_n: 16,
            coopmat: true,
            coop_narrow: 64,
            coop_narrow_split: None,
            coop_narrow_min: 9,
            coop_narrow_q6k: true,
            splitk: SplitK::Auto,
            coop_bk: 64,
            coop_direct: true,
            coop_float_split: true,
            coop_x_f16: true,
            coop_tile: None,
            coop_glu: true,
            coop_glu_half: true,
            cm2_matmul: true,
            cm2_matmul_min_n: 512,
            cm2_matmul_decode: false,
            cm2_matmul_tile: None,
            cm2_matmul_glu_tile: None,
            cm2_matmul_tokens_first: true,
            cm2_matmul_group: false,
            coop_group: CoopGroup::Qkv,
            dequant: DequantPolicy::AUTO,
            dequant_keep_mb: None,
            wg_coherent: true,
            wg_coherent_all: false,
            prune: false,
            recycle: true,
            fence_spin_us: None,
            pipeline_stats: false,
            sparse: true,
            attn: DecodeAttn::Split,
            attn_chunk: None,
            attn_adaptive: true,
            attn_wide: true,
            attn_wide_merge: false,
            attn_wide_rope: false,
            attn_prefill: PrefillAttn::Auto,
            attn_coop_nsg: 4,
            attn_coop_split: None,
            attn_coop_bk: 64,
            attn_coop_vahead: None,
            attn_cm2_tile: None,
            attn_cm2_mma: true,
            attn_cm2_prefetch: false,
            attn_cm2_qscale: true,
            attn_cm2_unclamped: true,
            attn_cm2_stats16: true,
            attn_cm2_ohalf: true,
            kv_centre: true,
            kv_sink: true,
            kv_rot_v: true,
            attn_f32_kv: F32KvPrefill::Half,
            fused: true,
            rope_kv_tpw: None,
            delta_chunked: true,
            delta_wide: true,
            delta_norm: true,
            delta_chunked_wide: true,
            moe_grouped_min: 128,
            moe_grouped_min_f32: 16,
            moe_q8g_min: 0,
            moe_q8g_cols: 4,
            moe_q8g_wpe: 0,
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
    "q8a_xg1",
    "q8a_xg1_norm",
    "q8a_xg1_produce",
    "q8a_xg1_reuse",
    "q8a_mixed",
    "q8a_wg",
    "q8a_xg_lanes",
    "q8a_xg_rows",
    "decode_int8_max_n",
    "coop_narrow",
    "coop_narrow_split",
    "coop_narrow_min",
    "coop_narrow_q6k",
    "coopmat",
    "splitk",
    "coop_bk",
    "coop_direct",
    "coop_float_split",
    "coop_x_f16",
    "coop_tile",
    "coop_glu",
    "coop_glu_half",
    "cm2_matmul",
    "cm2_matmul_min_n",
    "cm2_matmul_decode",
    "cm2_matmul_tile",
    "cm2_matmul_glu_tile",
    "cm2_matmul_tokens_first",
    "cm2_matmul_group",
    "coop_group",
    "dequant",
    "dequant_keep_mb",
    "dequant_min",
    "dequant_tokens",
    "dequant_tokens_q8",
    "wg_coherent",
    "wg_coherent_all",
    "prune",
    "recycle",
    "fence_spin_us",
    "pipeline_stats",
    "sparse",
    "attn",
    "attn_chunk",
    "attn_adaptive",
    "attn_wide",
    "attn_wide_merge",
    "attn_wide_rope",
    "attn_prefill",
    "attn_coop_nsg",
    "attn_coop_split",
    "attn_coop_bk",
    "attn_coop_vahead",
    "attn_cm2_tile",
    "attn_cm2_mma",
    "attn_cm2_prefetch",
    "attn_cm2_qscale",
    "attn_cm2_unclamped",
    "attn_cm2_stats16",
    "attn_cm2_ohalf",
    "kv_centre",
    "kv_sink",
    "kv_rot_v",
    "attn_f32_kv",
    "fused",
    "rope_kv_tpw",
    "delta_chunked",
    "delta_wide",
    "delta_norm",
    "delta_chunked_wide",
    "moe_grouped_min",
    "moe_grouped_min_f32",
    "moe_lanes",
    "moe_q8a",
    "moe_shared",
    "moe_coop",
    "one_submit",
    "split_submit",
];

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
