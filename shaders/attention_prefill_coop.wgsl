enable f16;
enable wgpu_cooperative_matrix;

// Attention for prefill on cooperative matrices (VK_KHR_cooperative_matrix, subgroup scope,
// f16 x f16 -> f32 in 16 x 16 x 16 steps): FlashAttention-2 style, the contract of
// `attention_prefill.wgsl` (causal, GQA, optional window and softcap, ring caches, f32 or f16
// KV) with one addition: the queries' positions are consecutive, q_pos[i] = pos0 + i (pos0 a
// push constant). Each workgroup walks the key range its queries can see, computed from pos0;
// q_pos masks each row.
//
// Shapes: q [n_q, n_heads, HD] f32; k, v [rows, n_kv_heads, HD] as u32 words (KV_DTYPE 0: f32
// bits, 1: f16 pairs), the key at position j in row j % ring; out [n_q, n_heads, HD] f32.
// HD (the head dim): a multiple of 16, 32..=128.
//
// Workgroup: NSG subgroups of SG invocations (SG: the device's subgroup size, >= 16), one head,
// 16 queries per subgroup. Q is staged once (f32 -> f16). Per step of BK keys (16 or 32 <= HD):
// - the workgroup stages K and V rows (-> f16, zero past the range);
// - each subgroup computes its scores S[16, BK] = Q K^T on cooperative matrices into its f32
//   scratch;
// - invocations 0..15 of each subgroup own one query row each: scale, softcap, mask, running
//   max / sum (online softmax), P = exp(s - max) as f16, and the row's rescale factor;
// - each subgroup computes P V [16, HD] in HD / 16 column blocks on cooperative matrices into
//   its scratch (the scores are consumed), and its invocations fold it into their share of the
//   output accumulator: o = o * rescale + P V (lane `l` owns elements l, l + SG, ... of the
//   subgroup's 16 x HD block, in registers).
// Four barriers per step; cooperative operations stay in uniform control flow.
// Staged rows are HD + 8 halves (16-byte aligned rows for the cooperative loads; consecutive
// rows start in different banks). Shared memory at HD 128, NSG 2, BK 32: Q 8.5 KiB, K and V
// 8.5 KiB each, scratch 16 KiB, P 2.5 KiB: 44.4 KiB (Rust checks the configuration).
// Precision: q, k, v and the probabilities are rounded to f16 (products exact, sums f32).

override HD: u32 = 128;
override BK: u32 = 32;
override NSG: u32 = 2;
override SG: u32 = 32;
override WG: u32 = 64;
override KV_DTYPE: u32 = 0;

struct Params {
    n_q: u32,
    n_heads: u32,
    n_kv_heads: u32,
    n_kv: u32,
    scale: f32,
    softcap: f32,
    window: u32,
    ring: u32,
    pos0: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<u32>;
@group(0) @binding(2) var<storage, read> v: array<u32>;
@group(0) @binding(3) var<storage, read> q_pos: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> qs: array<vec4<f16>, NSG * 16u * (HD / 4u + 2u)>;
var<workgroup> ks: array<vec4<f16>, BK * (HD / 4u + 2u)>;
var<workgroup> vs: array<vec4<f16>, BK * (HD / 4u + 2u)>;
var<workgroup> sc: array<f32, NSG * 16u * HD>;
var<workgroup> ps: array<vec4<f16>, NSG * 16u * (BK / 4u + 2u)>;
var<workgroup> row_m: array<f32, NSG * 16u>;
var<workgroup> row_l: array<f32, NSG * 16u>;
var<workgroup> row_a: array<f32, NSG * 16u>;

// Four consecutive K or V elements from word-element index e (a multiple of 4).
fn load4(is_v: bool, e: u32) -> vec4<f32> {
    if (KV_DTYPE == 0u) {
        if (is_v) {
            return bitcast<vec4<f32>>(vec4<u32>(v[e], v[e + 1u], v[e + 2u], v[e + 3u]));
        }
        return bitcast<vec4<f32>>(vec4<u32>(k[e], k[e + 1u], k[e + 2u], k[e + 3u]));
    }
    let w = e >> 1u;
    var a: u32;
    var b: u32;
    if (is_v) {
        a = v[w];
        b = v[w + 1u];
    } else {
        a = k[w];
        b = k[w + 1u];
    }
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

// First visible key of a query at position qp.
fn first_key(qp: u32) -> u32 {
    if (p.window > 0u && qp + 1u > p.window) {
        return qp + 1u - p.window;
    }
    return 0u;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let qld = HD / 4u + 2u;
    let pld = BK / 4u + 2u;
    let bq = NSG * 16u;
    let q0 = wid.x * bq;
    let h = wid.y;
    let kvh = h / (p.n_heads / p.n_kv_heads);
    let kv_dim = p.n_kv_heads * HD;
    // Keys the tile's queries see: from the first query's window start to the last query.
    let q_last = min(q0 + bq, p.n_q) - 1u;
    let lo = first_key(p.pos0 + q0);
    let hi = min(p.pos0 + q_last, p.n_kv - 1u);

    for (var i = lid; i < bq * (HD / 4u); i += WG) {
        let r = i / (HD / 4u);
        let c = i % (HD / 4u);
        var x = vec4<f32>(0.0);
        if (q0 + r < p.n_q) {
            let e = ((q0 + r) * p.n_heads + h) * HD + 4u * c;
            x = vec4<f32>(q[e], q[e + 1u], q[e + 2u], q[e + 3u]);
        }
        qs[r * qld + c] = vec4<f16>(x);
    }
    if (lid < bq) {
        // A finite floor instead of -inf keeps exp(m_old - m_new) finite for rows that have seen
        // only masked keys so far.
        row_m[lid] = -1e30;
        row_l[lid] = 0.0;
    }
    // This subgroup's rows of the tile and its scratch.
    let sb = sg_id * 16u;
    let sbase = sg_id * 16u * HD;
    let per = 16u * HD / SG;
    var o: array<f32, 128>;
    var zero: coop_mat16x16<f32, C>;

    for (var kb = lo; kb <= hi; kb += BK) {
        workgroupBarrier();
        for (var i = lid; i < BK * (HD / 4u); i += WG) {
            let jj = i / (HD / 4u);
            let c = i % (HD / 4u);
            let j = kb + jj;
            var kx = vec4<f32>(0.0);
            var vx = vec4<f32>(0.0);
            if (j <= hi) {
                let e = (j % p.ring) * kv_dim + kvh * HD + 4u * c;
                kx = load4(false, e);
                vx = load4(true, e);
            }
            ks[jj * qld + c] = vec4<f16>(kx);
            vs[jj * qld + c] = vec4<f16>(vx);
        }
        workgroupBarrier();
        // S[16, BK] = Q K^T, row-major into the scratch (row stride BK).
        for (var j = 0u; j < BK / 16u; j++) {
            var s = zero;
            for (var d = 0u; d < HD / 16u; d++) {
                let a = coopLoadT<coop_mat16x16<f16, A>>(&qs[sb * qld + 4u * d], qld);
                let b = coopLoad<coop_mat16x16<f16, B>>(&ks[16u * j * qld + 4u * d], qld);
                s = coopMultiplyAdd(a, b, s);
            }
            coopStoreT(s, &sc[sbase + 16u * j], BK);
        }
        workgroupBarrier();
        if (lane < 16u) {
            let t = sb + lane;
            let gi = q0 + t;
            let valid = gi < p.n_q;
            var qp = 0u;
            if (valid) {
                qp = q_pos[gi];
            }
            let kf = first_key(qp);
            let kl = min(qp, p.n_kv - 1u);
            let row = sbase + lane * BK;
            let m_old = row_m[t];
            var m_new = m_old;
            for (var jj = 0u; jj < BK; jj++) {
                let j = kb + jj;
                if (valid && j >= kf && j <= kl) {
                    var sv = sc[row + jj] * p.scale;
                    if (p.softcap > 0.0) {
                        sv = p.softcap * tanh(clamp(sv / p.softcap, -15.0, 15.0));
                    }
                    sc[row + jj] = sv;
                    m_new = max(m_new, sv);
                }
            }
            var sum = 0.0;
            for (var c4 = 0u; c4 < BK / 4u; c4++) {
                var pv = vec4<f32>(0.0);
                for (var u = 0u; u < 4u; u++) {
                    let jj = 4u * c4 + u;
                    let j = kb + jj;
                    if (valid && j >= kf && j <= kl) {
                        pv[u] = exp(sc[row + jj] - m_new);
                    }
                }
                sum += pv.x + pv.y + pv.z + pv.w;
                ps[t * pld + c4] = vec4<f16>(pv);
            }
            let a = exp(m_old - m_new);
            row_a[t] = a;
            row_l[t] = row_l[t] * a + sum;
            row_m[t] = m_new;
        }
        workgroupBarrier();
        // P V [16, HD] in column blocks of 16, row-major into the scratch (row stride HD).
        for (var d = 0u; d < HD / 16u; d++) {
            var acc = zero;
            for (var j = 0u; j < BK / 16u; j++) {
                let a = coopLoadT<coop_mat16x16<f16, A>>(&ps[sb * pld + 4u * j], pld);
                let b = coopLoadT<coop_mat16x16<f16, B>>(&vs[16u * j * qld + 4u * d], qld);
                acc = coopMultiplyAdd(a, b, acc);
            }
            coopStoreT(acc, &sc[sbase + 16u * d], HD);
        }
        workgroupBarrier();
        for (var i = 0u; i < per; i++) {
            let e = lane + SG * i;
            o[i] = o[i] * row_a[sb + e / HD] + sc[sbase + e];
        }
    }
    for (var i = 0u; i < per; i++) {
        let e = lane + SG * i;
        let gi = q0 + sb + e / HD;
        if (gi < p.n_q) {
            let l = row_l[sb + e / HD];
            var r = 0.0;
            if (l > 0.0) {
                r = o[i] / l;
            }
            out[(gi * p.n_heads + h) * HD + e % HD] = r;
        }
    }
}
