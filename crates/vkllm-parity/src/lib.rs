//! vkllm-parity, the kernel parity harness (above vkllm-vk and vkllm-cpu; vkllm-models builds
//! its model tiers on it): the "gpu op vs cpu op" tier, every kernel of `vkllm-kernels` run on a
//! device through `vkllm-vk` and compared with its `vkllm-cpu` op on fresh random inputs.
//!
//! Each case NaN-poisons its output buffers inside the same recording right before the dispatch
//! (so an unwritten element fails), uses shapes that are not multiples of the workgroup sizes, and
//! compares with [`vkllm_cpu::compare::diff`] against a tolerance stated per case (see
//! docs/kernels.md for the justification). When the device was opened with validation, any
//! validation message not on the allow-list fails the case.
//!
//! Inputs that are 16-bit on the device (F16/BF16 weights, f16 KV cache) are rounded once on the
//! host and the CPU op gets the same rounded values, so the comparison measures the kernel's own
//! arithmetic, not the storage format.

mod attention_fused;
mod attention_prefill_cm2;
mod attention_prefill_coop;
mod attention_prefill_coop2;
mod attention_rope;
mod attn;
mod basic;
mod decode;
mod dequant_f16;
mod hybrid;
mod kv_quant;
mod mat;
mod matmul_cm2;
mod matmul_coop;
mod matmul_coop_glu;
mod matmul_coop_group;
mod matmul_narrow;
mod matvec_fused;
mod matvec_q8a_qout;
mod moe_experts_grouped;
mod moe_experts_q8a;
mod moe_experts_quant;
mod quant;
mod quantize_act_q8;
mod recurrent;
mod ring;
mod rope_kv_append;
mod sample;

use vkllm_cpu::compare::{Diff, diff};

use vkllm_vk::Device;
use vkllm_vk::Recorder;
use vkllm_vk::Result;
use vkllm_vk::Validation;
use vkllm_vk::{Buffer, MemoryKind};

/// One row of the parity table.
#[derive(Clone, Debug)]
pub struct KernelParityRow {
    pub kernel: &'static str,
    /// dtype / mode, e.g. "f16" or "neox partial".
    pub variant: String,
    pub shape: String,
    pub diff: Diff,
    pub tol_max_abs: f64,
    pub tol_nmse: f64,
    /// False for a failed comparison and for a case that did not run (`not_applicable`).
    pub pass: bool,
    /// Why the case could not run on this device (e.g. "device lacks VK_KHR_cooperative_matrix"):
    /// such a row is neither passed nor failed, and is counted apart.
    pub not_applicable: Option<String>,
}

impl KernelParityRow {
    /// A row for a case this device cannot run (reported, never counted as passed).
    pub fn not_applicable(
        kernel: &'static str,
        variant: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        KernelParityRow {
            kernel,
            variant: variant.into(),
            shape: "-".into(),
            diff: diff(&[], &[]),
            tol_max_abs: 0.0,
            tol_nmse: 0.0,
            pass: false,
            not_applicable: Some(reason.into()),
        }
    }

    /// Out of tolerance (a row that ran and missed; not-applicable rows are not failures).
    pub fn failed(&self) -> bool {
        !self.pass && self.not_applicable.is_none()
    }
}

impl std::fmt::Display for KernelParityRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(reason) = &self.not_applicable {
            return write!(f, "{:<18} {:<22} n/a: {reason}", self.kernel, self.variant);
        }
        write!(
            f,
            "{:<18} {:<22} {:<34} max_abs {:.3e} (<= {:.1e}) nmse {:.3e} (<= {:.1e}) {}",
            self.kernel,
            self.variant,
            self.shape,
            self.diff.max_abs,
            self.tol_max_abs,
            self.diff.nmse,
            self.tol_nmse,
            if self.pass { "ok" } else { "FAIL" }
        )
    }
}

/// A kernel family's parity cases.
pub type CaseFn = fn(&Device, u64) -> Result<Vec<KernelParityRow>>;

/// Every case, by kernel family name (tests run one `#[test]` per entry).
pub const CASES: &[(&str, CaseFn)] = &[
    ("embedding", basic::embedding),
    ("rmsnorm", basic::rmsnorm),
    ("elementwise", basic::elementwise),
    ("activation", basic::activation),
    ("softmax", basic::softmax),
    ("argmax", basic::argmax),
    ("kv_append", basic::kv_append),
    ("kv_append_quant", kv_quant::kv_append_quant),
    ("kv_to_f16", kv_quant::kv_to_f16),
    ("kv_unrotate", kv_quant::kv_unrotate),
    ("matvec", mat::matvec),
    ("matmul", mat::matmul),
    ("matmul_coop", matmul_coop::matmul_coop),
    ("matmul_coop_group", matmul_coop_group::matmul_coop_group),
    ("matmul_coop_glu", matmul_coop_glu::matmul_coop_glu),
    ("matmul_narrow", matmul_narrow::matmul_narrow),
    ("matvec_fused_float", matvec_fused::matvec_fused_float),
    ("matvec_fused_legacy", matvec_fused::matvec_fused_legacy),
    ("matvec_fused_kquant", matvec_fused::matvec_fused_kquant),
    ("matvec_q8a", matvec_fused::matvec_q8a),
    ("quantize_act_q8", quantize_act_q8::quantize_act_q8_case),
    ("matvec_q8a_qout", matvec_q8a_qout::matvec_q8a_qout),
    ("rope", attn::rope),
    ("rope_kv_append", rope_kv_append::rope_kv_append_case),
    ("attention_decode", attn::attention_decode),
    ("attention_prefill", attn::attention_prefill),
    (
        "attention_prefill_coop",
        attention_prefill_coop::attention_prefill_coop,
    ),
    (
        "attention_prefill_coop2",
        attention_prefill_coop2::attention_prefill_coop2,
    ),
    ("attention_fused", attention_fused::attention_fused),
    ("attention_rope", attention_rope::attention_rope),
    ("sample", sample::sample),
    ("kv_append_slots", decode::kv_append_slots),
    ("attention_slots", decode::attention_slots),
    ("kv_append_ring", ring::kv_append_ring),
    ("attention_ring", ring::attention_ring),
    ("logprobs", decode::logprobs),
    ("decode_advance", decode::decode_advance),
    ("dequant_f16", dequant_f16::dequant_f16),
    ("quant_q8_0", quant::quant_q8_0),
    ("quant_q4_0", quant::quant_q4_0),
    ("quant_q4_1", quant::quant_q4_1),
    ("quant_q5_0", quant::quant_q5_0),
    ("quant_q5_1", quant::quant_q5_1),
    ("quant_iq4_nl", quant::quant_iq4_nl),
    ("quant_q4_k", quant::quant_q4_k),
    ("quant_q6_k", quant::quant_q6_k),
    ("quant_q5_k", quant::quant_q5_k),
    ("quant_q3_k", quant::quant_q3_k),
    ("quant_q2_k", quant::quant_q2_k),
    ("quant_iq4_xs", quant::quant_iq4_xs),
    ("causal_conv1d", recurrent::causal_conv1d),
    ("gated_delta_rule", recurrent::gated_delta_rule),
    (
        "gated_delta_rule_chunked",
        recurrent::gated_delta_rule_chunked,
    ),
    ("gated_rmsnorm", hybrid::gated_rmsnorm),
    ("sigmoid_mul", hybrid::sigmoid_mul),
    ("moe_route", hybrid::moe_route),
    ("moe_experts", hybrid::moe_experts),
    ("moe_experts_quant", moe_experts_quant::moe_experts_quant),
    ("moe_experts_q8a", moe_experts_q8a::moe_experts_q8a),
    (
        "moe_experts_grouped",
        moe_experts_grouped::moe_experts_grouped,
    ),
    (
        "attention_prefill_cm2",
        attention_prefill_cm2::attention_prefill_cm2,
    ),
    ("matmul_cm2", matmul_cm2::matmul_cm2),
];

/// Runs every case (each with a seed derived from `seed`) and returns all rows.
pub fn run_kernel_parity(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let mut rows = Vec::new();
    for (i, (_, case)) in CASES.iter().enumerate() {
        rows.extend(case(dev, seed.wrapping_add(i as u64))?);
    }
    Ok(rows)
}

pub use vkllm_vk::seed_from_env;

/// SplitMix64: a small, seedable generator for test inputs.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub(crate) fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    pub(crate) fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(lo, hi)).collect()
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Tolerance of one comparison.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tol {
    pub max_abs: f64,
    pub nmse: f64,
}

pub(crate) const EXACT: Tol = Tol {
    max_abs: 0.0,
    nmse: 0.0,
};

pub(crate) fn row(
    kernel: &'static str,
    variant: impl Into<String>,
    shape: impl Into<String>,
    actual: &[f32],
    expected: &[f32],
    tol: Tol,
) -> KernelParityRow {
    let d = diff(actual, expected);
    KernelParityRow {
        kernel,
        variant: variant.into(),
        shape: shape.into(),
        pass: d.within(tol.max_abs, tol.nmse),
        diff: d,
        tol_max_abs: tol.max_abs,
        tol_nmse: tol.nmse,
        not_applicable: None,
    }
}

/// f32 -> f16 bits (round to nearest even) and back.
pub(crate) fn to_f16(x: &[f32]) -> (Vec<u16>, Vec<f32>) {
    let h: Vec<u16> = x
        .iter()
        .map(|&v| half::f16::from_f32(v).to_bits())
        .collect();
    let back = h
        .iter()
        .map(|&b| half::f16::from_bits(b).to_f32())
        .collect();
    (h, back)
}

/// f32 -> bf16 bits (round to nearest even) and back.
pub(crate) fn to_bf16(x: &[f32]) -> (Vec<u16>, Vec<f32>) {
    let h: Vec<u16> = x
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_bits())
        .collect();
    let back = h
        .iter()
        .map(|&b| half::bf16::from_bits(b).to_f32())
        .collect();
    (h, back)
}

pub(crate) struct Ctx<'a> {
    pub dev: &'a Device,
}

impl Ctx<'_> {
    pub(crate) fn input<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> Result<Buffer> {
        self.dev.buffer_from(label, data)
    }

    pub(crate) fn output(&self, label: &str, n_words: usize) -> Result<Buffer> {
        self.dev
            .create_buffer(label, 4 * n_words as u64, MemoryKind::Device)
    }

    /// Records `f` after NaN-poisoning `poison`, submits, waits, and checks validation.
    pub(crate) fn run(
        &self,
        poison: &[&Buffer],
        f: impl FnOnce(&mut Recorder) -> Result<()>,
    ) -> Result<()> {
        let mut r = Recorder::new(self.dev)?;
        for b in poison {
            r.fill(b.all(), f32::NAN.to_bits())?;
        }
        f(&mut r)?;
        r.finish()?.submit()?;
        if self.dev.validation() == Validation::On {
            self.dev.check_validation()?;
        }
        Ok(())
    }

    pub(crate) fn read(&self, b: &Buffer, n: usize) -> Result<Vec<f32>> {
        self.dev.read_vec::<f32>(b, n)
    }
}

/// Packs 16-bit values two per little-endian word (odd counts padded with 0).
pub(crate) fn pack16(h: &[u16]) -> Vec<u32> {
    h.chunks(2)
        .map(|c| c[0] as u32 | (c.get(1).copied().unwrap_or(0) as u32) << 16)
        .collect()
}
