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
// elementwise.wgsl (units (wid.y * num_workgroups.x + wid.x) * WG .. + WG). The weight is packed
// blocks, so a workgroup's units are one contiguous byte range of whole blocks: the workgroup
// first copies its words into `dq_in` (consecutive invocations, consecutive words), every
// invocation decodes its unit from there (`wd` reads the copy) into `dq_out`, and the
// workgroup writes its 8 x WG output words in order. Both global sides are whole coalesced
// words; decoding straight from global memory with each invocation storing its 8 words
// (a 32-byte stride between neighbours) was over twice as slow (docs/benchmarks-history.md).
// Shared memory: DQ_IN words (Rust checks WG / (BLOCK / 16) blocks of TS bytes fit, plus one
// word either side) + 9 x WG words (each unit's 8 words padded to 9: no bank conflicts when
// staged).

override WG: u32 = 256;

struct Params {
    rows: u32,
    cols: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

// (Fixed lengths: the largest case is WG = 256 units of Q8_0, 128 blocks of 34 bytes = 1088
// words, + 2.)
var<workgroup> dq_in: array<u32, 1096>;
var<workgroup> dq_out: array<u32, 2304>; // [WG][9]
// First weight word held in dq_in (uniform per workgroup).
var<private> dq_base: u32;

// Word i of the weight: the interface of quant_blocks.inc.wgsl, from this workgroup's copy.
fn wd(i: u32) -> u32 {
    return dq_in[i - dq_base];
}

@compute @workgroup_size(WG)
fn dequant_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i0 = (wid.y * nwg.x + wid.x) * WG;
    let units = p.rows * (p.cols / 16u);
    if (i0 >= units) {
        return; // the 2-D grid's spare workgroups (uniform)
    }
    let upb = BLOCK / 16u;
    // Bytes of whole blocks: this workgroup's [b0, b1) of the weight's [0, total).
    let total = units / upb * TS;
    let b0 = i0 / upb * TS;
    let b1 = min((i0 + WG) / upb * TS, total);
    dq_base = b0 / 4u;
    let words = (b1 + 3u) / 4u - dq_base;
    for (var k = lid; k < words; k += WG) {
        dq_in[k] = w[dq_base + k];
    }
    workgroupBarrier();
    let i = i0 + lid;
    if (i < units) {
        let upr = p.cols / 16u;
        let r = i / upr;
        let u = i % upr;
        let v = dequant16(unit_block(r * (p.cols / BLOCK) * TS, u), u % upb);
        for (var j = 0u; j < 8u; j++) {
            dq_out[9u * lid + j] = pack2x16float(vec2<f32>(v[2u * j], v[2u * j + 1u]));
        }
    }
    workgroupBarrier();
    let n_out = 8u * (min(i0 + WG, units) - i0);
    for (var k = lid; k < n_out; k += WG) {
        out[8u * i0 + k] = dq_out[9u * (k / 8u) + k % 8u];
    }
}
