//! The embedded WGSL sources (`shaders/` is a link to the repository's `shaders/`). A kernel file
//! that names `*.inc.wgsl` fragments in `// #include` lines is followed by them here, as build.rs
//! assembles it (a test checks the two agree).

pub(crate) const ACTIVATION: &str = include_str!("../shaders/activation.wgsl");
pub(crate) const ARGMAX: &str = include_str!("../shaders/argmax.wgsl");
pub(crate) const ATTENTION: &str = concat!(
    include_str!("../shaders/attention.wgsl"),
    include_str!("../shaders/attention_gqa.inc.wgsl"),
    include_str!("../shaders/reduce.inc.wgsl"),
    include_str!("../shaders/kv_quant.inc.wgsl"),
    include_str!("../shaders/attention_keys.inc.wgsl")
);
pub(crate) const ATTENTION_FUSED: &str = concat!(
    include_str!("../shaders/attention_fused.wgsl"),
    include_str!("../shaders/attention_gqa.inc.wgsl"),
    include_str!("../shaders/reduce.inc.wgsl"),
    include_str!("../shaders/kv_quant.inc.wgsl"),
    include_str!("../shaders/attention_keys.inc.wgsl"),
    include_str!("../shaders/attention_rope_stage.inc.wgsl"),
    include_str!("../shaders/attention_merge_weights.inc.wgsl")
);
pub(crate) const ATTENTION_WIDE: &str = concat!(
    include_str!("../shaders/attention_wide.wgsl"),
    include_str!("../shaders/attention_wide.inc.wgsl"),
    include_str!("../shaders/attention_wide_split.inc.wgsl"),
    include_str!("../shaders/attention_keys.inc.wgsl")
);
pub(crate) const ATTENTION_WIDE_MERGE: &str = concat!(
    include_str!("../shaders/attention_wide_merge.wgsl"),
    include_str!("../shaders/attention_wide.inc.wgsl"),
    include_str!("../shaders/attention_merge_weights.inc.wgsl"),
    include_str!("../shaders/attention_wide_merge.inc.wgsl"),
    include_str!("../shaders/attention_wide_split.inc.wgsl"),
    include_str!("../shaders/attention_keys.inc.wgsl")
);
pub(crate) const ATTENTION_WIDE_ROPE: &str = concat!(
    include_str!("../shaders/attention_wide_rope.wgsl"),
    include_str!("../shaders/attention_wide.inc.wgsl"),
    include_str!("../shaders/attention_merge_weights.inc.wgsl"),
    include_str!("../shaders/attention_wide_merge.inc.wgsl"),
    include_str!("../shaders/attention_wide_split.inc.wgsl"),
    include_str!("../shaders/attention_rope_stage.inc.wgsl"),
    include_str!("../shaders/attention_keys.inc.wgsl")
);
pub(crate) const ATTENTION_WIDE_QUANT: &str = concat!(
    include_str!("../shaders/attention_wide_quant.wgsl"),
    include_str!("../shaders/attention_wide.inc.wgsl"),
    include_str!("../shaders/kv_quant.inc.wgsl"),
    include_str!("../shaders/attention_keys.inc.wgsl")
);
pub(crate) const CAUSAL_CONV1D: &str = include_str!("../shaders/causal_conv1d.wgsl");
pub(crate) const ATTENTION_PREFILL: &str = concat!(
    include_str!("../shaders/attention_prefill.wgsl"),
    include_str!("../shaders/kv_quant.inc.wgsl")
);
pub(crate) const ATTENTION_PREFILL_COOP: &str =
    include_str!("../shaders/attention_prefill_coop.wgsl");
pub(crate) const ATTENTION_PREFILL_COOP2: &str = concat!(
    include_str!("../shaders/attention_prefill_coop2.wgsl"),
    include_str!("../shaders/attention_prefill_coop2_out.inc.wgsl")
);
pub(crate) const DECODE_ADVANCE: &str = include_str!("../shaders/decode_advance.wgsl");
pub(crate) const DEQUANT_F16: &str = concat!(
    include_str!("../shaders/dequant_f16.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/quant_words.inc.wgsl")
);
pub(crate) const ELEMENTWISE: &str = include_str!("../shaders/elementwise.wgsl");
pub(crate) const TO_F16: &str = include_str!("../shaders/to_f16.wgsl");
pub(crate) const EMBEDDING: &str = include_str!("../shaders/embedding.wgsl");
pub(crate) const GATED_DELTA_RULE: &str = include_str!("../shaders/gated_delta_rule.wgsl");
pub(crate) const GATED_DELTA_RULE_CHUNKED: &str =
    include_str!("../shaders/gated_delta_rule_chunked.wgsl");
pub(crate) const GATED_RMSNORM: &str = concat!(
    include_str!("../shaders/gated_rmsnorm.wgsl"),
    include_str!("../shaders/reduce.inc.wgsl")
);
pub(crate) const KV_APPEND: &str = concat!(
    include_str!("../shaders/kv_append.wgsl"),
    include_str!("../shaders/kv_quant.inc.wgsl")
);
pub(crate) const KV_TO_F16: &str = concat!(
    include_str!("../shaders/kv_to_f16.wgsl"),
    include_str!("../shaders/kv_quant.inc.wgsl")
);
pub(crate) const KV_UNROTATE: &str = concat!(
    include_str!("../shaders/kv_unrotate.wgsl"),
    include_str!("../shaders/kv_quant.inc.wgsl")
);
pub(crate) const LOGPROBS: &str = include_str!("../shaders/logprobs.wgsl");
pub(crate) const MAT_QUANT: &str = concat!(
    include_str!("../shaders/mat_quant.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/quant_words.inc.wgsl")
);
pub(crate) const MATMUL: &str = include_str!("../shaders/matmul.wgsl");
pub(crate) const MATMUL_NARROW: &str = concat!(
    include_str!("../shaders/matmul_narrow.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/quant_words.inc.wgsl"),
    include_str!("../shaders/matmul_narrow_q6k.inc.wgsl")
);
pub(crate) const MATMUL_COOP: &str = concat!(
    include_str!("../shaders/matmul_coop.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/quant_words.inc.wgsl"),
    include_str!("../shaders/matmul_coop_out.inc.wgsl")
);
pub(crate) const MATVEC: &str = include_str!("../shaders/matvec.wgsl");
pub(crate) const MATVEC_FUSED: &str = concat!(
    include_str!("../shaders/matvec_fused.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/matvec_epilogue.inc.wgsl"),
    include_str!("../shaders/matvec_team.inc.wgsl")
);
pub(crate) const MATVEC_Q8A: &str = concat!(
    include_str!("../shaders/matvec_q8a.wgsl"),
    include_str!("../shaders/act_q8.inc.wgsl"),
    include_str!("../shaders/matvec_epilogue.inc.wgsl"),
    include_str!("../shaders/matvec_team.inc.wgsl"),
    include_str!("../shaders/matvec_q8a_units.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/matvec_q8a_qout.inc.wgsl")
);
pub(crate) const QUANTIZE_ACT_Q8: &str = concat!(
    include_str!("../shaders/quantize_act_q8.wgsl"),
    include_str!("../shaders/act_q8.inc.wgsl")
);
/// `matvec_rows.wgsl`: the fused matvec's op, one invocation per row (CPU Vulkan devices).
pub(crate) const MATVEC_ROWS: &str = concat!(
    include_str!("../shaders/matvec_rows.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/quant_words.inc.wgsl"),
    include_str!("../shaders/matvec_epilogue.inc.wgsl")
);
pub(crate) const MOE_EXPERTS: &str = include_str!("../shaders/moe_experts.wgsl");
pub(crate) const MOE_EXPERTS_QUANT: &str = concat!(
    include_str!("../shaders/moe_experts_quant.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/quant_words.inc.wgsl"),
    include_str!("../shaders/matvec_team.inc.wgsl")
);
pub(crate) const MOE_EXPERTS_GROUPED: &str = concat!(
    include_str!("../shaders/moe_experts_grouped.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/quant_words.inc.wgsl"),
    include_str!("../shaders/moe_grouped_io.inc.wgsl")
);
pub(crate) const MOE_EXPERTS_COOP: &str = concat!(
    include_str!("../shaders/moe_experts_coop.wgsl"),
    include_str!("../shaders/quant_blocks.inc.wgsl"),
    include_str!("../shaders/f16_bits.inc.wgsl"),
    include_str!("../shaders/quant_words.inc.wgsl"),
    include_str!("../shaders/moe_grouped_io.inc.wgsl")
);
pub(crate) const MOE_ROUTE: &str = include_str!("../shaders/moe_route.wgsl");
pub(crate) const RMSNORM: &str = concat!(
    include_str!("../shaders/rmsnorm.wgsl"),
    include_str!("../shaders/reduce.inc.wgsl")
);
pub(crate) const ROPE: &str = include_str!("../shaders/rope.wgsl");
pub(crate) const ROPE_KV_APPEND: &str = include_str!("../shaders/rope_kv_append.wgsl");
pub(crate) const SAMPLE: &str = concat!(
    include_str!("../shaders/sample.wgsl"),
    include_str!("../shaders/sample_math.inc.wgsl"),
    include_str!("../shaders/sample_list.inc.wgsl")
);
pub(crate) const SIGMOID_MUL: &str = include_str!("../shaders/sigmoid_mul.wgsl");
pub(crate) const SOFTMAX: &str = concat!(
    include_str!("../shaders/softmax.wgsl"),
    include_str!("../shaders/reduce.inc.wgsl")
);

#[cfg(test)]
mod tests {
    /// Each kernel file's `// #include` lines name exactly the fragments its embedded source
    /// appends (what build.rs validates is what runs).
    #[test]
    fn includes_match_build_assembly() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
        for (file, src) in [
            ("attention.wgsl", super::ATTENTION),
            ("attention_fused.wgsl", super::ATTENTION_FUSED),
            ("attention_wide.wgsl", super::ATTENTION_WIDE),
            ("attention_wide_rope.wgsl", super::ATTENTION_WIDE_ROPE),
            ("attention_wide_merge.wgsl", super::ATTENTION_WIDE_MERGE),
            ("attention_wide_quant.wgsl", super::ATTENTION_WIDE_QUANT),
            ("attention_prefill.wgsl", super::ATTENTION_PREFILL),
            ("kv_append.wgsl", super::KV_APPEND),
            ("kv_to_f16.wgsl", super::KV_TO_F16),
            ("kv_unrotate.wgsl", super::KV_UNROTATE),
            ("dequant_f16.wgsl", super::DEQUANT_F16),
            ("mat_quant.wgsl", super::MAT_QUANT),
            ("matvec_fused.wgsl", super::MATVEC_FUSED),
            ("matvec_rows.wgsl", super::MATVEC_ROWS),
            ("matvec_q8a.wgsl", super::MATVEC_Q8A),
            ("quantize_act_q8.wgsl", super::QUANTIZE_ACT_Q8),
            ("matmul_coop.wgsl", super::MATMUL_COOP),
            ("matmul_narrow.wgsl", super::MATMUL_NARROW),
            (
                "attention_prefill_coop2.wgsl",
                super::ATTENTION_PREFILL_COOP2,
            ),
            ("moe_experts_quant.wgsl", super::MOE_EXPERTS_QUANT),
            ("moe_experts_grouped.wgsl", super::MOE_EXPERTS_GROUPED),
            ("moe_experts_coop.wgsl", super::MOE_EXPERTS_COOP),
            ("rmsnorm.wgsl", super::RMSNORM),
            ("gated_rmsnorm.wgsl", super::GATED_RMSNORM),
            ("softmax.wgsl", super::SOFTMAX),
        ] {
            let want = assemble(&dir, file);
            assert_ne!(
                want.len(),
                std::fs::read_to_string(dir.join(file)).unwrap().len()
            );
            assert_eq!(src, want, "{file}");
        }
    }

    /// As build.rs assembles a kernel: the file, then each `// #include`d file, recursively.
    fn assemble(dir: &std::path::Path, file: &str) -> String {
        let mut s = std::fs::read_to_string(dir.join(file)).unwrap();
        let includes: Vec<String> = s
            .lines()
            .filter_map(|l| l.strip_prefix("// #include "))
            .map(|n| n.trim().to_string())
            .collect();
        for inc in includes {
            s.push_str(&assemble(dir, &inc));
        }
        s
    }
}
