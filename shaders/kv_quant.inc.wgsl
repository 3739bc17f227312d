// Quantized KV caches (type t: 2 q8_0, 3 q4_0, 4 tq4; the including file passes its KV_DTYPE for
// K and KV_DTYPE_V for V): not a kernel on its own. Values go in units of 64 (two blocks of 32, one f16 scale each), UW words per unit:
// the codes (q8_0: 16 words, byte i of word w is value 4w + i as an i8; q4_0: 8 words, nibble i
// of word w is value 8w + i plus 8), then one word with the two blocks' scales (f16 pair, the
// first block in the low half). Value = scale * code (q4_0: scale * (nibble - 8)). A cache row of
// kv_dim values (kv_dim a multiple of 64) is kv_dim / 64 units, so value e of the flat [rows,
// kv_dim] array is in unit e / 64 whatever the row and head.
// Quantizing a block (vkllm_cpu::kv_quant is the reference): q8_0 scale = f16(amax * (1 / 127)),
// code = clamp(round(x / scale), -127, 127); q4_0 m = the value of largest magnitude (the first
// on a tie), scale = the candidate f16(m / (-8.75 + j / 8)), j = 0..16, of least squared error
// (the first on a tie), code = clamp(floor(x / scale + 8.5), 0, 15). A zero scale
// gives code 0 (q4_0: 8).
// tq4: q4_0's layout; its units are always stored rotated (R below, keys and values), a block's
// scale is f16(-m) (its value of largest magnitude lands on level -1) and a code is the nearest
// of 16 levels (kvq_tq4_level: the Lloyd-Max levels of Gaussian blocks of 32 divided by their
// value of largest magnitude; the lower code on a tie), value = scale * level.

// Code words of a unit.
fn kvq_code_words(t: u32) -> u32 {
    return select(8u, 16u, t == 2u);
}

// Words of a unit (codes and the scale word).
fn kvq_unit_words(t: u32) -> u32 {
    return kvq_code_words(t) + 1u;
}

// Values per code word.
fn kvq_per_word(t: u32) -> u32 {
    return select(8u, 4u, t == 2u);
}

// The word holding value e's code, and the word holding its block's scale.
fn kvq_code_word(t: u32, e: u32) -> u32 {
    return (e / 64u) * kvq_unit_words(t) + (e % 64u) / kvq_per_word(t);
}

fn kvq_scale_word(t: u32, e: u32) -> u32 {
    return (e / 64u) * kvq_unit_words(t) + kvq_code_words(t);
}

// Value e's scale from its scale word.
fn kvq_scale(sw: u32, e: u32) -> f32 {
    let s = unpack2x16float(sw);
    return select(s.x, s.y, (e % 64u) >= 32u);
}

// tq4's level of code c (vkllm_cpu::kv_quant::TQ4_LEVELS).
fn kvq_tq4_level(c: u32) -> f32 {
    var l = -1.0;
    switch (c) {
        case 1u: { l = -0.7975; }
        case 2u: { l = -0.6371; }
        case 3u: { l = -0.5008; }
        case 4u: { l = -0.3798; }
        case 5u: { l = -0.2686; }
        case 6u: { l = -0.1638; }
        case 7u: { l = -0.0628; }
        case 8u: { l = 0.0365; }
        case 9u: { l = 0.1359; }
        case 10u: { l = 0.2373; }
        case 11u: { l = 0.3431; }
        case 12u: { l = 0.4559; }
        case 13u: { l = 0.5798; }
        case 14u: { l = 0.7209; }
        case 15u: { l = 0.8902; }
        default: {}
    }
    return l;
}

// Code i of a code word as a value in units of the scale (q8_0 the i8, q4_0 nibble - 8, tq4 its
// level).
fn kvq_code(t: u32, w: u32, i: u32) -> f32 {
    if (t == 2u) {
        return f32(extractBits(bitcast<i32>(w), 8u * i, 8u));
    }
    if (t == 4u) {
        return kvq_tq4_level(extractBits(w, 4u * i, 4u));
    }
    return f32(extractBits(w, 4u * i, 4u)) - 8.0;
}

// Value e given its code word and scale word.
fn kvq_value(t: u32, cw: u32, sw: u32, e: u32) -> f32 {
    return kvq_scale(sw, e) * kvq_code(t, cw, e % kvq_per_word(t));
}

// The f16-rounded scale of a block from its value of largest magnitude (signed) m: q8_0
// |m| / 127, q4_0 m / -8 (llama.cpp's rule; the append then searches kvq_q4_candidate), tq4 -m.
fn kvq_block_scale(t: u32, m: f32) -> f32 {
    var d = m * -0.125;
    if (t == 2u) {
        d = abs(m) * (1.0 / 127.0);
    }
    if (t == 4u) {
        d = -m;
    }
    return kvq_f16_round(d);
}

// q4_0's candidate scale j (0..16) of a block whose value of largest magnitude is m, f16-rounded:
// m / (-8.75 + j / 8); the block takes the first of least squared error.
fn kvq_q4_candidate(m: f32, j: u32) -> f32 {
    return kvq_f16_round(m / (-8.75 + f32(j) * 0.125));
}

fn kvq_f16_round(d: f32) -> f32 {
    return kvq_half_to_f32(pack2x16float(vec2<f32>(d, 0.0)) & 0xffffu);
}

// f16 bits to f32 by hand (finite values): unpack2x16float(pack2x16float(d)) is folded to d by
// some drivers, which would code values against the unrounded scale.
fn kvq_half_to_f32(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        return select(1.0, -1.0, (h & 0x8000u) != 0u) * f32(m) * 5.9604645e-8;
    }
    return bitcast<f32>(((h & 0x8000u) << 16u) | ((e + 112u) << 23u) | (m << 13u));
}

// The code (as stored bits, not yet shifted into place) of x in a block of scale d.
fn kvq_encode(t: u32, x: f32, d: f32) -> u32 {
    if (t == 4u) {
        var r = 0.0;
        if (d != 0.0) {
            r = x / d;
        }
        var c = 0u;
        for (var i = 0u; i < 15u; i++) {
            c += select(0u, 1u, r > 0.5 * (kvq_tq4_level(i) + kvq_tq4_level(i + 1u)));
        }
        return c;
    }
    if (t == 2u) {
        var q = 0.0;
        if (d != 0.0) {
            q = clamp(round(x / d), -127.0, 127.0);
        }
        return bitcast<u32>(i32(q)) & 0xffu;
    }
    var q = 8.0;
    if (d != 0.0) {
        q = clamp(floor(x / d + 8.5), 0.0, 15.0);
    }
    return u32(q);
}

// Rotation (K of q8_0 caches and V of q4_0 caches whose heads are whole units, the including
// file's overrides KV_ROT_K / KV_ROT_V = 1; K and V of tq4 caches): each rotated 64-value unit is
// stored as y = R x, R = H D / 8 with H the 64 x 64 Walsh-Hadamard matrix (H_ij =
// (-1)^popcount(i & j)) and D the fixed signs below, so the unit's large channels are spread over
// all its values before the blocks take their scales. R is orthogonal, so q . k = (R q) . (R k):
// attention rotates each 64-value segment of the query alike and reads the blocks as they are;
// rotated values give an output attention rotates back (kv_unrotate.wgsl); the f16 copy for the
// cooperative-matrix prefill applies R^T = D H / 8. Sums run over j = 0..63 in order (each term
// exact), as vkllm_cpu::kv_quant does.
const KVQ_SIGNS_LO: u32 = 0x4db26d92u;
const KVQ_SIGNS_HI: u32 = 0xc93649b6u;

// D_jj.
fn kvq_sign(j: u32) -> f32 {
    let bits = select(KVQ_SIGNS_HI, KVQ_SIGNS_LO, j < 32u);
    return select(1.0, -1.0, ((bits >> (j % 32u)) & 1u) == 1u);
}

// H_ij.
fn kvq_hadamard(i: u32, j: u32) -> f32 {
    return select(1.0, -1.0, (countOneBits(i & j) & 1u) == 1u);
}
