// Attention input preparation, fused: the optional per-head RMSNorm of q and k (Qwen3, Gemma 3),
// RoPE on q and k, and the KV-cache append of k and v. One dispatch replaces five (q norm, k norm,
// q rope, k rope, kv_append) in every layer of a decode step.
//
// Shapes: q [n_tok, n_heads, head_dim], k and v [n_tok, n_kv_heads, head_dim] f32, read only (the
// projections); q_norm and k_norm [head_dim] f32 (read when p.norm = 1); pos [n_tok] u32; table
// [max_pos, rotary_dim / 2] vec2<f32> = (cos, sin), the table rope.wgsl reads; q_out [n_tok,
// n_heads, head_dim] f32; k_cache and v_cache as kv_append.wgsl writes them (KV_DTYPE 0: f32 bits,
// 1: f16 pairs; token t's row is t * row_stride + pos[t] % ring, ring >= max_tok for a full
// cache, the ring of a sliding-window layer otherwise; a position >= max_tok writes nothing,
// which is how an idle slot stays untouched).
// Arithmetic: the same as the unfused ops, operation for operation: rmsnorm.wgsl's
// r = 1 / sqrt(sum(x^2) / n + eps), (x * r) * (offset + w); rope.wgsl's x0 * c - x1 * s and
// x1 * c + x0 * s with pairs (2i, 2i + 1) (STYLE 0) or (i, i + rotary_dim / 2) (STYLE 1), dims
// >= rotary_dim untouched. A position >= max_tok or >= max_pos (an idle slot) writes NaN to the
// token's q_out rows and nothing to the cache.
// Workgroup: WG = 64 invocations per (head, token), grid (n_heads + n_kv_heads, n_tok): heads
// below n_heads are query heads, the others key/value heads. The (normalised) head vector is
// staged in workgroup memory; the sum of squares is reduced with subgroupAdd, then across
// subgroups (any subgroup size >= 4). Each invocation then writes element pairs (2j, 2j + 1).
// Shared memory: MAX_HD f32 + 16 f32 (2 KiB + 64 B). head_dim <= MAX_HD, even.

override KV_DTYPE: u32 = 0;
const WG: u32 = 64u;
const MAX_HD: u32 = 512u;

struct Params {
    n_tok: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rotary_dim: u32,
    style: u32,
    max_pos: u32,
    norm: u32,
    eps: f32,
    norm_offset: f32,
    max_tok: u32,
    row_stride: u32,
    ring: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> q_norm: array<f32>;
@group(0) @binding(4) var<storage, read> k_norm: array<f32>;
@group(0) @binding(5) var<storage, read> pos: array<u32>;
@group(0) @binding(6) var<storage, read> table: array<vec2<f32>>;
@group(0) @binding(7) var<storage, read_write> q_out: array<f32>;
@group(0) @binding(8) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(9) var<storage, read_write> v_cache: array<u32>;

var<workgroup> hv: array<f32, MAX_HD>;
var<workgroup> red: array<f32, 16>;

// Element e of the rotated head (hv holds the normalised, unrotated head).
fn rotated(e: u32, ps: u32) -> f32 {
    if (e >= p.rotary_dim) {
        return hv[e];
    }
    let half = p.rotary_dim / 2u;
    var i = 0u;
    var a = 0u;
    var b = 0u;
    if (p.style == 1u) {
        i = e % half;
        a = i;
        b = i + half;
    } else {
        i = e / 2u;
        a = 2u * i;
        b = a + 1u;
    }
    let cs = table[ps * half + i];
    let x0 = hv[a];
    let x1 = hv[b];
    if (e == a) {
        return x0 * cs.x - x1 * cs.y;
    }
    return x1 * cs.x + x0 * cs.y;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
        @builtin(num_subgroups) n_sg: u32) {
    let head = wid.x;
    let t = wid.y;
    let hd = p.head_dim;
    let is_q = head < p.n_heads;
    var src = 0u;
    if (is_q) {
        src = (t * p.n_heads + head) * hd;
    } else {
        src = (t * p.n_kv_heads + head - p.n_heads) * hd;
    }
    // Stage the head and its sum of squares.
    var ss = 0.0;
    for (var e = lid; e < hd; e += WG) {
        var x = 0.0;
        if (is_q) {
            x = q[src + e];
        } else {
            x = k[src + e];
        }
        hv[e] = x;
        ss += x * x;
    }
    if (p.norm != 0u) {
        let s = subgroupAdd(ss);
        if (sg_lane == 0u) {
            red[sg_id] = s;
        }
        workgroupBarrier();
        var total = 0.0;
        for (var i = 0u; i < n_sg; i++) {
            total += red[i];
        }
        let r = 1.0 / sqrt(total / f32(hd) + p.eps);
        for (var e = lid; e < hd; e += WG) {
            var w = 0.0;
            if (is_q) {
                w = q_norm[e];
            } else {
                w = k_norm[e];
            }
            hv[e] = (hv[e] * r) * (p.norm_offset + w);
        }
    }
    workgroupBarrier();

    let ps = pos[t];
    let pairs = hd / 2u;
    if (is_q) {
        for (var j = lid; j < pairs; j += WG) {
            let e = 2u * j;
            var o0 = bitcast<f32>(0x7fc00000u);
            var o1 = o0;
            if (ps < p.max_pos && ps < p.max_tok) {
                o0 = rotated(e, ps);
                o1 = rotated(e + 1u, ps);
            }
            q_out[src + e] = o0;
            q_out[src + e + 1u] = o1;
        }
        return;
    }
    if (ps >= p.max_tok || ps >= p.max_pos) {
        return;
    }
    let kvh = head - p.n_heads;
    let kv_dim = p.n_kv_heads * hd;
    let row = t * p.row_stride + ps % p.ring;
    for (var j = lid; j < pairs; j += WG) {
        let e = 2u * j;
        let k0 = rotated(e, ps);
        let k1 = rotated(e + 1u, ps);
        let v0 = v[src + e];
        let v1 = v[src + e + 1u];
        let c = row * kv_dim + kvh * hd + e;
        if (KV_DTYPE == 0u) {
            k_cache[c] = bitcast<u32>(k0);
            k_cache[c + 1u] = bitcast<u32>(k1);
            v_cache[c] = bitcast<u32>(v0);
            v_cache[c + 1u] = bitcast<u32>(v1);
        } else {
            k_cache[c / 2u] = pack2x16float(vec2<f32>(k0, k1));
            v_cache[c / 2u] = pack2x16float(vec2<f32>(v0, v1));
        }
    }
}
