//! The kernel parity suite: one test per kernel family, each comparing the GPU kernel with its
//! vkllm-cpu op under the validation layer. Run on lavapipe in CI and on the H200 (the same
//! binary: `cargo test --profile device -p vkllm-parity --test kernels --no-run`).

// The device setup of vkllm-vk's GPU tests (one validated device per binary).
#[path = "../../vkllm-vk/tests/common/mod.rs"]
mod common;

fn check(name: &str) {
    let dev = common::device();
    let dev = &*dev;
    let seed = common::seed();
    let case = vkllm_parity::CASES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no parity case {name}"));
    let rows = match case(dev, seed) {
        Ok(r) => r,
        Err(e) => panic!("{name}: {e}"),
    };
    assert!(!rows.is_empty());
    let mut failed = Vec::new();
    for r in &rows {
        eprintln!("{r}");
        if r.failed() {
            failed.push(r.to_string());
        }
    }
    let na = rows.iter().filter(|r| r.not_applicable.is_some()).count();
    if na > 0 {
        eprintln!("{name}: {na} row(s) not applicable on this device (not counted as passed)");
    }
    if let Err(e) = dev.check_validation() {
        panic!("{name}: {e}");
    }
    assert!(
        failed.is_empty(),
        "{name} (seed {seed}) out of tolerance:\n{}",
        failed.join("\n")
    );
}

macro_rules! parity_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*

        /// Every registered case has a test above.
        #[test]
        fn every_case_has_a_test() {
            let tested = [$(stringify!($name)),*];
            for (n, _) in vkllm_parity::CASES {
                assert!(tested.contains(n), "parity case {n} has no #[test]");
            }
        }
    };
}

parity_tests!(
    embedding,
    rmsnorm,
    elementwise,
    activation,
    softmax,
    argmax,
    kv_append,
    kv_append_quant,
    kv_to_f16,
    kv_unrotate,
    matvec,
    matmul,
    matmul_coop,
    matmul_coop_group,
    matmul_coop_glu,
    matmul_narrow,
    matvec_fused_float,
    matvec_fused_legacy,
    matvec_fused_kquant,
    matvec_q8a,
    quantize_act_q8,
    matvec_q8a_qout,
    rope,
    rope_kv_append,
    attention_decode,
    attention_prefill,
    attention_prefill_coop,
    attention_prefill_coop2,
    attention_fused,
    attention_rope,
    sample,
    kv_append_slots,
    attention_slots,
    kv_append_ring,
    attention_ring,
    logprobs,
    decode_advance,
    dequant_f16,
    quant_q8_0,
    quant_q4_0,
    quant_q4_1,
    quant_q5_0,
    quant_q5_1,
    quant_iq4_nl,
    quant_q4_k,
    quant_q6_k,
    quant_q5_k,
    quant_q3_k,
    quant_q2_k,
    quant_iq4_xs,
    causal_conv1d,
    gated_delta_rule,
    gated_delta_rule_chunked,
    gated_rmsnorm,
    sigmoid_mul,
    moe_route,
    moe_experts,
    moe_experts_quant,
    moe_experts_q8a,
    moe_experts_grouped,
    attention_prefill_cm2,
    matmul_cm2,
);
