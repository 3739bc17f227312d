// The f16 wide split (attention_wide.wgsl) whose last live workgroup per (query, kv head)
// merges the group's partials (attention_wide_merge.inc.wgsl): one dispatch instead of split +
// merge. Shapes as attention_wide.wgsl; its partials are decorated Coherent here only (the plain
// split's stores stay plain: measured faster on an H100).
//
// #include attention_wide.inc.wgsl
// #include attention_merge_weights.inc.wgsl
// #include attention_wide_merge.inc.wgsl
// #include attention_wide_split.inc.wgsl
// #include attention_keys.inc.wgsl

override WG: u32 = 128;
override CHUNK: u32 = 256;
override CHUNK_MIN: u32 = 0;
// Query heads per kv head and head_dim: constants so that the per-lane loops unroll and the
// queries and accumulators live in registers.
override GQ: u32 = 4;
override HD: u32 = 128;
// V: 8-value slots per row, one per invocation of a key group.
override NS: u32 = HD / 8u;
// Lanes per key while scoring.
const CL: u32 = 8u;
// 16-byte slots per lane of a K cluster.
override SPL: u32 = (NS + CL - 1u) / CL;

// Keys per lane in flight while scoring (KB), and per invocation while accumulating V (VB; the
// next batch's loads are issued before the current one is used).
override KB: u32 = 2;
override VB: u32 = 8;
// The chunk's scores, then their exponentials, per head.
var<workgroup> sc: array<f32, GQ * CHUNK>;

@group(0) @binding(1) var<storage, read> k: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<u32>>;

struct Params {
    n_q: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    n_kv: u32,
    n_chunks: u32,
    scale: f32,
    softcap: f32,
    window: u32,
    kv_stride: u32,
    ring: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
// Coherent: the last workgroup reads what the others wrote.
@coherent @group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@coherent @group(0) @binding(5) var<storage, read_write> part_o: array<f32>;

fn wide_query(i: u32, kvh: u32, e: u32) -> vec4<f32> {
    return q[(i * p.n_heads + kvh * GQ) * (HD / 4u) + e];
}

@compute @workgroup_size(WG)
fn split_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
               @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
               @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let b = wide_chunk(wid.z, wid.x, lid);
    if (workgroupUniformLoad(&wg_skip) == 0u) {
        wide_split(wid.z, wid.y, wid.x, b.x, b.y, b.z, lid, sg_id, sg_lane, sg_size, n_sg);
    }
    wide_merge_last(wid.z, wid.y, wid.x, lid, sg_id, sg_lane, sg_size, n_sg);
}
