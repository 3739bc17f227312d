// Attention for prefill: causal, tiled, online softmax (FlashAttention-2 style).
//
// Shapes: q [n_q, n_heads, HD] f32; k, v [rows, n_kv_heads, HD] as u32 words (KV_DTYPE 0: f32
// bits, 1: f16 pairs, 2 q8_0 / 3 q4_0 units as kv_quant.inc.wgsl lays them out), the key at position j in row j % ring (ring >= n_kv: row = position; a
// sliding-window layer keeps a ring of its window plus the chunk, so the keys this chunk's queries
// see are all still there); q_pos [n_q] u32 (query i sees keys j < n_kv with j <= q_pos[i], and
// j > q_pos[i] - window when window > 0); out [n_q, n_heads, HD] f32. GQA: query head h reads kv head
// h / (n_heads / n_kv_heads). HD (the head dim) is an override: a multiple of 8, at most 256.
// Workgroup: 128 invocations for a tile of BQ = 16 queries of one head (grid: query tiles x
// heads); 8 invocations per query, each owning output dims sub, sub + 8, ... (HD / 8 registers).
// The key range the tile can see is walked in tiles of BK keys (16, or 8 when HD > 128 so shared
// memory stays under 32 KiB): stage K in shared memory, compute the BQ x BK scores, update each
// query's running max / sum (online softmax), stage V in the same buffer, accumulate. Each K/V
// element is loaded once per query tile instead of once per query.
// Shared memory: Q tile BQ*HD + K/V tile BK*HD + scores BQ*BK + 3*BQ f32: 24.6 KiB at HD = 256
// (BK 8), 17 KiB at HD = 128 (BK 16).
//
// #include kv_quant.inc.wgsl

override HD: u32 = 128;
override BK: u32 = 16;
override KV_DTYPE: u32 = 0;
// V's type (KV_DTYPE's codes).
override KV_DTYPE_V: u32 = 0;
// 1: K units stored rotated (kv_quant.inc.wgsl): the Q tile's 64-value segments are rotated
// alike (HD a multiple of 64).
override KV_ROT_K: u32 = 0;
// 1: the key at position 0 is read as its stored value plus `sink` (attention.wgsl's KV_SINK).
override KV_SINK: u32 = 0;
const BQ: u32 = 16u;
const WG: u32 = 128u;

struct Params {
    n_q: u32,
    n_heads: u32,
    n_kv_heads: u32,
    n_kv: u32,
    scale: f32,
    softcap: f32,
    window: u32,
    ring: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<u32>;
@group(0) @binding(2) var<storage, read> v: array<u32>;
@group(0) @binding(3) var<storage, read> q_pos: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// [kv_dim] f32 in the stored space, read only with KV_SINK 1 (bound to any buffer otherwise).
@group(0) @binding(5) var<storage, read> sink: array<f32>;

var<workgroup> qs: array<f32, BQ * HD>;
var<workgroup> kvs: array<f32, BK * HD>;
var<workgroup> s: array<f32, BQ * BK>;
var<workgroup> row_m: array<f32, BQ>;
var<workgroup> row_l: array<f32, BQ>;
var<workgroup> row_a: array<f32, BQ>;

fn load_kv(is_v: bool, e: u32) -> f32 {
    let t = select(KV_DTYPE, KV_DTYPE_V, is_v);
    if (t >= 2u) {
        if (is_v) {
            return kvq_value(t, v[kvq_code_word(t, e)], v[kvq_scale_word(t, e)], e);
        }
        return kvq_value(t, k[kvq_code_word(t, e)], k[kvq_scale_word(t, e)], e);
    }
    var word: u32;
    if (t == 0u) {
        if (is_v) {
            word = v[e];
        } else {
            word = k[e];
        }
        return bitcast<f32>(word);
    }
    if (is_v) {
        word = v[e >> 1u];
    } else {
        word = k[e >> 1u];
    }
    let pair = unpack2x16float(word);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

// First visible key of a query at position qp.
fn first_key(qp: u32) -> u32 {
    if (p.window > 0u && qp + 1u > p.window) {
        return qp + 1u - p.window;
    }
    return 0u;
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let q0 = wid.x * BQ;
    let h = wid.y;
    let kvh = h / (p.n_heads / p.n_kv_heads);
    let kv_dim = p.n_kv_heads * HD;
    let qi = lid / 8u;
    let sub = lid % 8u;
    let neg_inf = bitcast<f32>(0xff800000u);

    // Key range visible to any query of the tile (uniform across the workgroup).
    var t_lo = 0xffffffffu;
    var t_hi = 0u;
    var any = false;
    for (var r = 0u; r < BQ; r++) {
        if (q0 + r < p.n_q) {
            let qp = q_pos[q0 + r];
            t_lo = min(t_lo, first_key(qp));
            t_hi = max(t_hi, min(qp, p.n_kv - 1u));
            any = true;
        }
    }

    for (var idx = lid; idx < BQ * HD; idx += WG) {
        let r = idx / HD;
        var val = 0.0;
        if (q0 + r < p.n_q) {
            val = q[((q0 + r) * p.n_heads + h) * HD + idx % HD];
        }
        qs[idx] = val;
    }
    if (KV_ROT_K == 1u) {
        // BQ * HD <= 4096 elements, 32 per invocation.
        workgroupBarrier();
        var rq: array<f32, 32>;
        for (var t = 0u; t < 32u; t++) {
            let idx = lid + t * WG;
            rq[t] = 0.0;
            if (idx < BQ * HD) {
                let s = idx - idx % 64u;
                var r = 0.0;
                for (var jj = 0u; jj < 64u; jj++) {
                    r += kvq_hadamard(idx % 64u, jj) * (qs[s + jj] * kvq_sign(jj));
                }
                rq[t] = r * 0.125;
            }
        }
        workgroupBarrier();
        for (var t = 0u; t < 32u; t++) {
            let idx = lid + t * WG;
            if (idx < BQ * HD) {
                qs[idx] = rq[t];
            }
        }
    }
    if (lid < BQ) {
        // A finite floor instead of -inf keeps exp(m_old - m_new) finite for rows that have seen
        // only masked keys so far.
        row_m[lid] = -1e30;
        row_l[lid] = 0.0;
    }
    var acc: array<f32, 32>;
    for (var c = 0u; c < 32u; c++) {
        acc[c] = 0.0;
    }

    var kb = t_lo;
    while (any && kb <= t_hi) {
        workgroupBarrier();
        for (var idx = lid; idx < BK * HD; idx += WG) {
            let j = kb + idx / HD;
            var val = 0.0;
            if (j < p.n_kv) {
                val = load_kv(false, (j % p.ring) * kv_dim + kvh * HD + idx % HD);
                if (KV_SINK == 1u && j == 0u) {
                    val += sink[kvh * HD + idx % HD];
                }
            }
            kvs[idx] = val;
        }
        workgroupBarrier();
        for (var pi = lid; pi < BQ * BK; pi += WG) {
            let r = pi / BK;
            let jj = pi % BK;
            let j = kb + jj;
            var sv = neg_inf;
            if (q0 + r < p.n_q) {
                let qp = q_pos[q0 + r];
                if (j <= min(qp, p.n_kv - 1u) && j >= first_key(qp)) {
                    var dotv = 0.0;
                    for (var d = 0u; d < HD; d++) {
                        dotv += qs[r * HD + d] * kvs[jj * HD + d];
                    }
                    sv = dotv * p.scale;
                    if (p.softcap > 0.0) {
                        sv = p.softcap * tanh(clamp(sv / p.softcap, -15.0, 15.0));
                    }
                }
            }
            s[pi] = sv;
        }
        workgroupBarrier();
        if (lid < BQ) {
            let m_old = row_m[lid];
            var m_new = m_old;
            for (var jj = 0u; jj < BK; jj++) {
                m_new = max(m_new, s[lid * BK + jj]);
            }
            var sum = 0.0;
            for (var jj = 0u; jj < BK; jj++) {
                let e = exp(s[lid * BK + jj] - m_new);
                s[lid * BK + jj] = e;
                sum += e;
            }
            let a = exp(m_old - m_new);
            row_a[lid] = a;
            row_l[lid] = row_l[lid] * a + sum;
            row_m[lid] = m_new;
        }
        workgroupBarrier();
        for (var idx = lid; idx < BK * HD; idx += WG) {
            let j = kb + idx / HD;
            var val = 0.0;
            if (j < p.n_kv) {
                val = load_kv(true, (j % p.ring) * kv_dim + kvh * HD + idx % HD);
            }
            kvs[idx] = val;
        }
        workgroupBarrier();
        let a = row_a[qi];
        for (var c = 0u; c < HD / 8u; c++) {
            let d = sub + 8u * c;
            var o = acc[c] * a;
            for (var jj = 0u; jj < BK; jj++) {
                o += s[qi * BK + jj] * kvs[jj * HD + d];
            }
            acc[c] = o;
        }
        kb += BK;
    }
    workgroupBarrier();
    if (q0 + qi < p.n_q) {
        let l = row_l[qi];
        for (var c = 0u; c < HD / 8u; c++) {
            var r = 0.0;
            if (l > 0.0) {
                r = acc[c] / l;
            }
            out[((q0 + qi) * p.n_heads + h) * HD + sub + 8u * c] = r;
        }
    }
}
