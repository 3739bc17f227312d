// Shared by the kernels that read llama.cpp-quantized weights (mat_quant.wgsl, matvec_fused.wgsl):
// the block decoders. Not a kernel on its own: build.rs and sources.rs append it to each file
// that names it in a `// #include quant_blocks.inc.wgsl` line.
// #include f16_bits.inc.wgsl
//
// The including file provides `fn wd(i: u32) -> u32` (word i of the weight being read) and
// `fn load16(off: u32) -> vec4<u32>` (its 16 bytes from any even byte offset `off`, as 4
// little-endian words: quant_words.inc.wgsl's, built on `wd`, or the kernel's own). QTYPE is ggml's type id, BLOCK the
// elements per block (32 or 256), TS the bytes per block (set from Rust's `WeightType`).
//
// A block may start at any even byte offset (Q8_0 is 34 bytes, Q4_1 20, Q5_0 22, Q6_K 210):
// every read goes through `byte_at`, `u16_at`, `u32_at` or `load16`, which assemble unaligned
// fields from the words they straddle.
// `dequant16` returns 16 consecutive elements exactly as vkllm-cpu's `dequantize_row` computes
// them (same f32 operations in the same order, the integer codes reaching f32 exactly through
// `u2f`; every scale product is exact in f32, so FMA contraction cannot change them).

override QTYPE: u32 = 8;
override BLOCK: u32 = 32;
override TS: u32 = 34;

// ggml's kvalues_iq4nl (IQ4_NL, IQ4_XS).
var<private> KV: array<f32, 16> = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0,
    -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn byte_at(off: u32) -> u32 {
    return (wd(off >> 2u) >> ((off & 3u) * 8u)) & 0xffu;
}

// A little-endian u16 at an even byte offset (never straddles a word).
fn u16_at(off: u32) -> u32 {
    return (wd(off >> 2u) >> ((off & 2u) * 8u)) & 0xffffu;
}

// An f16 at an even byte offset, widened with integer operations rather than unpack2x16float:
// block scales are often f16 subnormals (Q4_K/Q6_K super-block scales of small weights fall
// below 2^-14), and Vulkan lets implementations flush 16-bit denormals. Exact for every input.
fn f16_at(off: u32) -> f32 {
    return f16_bits(u16_at(off));
}


// A little-endian u32 at any byte offset.
fn u32_at(off: u32) -> u32 {
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    if (sh == 0u) {
        return wd(i);
    }
    return (wd(i) >> sh) | (wd(i + 1u) << (32u - sh));
}

// An integer below 2^23 as f32 without a conversion instruction (those issue at a fraction of
// the ALU rate on some GPUs): the bits 0x4B000000 | v are the float 2^23 + v, exactly.
fn u2f(v: u32) -> f32 {
    return bitcast<f32>(v | 0x4B000000u) - 8388608.0;
}

fn byte_of(v: vec4<u32>, i: u32) -> u32 {
    return (v[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

// The 6-bit (scale, min) of sub-block s (0..8) of a Q4_K/Q5_K block's 12 scale bytes at `sc`.
fn scale_min_k4(sc: u32, s: u32) -> vec2<u32> {
    if (s < 4u) {
        return vec2<u32>(byte_at(sc + s) & 63u, byte_at(sc + s + 4u) & 63u);
    }
    let a = byte_at(sc + s + 4u);
    return vec2<u32>((a & 15u) | ((byte_at(sc + s - 4u) >> 6u) << 4u),
                     (a >> 4u) | ((byte_at(sc + s) >> 6u) << 4u));
}

// Elements 16 q .. 16 q + 16 of the block starting at byte `blk`.
fn dequant16(blk: u32, q: u32) -> array<f32, 16> {
    var o: array<f32, 16>;
    if (QTYPE == 2u || QTYPE == 3u || QTYPE == 20u) {
        // Q4_0, Q4_1, IQ4_NL: element j in the low nibble of qs[j], j + 16 in the high nibble.
        let d = f16_at(blk);
        var m = 0.0;
        var qoff = blk + 2u;
        if (QTYPE == 3u) {
            m = f16_at(blk + 2u);
            qoff = blk + 4u;
        }
        let qs = load16(qoff);
        for (var i = 0u; i < 16u; i++) {
            let nib = (byte_of(qs, i) >> (4u * q)) & 15u;
            if (QTYPE == 2u) {
                o[i] = d * (u2f(nib) - 8.0);
            } else if (QTYPE == 3u) {
                o[i] = d * u2f(nib) + m;
            } else {
                o[i] = d * KV[nib];
            }
        }
    } else if (QTYPE == 6u || QTYPE == 7u) {
        // Q5_0, Q5_1: bit 4 of element j is bit j of the u32 qh.
        let d = f16_at(blk);
        var m = 0.0;
        var hoff = blk + 2u;
        if (QTYPE == 7u) {
            m = f16_at(blk + 2u);
            hoff = blk + 4u;
        }
        let qh = u32_at(hoff);
        let qs = load16(hoff + 4u);
        for (var i = 0u; i < 16u; i++) {
            let nib = (byte_of(qs, i) >> (4u * q)) & 15u;
            let v = nib | (((qh >> (16u * q + i)) & 1u) << 4u);
            if (QTYPE == 6u) {
                o[i] = d * (u2f(v) - 16.0);
            } else {
                o[i] = d * u2f(v) + m;
            }
        }
    } else if (QTYPE == 8u) {
        // Q8_0: f16 d, 32 i8.
        let d = f16_at(blk);
        let qs = load16(blk + 2u + 16u * q);
        for (var i = 0u; i < 16u; i++) {
            o[i] = (u2f(byte_of(qs, i) ^ 0x80u) - 128.0) * d;
        }
    } else if (QTYPE == 10u) {
        // Q2_K: scales[16], qs[64], d, dmin; element 128 h + 32 j + l.
        let h = q / 8u;
        let j = (q / 2u) % 4u;
        let qs = load16(blk + 16u + 32u * h + 16u * (q % 2u));
        let sc = byte_at(blk + q);
        let dl = f16_at(blk + 80u) * f32(sc & 15u);
        let ml = f16_at(blk + 82u) * f32(sc >> 4u);
        for (var i = 0u; i < 16u; i++) {
            o[i] = dl * u2f((byte_of(qs, i) >> (2u * j)) & 3u) - ml;
        }
    } else if (QTYPE == 11u) {
        // Q3_K: hmask[32], qs[64], scales[12], d.
        let h = q / 8u;
        let j = (q / 2u) % 4u;
        let l0 = 16u * (q % 2u);
        let hm = load16(blk + l0);
        let qs = load16(blk + 32u + 32u * h + l0);
        let lo = (byte_at(blk + 96u + q % 8u) >> (4u * (q / 8u))) & 15u;
        let hi = (byte_at(blk + 104u + q % 4u) >> (2u * (q / 4u))) & 3u;
        let dl = f16_at(blk + 108u) * f32(i32(lo | (hi << 4u)) - 32);
        for (var i = 0u; i < 16u; i++) {
            let lo2 = u2f((byte_of(qs, i) >> (2u * j)) & 3u);
            let hbit = (byte_of(hm, i) >> (q / 2u)) & 1u;
            o[i] = dl * select(lo2 - 4.0, lo2, hbit == 1u);
        }
    } else if (QTYPE == 12u || QTYPE == 13u) {
        // Q4_K, Q5_K: d, dmin, scales[12], (Q5_K: qh[32]), qs[128]; sub-block s = q / 2.
        let s = q / 2u;
        let half = 16u * (q % 2u);
        let sm = scale_min_k4(blk + 4u, s);
        let d1 = f16_at(blk) * f32(sm.x);
        let m1 = f16_at(blk + 2u) * f32(sm.y);
        var qoff = blk + 16u;
        var qh = vec4<u32>(0u);
        if (QTYPE == 13u) {
            qh = load16(blk + 16u + half);
            qoff = blk + 48u;
        }
        let qs = load16(qoff + 32u * (s / 2u) + half);
        for (var i = 0u; i < 16u; i++) {
            let v = ((byte_of(qs, i) >> (4u * (s % 2u))) & 15u) | (((byte_of(qh, i) >> s) & 1u) << 4u);
            o[i] = d1 * u2f(v) - m1;
        }
    } else if (QTYPE == 14u) {
        // Q6_K: ql[128], qh[64], scales[16] (i8), d; element 128 h + 32 k + l.
        let h = q / 8u;
        let k = (q / 2u) % 4u;
        let l0 = 16u * (q % 2u);
        let ql = load16(blk + 64u * h + 32u * (k % 2u) + l0);
        let qh = load16(blk + 128u + 32u * h + l0);
        let sc = extractBits(i32(byte_at(blk + 192u + q)), 0u, 8u);
        let ds = f16_at(blk + 208u) * f32(sc);
        for (var i = 0u; i < 16u; i++) {
            let lo = (byte_of(ql, i) >> (4u * (k / 2u))) & 15u;
            let hi = (byte_of(qh, i) >> (2u * k)) & 3u;
            o[i] = ds * (u2f(lo | (hi << 4u)) - 32.0);
        }
    } else if (QTYPE == 23u) {
        // IQ4_XS: d, scales_h (u16), scales_l[4], qs[128]; sub-block ib = q / 2.
        let ib = q / 2u;
        let lo = (byte_at(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
        let hi = (u16_at(blk + 2u) >> (2u * ib)) & 3u;
        let dl = f16_at(blk) * f32(i32(lo | (hi << 4u)) - 32);
        let qs = load16(blk + 8u + 16u * ib);
        for (var i = 0u; i < 16u; i++) {
            o[i] = dl * KV[(byte_of(qs, i) >> (4u * (q % 2u))) & 15u];
        }
    }
    return o;
}
