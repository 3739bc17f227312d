// Activations to int8 per 32 elements for the multi-column int8 matvec (matvec_q8a.wgsl with
// XG = 1): the quantization matvec_q8a.wgsl does in shared memory per workgroup, done once per
// product into a buffer that every workgroup of the product reads. Oracle: vkllm-cpu's
// `quantize_act_q8` of v = x (NORM 0) or v = x * (offset + norm_w) (NORM 1).
//
// Per unit (32 elements of a column): amax = max |v_i|, d = amax * (1 / 127),
// q_i = round_half_even(v_i * (127 / amax)) clamped to [-127, 127] (0 when amax = 0), s = sum q_i.
// Output layout (u32 words; uc = cols / 32 units per column, nch = ceil(uc / 32) chunks):
//   q:    column t, unit u: words 8 (t uc + u) .. + 8, four codes per word (element 4j + b in
//         byte b of word j);
//   qm:   column t at word t * ms, ms = 2 uc + nch: (d as f32 bits, s as i32) per unit, then
//         (NORM 1) the sum of squares of x (not v) over each chunk's 1024 elements, so a reader
//         takes inv_rms = 1 / sqrt(sum / cols + eps) in a fixed order.
// Grid: (nch, n) workgroups of 128 invocations; invocation i of chunk c takes elements
// 8 (32 c * 4 + i) .. + 8 of its column: four lanes per unit combine amax and s with
// subgroupShuffleXor (subgroups of >= 4 lanes; act_q8.inc.wgsl). Shapes: cols a multiple of 32.
//
// #include act_q8.inc.wgsl

const WG: u32 = 128u;

override NORM: u32 = 0;

struct Params {
    cols: u32,
    norm_offset: f32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> nw4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;
@group(0) @binding(3) var<storage, read_write> qm: array<u32>;

var<workgroup> red: array<f32, 32>;


@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
        @builtin(num_subgroups) n_sg: u32) {
    let uc = p.cols / 32u;
    let nch = (uc + 31u) / 32u;
    let t = wid.y;
    let ch = wid.x * WG + li;
    let u = ch / 4u;
    let live = u < uc;
    // Lanes past the column's end load its last chunk (uniform shuffles) and store nothing.
    let chl = min(ch, 4u * uc - 1u);
    let e4 = t * (p.cols / 4u) + 2u * chl;
    var a = x4[e4];
    var b = x4[e4 + 1u];
    var sq = 0.0;
    if (NORM != 0u) {
        sq = select(0.0, dot(a, a) + dot(b, b), live);
        let c = 2u * chl;
        a *= p.norm_offset + nw4[c];
        b *= p.norm_offset + nw4[c + 1u];
    }
    let c8 = act_q8_chunk(a, b);
    let ms = 2u * uc + nch;
    if (live) {
        let wq = 8u * (t * uc + u) + 2u * (ch % 4u);
        q[wq] = c8.qa;
        q[wq + 1u] = c8.qb;
        if (ch % 4u == 0u) {
            qm[t * ms + 2u * u] = bitcast<u32>(c8.d);
            qm[t * ms + 2u * u + 1u] = bitcast<u32>(c8.s);
        }
    }
    if (NORM != 0u) {
        let total = subgroupAdd(sq);
        if (sg_lane == 0u) {
            red[sg_id] = total;
        }
        workgroupBarrier();
        if (li == 0u) {
            var acc = 0.0;
            for (var i = 0u; i < n_sg; i++) {
                acc += red[i];
            }
            qm[t * ms + 2u * uc + wid.x] = bitcast<u32>(acc);
        }
    }
}
