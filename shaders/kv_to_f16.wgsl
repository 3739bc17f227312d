// Quantized KV rows -> f16 pairs: the copy the cooperative-matrix prefill attention reads (its
// tiles are f16), made once per layer and chunk from the blocks kv_append.wgsl wrote.
//
// Shapes: k, v: n values of a q8_0 (KV_DTYPE 2) or q4_0 (3) cache as kv_quant.inc.wgsl lays them
// out (n a multiple of 64); k_out, v_out [n / 2] u32, value 2i in the low half of word i.
// Arithmetic: scale * code in f32 (exact: an f16 scale times an integer of at most 8 bits), then
// rounded to f16 by pack2x16float (nearest even; the reference is vkllm_cpu::kv_quant + f16).
// Workgroup: WG invocations, one output word of K and of V each; 2-D grid (word = (wid.y *
// num_workgroups.x + wid.x) * WG + lid). Shared memory: none. Memory bound.
//
// #include kv_quant.inc.wgsl

override WG: u32 = 256;
override KV_DTYPE: u32 = 2;

struct Params {
    n: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> k: array<u32>;
@group(0) @binding(1) var<storage, read> v: array<u32>;
@group(0) @binding(2) var<storage, read_write> k_out: array<u32>;
@group(0) @binding(3) var<storage, read_write> v_out: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    let e = 2u * i;
    if (e >= p.n) {
        return;
    }
    // Values e and e + 1 share a code word and a block.
    let kc = k[kvq_code_word(e)];
    let ks = k[kvq_scale_word(e)];
    k_out[i] = pack2x16float(vec2<f32>(kvq_value(kc, ks, e), kvq_value(kc, ks, e + 1u)));
    let vc = v[kvq_code_word(e)];
    let vs = v[kvq_scale_word(e)];
    v_out[i] = pack2x16float(vec2<f32>(kvq_value(vc, vs, e), kvq_value(vc, vs, e + 1u)));
}
