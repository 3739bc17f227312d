// Quantized weight rows -> f16: `out` holds rows x cols halves, two per little-endian u32 word,
// row-major (element 2i of the flattened rows in the low half of word i): the layout of an f16
// weight, which `matmul_coop.wgsl` (DTYPE 1) reads. Prefill can dequantize a weight once into a
// scratch and multiply it at f16 speed instead of decoding its blocks in every workgroup.
//
// #include quant_blocks.inc.wgsl
// #include quant_words.inc.wgsl
// Blocks are decoded by `dequant16` (vkllm-cpu's `dequantize_row`, operation for operation);
// each value is rounded with pack2x16float (to one of the two f16 values around it: the
// rounding direction is the implementation's). Rust requires cols % BLOCK == 0.
// Workgroup: WG invocations, one 16-element unit each (8 output words); 2-D grid as
// elementwise.wgsl (unit = (wid.y * num_workgroups.x + wid.x) * WG + lid). Shared memory: none.

override WG: u32 = 256;

struct Params {
    rows: u32,
    cols: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

// Word i of the weight: the interface of quant_blocks.inc.wgsl.
fn wd(i: u32) -> u32 {
    return w[i];
}

@compute @workgroup_size(WG)
fn dequant_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    let upr = p.cols / 16u;
    if (i >= p.rows * upr) {
        return;
    }
    let r = i / upr;
    let u = i % upr;
    let v = dequant16(unit_block(r * (p.cols / BLOCK) * TS, u), u % (BLOCK / 16u));
    let o = 8u * i;
    for (var j = 0u; j < 8u; j++) {
        out[o + j] = pack2x16float(vec2<f32>(v[2u * j], v[2u * j + 1u]));
    }
}
