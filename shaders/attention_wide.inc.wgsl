// Shared by the wide decode splits (attention_wide.wgsl over f16 caches, attention_wide_quant.wgsl
// over q8_0 / q4_0 / tq4 ones, attention_wide_rope.wgsl): not a kernel on its own. The including
// file provides the overrides WG, CHUNK, GQ, HD, NS (HD / 8: V's 8-value slots per row), KB and
// VB (keys in flight per lane while scoring and per invocation while accumulating V), `p` (the
// decode Params' leading words), the bindings q (0), k (1), v (2), part_ml (4) and part_o (5:
// Coherent in the merging kernels, plain in the splits), and sc (the chunk's scores per head,
// GQ * CHUNK f32) declared after every override (naga 30 panics resolving a named override that
// the front end lowers after an override-sized array); this file the rest of the interface, the
// chunk bounds, the softmax over a chunk's scores and the partials' write.

@group(0) @binding(3) var<storage, read> q_pos: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

// Array bounds of the per-lane registers: GQ <= 8; KB and VB <= WIDE_B_MAX.
const WIDE_GQ_MAX: u32 = 8u;
const WIDE_B_MAX: u32 = 8u;
const WIDE_PW: u32 = 4096u;

var<workgroup> wg_skip: u32;
var<workgroup> ml: array<f32, 16>;
var<workgroup> pw: array<f32, WIDE_PW>;

// Chunk c of query i: its keys [j0, j1) and the chunk size ck; sets wg_skip when the chunk lies
// past the visible keys (the merge reads only live chunks: the caller returns on
// workgroupUniformLoad(&wg_skip) != 0).
fn wide_chunk(i: u32, c: u32, lid: u32) -> vec3<u32> {
    let vis = visible_keys(i);
    let ck = chunk_keys(vis.x, vis.y);
    let j0 = vis.x + c * ck;
    let j1 = min(j0 + ck, vis.y + 1u);
    // By count, not by j0 > hi: an idle slot's lo (past hi) plus c * ck wraps around.
    if (lid == 0u) {
        wg_skip = select(0u, 1u, c >= live_chunks(vis.x, vis.y));
    }
    return vec3<u32>(j0, j1, ck);
}

// A cluster's partial dot d of key jj (chunk slot) with head g: summed over the 8 lanes, scaled,
// soft-capped and stored by lane 0 (-inf for a key past the chunk's live ones).
fn wide_score(d0: f32, g: u32, jj: u32, ck: u32, live: bool, cl_lane: u32) {
    var d = d0;
    d += subgroupShuffleXor(d, 4u);
    d += subgroupShuffleXor(d, 2u);
    d += subgroupShuffleXor(d, 1u);
    if (cl_lane == 0u && jj < ck) {
        var s = bitcast<f32>(0xff800000u);
        if (live) {
            s = d * p.scale;
            if (p.softcap > 0.0) {
                s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0));
            }
        }
        sc[g * CHUNK + jj] = s;
    }
}

// Softmax pieces per head over the chunk's ck scores: subgroup s takes heads s, s + n_sg, ...;
// lanes across keys. Leaves exp(s - m) in sc and (m, l) per head in ml.
fn wide_softmax(ck: u32, sg_id: u32, sg_lane: u32, sg_size: u32, n_sg: u32) {
    let neg_inf = bitcast<f32>(0xff800000u);
    let htrips = (GQ + n_sg - 1u) / n_sg;
    for (var t = 0u; t < htrips; t++) {
        let g = sg_id + t * n_sg;
        let gl = min(g, GQ - 1u);
        var m = neg_inf;
        for (var jj = sg_lane; jj < ck; jj += sg_size) {
            m = max(m, sc[gl * CHUNK + jj]);
        }
        m = subgroupMax(m);
        var l = 0.0;
        for (var jj = sg_lane; jj < ck; jj += sg_size) {
            var e = 0.0;
            if (m != neg_inf) {
                e = exp(sc[gl * CHUNK + jj] - m);
            }
            if (g < GQ) {
                sc[gl * CHUNK + jj] = e;
            }
            l += e;
        }
        l = subgroupAdd(l);
        if (sg_lane == 0u && g < GQ) {
            ml[2u * g] = m;
            ml[2u * g + 1u] = l;
        }
    }
}

// The key groups' output partials o (slot s of key group kg, 8 values per head as two vec4s)
// summed through pw, hp heads at a time (pw[((kg * hp + g - g0) * HD + d]), and the chunk's
// (m, l) per head: written to part_o and part_ml as attention.wgsl's split writes them.
fn wide_parts(o: array<vec4<f32>, 2u * WIDE_GQ_MAX>, i: u32, kvh: u32, c: u32, lid: u32,
              kg: u32, kg_n: u32, s: u32) {
    let hp = max(1u, WIDE_PW / (kg_n * HD));
    for (var g0 = 0u; g0 < GQ; g0 += hp) {
        workgroupBarrier();
        if (kg < kg_n) {
            for (var g = 0u; g < GQ; g++) {
                if (g >= g0 && g < g0 + hp) {
                    let e = (kg * hp + g - g0) * HD + 8u * s;
                    for (var x = 0u; x < 4u; x++) {
                        pw[e + x] = o[2u * g][x];
                        pw[e + 4u + x] = o[2u * g + 1u][x];
                    }
                }
            }
        }
        workgroupBarrier();
        for (var e = lid; e < hp * HD; e += WG) {
            let g = g0 + e / HD;
            if (g < GQ) {
                var t = 0.0;
                for (var kk = 0u; kk < kg_n; kk++) {
                    t += pw[(kk * hp) * HD + e];
                }
                let part = (i * p.n_heads + kvh * GQ + g) * p.n_chunks + c;
                part_o[part * HD + e % HD] = t;
            }
        }
    }
    if (lid < GQ) {
        let part = (i * p.n_heads + kvh * GQ + lid) * p.n_chunks + c;
        part_ml[2u * part] = ml[2u * lid];
        part_ml[2u * part + 1u] = ml[2u * lid + 1u];
    }
}
