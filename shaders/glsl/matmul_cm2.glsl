// Prefill matrix-matrix product on workgroup-scope cooperative matrices
// (VK_NV_cooperative_matrix2): Y[n, y_stride] columns [row_offset, row_offset + rows) (+)=
// X[n, cols] W^T for f16 W [rows, cols] and f16 X [n, cols] (f32 sums), the contract of
// matmul.wgsl (push constants n, rows, cols, row_offset, y_stride, accumulate).
//
// - One workgroup per (BM weight rows, BN tokens) tile (TOKENS_FIRST: the grid's order): the
//   accumulator is BM x BN (weights as the A operand, rows K-contiguous as stored; X read
//   through a transposed view as B), stored through a transposed view into Y's [token, row]
//   layout. Tensor-addressed loads and stores take the bounds: edge tiles and a K tail use
//   clamped layouts (zeros past the edges; stores past n or the rows dropped), interior tiles
//   over whole K steps the unclamped ones.
// - GLU 1 / 2: W is gate, W1 up (the same shape); one accumulator each, and Y[t, r] =
//   act(gate) * up with act silu (1) or gelu_tanh (2); no accumulate.
// - accumulate != 0: the accumulator starts from the Y tile.
// - SEGMENTS (matmul_cm2_group.comp): up to three products of one X in one launch, q/k/v of a
//   prefill layer (alone, k and v leave most of a large GPU idle): weight s (W, W1, W2) of
//   rows_s rows (push constants rows, rows1, rows2; 0 for an absent one) into its own
//   Y_s[n, rows_s] (Y, Y1, Y2); the grid's row tiles are segment 0's, then 1's, then 2's. No
//   accumulate, no GLU.
// - Weight types: this body is included by matmul_cm2.comp (f16 W) and matmul_cm2_q4_k.comp
//   (W_Q4_K: W's GGUF blocks decoded as the tensor loads read them, one element at a time from
//   its block, as vkllm-cpu's dequantization computes it, rounded to f16 as the f16 copy holds
//   it).
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_cooperative_matrix : enable
#extension GL_NV_cooperative_matrix2 : enable

// 256 invocations (a literal: a specialised LocalSizeId would need maintenance4).
layout(local_size_x = 256) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint GLU = 0;
// 1: workgroup x walks the token tiles and y the weight-row tiles (the workgroups sharing a
// weight tile run together); 0: x the weight-row tiles.
layout(constant_id = 5) const uint TOKENS_FIRST = 0;

#if defined(SEGMENTS)
layout(push_constant) uniform Params {
    uint n;
    uint rows;
    uint cols;
    uint rows1;
    uint rows2;
    uint unused;
} p;
#else
layout(push_constant) uniform Params {
    uint n;
    uint rows;
    uint cols;
    uint row_offset;
    uint y_stride;
    uint accumulate;
} p;
#endif

#if defined(W_Q4_K)
#extension GL_EXT_buffer_reference : require
// 144 bytes: d and dmin (f16 pair), 12 bytes of packed 6-bit scales and mins, 128 of codes.
struct Block { uint dm; uint scales[3]; uint qs[32]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BlockRef { Block b; };
const uint QK = 256;

uint scale_byte(const in BlockRef r, const uint i) {
    return (r.b.scales[i >> 2] >> (8 * (i & 3))) & 255;
}

float16_t decode_w(const in BlockRef r, const in uint blk[2], const in uint at[2]) {
    const uint c = at[1];
    const uint sb = c >> 5;
    const uint qi = ((c >> 6) << 5) | (c & 31);
    const uint q = (r.b.qs[qi >> 2] >> (8 * (qi & 3) + 4 * (sb & 1))) & 15;
    uint sc;
    uint m;
    if (sb < 4) {
        sc = scale_byte(r, sb) & 63;
        m = scale_byte(r, sb + 4) & 63;
    } else {
        sc = (scale_byte(r, sb + 4) & 15) | ((scale_byte(r, sb - 4) >> 6) << 4);
        m = (scale_byte(r, sb + 4) >> 4) | ((scale_byte(r, sb) >> 6) << 4);
    }
    const vec2 dm = unpackHalf2x16(r.b.dm);
    return float16_t(dm.x * float(sc) * float(q) - dm.y * float(m));
}
#endif

#if defined(W_Q4_K)
#define QUANT_W 1
#define DECODE , decode_w
layout(set = 0, binding = 0) readonly buffer W { Block w[]; };
layout(set = 0, binding = 3) readonly buffer W1 { Block w1[]; };
#else
#define DECODE
const uint QK = 1;
layout(set = 0, binding = 0) readonly buffer W { float16_t w[]; };
layout(set = 0, binding = 3) readonly buffer W1 { float16_t w1[]; };
#endif
layout(set = 0, binding = 1) readonly buffer X { float16_t x[]; };
layout(set = 0, binding = 2) buffer Y { float y[]; };
#if defined(SEGMENTS)
layout(set = 0, binding = 4) readonly buffer W2 { float16_t w2[]; };
layout(set = 0, binding = 5) buffer Y1 { float y1[]; };
layout(set = 0, binding = 6) buffer Y2 { float y2[]; };
#endif

// K steps per unrolled group on the unclamped path.
const uint UNROLL = 4;

float silu(const float g) { return g / (1.0 + exp(-g)); }

float gelu_tanh(const float g) {
    const float c = 0.7978845608028654;
    return 0.5 * g * (1.0 + tanh(c * (g + 0.044715 * g * g * g)));
}

float glu_op(const in uint r, const in uint c, const in float g, const in float u) {
    return (GLU == 2 ? gelu_tanh(g) : silu(g)) * u;
}

// One K step of the product of weight buffer `wb` (and the up product with GLU) at k over
// `lw` / `lx`.
#define STEP(wb, lw, lx, k)                                                                    \
    {                                                                                          \
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;                        \
        coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;                        \
        coopMatLoadTensorNV(a, wb, 0, sliceTensorLayoutNV(lw, r0, BM, k, BK) DECODE);          \
        coopMatLoadTensorNV(b, x, 0, sliceTensorLayoutNV(lx, t0, BN, k, BK), tr);              \
        acc = coopMatMulAdd(a, b, acc);                                                        \
        if (GLU != 0) {                                                                        \
            coopMatLoadTensorNV(a, w1, 0, sliceTensorLayoutNV(lw, r0, BM, k, BK) DECODE);             \
            acc1 = coopMatMulAdd(a, b, acc1);                                                  \
        }                                                                                      \
    }

// The whole K walk of weight buffer `wb` into acc (acc1): interior tiles whole K steps
// unrolled, then the rest; edge tiles and the K tail on the clamped layouts.
#define PRODUCT(wb)                                                                            \
    {                                                                                          \
        uint k = 0;                                                                            \
        [[dont_unroll]]                                                                        \
        for (; k + UNROLL * BK <= k_whole; k += UNROLL * BK) {                                 \
            [[unroll]] for (uint u = 0; u < UNROLL; u++) {                                     \
                STEP(wb, lw, lx, k + u * BK)                                                   \
            }                                                                                  \
        }                                                                                      \
        [[dont_unroll]]                                                                        \
        for (; k < k_whole; k += BK) {                                                         \
            STEP(wb, lw, lx, k)                                                                \
        }                                                                                      \
        [[dont_unroll]]                                                                        \
        for (; k < p.cols; k += BK) {                                                          \
            STEP(wb, cw, cx, k)                                                                \
        }                                                                                      \
    }

void main() {
    const uint rt = TOKENS_FIRST != 0 ? gl_WorkGroupID.y : gl_WorkGroupID.x;
    const uint t0 = (TOKENS_FIRST != 0 ? gl_WorkGroupID.x : gl_WorkGroupID.y) * BN;
#if defined(SEGMENTS)
    // Row tile rt: segment 0's tiles first, then 1's, then 2's.
    const uint tiles0 = (p.rows + BM - 1) / BM;
    const uint tiles1 = (p.rows1 + BM - 1) / BM;
    const uint seg = rt < tiles0 ? 0 : (rt < tiles0 + tiles1 ? 1 : 2);
    const uint rows = seg == 0 ? p.rows : (seg == 1 ? p.rows1 : p.rows2);
    const uint r0 = (rt - (seg == 0 ? 0 : (seg == 1 ? tiles0 : tiles0 + tiles1))) * BM;
    const uint row_offset = 0;
    const uint y_stride = rows;
    const uint accumulate = 0;
#else
    const uint rows = p.rows;
    const uint r0 = rt * BM;
    const uint row_offset = p.row_offset;
    const uint y_stride = p.y_stride;
    const uint accumulate = p.accumulate;
#endif

    tensorLayoutNV<2> lw = createTensorLayoutNV(2);
    tensorLayoutNV<2> lx = createTensorLayoutNV(2);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> cw =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> cx =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    // Rows of W and X start on 16-byte boundaries (cols % 8 == 0, checked by the caller): the
    // mask tells the compiler so, which lets the loads be wide.
    const uint ld = p.cols & ~7u;
    lw = setTensorLayoutDimensionNV(lw, rows, p.cols);
    cw = setTensorLayoutDimensionNV(cw, rows, p.cols);
#if defined(QUANT_W)
    // Whole blocks of QK along a row; strides count blocks.
    lw = setTensorLayoutBlockSizeNV(lw, 1, QK);
    cw = setTensorLayoutBlockSizeNV(cw, 1, QK);
    lw = setTensorLayoutStrideNV(lw, p.cols / QK, 1);
    cw = setTensorLayoutStrideNV(cw, p.cols / QK, 1);
#else
    lw = setTensorLayoutStrideNV(lw, ld, 1);
    cw = setTensorLayoutStrideNV(cw, ld, 1);
#endif
    lx = setTensorLayoutDimensionNV(lx, p.n, p.cols);
    lx = setTensorLayoutStrideNV(lx, ld, 1);
    cx = setTensorLayoutDimensionNV(cx, p.n, p.cols);
    cx = setTensorLayoutStrideNV(cx, p.cols, 1);
    ly = setTensorLayoutDimensionNV(ly, p.n, row_offset + rows);
    ly = setTensorLayoutStrideNV(ly, y_stride, 1);
    tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);

    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc1 =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    if (GLU == 0 && accumulate != 0) {
        coopMatLoadTensorNV(acc, y, 0, sliceTensorLayoutNV(ly, t0, BN, row_offset + r0, BM), tr);
    }

    const bool interior = r0 + BM <= rows && t0 + BN <= p.n;
    const uint k_whole = interior ? ld / BK * BK : 0;
#if defined(SEGMENTS)
    if (seg == 0) {
        PRODUCT(w)
    } else if (seg == 1) {
        PRODUCT(w1)
    } else {
        PRODUCT(w2)
    }
    if (seg == 0) {
        coopMatStoreTensorNV(acc, y, 0, sliceTensorLayoutNV(ly, t0, BN, r0, BM), tr);
    } else if (seg == 1) {
        coopMatStoreTensorNV(acc, y1, 0, sliceTensorLayoutNV(ly, t0, BN, r0, BM), tr);
    } else {
        coopMatStoreTensorNV(acc, y2, 0, sliceTensorLayoutNV(ly, t0, BN, r0, BM), tr);
    }
#else
    PRODUCT(w)
    if (GLU != 0) {
        coopMatPerElementNV(acc, acc, glu_op, acc1);
    }
    coopMatStoreTensorNV(acc, y, 0, sliceTensorLayoutNV(ly, t0, BN, row_offset + r0, BM), tr);
#endif
}
