//! Which kernel a decode product takes: the matvec implementation, the int8 MoE expert
//! products, and how many tokens the multi-column matvec takes before the matmul kernels.

use vkllm_kernels::WeightType;
use vkllm_kernels::matvec_fused::MatvecImpl;

/// The kernel [`crate::Recorder::matvec`] and [`crate::Recorder::matvec_fused`] (the decode graph's matvecs)
/// use on `dev`:
/// [`crate::Tuning::matvec`], else [`MatvecImpl::Int8`] on GPUs (int8 dot products over
/// activations quantized per 32 for Q8_0/Q4_0/Q4_K/Q6_K weights, the fast kernel for the other
/// types: much faster quantized decode, docs/benchmarks-history.md) and [`MatvecImpl::Fast`] on
/// CPU devices (lavapipe), whose own matvec layout is tuned for them. `matvec=fast` keeps the
/// exact kernel everywhere.
pub fn fused_matvec_impl(dev: &crate::Device) -> MatvecImpl {
    dev.tuning()
        .matvec
        .unwrap_or(if dev.info().kind == crate::info::DeviceKind::Cpu {
            MatvecImpl::Fast
        } else {
            MatvecImpl::Int8
        })
}

/// Whether the per-row MoE expert products of `s` run on int8 dot products
/// ([`vkllm_kernels::moe_experts_q8a`]) on `dev`: the tuning's `moe_q8a`, the device runs the
/// int8 matvec ([`fused_matvec_impl`], integer dot products, subgroups of 4+ lanes, the kernel's
/// shared memory) and the kernel takes the shape.
pub fn moe_q8a_runs(
    dev: &crate::Device,
    s: &vkllm_kernels::moe_experts_quant::MoeQuantShape,
) -> bool {
    dev.tuning().moe_q8a
        && fused_matvec_impl(dev) == MatvecImpl::Int8
        && dev.int8_dot()
        && dev.info().min_subgroup_size >= 4
        && dev.info().limits.max_shared_memory as usize >= vkllm_kernels::matvec_q8a::SHARED_BYTES
        && vkllm_kernels::moe_experts_q8a::supported(s)
}

/// The most tokens one decode product of a `dtype` weight with rows of `cols` elements takes
/// through the multi-column matvec on `dev` ([`crate::Recorder::matvec_fused`]; more take the matmul):
/// the tuning's `decode_int8_max_n` where the int8 kernel runs it on quantized x (tuning
/// `q8a_xg`; at least [`vkllm_kernels::matvec_fused::MAX_COLUMNS`]), but below the tuning's
/// `coop_narrow_min` for the Q4_K and Q6_K weights `matmul_narrow` takes in decode; else
/// `MAX_COLUMNS`.
pub fn decode_columns_max(dev: &crate::Device, dtype: WeightType, cols: usize) -> usize {
    let mc = vkllm_kernels::matvec_fused::MAX_COLUMNS;
    let int8 = dev.tuning().q8a_xg
        && fused_matvec_impl(dev) == MatvecImpl::Int8
        && dev.int8_dot()
        && dev.info().min_subgroup_size >= 4
        && vkllm_kernels::matvec_q8a::TYPES.contains(&dtype)
        && cols > 0
        && cols.is_multiple_of(dtype.block_size());
    if !int8 {
        return mc;
    }
    let max = (dev.tuning().decode_int8_max_n as usize).max(mc);
    // Q4_K and Q6_K weights take `matmul_narrow` from `coop_narrow_min` rows on.
    let from = dev.tuning().coop_narrow_min as usize;
    if crate::matmul_narrow::decode_applies(dev, dtype, from, cols) {
        max.min(from - 1).max(mc)
    } else {
        max
    }
}
