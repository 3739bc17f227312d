// KV-cache append: writes the new tokens' K and V rows at their positions.
//
// Shapes: k_new, v_new [n_tok, kv_dim] f32; pos [n_tok] u32 (destination row of each token, from a
// device buffer so a recorded step replays); k_cache, v_cache [max_tok, kv_dim] as u32 words:
// KV_DTYPE 0 f32 bits, 1 f16 pairs (kv_dim even; element e in the low half of word e/2 when e is
// even; rounding to nearest even by pack2x16float), 2 q8_0 and 3 q4_0 units of 64 values
// (kv_quant.inc.wgsl; kv_dim a multiple of 64). One dispatch appends both K and V.
// Slots: token t's row is t * row_stride + pos[t] % ring (row_stride 0: every token writes into the
// same rows; row_stride >= the rows of a slot: token t is slot t of a slot-major cache). ring: the
// rows a slot keeps (>= max_tok for a full cache, where the row is the position; a sliding-window
// layer keeps a ring of its window plus a prefill chunk and wraps). A position >= max_tok is
// skipped: that is how an inactive slot (position 0xffffffff) writes nothing.
// Workgroup: WG invocations (default 256), one cache word each (K and V; quantized: one unit of
// 64 values each), 2-D grid.
// Shared memory: none.
//
// #include kv_quant.inc.wgsl

override WG: u32 = 256;
override KV_DTYPE: u32 = 0;

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

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    var words = p.kv_dim;
    if (KV_DTYPE == 1u) {
        words = p.kv_dim / 2u;
    } else if (KV_DTYPE >= 2u) {
        words = p.kv_dim / 64u;
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
    if (KV_DTYPE >= 2u) {
        append_unit(t * p.kv_dim + 64u * j, dst);
    } else if (KV_DTYPE == 0u) {
        k_cache[dst] = bitcast<u32>(k_new[t * p.kv_dim + j]);
        v_cache[dst] = bitcast<u32>(v_new[t * p.kv_dim + j]);
    } else {
        let s = t * p.kv_dim + 2u * j;
        k_cache[dst] = pack2x16float(vec2<f32>(k_new[s], k_new[s + 1u]));
        v_cache[dst] = pack2x16float(vec2<f32>(v_new[s], v_new[s + 1u]));
    }
}

// Quantizes the 64 values at k_new[src..] and v_new[src..] into unit u of the caches.
fn append_unit(src: u32, u: u32) {
    let uw = kvq_unit_words();
    let per = kvq_per_word();
    for (var which = 0u; which < 2u; which++) {
        var d: array<f32, 2>;
        for (var b = 0u; b < 2u; b++) {
            var m = 0.0;
            for (var i = 0u; i < 32u; i++) {
                let x = select(v_new[src + 32u * b + i], k_new[src + 32u * b + i], which == 0u);
                if (abs(x) > abs(m)) {
                    m = x;
                }
            }
            d[b] = kvq_block_scale(m);
        }
        for (var w = 0u; w < kvq_code_words(); w++) {
            var word = 0u;
            for (var i = 0u; i < per; i++) {
                let e = per * w + i;
                let x = select(v_new[src + e], k_new[src + e], which == 0u);
                word |= kvq_encode(x, d[e / 32u]) << ((32u / per) * i);
            }
            if (which == 0u) {
                k_cache[u * uw + w] = word;
            } else {
                v_cache[u * uw + w] = word;
            }
        }
        let sw = pack2x16float(vec2<f32>(d[0], d[1]));
        if (which == 0u) {
            k_cache[u * uw + kvq_code_words()] = sw;
        } else {
            v_cache[u * uw + kvq_code_words()] = sw;
        }
    }
}
