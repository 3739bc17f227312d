#version 450
// Attention for prefill on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2):
// the contract of attention_prefill_coop2.wgsl (causal, GQA, optional window and softcap,
// queries at positions pos0 + i, the same push constants, bindings and key split) for f16 K/V
// without a ring (every key at row j). Where coop2 moves scores and probabilities through shared
// memory, here they stay in registers: row max and sum by coopMatReduceNV, exp and masks by
// coopMatPerElementNV, the output rescaled element-wise each step.
//
// - One workgroup per (query tile, kv head): its BR rows are (query, head) pairs of one GQA group,
//   query-major (row r: query q0 + r / g, head kvh g + r % g), so a K/V tile serves the group's
//   heads; BQ = floor(BR / g) queries per tile, rows past BQ g are padding (zero queries).
// - Per step of BC keys: S = Q K^T (f16 products, f32 sums), times the scale; softcap and the
//   mask (causal, window, the range's end) only on steps that need them; M = max(M, rowmax S),
//   P = exp(S - M), L = L e^(Mold - M) + rowsum P, O = O e^(Mold - M) + f16(P) V.
// - QSCALE: the staged queries carry the scale (and log2 e without a softcap), so scores come
//   out in log2 units and P = exp2(S - M): no per-element scaling on unmasked steps; the
//   running max is then in log2 units, in kv_part too. Probes take the reference form.
// - UNCLAMPED: steps whose keys all lie in the cache read K and V through an unclamped layout
//   (the last partial step stays clamped).
// - STATS16: the running max and sum and the per-row factor e^(Mold - M) kept as BR x 16
//   matrices (a row reduction may fill a result of any width), broadcast to BR x BC or BR x HD
//   by a row reduction where needed: fewer registers and exps than BR x BC ones.
// - OHALF (head dims a multiple of 32, no prefetch, no probe): the output as two BR x HD/2
//   matrices, each rescaled by one BR x HD/2 factor matrix and multiplied by its half of V: the
//   broadcast factor and V tile take half the registers of whole ones.
// - Split (SPLIT_ON, push constant split > 1): as in coop2 (part s of a tile of at least
//   split_min steps walks steps [s per, (s + 1) per)); each part writes its unnormalised rows and
//   their M and L to kv_part ([tile][s][row][HD + 2]), counts itself in on kv_ctr[kvh tiles +
//   tile], and the last one resets the counter and writes the merged rows (parts in order).
// Shapes: q [n_q, n_heads, HD] f32; k, v [n_kv, n_kv_heads, HD] f16; out [n_q, n_heads, HD] f32;
// HALF 1 also writes out16 (the same elements as f16).
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_cooperative_matrix : enable
#extension GL_NV_cooperative_matrix2 : enable

layout(local_size_x = 128) in;
layout(constant_id = 1) const uint HD = 128;
layout(constant_id = 2) const uint BR = 64;
layout(constant_id = 3) const uint BC = 64;
layout(constant_id = 4) const uint SPLIT_ON = 0;
layout(constant_id = 5) const uint HALF = 0;
// 1: each row's sum of probabilities as f16(P) times a ones matrix on the tensor cores;
// 0: coopMatReduceNV over the f32 probabilities.
layout(constant_id = 6) const uint SUM_MMA = 0;
// Diagnostics (0 computes attention): after the first key step the output rows hold 1 the
// scores (scaled and masked), 2 the probabilities, 3 P V with P = 1, 4 the unnormalised output;
// 5 the finished output's inverse row sums.
layout(constant_id = 7) const uint PROBE = 0;
// 1: the next step's K and V tiles are loaded while this step computes (registers for a
// second pair); 0: each step loads its own.
layout(constant_id = 8) const uint PREFETCH = 0;
// 1: the scale folded into the staged queries (above); 0: scores scaled each step (reference).
layout(constant_id = 9) const uint QSCALE = 0;
// 1: steps whose keys all lie in the cache load K and V through an unclamped layout (no
// per-element bounds; the row stride masked to whole 16-byte words); 0: every load clamped.
layout(constant_id = 10) const uint UNCLAMPED = 0;
// 1: row statistics as BR x 16 matrices (above); 0: as BR x BC ones (reference).
layout(constant_id = 11) const uint STATS16 = 0;
const bool QS = QSCALE == 1 && PROBE == 0;
const bool NS = STATS16 == 1;
// 1: the output in two column halves (above); 0: one BR x HD matrix (reference).
layout(constant_id = 12) const uint OHALF = 0;
// The caller sets it only for head dims a multiple of 32.
const bool OH = OHALF == 1 && PREFETCH == 0 && PROBE == 0;
// Columns of an output half (a multiple of 16 at every head dim: a valid type where unused).
const uint HD2 = (HD + 16) / 32 * 16;
const float LOG2E = 1.4426950408889634;

layout(push_constant) uniform Params {
    uint n_q;
    uint n_heads;
    uint n_kv_heads;
    uint n_kv;
    float scale;
    float softcap;
    uint window;
    uint ring;
    uint pos0;
    uint split_min;
    uint split;
} p;

layout(set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) readonly buffer K { float16_t k[]; };
layout(set = 0, binding = 2) readonly buffer V { float16_t v[]; };
layout(set = 0, binding = 3) readonly buffer QPos { uint q_pos[]; };
layout(set = 0, binding = 4) writeonly buffer Out { float o_f32[]; };
layout(set = 0, binding = 5) writeonly buffer Out16 { float16_t o_f16[]; };
layout(set = 0, binding = 6) coherent buffer Part { float kv_part[]; };
layout(set = 0, binding = 7) coherent buffer Ctr { uint kv_ctr[]; };

const float FLOOR = -1e30;
const float MASKED = -3e38;
// Staged query rows: HD + 8 halves (consecutive rows in different banks).
const uint QLD = HD + 8;

// Every shared variable is a whole number of 16-byte units: the cooperative load of `qs` needs
// a 16-byte aligned start and the driver orders the variables as it likes (coop2 met a 4-byte
// flag placed first, which broke every load on the H200).
shared float16_t qs[BR * QLD];
shared uvec4 last_flag;

// The workgroup's tile, read by the per-element functions.
uint g_q0;
uint g_kvh;
uint g_g;
uint g_bq;
uint g_kb;
uint g_hi;
// Base row of this part in kv_part.
uint g_pb;
// Column of the output half that store_op and part_op write (0 without OHALF).
uint g_c0 = 0;

uint first_key(uint qp) {
    return (p.window > 0 && qp + 1 > p.window) ? qp + 1 - p.window : 0;
}

float max_op(const in float a, const in float b) { return max(a, b); }
float add_op(const in float a, const in float b) { return a + b; }
float smear_op(const in float a, const in float b) { return a; }

float exp_op(const in uint r, const in uint c, const in float x) { return QS ? exp2(x) : exp(x); }

float max2_op(const in uint r, const in uint c, const in float a, const in float b) {
    return max(a, b);
}

// Scale, softcap and the mask of score (r, c): key g_kb + c for row r's query.
float score_op(const in uint r, const in uint c, const in float x) {
    float s = QS ? x : x * p.scale;
    if (p.softcap > 0.0) {
        s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0)) * (QS ? LOG2E : 1.0);
    }
    uint qp = p.pos0 + g_q0 + r / g_g;
    uint j = g_kb + c;
    if (j > qp || j < first_key(qp) || j > g_hi) {
        s = MASKED;
    }
    return s;
}

// Scale and softcap only (a step every row sees whole).
float soft_op(const in uint r, const in uint c, const in float x) {
    float s = QS ? x : x * p.scale;
    return p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0)) * (QS ? LOG2E : 1.0);
}

// Writes the finished element (r, c) (already divided by the row sum) to out (and out16).
float store_op(const in uint r, const in uint c, const in float x) {
    uint qi = g_q0 + r / g_g;
    if (r < g_bq * g_g && qi < p.n_q && g_c0 + c < HD) {
        uint o = (qi * p.n_heads + g_kvh * g_g + r % g_g) * HD + g_c0 + c;
        o_f32[o] = x;
        if (HALF == 1) {
            o_f16[o] = float16_t(x);
        }
    }
    return x;
}

// PROBE: element (r, c) of a diagnostic matrix to out row r (as the output), columns < HD.
float probe_op(const in uint r, const in uint c, const in float x) {
    uint qi = g_q0 + r / g_g;
    if (r < g_bq * g_g && qi < p.n_q && c < HD) {
        o_f32[(qi * p.n_heads + g_kvh * g_g + r % g_g) * HD + c] = x;
    }
    return x;
}

// Writes this part's unnormalised element (r, c) to kv_part.
float part_op(const in uint r, const in uint c, const in float x) {
    if (g_c0 + c < HD) {
        kv_part[(g_pb + r) * (HD + 2) + g_c0 + c] = x;
    }
    return x;
}

// Writes row r's running max (column 0 of the smeared matrix) to kv_part.
float part_m_op(const in uint r, const in uint c, const in float x) {
    if (c == 0) {
        kv_part[(g_pb + r) * (HD + 2) + HD] = x;
    }
    return x;
}

float part_l_op(const in uint r, const in uint c, const in float x) {
    if (c == 0) {
        kv_part[(g_pb + r) * (HD + 2) + HD + 1] = x;
    }
    return x;
}

void main() {
    const uint lid = gl_LocalInvocationIndex;
    const uint wg = gl_WorkGroupSize.x;
    const uint g = p.n_heads / p.n_kv_heads;
    const uint bq = BR / g;
    const uint tiles = gl_NumWorkGroups.x / p.split;
    const uint tile = tiles - 1 - gl_WorkGroupID.x / p.split;
    const uint sp = gl_WorkGroupID.x % p.split;
    const uint q0 = tile * bq;
    const uint kvh = gl_WorkGroupID.y;
    const uint q_last = min(q0 + bq, p.n_q) - 1;
    const uint t_lo = first_key(p.pos0 + q0);
    const uint t_hi = min(p.pos0 + q_last, p.n_kv - 1);
    const uint steps = (t_hi - t_lo) / BC + 1;
    const bool split = SPLIT_ON == 1 && p.split > 1 && steps >= p.split_min;
    const bool idle = !split && sp > 0;
    uint lo = t_lo;
    uint hi = t_hi;
    if (split) {
        const uint per = (steps + p.split - 1) / p.split;
        lo = t_lo + sp * per * BC;
        hi = min(lo + per * BC - 1, t_hi);
    }
    if (idle) {
        return;
    }
    g_q0 = q0;
    g_kvh = kvh;
    g_g = g;
    g_bq = bq;
    g_hi = hi;
    // Keys every row sees without a mask: [first_key(last query), first query].
    const uint full_lo = first_key(p.pos0 + q_last);
    const uint full_hi = p.pos0 + q0;

    // QSCALE: log2 units unless a softcap (applied to the scaled score) comes first.
    const float q_mul = QS ? (p.softcap > 0.0 ? p.scale : p.scale * LOG2E) : 1.0;
    for (uint i = lid; i < BR * HD; i += wg) {
        const uint t = i / HD;
        const uint c = i % HD;
        const uint qi = q0 + t / g;
        float x = 0.0;
        if (t < bq * g && qi < p.n_q) {
            x = q[(qi * p.n_heads + kvh * g + t % g) * HD + c];
        }
        qs[t * QLD + c] = float16_t(x * q_mul);
    }
    barrier();
    coopmat<float16_t, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseA> qa;
    coopMatLoad(qa, qs, 0, QLD, gl_CooperativeMatrixLayoutRowMajor);

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tk =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tk = setTensorLayoutDimensionNV(tk, p.n_kv, HD);
    tk = setTensorLayoutStrideNV(tk, p.n_kv_heads * HD, 1);
    tensorLayoutNV<2> tu = createTensorLayoutNV(2);
    tu = setTensorLayoutDimensionNV(tu, p.n_kv, HD);
    tu = setTensorLayoutStrideNV(tu, (p.n_kv_heads * HD) & ~7u, 1);
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);
    const uint kv_off = kvh * HD;

    coopmat<float, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseAccumulator> o =
        coopmat<float, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseAccumulator>(0.0);
    // OHALF's output halves (o above is then unused).
    coopmat<float, gl_ScopeWorkgroup, BR, HD2, gl_MatrixUseAccumulator> o0 =
        coopmat<float, gl_ScopeWorkgroup, BR, HD2, gl_MatrixUseAccumulator>(0.0);
    coopmat<float, gl_ScopeWorkgroup, BR, HD2, gl_MatrixUseAccumulator> o1 =
        coopmat<float, gl_ScopeWorkgroup, BR, HD2, gl_MatrixUseAccumulator>(0.0);
    coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> m =
        coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(FLOOR);
    coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> l =
        coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(0.0);
    // STATS16's running max and sum (m and l above are then unused).
    coopmat<float, gl_ScopeWorkgroup, BR, 16, gl_MatrixUseAccumulator> m16 =
        coopmat<float, gl_ScopeWorkgroup, BR, 16, gl_MatrixUseAccumulator>(FLOOR);
    coopmat<float, gl_ScopeWorkgroup, BR, 16, gl_MatrixUseAccumulator> l16 =
        coopmat<float, gl_ScopeWorkgroup, BR, 16, gl_MatrixUseAccumulator>(0.0);

    // PREFETCH: the tiles of the step after the current one (past the range: rows the next
    // step never reads, or zeros past the cache).
    coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB> kt_next;
    coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB> vt_next;
    if (PREFETCH == 1) {
        coopMatLoadTensorNV(kt_next, k, kv_off, sliceTensorLayoutNV(tk, lo, BC, 0, HD), transpose);
        coopMatLoadTensorNV(vt_next, v, kv_off, sliceTensorLayoutNV(tk, lo, BC, 0, HD));
    }

    [[dont_unroll]]
    for (uint kb = lo; kb <= hi; kb += BC) {
        g_kb = kb;
        const bool inside = UNCLAMPED == 1 && kb + BC <= p.n_kv;
        coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB> kt;
        coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB> vt;
        if (PREFETCH == 1) {
            kt = kt_next;
            vt = vt_next;
            coopMatLoadTensorNV(kt_next, k, kv_off, sliceTensorLayoutNV(tk, kb + BC, BC, 0, HD),
                                transpose);
            coopMatLoadTensorNV(vt_next, v, kv_off, sliceTensorLayoutNV(tk, kb + BC, BC, 0, HD));
        } else if (inside) {
            coopMatLoadTensorNV(kt, k, kv_off, sliceTensorLayoutNV(tu, kb, BC, 0, HD), transpose);
        } else {
            coopMatLoadTensorNV(kt, k, kv_off, sliceTensorLayoutNV(tk, kb, BC, 0, HD), transpose);
        }
        coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> s =
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(0.0);
        s = coopMatMulAdd(qa, kt, s);
        const bool full = kb >= full_lo && kb + BC - 1 <= full_hi && kb + BC - 1 <= hi;
        if (!full) {
            coopMatPerElementNV(s, s, score_op);
        } else if (p.softcap > 0.0) {
            coopMatPerElementNV(s, s, soft_op);
        } else if (!QS) {
            s = s * p.scale;
        }

        if (PROBE == 1) {
            coopMatPerElementNV(s, s, probe_op);
            return;
        }
        coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> pr;
        coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> pa;
        coopmat<float, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseAccumulator> em_d;
        coopmat<float, gl_ScopeWorkgroup, BR, HD2, gl_MatrixUseAccumulator> em_h;
        if (NS) {
            coopmat<float, gl_ScopeWorkgroup, BR, 16, gl_MatrixUseAccumulator> rmax, rsum, em;
            coopMatReduceNV(rmax, s, gl_CooperativeMatrixReduceRowNV, max_op);
            coopmat<float, gl_ScopeWorkgroup, BR, 16, gl_MatrixUseAccumulator> m_old = m16;
            coopMatPerElementNV(m16, rmax, max2_op, m_old);
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> mb;
            coopMatReduceNV(mb, m16, gl_CooperativeMatrixReduceRowNV, smear_op);
            coopMatPerElementNV(pr, s - mb, exp_op);
            coopMatPerElementNV(em, m_old - m16, exp_op);
            if (PROBE == 2) {
                coopMatPerElementNV(pr, pr, probe_op);
                return;
            }
            pa = coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(pr);
            if (PROBE == 3) {
                pa = coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(1.0);
            }
            if (SUM_MMA == 1) {
                coopmat<float16_t, gl_ScopeWorkgroup, BC, 16, gl_MatrixUseB> ones =
                    coopmat<float16_t, gl_ScopeWorkgroup, BC, 16, gl_MatrixUseB>(1.0);
                rsum = coopmat<float, gl_ScopeWorkgroup, BR, 16, gl_MatrixUseAccumulator>(0.0);
                rsum = coopMatMulAdd(pa, ones, rsum);
            } else {
                coopMatReduceNV(rsum, pr, gl_CooperativeMatrixReduceRowNV, add_op);
            }
            l16 = em * l16 + rsum;
            if (OH) {
                coopMatReduceNV(em_h, em, gl_CooperativeMatrixReduceRowNV, smear_op);
            } else {
                if (PREFETCH == 0 && inside) {
                    coopMatLoadTensorNV(vt, v, kv_off, sliceTensorLayoutNV(tu, kb, BC, 0, HD));
                } else if (PREFETCH == 0) {
                    coopMatLoadTensorNV(vt, v, kv_off, sliceTensorLayoutNV(tk, kb, BC, 0, HD));
                }
                coopMatReduceNV(em_d, em, gl_CooperativeMatrixReduceRowNV, smear_op);
            }
        } else {
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> rmax, rsum, em;
            coopMatReduceNV(rmax, s, gl_CooperativeMatrixReduceRowNV, max_op);
            coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> m_old = m;
            coopMatPerElementNV(m, rmax, max2_op, m_old);
            coopMatPerElementNV(pr, s - m, exp_op);
            coopMatPerElementNV(em, m_old - m, exp_op);
            if (PROBE == 2) {
                coopMatPerElementNV(pr, pr, probe_op);
                return;
            }
            pa = coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(pr);
            if (PROBE == 3) {
                pa = coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(1.0);
            }
            if (SUM_MMA == 1) {
                coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB> ones =
                    coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB>(1.0);
                rsum = coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(0.0);
                rsum = coopMatMulAdd(pa, ones, rsum);
            } else {
                coopMatReduceNV(rsum, pr, gl_CooperativeMatrixReduceRowNV, add_op);
            }
            l = em * l + rsum;

            if (OH) {
                coopMatReduceNV(em_h, em, gl_CooperativeMatrixReduceRowNV, smear_op);
            } else {
                if (PREFETCH == 0 && inside) {
                    coopMatLoadTensorNV(vt, v, kv_off, sliceTensorLayoutNV(tu, kb, BC, 0, HD));
                } else if (PREFETCH == 0) {
                    coopMatLoadTensorNV(vt, v, kv_off, sliceTensorLayoutNV(tk, kb, BC, 0, HD));
                }
                coopMatReduceNV(em_d, em, gl_CooperativeMatrixReduceRowNV, smear_op);
            }
        }
        if (OH) {
            coopmat<float16_t, gl_ScopeWorkgroup, BC, HD2, gl_MatrixUseB> vh;
            if (inside) {
                coopMatLoadTensorNV(vh, v, kv_off, sliceTensorLayoutNV(tu, kb, BC, 0, HD2));
            } else {
                coopMatLoadTensorNV(vh, v, kv_off, sliceTensorLayoutNV(tk, kb, BC, 0, HD2));
            }
            o0 = o0 * em_h;
            o0 = coopMatMulAdd(pa, vh, o0);
            if (inside) {
                coopMatLoadTensorNV(vh, v, kv_off, sliceTensorLayoutNV(tu, kb, BC, HD2, HD2));
            } else {
                coopMatLoadTensorNV(vh, v, kv_off, sliceTensorLayoutNV(tk, kb, BC, HD2, HD2));
            }
            o1 = o1 * em_h;
            o1 = coopMatMulAdd(pa, vh, o1);
        } else {
            o = o * em_d;
            o = coopMatMulAdd(pa, vt, o);
        }
        if (PROBE == 3 || PROBE == 4) {
            coopMatPerElementNV(o, o, probe_op);
            return;
        }
    }

    if (!split && OH) {
        coopmat<float, gl_ScopeWorkgroup, BR, HD2, gl_MatrixUseAccumulator> l_h;
        if (NS) {
            coopMatReduceNV(l_h, l16, gl_CooperativeMatrixReduceRowNV, smear_op);
        } else {
            coopMatReduceNV(l_h, l, gl_CooperativeMatrixReduceRowNV, smear_op);
        }
        [[unroll]] for (int i = 0; i < l_h.length(); ++i) {
            l_h[i] = l_h[i] > 0.0 ? 1.0 / l_h[i] : 0.0;
        }
        o0 = o0 * l_h;
        coopMatPerElementNV(o0, o0, store_op);
        o1 = o1 * l_h;
        g_c0 = HD2;
        coopMatPerElementNV(o1, o1, store_op);
        return;
    }
    if (!split) {
        coopmat<float, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseAccumulator> l_d;
        if (NS) {
            coopMatReduceNV(l_d, l16, gl_CooperativeMatrixReduceRowNV, smear_op);
        } else {
            coopMatReduceNV(l_d, l, gl_CooperativeMatrixReduceRowNV, smear_op);
        }
        [[unroll]] for (int i = 0; i < l_d.length(); ++i) {
            l_d[i] = l_d[i] > 0.0 ? 1.0 / l_d[i] : 0.0;
        }
        if (PROBE == 5) {
            coopMatPerElementNV(l_d, l_d, probe_op);
            return;
        }
        o = o * l_d;
        coopMatPerElementNV(o, o, store_op);
        return;
    }

    // This part's rows: unnormalised output, running max and sum.
    g_pb = ((kvh * tiles + tile) * p.split + sp) * BR;
    if (OH) {
        coopMatPerElementNV(o0, o0, part_op);
        g_c0 = HD2;
        coopMatPerElementNV(o1, o1, part_op);
    } else {
        coopMatPerElementNV(o, o, part_op);
    }
    if (NS) {
        coopMatPerElementNV(m16, m16, part_m_op);
        coopMatPerElementNV(l16, l16, part_l_op);
    } else {
        coopMatPerElementNV(m, m, part_m_op);
        coopMatPerElementNV(l, l, part_l_op);
    }
    memoryBarrierBuffer();
    barrier();
    const uint ci = kvh * tiles + tile;
    if (lid == 0) {
        const uint before = atomicAdd(kv_ctr[ci], 1);
        last_flag = uvec4(before == p.split - 1 ? 1 : 0);
    }
    barrier();
    if (last_flag.x == 0) {
        return;
    }
    memoryBarrierBuffer();
    if (lid == 0) {
        kv_ctr[ci] = 0;
    }
    // Merge the parts in order: row r, column c = sum_s o_s e^(m_s - m*) / sum_s l_s e^(m_s - m*).
    const uint pb0 = (kvh * tiles + tile) * p.split * BR;
    for (uint e = lid; e < BR * HD; e += wg) {
        const uint r = e / HD;
        const uint c = e % HD;
        const uint qi = q0 + r / g;
        if (r >= bq * g || qi >= p.n_q) {
            continue;
        }
        float mx = FLOOR;
        for (uint s = 0; s < p.split; s++) {
            mx = max(mx, kv_part[(pb0 + s * BR + r) * (HD + 2) + HD]);
        }
        float lsum = 0.0;
        float acc = 0.0;
        for (uint s = 0; s < p.split; s++) {
            const uint b = (pb0 + s * BR + r) * (HD + 2);
            const float d = kv_part[b + HD] - mx;
            const float w = QS ? exp2(d) : exp(d);
            lsum += kv_part[b + HD + 1] * w;
            acc += kv_part[b + c] * w;
        }
        const float x = lsum > 0.0 ? acc / lsum : 0.0;
        const uint oi = (qi * p.n_heads + kvh * g + r % g) * HD + c;
        o_f32[oi] = x;
        if (HALF == 1) {
            o_f16[oi] = float16_t(x);
        }
    }
}
