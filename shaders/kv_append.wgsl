// KV-cache append: writes the new tokens' K and V rows at their positions.
//
// Shapes: k_new, v_new [n_tok, kv_dim] f32; pos [n_tok] u32 (destination row of each token, from a
// device buffer so a recorded step replays); k_cache, v_cache [max_tok, kv_dim] as u32 words:
// KV_DTYPE 0 f32 bits, 1 f16 pairs (kv_dim even; element e in the low half of word e/2 when e is
// even; rounding to nearest even by pack2x16float), 2 q8_0, 3 q4_0 and 4 tq4 units of 64 values
// (kv_quant.inc.wgsl; kv_dim a multiple of 64; tq4 units are rotated first). One dispatch appends both K and V.
// Slots: token t's row is t * row_stride + pos[t] % ring (row_stride 0: every token writes into the
// same rows; row_stride >= the rows of a slot: token t is slot t of a slot-major cache). ring: the
// rows a slot keeps (>= max_tok for a full cache, where the row is the position; a sliding-window
// layer keeps a ring of its window plus a prefill chunk and wraps). A position >= max_tok is
// skipped: that is how an inactive slot (position 0xffffffff) writes nothing.
// Workgroup (`main`, f32 and f16): WG invocations (default 256), one cache word each (K and V),
// 2-D grid; shared memory none. `quant` (q8_0, q4_0, tq4): one workgroup of 64 invocations per
// unit of 64 values (token t's unit u = workgroup t * kv_dim / 64 + u), one value each: the values
// go to shared memory (rotated: K with KV_ROT_K, V with KV_ROT_V), four invocations find the
// blocks' scales (K's two, V's two; a sequential scan, so the first of equal magnitudes wins),
// q4_0 blocks try 16 candidate scales (an invocation each, its squared error summed in order as in
// the reference), each invocation codes its value, the first code-words invocations pack the
// words. Shared memory: 4 x 64 f32 + 8 f32 + 128 u32 (1.5 KiB).
// Centred keys (KV_CENTRE 1, `quant` only): K element c is stored as (k_c - shift_c) * inv_c
// before its unit is rotated and coded, and the key at position 0 less sink_c as well
// (`centre`: shift, inv, sink, each [kv_dim]; the model's key centring, docs/quantization.md);
// attention takes the query times 1 / inv and reads the key at position 0 plus the sink.
//
// #include kv_quant.inc.wgsl

override WG: u32 = 256;
override KV_DTYPE: u32 = 0;
// V's type (KV_DTYPE's codes; the quantizing entry takes any two quantized types).
override KV_DTYPE_V: u32 = 0;
// 1: K units are stored rotated (kv_quant.inc.wgsl): q8_0 keys by the cache's choice, tq4 keys.
override KV_ROT_K: u32 = 0;
// 1: V units are stored rotated: q4_0 values by the cache's choice, tq4 values.
override KV_ROT_V: u32 = 0;
// 1: K elements are centred and scaled first (`centre`, quant entry).
override KV_CENTRE: u32 = 0;

struct Params {
    n_tok: u32,
    kv_dim: u32,
    max_tok: u32,
    row_stride: u32,
    ring: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> k_new: array<f32>;
@group(0) @binding(1) var<storage, read> v_new: array<f32>;
@group(0) @binding(2) var<storage, read> pos: array<u32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<u32>;
// Only read by `quant` with KV_CENTRE 1 (bound to any buffer otherwise).
@group(0) @binding(5) var<storage, read> centre: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    var words = p.kv_dim;
    if (KV_DTYPE == 1u) {
        words = p.kv_dim / 2u;
    }
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    if (idx >= p.n_tok * words) {
        return;
    }
    let t = idx / words;
    let j = idx % words;
    let ps = pos[t];
    if (ps >= p.max_tok) {
        return;
    }
    let dst = (t * p.row_stride + ps % p.ring) * words + j;
    if (KV_DTYPE == 0u) {
        k_cache[dst] = bitcast<u32>(k_new[t * p.kv_dim + j]);
        v_cache[dst] = bitcast<u32>(v_new[t * p.kv_dim + j]);
    } else {
        let s = t * p.kv_dim + 2u * j;
        k_cache[dst] = pack2x16float(vec2<f32>(k_new[s], k_new[s + 1u]));
        v_cache[dst] = pack2x16float(vec2<f32>(v_new[s], v_new[s + 1u]));
    }
}


var<workgroup> qk: array<f32, 64>;
var<workgroup> qv: array<f32, 64>;
var<workgroup> qscale: array<f32, 4>;
var<workgroup> qbits: array<u32, 128>;
var<workgroup> qm: array<f32, 4>;
var<workgroup> qsse: array<f32, 64>;
var<workgroup> qcand: array<f32, 64>;

@compute @workgroup_size(64)
fn quant(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let units = p.kv_dim / 64u;
    let g = wid.y * nwg.x + wid.x;
    let t = g / units;
    let j = g % units;
    // Workgroup-uniform: the barriers below are reached by every invocation or none.
    if (t >= p.n_tok) {
        return;
    }
    let ps = pos[t];
    if (ps >= p.max_tok) {
        return;
    }
    let src = t * p.kv_dim + 64u * j;
    var xk = k_new[src + lid];
    var xv = v_new[src + lid];
    if (KV_CENTRE == 1u) {
        let c = 64u * j + lid;
        xk = (xk - centre[c]) * centre[p.kv_dim + c];
        // Position 0 (the attention sink) is stored relative to the model's sink: attention
        // reads it plus the same offset.
        if (ps == 0u) {
            xk -= centre[2u * p.kv_dim + c];
        }
    }
    qk[lid] = xk;
    qv[lid] = xv;
    // Rotated units (K with KV_ROT_K, V with KV_ROT_V): y_i = (1/8) sum_j H_ij D_jj x_j, both
    // sums in one pass.
    let rot_v = KV_ROT_V == 1u;
    if (KV_ROT_K == 1u || rot_v) {
        qk[lid] = xk * kvq_sign(lid);
        qv[lid] = xv * kvq_sign(lid);
        workgroupBarrier();
        var rk = 0.0;
        var rv = 0.0;
        for (var jj = 0u; jj < 64u; jj++) {
            let hj = kvq_hadamard(lid, jj);
            rk += hj * qk[jj];
            rv += hj * qv[jj];
        }
        workgroupBarrier();
        if (KV_ROT_K == 1u) {
            xk = rk * 0.125;
        }
        if (rot_v) {
            xv = rv * 0.125;
        }
        qk[lid] = xk;
        qv[lid] = xv;
    }
    workgroupBarrier();
    if (lid < 4u) {
        var m = 0.0;
        for (var i = 0u; i < 32u; i++) {
            let e = 32u * (lid % 2u) + i;
            let x = select(qk[e], qv[e], lid >= 2u);
            if (abs(x) > abs(m)) {
                m = x;
            }
        }
        qm[lid] = m;
        qscale[lid] = kvq_block_scale(select(KV_DTYPE, KV_DTYPE_V, lid >= 2u), m);
    }
    workgroupBarrier();
    // q4_0 blocks: invocation 16 b + j sums block b's squared error (in order) against candidate
    // scale j; the block takes the first of least error.
    if (KV_DTYPE == 3u || KV_DTYPE_V == 3u) {
        let b = lid / 16u;
        let d = kvq_q4_candidate(qm[b], lid % 16u);
        var sse = 0.0;
        for (var i = 0u; i < 32u; i++) {
            let e = 32u * (b % 2u) + i;
            let x = select(qk[e], qv[e], b >= 2u);
            let err = x - d * (f32(kvq_encode(3u, x, d)) - 8.0);
            sse += err * err;
        }
        qsse[lid] = sse;
        qcand[lid] = d;
        workgroupBarrier();
        if (lid < 4u && select(KV_DTYPE, KV_DTYPE_V, lid >= 2u) == 3u) {
            var best = 16u * lid;
            for (var j = 1u; j < 16u; j++) {
                if (qsse[16u * lid + j] < qsse[best]) {
                    best = 16u * lid + j;
                }
            }
            qscale[lid] = qcand[best];
        }
        workgroupBarrier();
    }
    // K in KV_DTYPE, V in KV_DTYPE_V (their code widths may differ).
    let tk = KV_DTYPE;
    let tv = KV_DTYPE_V;
    let pk = kvq_per_word(tk);
    let pv = kvq_per_word(tv);
    qbits[lid] = kvq_encode(tk, xk, qscale[lid / 32u]) << ((32u / pk) * (lid % pk));
    qbits[64u + lid] = kvq_encode(tv, xv, qscale[2u + lid / 32u]) << ((32u / pv) * (lid % pv));
    workgroupBarrier();
    let row = (t * p.row_stride + ps % p.ring) * units + j;
    let dk = row * kvq_unit_words(tk);
    let dv = row * kvq_unit_words(tv);
    if (lid < kvq_code_words(tk)) {
        var wk = 0u;
        for (var i = 0u; i < pk; i++) {
            wk |= qbits[pk * lid + i];
        }
        k_cache[dk + lid] = wk;
    } else if (lid == kvq_code_words(tk)) {
        k_cache[dk + lid] = pack2x16float(vec2<f32>(qscale[0], qscale[1]));
    }
    if (lid < kvq_code_words(tv)) {
        var wv = 0u;
        for (var i = 0u; i < pv; i++) {
            wv |= qbits[64u + pv * lid + i];
        }
        v_cache[dv + lid] = wv;
    } else if (lid == kvq_code_words(tv)) {
        v_cache[dv + lid] = pack2x16float(vec2<f32>(qscale[2], qscale[3]));
    }
}
