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
// #include matvec_q8a_units.inc.wgsl
// #include f16_bits.inc.wgsl
// #include matvec_q8a_qout.inc.wgsl

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

fn gated() -> bool {
    return EPI >= 2u;
}

fn slots() -> u32 {
    return select(R, 2u * R, gated());
}

// The product of weight unit w with the x unit of words xw, code sum `sum`, before x's scale.
fn unit_dot(w: Unit, xw: array<u32, 8>, sum: i32) -> f32 {
    var lo = 0;
    var hi = 0;
    for (var j = 0u; j < 4u; j++) {
        lo = lo + dot4I8Packed(w.q[j], xw[j]);
        hi = hi + dot4I8Packed(w.q[j + 4u], xw[j + 4u]);
    }
    if (qt() == 14u) {
        return w.sa * f32(lo) + w.sb * f32(hi);
    }
    return w.sa * f32(lo + hi + w.zb * sum) - w.sm * f32(sum);
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
                (*acc)[k * NC + t] += unit_dot((*un)[2u * k + h], xw, sum) * dx * rw;
            }
        }
    }
}

// The part slot k's weights come from: gate or up (slots 0..R, R..2R) when gated, else the
// workgroup's part.
fn slot_part(part: u32, k: u32) -> u32 {
    return select(part, k / R, gated());
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
        @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    product(wid, nwg, sg_id, sg_lane, sg_size, n_sg);
}

// The product, then (matvec_q8a_qout.inc.wgsl) the quantization of y for the next product.
@compute @workgroup_size(WG)
fn main_qout(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
             @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.wg_end) {
        return;
    }
    let rows = product(wid, nwg, sg_id, sg_lane, sg_size, n_sg);
    qout_tail(rows.x, rows.y, sg_id * sg_size + sg_lane);
}

// The workgroup's share of the launch; returns the rows [x, y) of the (first) part it wrote
// (empty past the grid's end).
fn product(wid: vec3<u32>, nwg: vec3<u32>, sg_id: u32, sg_lane: u32, sg_size: u32,
           n_sg: u32) -> vec2<u32> {
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.wg_end) {
        return vec2<u32>(0u);
    }
    var written = vec2<u32>(0u);
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
        let base0 = (g - first_wg) * NIT * group_rows;
        written = vec2<u32>(min(base0, rows), min(base0 + NIT * group_rows, rows));

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
                for (var pu = tl; pu < uc / upl(); pu += LPR) {
                    var rw = 1.0;
                    if (MOE == 2u) {
                        rw = moe_weight(pu / moe_spr());
                    }
                    var un: array<Unit, 8>;
                    for (var k = 0u; k < slots(); k++) {
                        cur = slot_part(part, k);
                        let pr = units_of(wrow(min(row0 + k % R, rows - 1u), pu), wpu(pu));
                        un[2u * k] = pr[0];
                        un[2u * k + 1u] = pr[1];
                    }
                    dot_step(pu, &un, &acc, n_units, rw);
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
    return written;
}
