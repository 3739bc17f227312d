// Decode attention's split pass over f16 caches with 16-byte loads ("wide"); attention.wgsl's
// split_gqa is its reference and `merge` there combines its partials (same layout).
//
// One workgroup per (key chunk c, kv head, query i) scores the chunk's keys for the GQ query
// heads sharing the kv head and writes each head's max m, sum l = sum exp(s - m) and unnormalised
// output o = sum exp(s - m) v (chunks as attention_keys.inc.wgsl cuts them).
//   K: clusters of CL = 8 lanes, one key each; a row of HD f16 values is HD / 8 16-byte slots,
//      lane l of the cluster takes slots l, l + 8, ... and holds the group's queries for those
//      slots in registers (loaded once); KB keys per lane are loaded before any is used; a
//      cluster's partial dots are summed with subgroupShuffleXor 4, 2, 1.
//   softmax: subgroups across heads, lanes across the chunk's keys.
//   V: HD / 8 invocations per key (one slot each, 8 dims x GQ heads of accumulators),
//      WG / (HD / 8) key groups, 2 VB keys per invocation in flight; the key groups' partials
//      meet in shared memory (pw; at most 4096 floats per pass over the heads).
// Shapes: as attention.wgsl, with k and v f16 (head_dim = HD, a multiple of 8, <= 256) and every
// binding 16-byte aligned. GQ <= 8, CHUNK <= 256, subgroups of at least 8 lanes (the caller
// checks). Shared memory: scores GQ * CHUNK f32 + 4096 f32 (pw) + 16 f32: at most 24.1 KiB.
// KB, VB and CL are measured (docs/benchmarks.md): more keys in flight per lane cost registers
// and occupancy; 16-lane clusters (half the query registers) were slower.
//
// #include attention_wide.inc.wgsl
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
@group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@group(0) @binding(5) var<storage, read_write> part_o: array<f32>;

fn wide_query(i: u32, kvh: u32, e: u32) -> vec4<f32> {
    return q[(i * p.n_heads + kvh * GQ) * (HD / 4u) + e];
}

@compute @workgroup_size(WG)
fn split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
         @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
         @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let b = wide_chunk(wid.z, wid.x, lid);
    if (workgroupUniformLoad(&wg_skip) != 0u) {
        return;
    }
    wide_split(wid.z, wid.y, wid.x, b.x, b.y, b.z, lid, sg_id, sg_lane, sg_size, n_sg);
}
