//! The kernels' weight type of each vkllm-cpu (GGUF) tensor type.

use vkllm_kernels::WeightType;

/// The kernels' weight type for a vkllm-cpu (GGUF) tensor type: every format vkllm-cpu reads
/// has a GPU kernel.
pub fn weight_type(q: vkllm_cpu::quant::QuantType) -> WeightType {
    use vkllm_cpu::quant::QuantType as Q;
    match q {
        Q::F32 => WeightType::F32,
        Q::F16 => WeightType::F16,
        Q::BF16 => WeightType::Bf16,
        Q::Q4_0 => WeightType::Q4_0,
        Q::Q4_1 => WeightType::Q4_1,
        Q::Q5_0 => WeightType::Q5_0,
        Q::Q5_1 => WeightType::Q5_1,
        Q::Q8_0 => WeightType::Q8_0,
        Q::Q2_K => WeightType::Q2_K,
        Q::Q3_K => WeightType::Q3_K,
        Q::Q4_K => WeightType::Q4_K,
        Q::Q5_K => WeightType::Q5_K,
        Q::Q6_K => WeightType::Q6_K,
        Q::IQ4_NL => WeightType::IQ4_NL,
        Q::IQ4_XS => WeightType::IQ4_XS,
    }
}

#[cfg(test)]
mod tests {
    use vkllm_cpu::quant::QuantType;

    /// The kernels' block geometry agrees with vkllm-cpu's for every format.
    #[test]
    fn weight_types_match_the_cpu_formats() {
        for q in QuantType::ALL {
            let t = super::weight_type(q);
            assert_eq!(t.ggml_id(), q.ggml_id(), "{q}");
            assert_eq!(t.name(), q.name(), "{q}");
            assert_eq!(t.block_size(), q.block_size(), "{q}");
            assert_eq!(t.bytes() as usize, q.type_size(), "{q}");
            let cols = 4 * q.block_size();
            assert_eq!(
                t.row_bytes(cols as u64),
                q.row_bytes(cols).ok().map(|b| b as u64),
                "{q}"
            );
        }
    }
}
