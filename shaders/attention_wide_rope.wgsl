// The f16 wide split with the decode step's attention input folded in and its last workgroup
// merging: attention_fused.wgsl's ROPE = 1 staging (per-head RMSNorm, RoPE, the current token's
// KV append, operation for operation as rope_kv_append.wgsl) in front of attention_wide.wgsl's
// split (attention_wide_split.inc.wgsl) and its split_merge tail. One dispatch replaces
// rope_kv_append + split + merge.
//
// `q` is the packed projection output [n_q, q_tok_stride] f32 (query heads at word 0, key heads
// at k_off, value heads at v_off of each token's row; any word offsets). Every live workgroup
// stages its group's GQ query heads in pw (normalised, rotated); the one whose chunk holds the
// query's own position (the last visible key) also stages kv head kvh's key and writes it and the
// value to the cache row i * kv_stride + pos % ring (k and v Coherent: the storageBarrier after
// the write makes the row visible to the workgroup's own scoring; no other workgroup reads it).
// A position >= max_pos or >= max_tok (an idle slot) stages NaN queries and writes no row.
// Shapes as attention_wide.wgsl (f16 caches, HD a multiple of 8); pw holds (GQ + 1) * HD <= 2304
// staged values until the split has read its queries into registers.
//
// #include attention_wide.inc.wgsl
// #include attention_merge_weights.inc.wgsl
// #include attention_wide_merge.inc.wgsl
// #include attention_wide_split.inc.wgsl
// #include attention_rope_stage.inc.wgsl
// #include attention_keys.inc.wgsl

override WG: u32 = 128;
override CHUNK: u32 = 256;
override CHUNK_MIN: u32 = 0;
override GQ: u32 = 4;
override HD: u32 = 128;
override NS: u32 = HD / 8u;
const CL: u32 = 8u;
override SPL: u32 = (NS + CL - 1u) / CL;
override KB: u32 = 2;
override VB: u32 = 8;
var<workgroup> sc: array<f32, GQ * CHUNK>;

// attention_fused.wgsl's Params (the decode words, then the input step's).
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
    rotary_dim: u32,
    style: u32,
    max_pos: u32,
    norm: u32,
    eps: f32,
    norm_offset: f32,
    max_tok: u32,
    q_tok_stride: u32,
    k_off: u32,
    v_off: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> q: array<f32>;
// Coherent: the last workgroup reads what the others wrote.
@coherent @group(0) @binding(4) var<storage, read_write> part_ml: array<f32>;
@coherent @group(0) @binding(5) var<storage, read_write> part_o: array<f32>;
@coherent @group(0) @binding(1) var<storage, read_write> k: array<vec4<u32>>;
@coherent @group(0) @binding(2) var<storage, read_write> v: array<vec4<u32>>;
@group(0) @binding(9) var<storage, read> q_norm: array<f32>;
@group(0) @binding(10) var<storage, read> k_norm: array<f32>;
@group(0) @binding(11) var<storage, read> table: array<vec2<f32>>;

fn stage_get(e: u32) -> f32 {
    return pw[e];
}

fn stage_set(e: u32, x: f32) {
    pw[e] = x;
}

fn wide_query(i: u32, kvh: u32, e: u32) -> vec4<f32> {
    return vec4<f32>(pw[4u * e], pw[4u * e + 1u], pw[4u * e + 2u], pw[4u * e + 3u]);
}

// Query i's group into pw[0 .. GQ * HD] (rope_stage) and, when this chunk [j0, j1) holds the
// query's position, its key and value rows into the cache.
fn wide_stage(i: u32, kvh: u32, j0: u32, j1: u32, lid: u32, sg_id: u32, sg_lane: u32,
              sg_size: u32, n_sg: u32) {
    let own = rope_stage(i, kvh, GQ, HD, j0, j1, lid, sg_id, sg_lane, sg_size, n_sg);
    let ps = q_pos[i];
    let tok = i * p.q_tok_stride;
    if (own) {
        // The row as 16-byte slots of 8 f16 values (HD and the row offset are multiples of 8).
        let slot0 = ((i * p.kv_stride + ps % p.ring) * p.n_kv_heads + kvh) * NS;
        let vsrc = tok + p.v_off + kvh * HD;
        for (var s = lid; s < NS; s += WG) {
            var kw = vec4<u32>(0u);
            var vw = vec4<u32>(0u);
            for (var x = 0u; x < 4u; x++) {
                let e = 8u * s + 2u * x;
                kw[x] = pack2x16float(vec2<f32>(pw[GQ * HD + e], pw[GQ * HD + e + 1u]));
                vw[x] = pack2x16float(vec2<f32>(q[vsrc + e], q[vsrc + e + 1u]));
            }
            k[slot0 + s] = kw;
            v[slot0 + s] = vw;
        }
        // The row is read back by this workgroup's scoring.
        storageBarrier();
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn split_merge_rope(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32,
                    @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
                    @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let b = wide_chunk(wid.z, wid.x, lid);
    if (workgroupUniformLoad(&wg_skip) == 0u) {
        wide_stage(wid.z, wid.y, b.x, b.y, lid, sg_id, sg_lane, sg_size, n_sg);
        wide_split(wid.z, wid.y, wid.x, b.x, b.y, b.z, lid, sg_id, sg_lane, sg_size, n_sg);
    }
    wide_merge_last(wid.z, wid.y, wid.x, lid, sg_id, sg_lane, sg_size, n_sg);
}
