// Shared by the kernels that read quantized weights as 4-byte words through `fn wd(i: u32) ->
// u32` (mat_quant.wgsl, matmul_coop.wgsl, matmul_narrow.wgsl, matvec_rows.wgsl, moe_experts_quant.wgsl,
// dequant_f16.wgsl): quant_blocks.inc.wgsl's `load16`, and where a 16-element unit starts. Not a
// kernel on its own: appended to each file that names it in a `// #include quant_words.inc.wgsl`
// line (with quant_blocks.inc.wgsl, whose BLOCK and TS it uses).

// 16 bytes from any even byte offset as 4 little-endian words (a fifth word read only when the
// bytes straddle it, so never past the data).
fn load16(off: u32) -> vec4<u32> {
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    let a = vec4<u32>(wd(i), wd(i + 1u), wd(i + 2u), wd(i + 3u));
    if (sh == 0u) {
        return a;
    }
    let b = vec4<u32>(a.y, a.z, a.w, wd(i + 4u));
    return (a >> vec4<u32>(sh)) | (b << vec4<u32>(32u - sh));
}

// Byte offset of unit u (16 elements) of a row starting at byte `row`.
fn unit_block(row: u32, u: u32) -> u32 {
    return row + (u / (BLOCK / 16u)) * TS;
}
