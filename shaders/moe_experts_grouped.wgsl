// The routed experts of a MoE block for many tokens (prompt prefill), grouped by expert: the
// (token, choice) slots routed to each expert are listed, then each workgroup multiplies a tile
// of one expert's weight rows (dequantized from llama.cpp blocks once per tile) with a tile of
// that expert's slots, so a weight row is read once per tile of tokens instead of once per token.
// Same results as moe_experts_quant.wgsl up to the order of the f32 sums:
//   group:                lists[e, i] = the i-th slot (t * K + s, ascending) with ids = e;
//                         counts[e] = their number (lists: [E, n] then counts: [E])
//   grouped (stage 0, w = gate, src = x):   act[slot, r] = gate[e] . x[t]
//   grouped (stage 1, w = up,   src = x):   act[slot, r] = silu(act[slot, r]) * (up[e] . x[t])
//   grouped (stage 2, w = down, src = act): y[slot, c] = down[e] . act[slot]
//   sum:                  out[t, c] = sum_s weights[t, s] * y[t * K + s, c]  (s ascending;
//                         stage 1: out[t, c] += that sum)
// Shapes: w: [E R, C] blocks (R rows of C columns per expert, C a multiple of BLOCK and of 32);
// x: [n, H]; act: [n K, F]; y: [n K, H]; out: [n, H]; ids, weights: [n, K].
// Workgroup (grouped): 256 invocations, a tile of 64 rows x 32 slots of one expert, 32 columns
// per step through shared memory; invocation i computes row i % 64 for slots 8 (i / 64) ..
// + 8. Grid (R / 64, ceil(n / 32), E); tiles past the expert's slot count return at once.
// Expert ids are clamped to E - 1 (a bad id cannot read outside the weights).
// Shared memory: (64 + 32) x 33 f32 + 97 u32.
// The block decoding (QTYPE/BLOCK/TS overrides, `dequant16`) is quant_blocks.inc.wgsl:
// #include quant_blocks.inc.wgsl
// #include quant_words.inc.wgsl
// #include moe_grouped_io.inc.wgsl

override WG: u32 = 256;
const TR: u32 = 64u;
const TT: u32 = 32u;
const KC: u32 = 32u;
const LD: u32 = 33u;

var<workgroup> ws: array<f32, 2112>;
var<workgroup> xs: array<f32, 1056>;
var<workgroup> tile_slots: array<u32, 32>;
var<workgroup> sg_count: array<u32, 64>;
var<workgroup> wg_count: u32;

@compute @workgroup_size(WG)
fn group(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
         @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let e = wid.y * nwg.x + wid.x;
    if (e >= p.n_experts) {
        return;
    }
    let total = p.n * p.top_k;
    var found = 0u;
    for (var c = 0u; c < total; c += WG) {
        let slot = c + lid;
        var f = 0u;
        if (slot < total && min(ids[slot], p.n_experts - 1u) == e) {
            f = 1u;
        }
        // Workgroup exclusive scan of f: within the subgroup, then the subgroups before.
        let before = subgroupExclusiveAdd(f);
        let all = subgroupAdd(f);
        if (sg_lane == 0u) {
            sg_count[sg_id] = all;
        }
        workgroupBarrier();
        var off = found;
        var sum = 0u;
        for (var k = 0u; k < n_sg; k++) {
            if (k < sg_id) {
                off += sg_count[k];
            }
            sum += sg_count[k];
        }
        if (f == 1u) {
            lists[e * p.n + off + before] = slot;
        }
        found += sum;
        workgroupBarrier();
    }
    if (lid == 0u) {
        lists[p.n_experts * p.n + e] = found;
    }
}

@compute @workgroup_size(WG)
fn grouped(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = wid.z;
    if (lid == 0u) {
        wg_count = lists[p.n_experts * p.n + e];
    }
    let count = workgroupUniformLoad(&wg_count);
    let t0 = wid.y * TT;
    if (t0 >= count) {
        return;
    }
    let nt = min(TT, count - t0);
    let r0 = wid.x * TR;
    if (lid < TT) {
        var slot = 0u;
        if (lid < nt) {
            slot = lists[e * p.n + t0 + lid];
        }
        tile_slots[lid] = slot;
    }
    workgroupBarrier();
    let rb = (p.cols / BLOCK) * TS;
    let upb = BLOCK / 16u;
    let my_r = lid % TR;
    let my_t = (lid / TR) * 8u;
    var acc: array<f32, 8>;
    for (var j = 0u; j < 8u; j++) {
        acc[j] = 0.0;
    }
    for (var k0 = 0u; k0 < p.cols; k0 += KC) {
        // Weights: 64 rows x 2 units of 16 columns, one unit per invocation of the first 128.
        if (lid < 2u * TR) {
            let r = lid / 2u;
            let half = lid % 2u;
            var v: array<f32, 16>;
            if (r0 + r < p.rows) {
                let u = k0 / 16u + half;
                v = dequant16((e * p.rows + r0 + r) * rb + (u / upb) * TS, u % upb);
            }
            for (var i = 0u; i < 16u; i++) {
                ws[r * LD + half * 16u + i] = v[i];
            }
        }
        // Sources: 32 slots x 32 columns, 4 per invocation.
        let tt = lid / 8u;
        let cc = (lid % 8u) * 4u;
        var base = 0u;
        if (p.stage == 2u) {
            base = tile_slots[tt] * p.cols;
        } else {
            base = (tile_slots[tt] / p.top_k) * p.cols;
        }
        for (var i = 0u; i < 4u; i++) {
            var v = 0.0;
            if (tt < nt) {
                v = src[base + k0 + cc + i];
            }
            xs[tt * LD + cc + i] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < KC; kk++) {
            let wv = ws[my_r * LD + kk];
            for (var j = 0u; j < 8u; j++) {
                acc[j] += wv * xs[(my_t + j) * LD + kk];
            }
        }
        workgroupBarrier();
    }
    let r = r0 + my_r;
    if (r >= p.rows) {
        return;
    }
    for (var j = 0u; j < 8u; j++) {
        if (my_t + j < nt) {
            let i = tile_slots[my_t + j] * p.rows + r;
            if (p.stage == 1u) {
                let g = dst[i];
                dst[i] = (g / (1.0 + exp(-g))) * acc[j];
            } else {
                dst[i] = acc[j];
            }
        }
    }
}

@compute @workgroup_size(WG)
fn sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    if (idx >= p.n * p.rows) {
        return;
    }
    let t = idx / p.rows;
    let c = idx % p.rows;
    var total = 0.0;
    for (var s = 0u; s < p.top_k; s++) {
        let slot = t * p.top_k + s;
        total += weights[slot] * src[slot * p.rows + c];
    }
    // Stage 1: added to what dst holds (the residual stream).
    if (p.stage == 1u) {
        dst[idx] = dst[idx] + total;
    } else {
        dst[idx] = total;
    }
}
