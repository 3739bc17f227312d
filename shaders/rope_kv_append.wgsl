// Attention input preparation, fused: the optional per-head RMSNorm of q and k (Qwen3, Gemma 3),
// RoPE on q and k, and the KV-cache append of k and v. One dispatch replaces five (q norm, k norm,
// q rope, k rope, kv_append) in every layer of a decode step.
//
// Shapes: q [n_tok, n_heads, head_dim], k and v [n_tok, n_kv_heads, head_dim] f32, read only (the
// projections; token t's rows start at t * q_tok_stride / t * kv_tok_stride, so q, k and v may
// be slices of one packed [n_tok, q + k + v] tensor); q_norm and k_norm [head_dim] f32 (read when p.norm = 1); pos [n_tok] u32; table
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
// Workgroup: WG = 64 invocations per (head, TPW tokens), grid (n_heads + n_kv_heads,
// ceil(n_tok / TPW)): heads below n_heads are query heads, the others key/value heads. The
// (normalised) head vectors are staged in workgroup memory; each sum of squares is reduced with
// subgroupAdd, then across subgroups (any subgroup size >= 4). Each invocation then writes
// element pairs (2j, 2j + 1).
// Shared memory: TPW x MAX_HD f32 + 64 f32 (2 KiB per token + 256 B). head_dim <= MAX_HD, even.

override KV_DTYPE: u32 = 0;
// Tokens per workgroup (1..=4): their heads are staged together, so one workgroup has every
// token's loads in flight before the first reduction (prefill); 1 for decode.
override TPW: u32 = 1;
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
    // Words between consecutive tokens' rows of q, and of k and v (the head count times
    // head_dim when they are separate tensors; q + k + v dims when they are packed per token).
    q_tok_stride: u32,
    kv_tok_stride: u32,
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

var<workgroup> hv: array<f32, MAX_HD * TPW>; // [token of the group (TPW)][MAX_HD]
var<workgroup> red: array<f32, 64>; // [token of the group][subgroup]

// Element e of the rotated head staged at hv[base..] (the normalised, unrotated head).
fn rotated(base: u32, e: u32, ps: u32) -> f32 {
    if (e >= p.rotary_dim) {
        return hv[base + e];
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
    let x0 = hv[base + a];
    let x1 = hv[base + b];
    if (e == a) {
        return x0 * cs.x - x1 * cs.y;
    }
    return x1 * cs.x + x0 * cs.y;
}

// Word offset of token t's row of this head in q (query heads) or k and v.
fn src_of(head: u32, t: u32) -> u32 {
    if (head < p.n_heads) {
        return t * p.q_tok_stride + head * p.head_dim;
    }
    return t * p.kv_tok_stride + (head - p.n_heads) * p.head_dim;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
        @builtin(num_subgroups) n_sg: u32) {
    let head = wid.x;
    let t0 = wid.y * TPW;
    let hd = p.head_dim;
    let is_q = head < p.n_heads;
    // Stage the group's heads and their sums of squares (every token's loads issued before
    // any reduction waits on them).
    var ss = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var j = 0u; j < TPW; j++) {
        let t = t0 + j;
        if (t < p.n_tok) {
            let src = src_of(head, t);
            for (var e = lid; e < hd; e += WG) {
                var x = 0.0;
                if (is_q) {
                    x = q[src + e];
                } else {
                    x = k[src + e];
                }
                hv[j * MAX_HD + e] = x;
                ss[j] += x * x;
            }
        }
    }
    if (p.norm != 0u) {
        for (var j = 0u; j < TPW; j++) {
            let s = subgroupAdd(ss[j]);
            if (sg_lane == 0u) {
                red[j * 16u + sg_id] = s;
            }
        }
        workgroupBarrier();
        for (var j = 0u; j < TPW; j++) {
            var total = 0.0;
            for (var i = 0u; i < n_sg; i++) {
                total += red[j * 16u + i];
            }
            let r = 1.0 / sqrt(total / f32(hd) + p.eps);
            for (var e = lid; e < hd; e += WG) {
                var w = 0.0;
                if (is_q) {
                    w = q_norm[e];
                } else {
                    w = k_norm[e];
                }
                hv[j * MAX_HD + e] = (hv[j * MAX_HD + e] * r) * (p.norm_offset + w);
            }
        }
    }
    workgroupBarrier();

    let pairs = hd / 2u;
    for (var j = 0u; j < TPW; j++) {
        let t = t0 + j;
        if (t >= p.n_tok) {
            break;
        }
        let base = j * MAX_HD;
        let ps = pos[t];
        let live = ps < p.max_pos && ps < p.max_tok;
        if (is_q) {
            let dst = (t * p.n_heads + head) * hd;
            for (var i = lid; i < pairs; i += WG) {
                let e = 2u * i;
                var o0 = bitcast<f32>(0x7fc00000u);
                var o1 = o0;
                if (live) {
                    o0 = rotated(base, e, ps);
                    o1 = rotated(base, e + 1u, ps);
                }
                q_out[dst + e] = o0;
                q_out[dst + e + 1u] = o1;
            }
        } else if (live) {
            let src = src_of(head, t);
            let kvh = head - p.n_heads;
            let kv_dim = p.n_kv_heads * hd;
            let row = t * p.row_stride + ps % p.ring;
            for (var i = lid; i < pairs; i += WG) {
                let e = 2u * i;
                let k0 = rotated(base, e, ps);
                let k1 = rotated(base, e + 1u, ps);
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
    }
}

// ---- `pairs`: the same step with one invocation per element pair (prefill-sized batches) ----
// Invocation g of the dispatch takes pair i = g % (head_dim / 2) of (token, head) unit
// u = g / (head_dim / 2), u = t * (n_heads + n_kv_heads) + head. The pair is (2i, 2i + 1)
// (STYLE 0), or (i, i + rotary_dim / 2) for i < rotary_dim / 2 and then (rotary_dim + 2m,
// rotary_dim + 2m + 1) for the unrotated rest (STYLE 1): every element once, each rotated pair
// in one invocation, so nothing is staged unless a reduction or a packing needs it.
// Workgroup: PWG invocations = whole units (a multiple of head_dim / 2, <= 256), the grid 2-D
// over ceil(units * head_dim / 2 / PWG) workgroups (y * num_workgroups.x + x).
// Per-head norm: each unit's sum of squares by a tree over its invocations' partials in
// workgroup memory (ceil(log2(head_dim / 2)) barriers; any subgroup size and head_dim).
// A key head with f16 pairs and STYLE 1 stages its rotated k and its v in workgroup memory so
// each invocation then packs the adjacent words (2i, 2i + 1) of its unit.
// Shared memory: 3 x 512 f32 (6 KiB).
override PWG: u32 = 256u;

var<workgroup> pred: array<f32, 256>;
var<workgroup> pk: array<f32, 512>;
var<workgroup> pv: array<f32, 512>;

@compute @workgroup_size(PWG)
fn pairs(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let hd = p.head_dim;
    let hp = hd / 2u;
    let heads = p.n_heads + p.n_kv_heads;
    let g = (wid.y * nwg.x + wid.x) * PWG + lid;
    let i = g % hp;
    let unit = g / hp;
    let t = unit / heads;
    let head = unit % heads;
    let in_range = t < p.n_tok;
    let is_q = head < p.n_heads;
    let half = p.rotary_dim / 2u;
    var a = 2u * i;
    if (p.style == 1u) {
        if (i < half) {
            a = i;
        } else {
            a = p.rotary_dim + 2u * (i - half);
        }
    }
    var b = a + 1u;
    if (p.style == 1u && i < half) {
        b = i + half;
    }
    let rot = a < p.rotary_dim;
    var x0 = 0.0;
    var x1 = 0.0;
    var src = 0u;
    if (in_range) {
        src = src_of(head, t);
        if (is_q) {
            x0 = q[src + a];
            x1 = q[src + b];
        } else {
            x0 = k[src + a];
            x1 = k[src + b];
        }
    }
    if (p.norm != 0u) {
        // Tree over the unit's hp partials (uniform trip count: every invocation reaches each
        // barrier). After the step of stride s, invocations i < s hold the sums of i, i + s, ...
        let h0 = lid - i;
        pred[lid] = x0 * x0 + x1 * x1;
        workgroupBarrier();
        var n = hp;
        while (n > 1u) {
            let s = (n + 1u) / 2u;
            if (i + s < n) {
                pred[lid] += pred[lid + s];
            }
            workgroupBarrier();
            n = s;
        }
        let r = 1.0 / sqrt(pred[h0] / f32(hd) + p.eps);
        var wa = 0.0;
        var wb = 0.0;
        if (is_q) {
            wa = q_norm[a];
            wb = q_norm[b];
        } else {
            wa = k_norm[a];
            wb = k_norm[b];
        }
        x0 = (x0 * r) * (p.norm_offset + wa);
        x1 = (x1 * r) * (p.norm_offset + wb);
    }
    var ps = 0u;
    var live = false;
    if (in_range) {
        ps = pos[t];
        live = ps < p.max_pos && ps < p.max_tok;
    }
    var o0 = x0;
    var o1 = x1;
    if (rot && live) {
        let cs = table[ps * half + i];
        o0 = x0 * cs.x - x1 * cs.y;
        o1 = x1 * cs.x + x0 * cs.y;
    }
    let kvh = head - p.n_heads;
    let c = (t * p.row_stride + ps % p.ring) * p.n_kv_heads * hd + kvh * hd;
    if (KV_DTYPE == 1u && p.style == 1u) {
        // Stage the unit's rotated k and its v (element order), then pack words (2i, 2i + 1).
        let e0 = 2u * (lid - i);
        var v0 = 0.0;
        var v1 = 0.0;
        if (in_range && !is_q && live) {
            v0 = v[src + a];
            v1 = v[src + b];
        }
        pk[e0 + a] = o0;
        pk[e0 + b] = o1;
        pv[e0 + a] = v0;
        pv[e0 + b] = v1;
        workgroupBarrier();
        if (in_range && !is_q && live) {
            let w = e0 + 2u * i;
            k_cache[c / 2u + i] = pack2x16float(vec2<f32>(pk[w], pk[w + 1u]));
            v_cache[c / 2u + i] = pack2x16float(vec2<f32>(pv[w], pv[w + 1u]));
        }
    } else if (in_range && !is_q && live) {
        let v0 = v[src + a];
        let v1 = v[src + b];
        if (KV_DTYPE == 0u) {
            k_cache[c + a] = bitcast<u32>(o0);
            k_cache[c + b] = bitcast<u32>(o1);
            v_cache[c + a] = bitcast<u32>(v0);
            v_cache[c + b] = bitcast<u32>(v1);
        } else {
            k_cache[(c + a) / 2u] = pack2x16float(vec2<f32>(o0, o1));
            v_cache[(c + a) / 2u] = pack2x16float(vec2<f32>(v0, v1));
        }
    }
    if (in_range && is_q) {
        let dst = (t * p.n_heads + head) * hd;
        var y0 = o0;
        var y1 = o1;
        if (!live) {
            y0 = bitcast<f32>(0x7fc00000u);
            y1 = y0;
        }
        q_out[dst + a] = y0;
        q_out[dst + b] = y1;
    }
}
