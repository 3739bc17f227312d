// An f16 given as the low 16 bits of h (higher bits ignored), widened to f32 with integer
// operations rather than unpack2x16float: block scales are often f16 subnormals and Vulkan lets
// implementations flush 16-bit denormals. Exact for every input. Not a kernel: appended to each
// file naming it in a `// #include f16_bits.inc.wgsl` line (quant_blocks.inc.wgsl,
// matvec_q8a.wgsl).
fn f16_bits(h: u32) -> f32 {
    let e = (h >> 10u) & 31u;
    let m = h & 1023u;
    if (e == 0u) {
        // m * 2^-24: exact in f32, and a normal f32 for every m != 0.
        let v = f32(m) * 5.9604644775390625e-8;
        return select(v, -v, (h & 0x8000u) != 0u);
    }
    let eb = select(e + 112u, 255u, e == 31u);
    return bitcast<f32>(((h & 0x8000u) << 16u) | (eb << 23u) | (m << 13u));
}
