// Quantized KV rows -> f16 pairs: the copy the cooperative-matrix prefill attention reads (its
// tiles are f16), made once per layer and chunk from the blocks kv_append.wgsl wrote.
//
// Shapes: k, v: n values of a q8_0 (KV_DTYPE 2), q4_0 (3) or tq4 (4) cache as kv_quant.inc.wgsl
// lays them out (n a multiple of 64); k_out, v_out [n / 2] u32, value 2i in the low half of word i.
// Arithmetic: scale * code in f32 (q8_0, q4_0: exact, an f16 scale times an integer of at most 8
// bits; tq4: scale * level rounded once), then rounded to f16 by pack2x16float (nearest even; the
// reference is vkllm_cpu::kv_quant + f16).
// Workgroup: 64 invocations per unit of 64 values (2-D grid: unit = wid.y * num_workgroups.x +
// wid.x), one value of K and of V each, through shared memory (2 x 64 f32); with KV_ROT_K = 1
// the K unit is rotated back, x_j = D_jj (1/8) sum_i H_ji y_i (kv_quant.inc.wgsl), and so is the
// V unit with KV_ROT_V = 1. Memory bound.
//
// #include kv_quant.inc.wgsl

override KV_DTYPE: u32 = 2;
override KV_DTYPE_V: u32 = 2;
override KV_ROT_K: u32 = 0;
override KV_ROT_V: u32 = 0;
// 1: the first `sink_n` K values (the row of position 0) take `sink` (plain, added after the
// rotation back): the attention sink's offset of centred keys (docs/quantization.md).
override KV_SINK: u32 = 0;

struct Params {
    n: u32,
    sink_n: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> k: array<u32>;
@group(0) @binding(1) var<storage, read> v: array<u32>;
@group(0) @binding(2) var<storage, read_write> k_out: array<u32>;
@group(0) @binding(3) var<storage, read_write> v_out: array<u32>;
// Read only with KV_SINK 1 (bound to any buffer otherwise).
@group(0) @binding(4) var<storage, read> sink: array<f32>;

var<workgroup> kx: array<f32, 64>;
var<workgroup> vx: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let u = wid.y * nwg.x + wid.x;
    // Workgroup-uniform: every invocation reaches the barriers or none does.
    if (64u * u >= p.n) {
        return;
    }
    let e = 64u * u + lid;
    let tk = KV_DTYPE;
    let tv = KV_DTYPE_V;
    kx[lid] = kvq_value(tk, k[kvq_code_word(tk, e)], k[kvq_scale_word(tk, e)], e);
    vx[lid] = kvq_value(tv, v[kvq_code_word(tv, e)], v[kvq_scale_word(tv, e)], e);
    // Rotated units back (K with KV_ROT_K, V with KV_ROT_V): x_j = D_jj (1/8) sum_i H_ji y_i,
    // both sums in one pass.
    let rot_v = KV_ROT_V == 1u;
    if (KV_ROT_K == 1u || rot_v) {
        workgroupBarrier();
        var rk = 0.0;
        var rv = 0.0;
        for (var i = 0u; i < 64u; i++) {
            let hi = kvq_hadamard(lid, i);
            rk += hi * kx[i];
            rv += hi * vx[i];
        }
        workgroupBarrier();
        if (KV_ROT_K == 1u) {
            kx[lid] = rk * 0.125 * kvq_sign(lid);
        }
        if (rot_v) {
            vx[lid] = rv * 0.125 * kvq_sign(lid);
        }
    }
    if (KV_SINK == 1u && e < p.sink_n) {
        kx[lid] += sink[e];
    }
    workgroupBarrier();
    if (lid < 32u) {
        k_out[32u * u + lid] = pack2x16float(vec2<f32>(kx[2u * lid], kx[2u * lid + 1u]));
        v_out[32u * u + lid] = pack2x16float(vec2<f32>(vx[2u * lid], vx[2u * lid + 1u]));
    }
}
