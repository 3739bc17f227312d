// Decode matvec on int8 dot products: y = epilogue(W . q8(prologue(x))) for Q8_0, Q4_0, Q4_K and
// Q6_K weights, `n` activation columns at once. The same op, parts, prologue and epilogues as
// matvec_fused.wgsl (see there), with one difference: the activations are quantized first.
//
// Activation quantization (vkllm-cpu's `quantize_act_q8`, the oracle): each run of 32 elements
// of a column, a "unit", v_i = x_i (NORM 0) or x_i * (offset + norm_w_i) (NORM 1: inv_rms, a
// per-column scalar, multiplies the finished dot product as in matvec_fused), becomes
//   amax = max |v_i|, d = amax * (1 / 127), q_i = round_half_even(v_i * (127 / amax)) (0 when
//   amax = 0), clamped to [-127, 127]; sum = sum_i q_i.
// The product of a weight unit w (32 dequantized weights) with it is d * sum_i w_i q_i, computed
// from the weight's integer codes with dot4I8Packed (4 int8 products per instruction; exact i32
// sums) and one f32 scale per sub-block:
//   Q8_0: dw * isum;  Q4_0: dw * (isum - 8 * sum);  Q4_K: (d * sc) * isum - (dmin * m) * sum;
//   Q6_K: d * (sc_lo * isum_lo + sc_hi * isum_hi) (two 16-element scales; codes made signed).
//
// Layout: every workgroup first quantizes all NC columns of x into shared memory (each
// invocation one 8-element chunk; the 4 chunks of a unit combine amax and sum with
// subgroupShuffleXor, so subgroups of >= 4 lanes), then teams of LPR invocations own R rows as in
// matvec_fused, but a lane's unit of work is a whole 32-element unit (Q4_K, Q6_K: a pair of
// them sharing their bytes): lane l takes units l, l + LPR, ... of its rows and reads their bytes as
// aligned 16-byte words only (Q8_0, Q4_0 and Q6_K blocks are 2-byte aligned: the 2 or 3 words
// holding the bytes, shifted into place with selects; 4-byte loads, one cache line per lane,
// measured slower; Q4_K's 144-byte blocks are 16-byte aligned), and takes 8 int8 words of x
// per column from shared memory (stored word-major, `xq[j * units + unit]`, so consecutive
// lanes read consecutive words: no bank conflicts). NIT row groups per workgroup share one
// quantization of x.
// Shapes: x [NC, cols] f32 with NC * cols <= 16384 (the shared copy); cols a multiple of the
// block (32 or 256). Shared memory: 16 KiB of int8 x, 4 KiB of unit scales and sums, 4 KiB of
// reduction space (24 KiB). Memory bound: every weight byte is read once per dispatch.
// XG = 1 (the multi-column decode path): x arrives quantized (quantize_act_q8.wgsl) and is read
// from global memory, so NC (up to 16; slots x NC <= 32 sums) and cols are not bounded by the
// shared copy; teams sum by an xor butterfly.
// MOE != 0 (moe_experts_q8a.rs): the routed experts of a MoE block for token wid.z (x is its
// column, y its row). MOE 1, gate and up (gated; w0, w1 the stacked [E FF, cols] matrices): op
// row r (of TOPK FF) reads expert e = ids[t TOPK + r / FF]'s row e FF + r % FF. MOE 2, down (w0
// the stacked [E rows, FF] matrix; x the token's TOPK x FF activations): lane step pu belongs to
// slot s = pu / (steps per FF), reads expert e's row e rows + r, and is weighed by the routing
// weight of slot s. Expert ids (u32) come in binding w2, routing weights (f32) in norm_w; expert
// ids are clamped to E - 1.
// MOE 3 / 4 (moe_experts_grouped.rs's int8 launches, decode batches): the slots routed to expert
// wid.z as listed by moe_experts_grouped.wgsl's `group` (binding w2: lists [E, n] then counts
// [E]; p.col0 holds n), NC at a time as the columns. MOE 3, gate and up (gated; rows FF of the
// expert): x row slot / TOPK, y (act) row slot. MOE 4, down (rows: the expert's p.rows0): x (act)
// row slot, y row slot (one product per slot; the grouped `sum` weighs and adds them).

// #include act_q8.inc.wgsl
// #include matvec_epilogue.inc.wgsl
// #include matvec_team.inc.wgsl

override WG: u32 = 128;
override LPR: u32 = 32;
override R: u32 = 1;
override NC: u32 = 1;
override NPARTS: u32 = 1;
override NORM: u32 = 0;
// 0 store, 1 accumulate, 2 gated silu, 3 gated gelu_tanh.
override EPI: u32 = 0;
// ggml type id (8 Q8_0, 2 Q4_0, 12 Q4_K, 14 Q6_K) and bytes per block.
override QTYPE: u32 = 8;
override TS: u32 = 34;
// 1: parts 1 and 2 hold QTYPE1 and QTYPE2 weights (q/k/v of mixed types in one launch; never
// gated or QUAD): a part's workgroups take its type's decoder (uniform per workgroup).
override MIXED: u32 = 0;
override QTYPE1: u32 = 8;
override QTYPE2: u32 = 8;
// Row groups per workgroup: the workgroup owns NIT * (WG / LPR) * R consecutive rows and walks
// them one group of (WG / LPR) * R at a time, so one quantization of x serves them all.
override NIT: u32 = 1;
// 1: Q6_K with one row per team, ungated (the large-matrix launch): a lane step is half a
// super-block, the four units that share their qh bytes (`q6k_quad`), instead of a unit pair.
override QUAD: u32 = 0;
// Lane steps whose weight words are loaded ahead (MOE 0, QUAD 0; PF * slots <= 8): the first
// group's before x is quantized, the next group's before this one's team sums, so the loads are
// in flight over that work. 0: each step's words are loaded when it runs (the reference).
override PF: u32 = 0;
// 1: x comes quantized from global memory (quantize_act_q8.wgsl's layout: codes in binding
// `x`, per column the unit scales and sums and the chunks' sums of squares in binding `norm_w`,
// whose weights that kernel already applied), so any NC x cols fits and no workgroup quantizes;
// the launch covers columns col0 .. col0 + NC of them. The multi-column decode path.
override XG: u32 = 0;
override MOE: u32 = 0;
override MOE_FF: u32 = 32;
override MOE_K: u32 = 1;
override MOE_E: u32 = 1;

struct Params {
    cols: u32,
    y_stride: u32,
    rows0: u32,
    rows1: u32,
    rows2: u32,
    off0: u32,
    off1: u32,
    off2: u32,
    wg1: u32,
    wg2: u32,
    wg_end: u32,
    eps: f32,
    norm_offset: f32,
    // XG: the first column of x and y this launch takes.
    col0: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w0q: array<vec4<u32>>;
// x and norm_w are declared as words: with XG they hold integer codes and sums, which must not
// pass through float loads (a driver may flush denormal bit patterns); floats are bitcast.
@group(0) @binding(1) var<storage, read> x4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w1q: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> w2q: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> nw4: array<vec4<u32>>;

// Quantized x: word j (elements 4j..4j+3) of unit U (column t, unit u: U = t * cols / 32 + u)
// at xq[j * n_units + U]; its scale and code sum at xd[U], xs[U].
var<workgroup> xq: array<u32, 4096>;
var<workgroup> xd: array<f32, 512>;
var<workgroup> xs: array<i32, 512>;
var<workgroup> red: array<f32, 1024>;

// XG: quantize_act_q8.wgsl's words per column of scales, sums and chunk sums.
fn xg_ms() -> u32 {
    let uc = p.cols / 32u;
    return 2u * uc + (uc + 31u) / 32u;
}

fn qm_word(i: u32) -> u32 {
    return nw4[i >> 2u][i & 3u];
}

// The 8 code words of unit u of column t (of this launch).
fn x_words(t: u32, u: u32, n_units: u32) -> array<u32, 8> {
    var o: array<u32, 8>;
    if (XG == 1u) {
        let i = 2u * ((p.col0 + t) * (p.cols / 32u) + u);
        let a = x4[i];
        let b = x4[i + 1u];
        o = array<u32, 8>(a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
    } else {
        let U = t * (p.cols / 32u) + u;
        for (var j = 0u; j < 8u; j++) {
            o[j] = xq[j * n_units + U];
        }
    }
    return o;
}

// The scale of unit u of column t.
fn x_scale(t: u32, u: u32) -> f32 {
    if (XG == 1u) {
        return bitcast<f32>(qm_word((p.col0 + t) * xg_ms() + 2u * u));
    }
    return xd[t * (p.cols / 32u) + u];
}

// The code sum of unit u of column t.
fn x_sum(t: u32, u: u32) -> i32 {
    if (XG == 1u) {
        return bitcast<i32>(qm_word((p.col0 + t) * xg_ms() + 2u * u + 1u));
    }
    return xs[t * (p.cols / 32u) + u];
}

// The part the next weight read goes to.
var<private> cur: u32;
// MIXED: the weight type of this workgroup's part.
var<private> part_qt: u32;

// The weight type being decoded: QTYPE, or with MIXED this workgroup's part's.
fn qt() -> u32 {
    if (MIXED == 0u) {
        return QTYPE;
    }
    return part_qt;
}
// MOE: the token this workgroup takes (wid.z); MOE 3 / 4: its expert.
var<private> tok: u32 = 0u;
// MOE 3 / 4: the expert's listed slots, and the first of this pass's NC columns.
var<private> g_count: u32 = 0u;
var<private> g_c0: u32 = 0u;
var<workgroup> g_count_wg: u32;

fn list_word(i: u32) -> u32 {
    return w2q[i >> 2u][i & 3u];
}

// MOE 3 / 4: whether column t of this pass holds a slot, and that slot.
fn g_live(t: u32) -> bool {
    return g_c0 + t < g_count;
}

fn g_slot(t: u32) -> u32 {
    return list_word(tok * p.col0 + g_c0 + t);
}

// MOE: the expert of the token's slot s, and its routing weight.
fn moe_expert(s: u32) -> u32 {
    let i = tok * MOE_K + s;
    return min(w2q[i >> 2u][i & 3u], MOE_E - 1u);
}

fn moe_weight(s: u32) -> f32 {
    return bitcast<f32>(qm_word(tok * MOE_K + s));
}

// Elements in a row of the weight matrix (MOE 2: an expert's row of FF).
fn wcols() -> u32 {
    return select(p.cols, MOE_FF, MOE == 2u);
}

// MOE 2: lane steps per expert row.
fn moe_spr() -> u32 {
    return (MOE_FF / 32u) / upl();
}

// The weight matrix row that op row `row` reads at lane step `pu` (MOE: the routed expert's).
fn wrow(row: u32, pu: u32) -> u32 {
    if (MOE == 1u) {
        return moe_expert(row / MOE_FF) * MOE_FF + row % MOE_FF;
    }
    if (MOE == 2u) {
        return moe_expert(pu / moe_spr()) * p.rows0 + row;
    }
    if (MOE == 3u) {
        return tok * MOE_FF + row;
    }
    if (MOE == 4u) {
        return tok * p.rows0 + row;
    }
    return row;
}

// The lane step within that row.
fn wpu(pu: u32) -> u32 {
    return select(pu, pu % moe_spr(), MOE == 2u);
}

fn wq(i: u32) -> vec4<u32> {
    if (NPARTS == 1u || cur == 0u) {
        return w0q[i];
    }
    if (cur == 1u) {
        return w1q[i];
    }
    return w2q[i];
}

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

fn window5_of(a: vec4<u32>, b: vec4<u32>, off: u32) -> array<u32, 5> {
    var w = array<u32, 8>(a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
    let s2 = (off & 8u) != 0u;
    let s1 = (off & 4u) != 0u;
    var t: array<u32, 6>;
    for (var k = 0u; k < 6u; k++) {
        t[k] = select(w[k], w[k + 2u], s2);
    }
    var o: array<u32, 5>;
    for (var k = 0u; k < 5u; k++) {
        o[k] = select(t[k], t[k + 1u], s1);
    }
    return o;
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

// f16 bits (low 16 of h) to f32 with integer operations: exact for subnormals too (Vulkan may
// flush 16-bit denormals in unpack2x16float; K-quant super-block scales are often subnormal).
fn f16v(h: u32) -> f32 {
    let e = (h >> 10u) & 31u;
    let m = h & 1023u;
    if (e == 0u) {
        let v = f32(m) * 5.9604644775390625e-8;
        return select(v, -v, (h & 0x8000u) != 0u);
    }
    let eb = select(e + 112u, 255u, e == 31u);
    return bitcast<f32>(((h & 0x8000u) << 16u) | (eb << 23u) | (m << 13u));
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
        o.sa = f16v(select(w[0], w[0] >> 16u, odd) & 0xffffu);
        for (var j = 0u; j < 8u; j++) {
            o.q[j] = select((w[j] >> 16u) | (w[j + 1u] << 16u), w[j + 1u], odd);
        }
    } else {
        // Q4_0: f16 d, 16 bytes: element j low nibble of byte j, j + 16 its high nibble. Its 18
        // bytes lie in the 5 words from blk / 4; qs word j is word j + 1 (blk = 2 mod 4) or the
        // halves of words j and j + 1 (blk = 0 mod 4).
        let w = window5_of(r[0], r[1], blk);
        o.sa = f16v(select(w[0], w[0] >> 16u, odd) & 0xffffu);
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
    let d = f16v(select(hw[4], hw[4] >> 16u, odd) & 0xffffu);
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
    let d = f16v(select(hw[4], hw[4] >> 16u, odd) & 0xffffu);
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
// ql and qh runs' 3 each, the 2 holding scales and d). Loaded apart from their decoding so a
// launch can issue a step's loads ahead (PF).
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
        let d = f16v(r[0].x & 0xffffu);
        let dmin = f16v(r[0].x >> 16u);
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

fn gated() -> bool {
    return EPI >= 2u;
}

fn slots() -> u32 {
    return select(R, 2u * R, gated());
}

// PF: the first PF steps' words of every slot of the team whose first row is row0, into pre.
fn prefetch(pre: ptr<function, array<Raw, 8>>, row0: u32, part: u32, rows: u32, tl: u32) {
    for (var st = 0u; st < PF; st++) {
        let pu = tl + st * LPR;
        if (pu < p.cols / 32u / upl()) {
            for (var k = 0u; k < slots(); k++) {
                cur = select(part, k / R, gated());
                (*pre)[st * slots() + k] = fetch(min(row0 + k % R, rows - 1u), pu);
            }
        }
    }
}

// Step pu's products of its units un (slot k's at 2k, 2k + 1) with every column, into acc.
fn dot_step(pu: u32, un: ptr<function, array<Unit, 8>>, acc: ptr<function, array<f32, 32>>,
            n_units: u32, rw: f32) {
    for (var t = 0u; t < NC; t++) {
        for (var h = 0u; h < upl(); h++) {
            let xu = xunit(pu, h);
            let xw = x_words(t, xu, n_units);
            let sum = x_sum(t, xu);
            let dx = x_scale(t, xu);
            for (var k = 0u; k < slots(); k++) {
                let w = (*un)[2u * k + h];
                var lo = 0;
                var hi = 0;
                for (var j = 0u; j < 4u; j++) {
                    lo = lo + dot4I8Packed(w.q[j], xw[j]);
                    hi = hi + dot4I8Packed(w.q[j + 4u], xw[j + 4u]);
                }
                var c: f32;
                if (qt() == 14u) {
                    c = w.sa * f32(lo) + w.sb * f32(hi);
                } else {
                    c = w.sa * f32(lo + hi + w.zb * sum) - w.sm * f32(sum);
                }
                (*acc)[k * NC + t] += c * dx * rw;
            }
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
        @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.wg_end) {
        return;
    }
    if (MOE != 0u) {
        tok = wid.z;
    }
    let v = sg_id * sg_size + sg_lane;
    // One pass, or (MOE 3 / 4) one per NC listed slots of the expert (a workgroup-uniform count).
    var passes = 1u;
    if (MOE >= 3u) {
        if (v == 0u) {
            g_count_wg = min(list_word(MOE_E * p.col0 + tok), p.col0);
        }
        g_count = workgroupUniformLoad(&g_count_wg);
        passes = (g_count + NC - 1u) / NC;
    }
    for (var ps = 0u; ps < passes; ps++) {
        g_c0 = ps * NC;
        let team = v / LPR;
        let tl = v % LPR;

        var part = 0u;
        var first_wg = 0u;
        var rows = p.rows0;
        var yoff = p.off0;
        if (NPARTS > 2u && !gated() && g >= p.wg2) {
            part = 2u;
            first_wg = p.wg2;
            rows = p.rows2;
            yoff = p.off2;
        } else if (NPARTS > 1u && !gated() && g >= p.wg1) {
            part = 1u;
            first_wg = p.wg1;
            rows = p.rows1;
            yoff = p.off1;
        }
        part_qt = select(select(QTYPE, QTYPE2, part == 2u), QTYPE1, part == 1u);
        let c4 = p.cols / 4u;
        let uc = p.cols / 32u;
        let n_units = NC * uc;
        let group_rows = (WG / LPR) * R;
        var pre: array<Raw, 8>;
        let base0 = (g - first_wg) * NIT * group_rows;
        if (PF > 0u && MOE == 0u && QUAD == 0u && base0 < rows) {
            prefetch(&pre, base0 + team * R, part, rows, tl);
        }

        // Norm prologue and quantization in one pass over x (x is read once: the sum of squares
        // of each column is taken from the chunks being quantized, whose weighting by the norm
        // does not depend on it; inv_rms multiplies the finished dot products, as in matvec_fused).
        // Quantize x: chunk ch (8 elements: unit ch / 4, words 2 (ch % 4), 2 (ch % 4) + 1). The
        // chunk count is a multiple of 4 and of no concern to WG (a multiple of 32): the 4 lanes of a
        // unit run the loop alike.
        var inv: array<f32, 16>;
        var ss: array<f32, 16>;
        for (var t = 0u; t < NC; t++) {
            ss[t] = 0.0;
        }
        if (XG == 1u && NORM != 0u) {
            // inv_rms from the quantization's chunk sums, in chunk order.
            let ms = xg_ms();
            let nch = (uc + 31u) / 32u;
            for (var t = 0u; t < NC; t++) {
                var total = 0.0;
                for (var c = 0u; c < nch; c++) {
                    total += bitcast<f32>(qm_word((p.col0 + t) * ms + 2u * uc + c));
                }
                inv[t] = 1.0 / sqrt(total / f32(p.cols) + p.eps);
            }
        }
        for (var ch = v; ch < select(4u * n_units, 0u, XG == 1u); ch += WG) {
            let un = ch / 4u;
            var e4 = 2u * ch + tok * c4;
            var live = true;
            if (MOE >= 3u) {
                // Column un / uc is a listed slot's row (MOE 3: its token's) or zeros.
                let col = un / uc;
                live = g_live(col);
                var src = 0u;
                if (live) {
                    src = g_slot(col);
                    if (MOE == 3u) {
                        src = src / MOE_K;
                    }
                }
                e4 = 2u * (ch - col * 4u * uc) + src * c4;
            }
            var a = bitcast<vec4<f32>>(x4[e4]);
            var b = bitcast<vec4<f32>>(x4[e4 + 1u]);
            if (!live) {
                a = vec4<f32>(0.0);
                b = vec4<f32>(0.0);
            }
            if (NORM != 0u) {
                let col = un / uc;
                let sq = dot(a, a) + dot(b, b);
                for (var t = 0u; t < NC; t++) {
                    ss[t] += select(0.0, sq, t == col);
                }
                let c = e4 % c4;
                a *= p.norm_offset + bitcast<vec4<f32>>(nw4[c]);
                b *= p.norm_offset + bitcast<vec4<f32>>(nw4[c + 1u]);
            }
            let q = act_q8_chunk(a, b);
            let j = 2u * (ch % 4u);
            xq[j * n_units + un] = q.qa;
            xq[(j + 1u) * n_units + un] = q.qb;
            if (ch % 4u == 0u) {
                xd[un] = q.d;
                xs[un] = q.s;
            }
        }
        if (XG == 0u && NORM != 0u) {
            for (var t = 0u; t < NC; t++) {
                let s = subgroupAdd(ss[t]);
                if (sg_lane == 0u) {
                    red[sg_id * NC + t] = s;
                }
            }
        }
        workgroupBarrier();
        if (XG == 0u && NORM != 0u) {
            for (var t = 0u; t < NC; t++) {
                var total = 0.0;
                for (var i = 0u; i < n_sg; i++) {
                    total += red[i * NC + t];
                }
                inv[t] = 1.0 / sqrt(total / f32(p.cols) + p.eps);
            }
            // `red` is written again by the team sums below.
            workgroupBarrier();
        }

        for (var it = 0u; it < NIT; it++) {
            let base = base0 + it * group_rows;
            // Uniform: past the part's end for the whole workgroup.
            if (base >= rows) {
                break;
            }
            let row0 = base + team * R;
            var acc: array<f32, 32>;
            for (var k = 0u; k < 32u; k++) {
                acc[k] = 0.0;
            }
            if (QUAD == 1u) {
                // Q6_K, R = 1, ungated: step pu is half super-block pu % 2 of super-block pu / 2;
                // its unit (h, k, i) multiplies x unit 8 (pu / 2) + 4 h + k + 2 i.
                let blk0 = min(row0, rows - 1u) * (p.cols / 256u) * 210u;
                for (var pu = tl; pu < uc / 4u; pu += LPR) {
                    cur = part;
                    let un = q6k_quad(blk0 + (pu / 2u) * 210u, pu % 2u);
                    for (var t = 0u; t < NC; t++) {
                        for (var hq = 0u; hq < 4u; hq++) {
                            let xu = (pu / 2u) * 8u + (pu % 2u) * 4u + hq / 2u + 2u * (hq % 2u);
                            let xw = x_words(t, xu, n_units);
                            let w = un[hq];
                            var lo = 0;
                            var hi = 0;
                            for (var j = 0u; j < 4u; j++) {
                                lo = lo + dot4I8Packed(w.q[j], xw[j]);
                                hi = hi + dot4I8Packed(w.q[j + 4u], xw[j + 4u]);
                            }
                            acc[t] += (w.sa * f32(lo) + w.sb * f32(hi)) * x_scale(t, xu);
                        }
                    }
                }
            } else {
                var pu0 = tl;
                if (PF > 0u && MOE == 0u) {
                    for (var st = 0u; st < PF; st++) {
                        let pu = tl + st * LPR;
                        if (pu < uc / upl()) {
                            var un: array<Unit, 8>;
                            for (var k = 0u; k < slots(); k++) {
                                let row = min(row0 + k % R, rows - 1u);
                                let pr = decode(pre[st * slots() + k], row, pu);
                                un[2u * k] = pr[0];
                                un[2u * k + 1u] = pr[1];
                            }
                            dot_step(pu, &un, &acc, n_units, 1.0);
                        }
                    }
                    pu0 = tl + PF * LPR;
                }
                for (var pu = pu0; pu < uc / upl(); pu += LPR) {
                    var un: array<Unit, 8>;
                    for (var k = 0u; k < slots(); k++) {
                        cur = part;
                        if (gated()) {
                            cur = k / R;
                        }
                        let pr = units_of(wrow(min(row0 + k % R, rows - 1u), pu), wpu(pu));
                        un[2u * k] = pr[0];
                        un[2u * k + 1u] = pr[1];
                    }
                    var rw = 1.0;
                    if (MOE == 2u) {
                        rw = moe_weight(pu / moe_spr());
                    }
                    dot_step(pu, &un, &acc, n_units, rw);
                }
                if (PF > 0u && MOE == 0u && it + 1u < NIT && base + group_rows < rows) {
                    prefetch(&pre, base + group_rows + team * R, part, rows, tl);
                }
            }

            // Team sums and the epilogue, as matvec_fused.
            let sn = slots() * NC;
            if (sg_size <= LPR) {
                for (var k = 0u; k < sn; k++) {
                    acc[k] = subgroupAdd(acc[k]);
                }
            } else if (XG == 1u) {
                // A team is LPR consecutive lanes of one subgroup: a butterfly within it.
                for (var k = 0u; k < sn; k++) {
                    for (var o = LPR / 2u; o > 0u; o >>= 1u) {
                        acc[k] += subgroupShuffleXor(acc[k], o);
                    }
                }
            } else {
                let cl = sg_lane / LPR;
                for (var k = 0u; k < sn; k++) {
                    acc[k] = cluster_sum(acc[k], cl, sg_size);
                }
            }
            if (sg_size < LPR && sg_lane == 0u) {
                for (var k = 0u; k < sn; k++) {
                    red[sg_id * sn + k] = acc[k];
                }
            }
            workgroupBarrier();
            if (sg_size < LPR) {
                for (var k = 0u; k < sn; k++) {
                    acc[k] = red_team_sum(team, k, sn, sg_size);
                }
            }

            for (var r = 0u; r < R; r++) {
                let row = row0 + r;
                for (var t = 0u; t < NC; t++) {
                    if (row >= rows || (r * NC + t) % LPR != tl) {
                        continue;
                    }
                    var scale = 1.0;
                    if (NORM != 0u) {
                        scale = inv[t];
                    }
                    var up = 0.0;
                    if (EPI == 2u || EPI == 3u) {
                        up = acc[(R + r) * NC + t] * scale;
                    }
                    var o = (p.col0 + tok + t) * p.y_stride + yoff + row;
                    if (MOE >= 3u) {
                        if (!g_live(t)) {
                            continue;
                        }
                        o = g_slot(t) * p.y_stride + yoff + row;
                    }
                    epilogue_store(o, acc[r * NC + t] * scale, up);
                }
            }
            // `red` is written again by the next group (and xq by the next pass).
            workgroupBarrier();
        }
    }
}
