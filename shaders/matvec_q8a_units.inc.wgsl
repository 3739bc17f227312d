// matvec_q8a.wgsl's weight decoding: the 16-byte words of a lane step (`fetch`) and the int8
// units they hold (`decode`) for Q8_0, Q4_0, Q4_K and Q6_K. Not a kernel: appended to
// matvec_q8a.wgsl, which declares the weight bindings (`wq`), `qt()`, `wcols()` and `cur`.

// The 9 consecutive 4-byte words from word off / 4 (`window9`; 5 for `window5`): the aligned
// 16-byte words holding them (3; 2), shifted into place by (off / 4) % 4 words in two select
// stages. Callers read only 16-byte words that hold bytes of the block they decode, so nothing
// past the weight: a Q8_0 block's 34 bytes reach into the ninth word, a Q4_0 block's 18 into
// the fifth, and Q6_K's 32-byte runs are followed by more of their block.
fn window9(off: u32) -> array<u32, 9> {
    let v = off >> 4u;
    return window9_of(wq(v), wq(v + 1u), wq(v + 2u), off);
}

// window9 from its three 16-byte words, already loaded.
fn window9_of(a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, off: u32) -> array<u32, 9> {
    var w = array<u32, 12>(a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w);
    let s2 = (off & 8u) != 0u;
    let s1 = (off & 4u) != 0u;
    var t: array<u32, 10>;
    for (var k = 0u; k < 10u; k++) {
        t[k] = select(w[k], w[k + 2u], s2);
    }
    var o: array<u32, 9>;
    for (var k = 0u; k < 9u; k++) {
        o[k] = select(t[k], t[k + 1u], s1);
    }
    return o;
}

fn window5(off: u32) -> array<u32, 5> {
    let v = off >> 4u;
    return window5_of(wq(v), wq(v + 1u), off);
}

// window5 from its two 16-byte words: window9_of's first 5 words, which never reach a third.
fn window5_of(a: vec4<u32>, b: vec4<u32>, off: u32) -> array<u32, 5> {
    let w = window9_of(a, b, vec4<u32>(0u), off);
    return array<u32, 5>(w[0], w[1], w[2], w[3], w[4]);
}

// The 8 words (32 bytes) at an even byte offset `off`: its window, shifted by 16 bits when `off`
// is 2 mod 4.
fn words8(off: u32) -> array<u32, 8> {
    return words8_of(window9(off), off);
}

// words8 from its window.
fn words8_of(w: array<u32, 9>, off: u32) -> array<u32, 8> {
    let odd = (off & 2u) != 0u;
    var o: array<u32, 8>;
    for (var j = 0u; j < 8u; j++) {
        o[j] = select(w[j], (w[j] >> 16u) | (w[j + 1u] << 16u), odd);
    }
    return o;
}

// One weight unit (32 elements) as int8 codes and scales:
//   product = sa * f32(isum_lo + zb * sum) + sb * f32(isum_hi) - sm * f32(sum)
// with isum_lo over words 0..3 and isum_hi over words 4..7 (sa = sb except for Q6_K).
struct Unit {
    q: array<u32, 8>,
    sa: f32,
    sb: f32,
    sm: f32,
    zb: i32,
}

// A lane step's weight words as loaded (`fetch`), before decoding.
alias Raw = array<vec4<u32>, 8>;

// The byte offset of unit u's block in row `row` (Q8_0, Q4_0).
fn unit_byte(row: u32, u: u32) -> u32 {
    let ts = select(18u, 34u, qt() == 8u);
    return row * (wcols() / 32u) * ts + u * ts;
}

// A Q8_0 or Q4_0 unit from the 16-byte words holding its block (r[0], r[1] and, Q8_0, r[2];
// `fetch`) at byte offset blk.
fn unit_of(r: Raw, blk: u32) -> Unit {
    var o: Unit;
    o.sm = 0.0;
    o.zb = 0;
    let odd = (blk & 2u) != 0u;
    if (qt() == 8u) {
        // Q8_0: f16 d, 32 i8 (its 34 bytes are the 9 words from blk / 4: qs word j is word
        // j + 1 when blk = 2 mod 4, else the halves of words j and j + 1).
        let w = window9_of(r[0], r[1], r[2], blk);
        o.sa = f16_bits(select(w[0], w[0] >> 16u, odd) & 0xffffu);
        for (var j = 0u; j < 8u; j++) {
            o.q[j] = select((w[j] >> 16u) | (w[j + 1u] << 16u), w[j + 1u], odd);
        }
    } else {
        // Q4_0: f16 d, 16 bytes: element j low nibble of byte j, j + 16 its high nibble. Its 18
        // bytes lie in the 5 words from blk / 4; qs word j is word j + 1 (blk = 2 mod 4) or the
        // halves of words j and j + 1 (blk = 0 mod 4).
        let w = window5_of(r[0], r[1], blk);
        o.sa = f16_bits(select(w[0], w[0] >> 16u, odd) & 0xffffu);
        for (var j = 0u; j < 4u; j++) {
            let qs = select((w[j] >> 16u) | (w[j + 1u] << 16u), w[j + 1u], odd);
            o.q[j] = qs & 0x0f0f0f0fu;
            o.q[j + 4u] = (qs >> 4u) & 0x0f0f0f0fu;
        }
        o.zb = -8;
    }
    o.sb = o.sa;
    return o;
}

// Q4_K sub-block s (0..8) of the super-block with header `hd` (f16 d, dmin as f32 `d`, `dmin`;
// scales[12] in hd.y, hd.z, hd.w) and the 32 qs bytes q0, q1 it shares with sub-block s ^ 1 (its
// codes: nibble s % 2 of each byte). The 6-bit scale and min as vkllm-cpu's scale_min_k4, from
// whole words (no dynamic byte indexing, no branch): for s < 4 bytes s of scales[0..4] and
// scales[4..8]; else the nibbles of scales[s + 4] and the top bits of scales[s - 4], scales[s].
fn q4k_unit(d: f32, dmin: f32, hd: vec4<u32>, q0: vec4<u32>, q1: vec4<u32>, s: u32) -> Unit {
    var r: Unit;
    let sh = 8u * (s % 4u);
    let y = hd.y >> sh;
    let z = hd.z >> sh;
    let w = hd.w >> sh;
    let hi = s >= 4u;
    let sc = select(y & 63u, (w & 15u) | ((y >> 2u) & 48u), hi);
    let mn = select(z & 63u, ((w >> 4u) & 15u) | ((z >> 2u) & 48u), hi);
    r.sa = d * f32(sc);
    r.sb = r.sa;
    r.sm = dmin * f32(mn);
    r.zb = 0;
    let shv = vec4<u32>(4u * (s % 2u));
    let m = vec4<u32>(0x0f0f0f0fu);
    let a = (q0 >> shv) & m;
    let b = (q1 >> shv) & m;
    r.q = array<u32, 8>(a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
    return r;
}

// Units per lane step: Q4_K lanes take sub-block pairs (2j, 2j + 1), which share their 32 qs
// bytes (one header and two 16-byte loads per 64 elements), Q6_K pairs (k, k + 2) sharing ql and
// qh bytes; the others single units.
fn upl() -> u32 {
    return select(1u, 2u, qt() == 12u || qt() == 14u);
}

// The row's unit (32 elements of x) that part `hh` of step `pu` multiplies.
fn xunit(pu: u32, hh: u32) -> u32 {
    if (qt() == 12u) {
        return 2u * pu + hh;
    }
    if (qt() == 14u) {
        let pp = pu % 4u;
        return (pu / 4u) * 8u + (pp / 2u) * 4u + pp % 2u + 2u * hh;
    }
    return pu;
}

// Q6_K units (h, k) and (h, k + 2) of a super-block share their 32 ql bytes (low and high
// nibbles) and 32 qh bytes (bit pairs 2k and 2k + 4): ql[64 h + 32 k + l], qh[32 h + l]; the
// scales are scales[8 h + 2 kk + l / 16] (i8) for unit kk, times d.
// (From `fetch`'s words: the ql run's 3 in r[0..3], the qh run's in r[3..6], the 2 holding the
// block's bytes 192..210, scales and d, in r[6], r[7].)
fn q6k_pair(r: Raw, blk: u32, h: u32, k: u32) -> array<Unit, 2> {
    var o: array<Unit, 2>;
    let lo = blk + 64u * h + 32u * k;
    let ql = words8_of(window9_of(r[0], r[1], r[2], lo), lo);
    let hi = blk + 128u + 32u * h;
    let qh = words8_of(window9_of(r[3], r[4], r[5], hi), hi);
    // The 5 words from (blk + 192) / 4: scale byte e of the block's 16 sits at byte e + 2 odd.
    let hw = window5_of(r[6], r[7], blk + 192u);
    let odd = (blk & 2u) != 0u;
    let d = f16_bits(select(hw[4], hw[4] >> 16u, odd) & 0xffffu);
    for (var i = 0u; i < 2u; i++) {
        let e = 8u * h + 2u * k + 4u * i + select(0u, 2u, odd);
        let sw = pick5(hw, e >> 2u) >> (8u * (e & 3u));
        o[i].sa = d * f32(extractBits(bitcast<i32>(sw), 0u, 8u));
        o[i].sb = d * f32(extractBits(bitcast<i32>(sw), 8u, 8u));
        o[i].sm = 0.0;
        o[i].zb = 0;
        for (var j = 0u; j < 8u; j++) {
            let v = ((ql[j] >> (4u * i)) & 0x0f0f0f0fu)
                | (((qh[j] >> (2u * k + 4u * i)) & 0x03030303u) << 4u);
            // 6-bit code c -> int8 c - 32: flip bit 5, then copy it into bits 6 and 7.
            let t = v ^ 0x20202020u;
            o[i].q[j] = t | ((t & 0x20202020u) * 6u);
        }
    }
    return o;
}

// Word i (0..5) of w, by selects (no indexed private array).
fn pick5(w: array<u32, 5>, i: u32) -> u32 {
    var o = w[0];
    for (var j = 1u; j < 5u; j++) {
        o = select(o, w[j], i == j);
    }
    return o;
}

// The 16 consecutive words (64 bytes) at an even byte offset `off`: two words8 runs (their
// shared middle 16-byte word is the same load).
fn words16(off: u32) -> array<u32, 16> {
    let a = words8(off);
    let b = words8(off + 32u);
    var o: array<u32, 16>;
    for (var j = 0u; j < 8u; j++) {
        o[j] = a[j];
        o[j + 8u] = b[j];
    }
    return o;
}

// Q6_K half super-block h (QUAD): the units (h, k, i) = r[2k + i], i.e. q6k_pair's
// two units for k = 0 and 1, from one 64-byte ql run, one qh run and one header window (the 8
// scale bytes 8h..8h + 8 and d) instead of two of each.
fn q6k_quad(blk: u32, h: u32) -> array<Unit, 4> {
    var r: array<Unit, 4>;
    let ql = words16(blk + 64u * h);
    let qh = words8(blk + 128u + 32u * h);
    // Bytes 192..210 of the block: scales[16] and d, from the 5 words at (blk + 192) / 4.
    let hw = window5(blk + 192u);
    let odd = ((blk + 192u) & 2u) != 0u;
    // Words of scale bytes 8h.., 8h + 4.. (3 words hold them: 0..2 for h = 0, 2..4 for h = 1).
    let t0 = select(hw[0], hw[2], h == 1u);
    let t1 = select(hw[1], hw[3], h == 1u);
    let t2 = select(hw[2], hw[4], h == 1u);
    var sw: array<u32, 2>;
    sw[0] = select(t0, (t0 >> 16u) | (t1 << 16u), odd);
    sw[1] = select(t1, (t1 >> 16u) | (t2 << 16u), odd);
    let d = f16_bits(select(hw[4], hw[4] >> 16u, odd) & 0xffffu);
    for (var k = 0u; k < 2u; k++) {
        for (var i = 0u; i < 2u; i++) {
            let sc = sw[i] >> (16u * k);
            var u: Unit;
            u.sa = d * f32(extractBits(bitcast<i32>(sc), 0u, 8u));
            u.sb = d * f32(extractBits(bitcast<i32>(sc), 8u, 8u));
            u.sm = 0.0;
            u.zb = 0;
            for (var j = 0u; j < 8u; j++) {
                let v = ((ql[8u * k + j] >> (4u * i)) & 0x0f0f0f0fu)
                    | (((qh[j] >> (2u * k + 4u * i)) & 0x03030303u) << 4u);
                let c = v ^ 0x20202020u;
                u.q[j] = c | ((c & 0x20202020u) * 6u);
            }
            r[2u * k + i] = u;
        }
    }
    return r;
}

// The byte offset of the Q6_K super-block holding step pu of row `row`.
fn q6k_blk(row: u32, pu: u32) -> u32 {
    return row * (wcols() / 256u) * 210u + (pu / 4u) * 210u;
}

// The aligned 16-byte words step `pu` of row `row` reads (of the weight `cur` names): Q4_K 3 (the
// header, the pair's two qs words), Q8_0 3 and Q4_0 2 (the words holding the block), Q6_K 8 (the
// ql and qh runs' 3 each, the 2 holding scales and d), loaded before any is decoded.
fn fetch(row: u32, pu: u32) -> Raw {
    var r: Raw;
    if (qt() == 12u) {
        let j = pu % 4u;
        let blk = row * (wcols() / 256u) * 9u + (pu / 4u) * 9u;
        r[0] = wq(blk);
        r[1] = wq(blk + 1u + 2u * j);
        r[2] = wq(blk + 2u + 2u * j);
    } else if (qt() == 14u) {
        let pp = pu % 4u;
        let blk = q6k_blk(row, pu);
        let a = (blk + 64u * (pp / 2u) + 32u * (pp % 2u)) >> 4u;
        let b = (blk + 128u + 32u * (pp / 2u)) >> 4u;
        let c = (blk + 192u) >> 4u;
        r[0] = wq(a);
        r[1] = wq(a + 1u);
        r[2] = wq(a + 2u);
        r[3] = wq(b);
        r[4] = wq(b + 1u);
        r[5] = wq(b + 2u);
        r[6] = wq(c);
        r[7] = wq(c + 1u);
    } else {
        let v = unit_byte(row, pu) >> 4u;
        r[0] = wq(v);
        r[1] = wq(v + 1u);
        if (qt() == 8u) {
            r[2] = wq(v + 2u);
        }
    }
    return r;
}

// Step `pu` of row `row` from its fetched words: units xunit(pu, 0), xunit(pu, 1); the second is
// unset when upl() is 1.
fn decode(r: Raw, row: u32, pu: u32) -> array<Unit, 2> {
    var o: array<Unit, 2>;
    if (qt() == 12u) {
        let j = pu % 4u;
        let d = f16_bits(r[0].x & 0xffffu);
        let dmin = f16_bits(r[0].x >> 16u);
        o[0] = q4k_unit(d, dmin, r[0], r[1], r[2], 2u * j);
        o[1] = q4k_unit(d, dmin, r[0], r[1], r[2], 2u * j + 1u);
    } else if (qt() == 14u) {
        let pp = pu % 4u;
        o = q6k_pair(r, q6k_blk(row, pu), pp / 2u, pp % 2u);
    } else {
        o[0] = unit_of(r, unit_byte(row, pu));
    }
    return o;
}

fn units_of(row: u32, pu: u32) -> array<Unit, 2> {
    return decode(fetch(row, pu), row, pu);
}
