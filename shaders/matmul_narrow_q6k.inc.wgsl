// Q6_K straight into registers for `matmul_narrow.wgsl` (entry point `main_q6k`): the Q4_K
// direct scheme with half-block steps. Invocation lid owns row lid / 2 and, of every
// 32-element group of a half-block (128 elements, sub-chunks 2 h and 2 h + 1), the elements
// l = 16 t .. 16 t + 16 (t = lid % 2): quant bytes ql at 64 h + 16 t and 64 h + 32 + 16 t,
// high bits qh at 128 + 32 h + 16 t, the half's 8 scales and d, loaded a half-block ahead.
// Blocks are 210 bytes, so a block starts on an even byte: a start 2 bytes past a word takes
// each 16-byte group from five words shifted by 16 bits. Needs NWG = 2 BN (subgroups of 32).

var<private> n6_ql0: vec4<u32>;
var<private> n6_ql1: vec4<u32>;
var<private> n6_qh: vec4<u32>;
// Scale words (bytes 8 h .. 8 h + 8 of the block's scales) and d (f32).
var<private> n6_sc: vec2<u32>;
var<private> n6_d: f32;
var<private> n6_nql0: vec4<u32>;
var<private> n6_nql1: vec4<u32>;
var<private> n6_nqh: vec4<u32>;
var<private> n6_nsc: vec2<u32>;
var<private> n6_nd: f32;

// Four words from word g on, moved down 16 bits (the next word's low half on top) when `mis`.
fn n6_words(g: u32, mis: bool) -> vec4<u32> {
    let v = vec4<u32>(w[g], w[g + 1u], w[g + 2u], w[g + 3u]);
    if (!mis) {
        return v;
    }
    let e = w[g + 4u];
    return (v >> vec4<u32>(16u)) | (vec4<u32>(v.y, v.z, v.w, e) << vec4<u32>(16u));
}

// The next half-block's registers: the one at k (a multiple of 128), zero past rows.
fn n6_fetch(lid: u32, r0: u32, k: u32) {
    let r = r0 + lid / 2u;
    let t = lid % 2u;
    n6_nql0 = vec4<u32>(0u);
    n6_nql1 = vec4<u32>(0u);
    n6_nqh = vec4<u32>(0u);
    n6_nsc = vec2<u32>(0u);
    n6_nd = 0.0;
    if (r < p.rows) {
        let h = (k / 128u) % 2u;
        let byte = (r * (p.cols / 256u) + k / 256u) * 210u;
        let a = byte >> 2u;
        let mis = (byte & 2u) != 0u;
        n6_nql0 = n6_words(a + 16u * h + 4u * t, mis);
        n6_nql1 = n6_words(a + 16u * h + 8u + 4u * t, mis);
        n6_nqh = n6_words(a + 32u + 8u * h + 4u * t, mis);
        let s0 = w[a + 48u + 2u * h];
        let s1 = w[a + 49u + 2u * h];
        let dw = w[a + 52u];
        if (mis) {
            let s2 = w[a + 50u + 2u * h];
            n6_nsc = vec2<u32>((s0 >> 16u) | (s1 << 16u), (s1 >> 16u) | (s2 << 16u));
            n6_nd = f16_bits(dw >> 16u);
        } else {
            n6_nsc = vec2<u32>(s0, s1);
            n6_nd = f16_bits(dw & 0xffffu);
        }
    }
}

fn n6_advance() {
    n6_ql0 = n6_nql0;
    n6_ql1 = n6_nql1;
    n6_qh = n6_nqh;
    n6_sc = n6_nsc;
    n6_d = n6_nd;
}

// The signed scale in byte i of word v.
fn n6_scale(v: u32, i: u32) -> f32 {
    return f32(extractBits(i32(v), 8u * i, 8u));
}

// Four 6-bit codes (bytes of c) as the floats 1 + q / 64 (q in the top 6 mantissa bits).
fn n6_codes(c: u32) -> vec4<f32> {
    let m = 0x007e0000u;
    let one = 0x3f800000u;
    return vec4<f32>(bitcast<f32>(((c << 17u) & m) | one), bitcast<f32>(((c << 9u) & m) | one),
                     bitcast<f32>(((c << 1u) & m) | one), bitcast<f32>(((c >> 7u) & m) | one));
}

// Sub-chunk 2 h + e of the current half-block (e = 0: low nibbles, groups 0 and 1; e = 1: high
// nibbles, groups 2 and 3) into nm_b as `dequant16` computes it; zeros past rows or this
// workgroup's share (`live` false).
fn n6_put(lid: u32, r0: u32, e: u32, live: bool) {
    let lr = lid / 2u;
    let t = lid % 2u;
    let o = lr * LDV + 4u * t;
    if (!live || r0 + lr >= p.rows) {
        for (var i = 0u; i < 4u; i++) {
            nm_b[o + i] = vec4<f16>(0.0);
            nm_b[o + 8u + i] = vec4<f16>(0.0);
        }
        return;
    }
    // Scales 4 e + t and 4 e + t + 2 of the half: bytes t and t + 2 of scale word e.
    let sw = select(n6_sc.x, n6_sc.y, e == 1u);
    // d sc (q - 32) = 64 d sc (1 + q / 64) - 96 d sc: one fma per element.
    let sl = 64.0 * n6_d * n6_scale(sw, t);
    let sh = 64.0 * n6_d * n6_scale(sw, t + 2u);
    let bl = -1.5 * sl;
    let bh = -1.5 * sh;
    let nib = 4u * e;
    for (var i = 0u; i < 4u; i++) {
        let hi = n6_qh[i] >> nib;
        let a = ((n6_ql0[i] >> nib) & 0x0f0f0f0fu) | ((hi & 0x03030303u) << 4u);
        let b = ((n6_ql1[i] >> nib) & 0x0f0f0f0fu) | ((hi & 0x0c0c0c0cu) << 2u);
        nm_b[o + i] = vec4<f16>(fma(n6_codes(a), vec4<f32>(sl), vec4<f32>(bl)));
        nm_b[o + 8u + i] = vec4<f16>(fma(n6_codes(b), vec4<f32>(sh), vec4<f32>(bh)));
    }
}

// The sub-chunk's products: this subgroup's 16 rows of nm_b by every token tile of nm_x.
fn nm_mma(sg: u32, c0: ptr<function, coop_mat16x16<f32, C>>,
          c1: ptr<function, coop_mat16x16<f32, C>>, c2: ptr<function, coop_mat16x16<f32, C>>,
          c3: ptr<function, coop_mat16x16<f32, C>>) {
    for (var kk = 0u; kk < KC / 4u; kk += 4u) {
        let b = coopLoad<coop_mat16x16<f16, B>>(&nm_b[16u * sg * LDV + kk], LDV);
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[kk], LDV);
        *c0 = coopMultiplyAdd(a0, b, *c0);
        if (MT > 1u) {
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[16u * LDV + kk], LDV);
            *c1 = coopMultiplyAdd(a1, b, *c1);
        }
        if (MT > 2u) {
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[32u * LDV + kk], LDV);
            *c2 = coopMultiplyAdd(a2, b, *c2);
        }
        if (MT > 3u) {
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&nm_x[48u * LDV + kk], LDV);
            *c3 = coopMultiplyAdd(a3, b, *c3);
        }
    }
}

// Q6_K straight into registers (entry point `main_q6k`).
@compute @workgroup_size(NWG)
fn main_q6k(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(local_invocation_index) lid: u32,
            @builtin(subgroup_id) sg: u32,
            @builtin(subgroup_invocation_id) lane: u32) {
    let r0 = wid.x * BN;
    let kr = nm_share(wid.z);
    let kb = kr.x;
    let ke = kr.y;
    var c0: coop_mat16x16<f32, C>;
    var c1: coop_mat16x16<f32, C>;
    var c2: coop_mat16x16<f32, C>;
    var c3: coop_mat16x16<f32, C>;
    if (kb < ke) {
        n6_fetch(lid, r0, kb);
        if (XH == 1u) {
            nm_xfetch(lid, kb, ke);
        }
    }
    for (var k0 = kb; k0 < ke; k0 += 128u) {
        n6_advance();
        if (k0 + 128u < ke) {
            n6_fetch(lid, r0, k0 + 128u);
        }
        for (var e = 0u; e < 2u; e++) {
            let ks = k0 + e * KC;
            n6_put(lid, r0, e, ks < ke);
            nm_x_phase(lid, ks, ke);
            workgroupBarrier();
            nm_mma(sg, &c0, &c1, &c2, &c3);
            workgroupBarrier();
        }
    }
    nm_epilogue(c0, c1, c2, c3, wid, lid, sg, lane);
}
