// Decode matvec, fast layout and fusions: y = epilogue(W . prologue(x)) for every weight type
// (F32/F16/BF16 and the llama.cpp block formats), `n` activation columns at once.
//
//   y[t, off_i + r] = sum_c W_i[r, c] * x'[t, c]          (EPI 0: store)
//   y[t, off_i + r] += ...                                  (EPI 1: accumulate, a fused residual add)
//   y[t, off_0 + r] = act(gate_r . x'[t]) * (up_r . x'[t])  (EPI 2: silu, 3: gelu_tanh; parts 0, 1)
//   x'[t, c] = x[t, c] * inv_rms(x[t]) * (offset + norm_w[c])   (NORM 1), else x' = x
//
// Shapes: x [NC, cols] f32 (NC <= 8 tokens, row-major); y [NC, y_stride] f32; up to NPARTS = 3
// weight parts w0, w1, w2 (same cols and type, rows_i rows each, written at y offset off_i);
// norm_w [cols] f32. Float weights need cols a multiple of 4 (f32) or 8 (16-bit), quantized ones
// are whole blocks (a multiple of 16).
//
// Layout: a team of LPR consecutive invocations (default 32) owns R rows (a "slot" each; gated:
// 2R slots, the same R rows of gate and of up) and walks the row in units of UE elements: one
// 16-byte word of a float row (4 f32 or 8 f16/bf16), or 16 elements of a quantized row
// (`dequant16`). Lane l takes units l, l + LPR, ...: consecutive lanes read consecutive 16-byte
// words (coalesced across the team). Each unit is decoded once per slot and used for all NC
// columns (x comes from cache: 16 bytes of x per column and unit). Per-lane partial sums:
// S * NC <= 16 registers. WG / LPR teams per workgroup, so a workgroup owns (WG / LPR) * R rows;
// it belongs to one part (the grid is the parts' workgroup ranges back to back, `wg1`, `wg2`).
//
// Invocations are numbered v = subgroup_id * subgroup_size + lane, so a team is whole subgroups
// or a whole-subgroup cluster for ANY subgroup size (4..128): the team sum is subgroupAdd when
// the subgroup is the team; when the subgroup is larger, one masked subgroupAdd per LPR-lane
// cluster; when it is smaller, subgroupAdd then the team's subgroups combine through shared
// memory. Rows past a part's end read its last row (no divergence) and store nothing.
//
// The norm prologue: every workgroup recomputes sum(x^2) per column (cols <= 16384: one pass
// over x, from cache), inv_rms = 1 / sqrt(sum / cols + eps) as vkllm-cpu's rmsnorm; the weights
// of a unit are scaled by (offset + norm_w) and inv_rms, a per-column scalar, multiplies the
// finished dot product.
// Shared memory: `red`, 1024 f32 (4 KiB): (WG / subgroup size) * S * NC partial sums.
// Memory bound: every weight byte is read once per dispatch.

// #include quant_blocks.inc.wgsl
// #include matvec_epilogue.inc.wgsl
// #include matvec_team.inc.wgsl

override WG: u32 = 128;
override LPR: u32 = 32;
override R: u32 = 1;
override NC: u32 = 1;
// Elements per unit: 16 for quantized weights, 4 for f32, 8 for f16/bf16.
override UE: u32 = 8;
// Float weights (QTYPE 0): 0 f32, 1 f16, 2 bf16.
override DTYPE: u32 = 1;
override NPARTS: u32 = 1;
override NORM: u32 = 0;
// 0 store, 1 accumulate, 2 gated silu, 3 gated gelu_tanh.
override EPI: u32 = 0;

struct Params {
    cols: u32,
    y_stride: u32,
    rows0: u32,
    rows1: u32,
    rows2: u32,
    off0: u32,
    off1: u32,
    off2: u32,
    // First workgroup of part 1 and of part 2; `wg_end` is one past the last.
    wg1: u32,
    wg2: u32,
    wg_end: u32,
    eps: f32,
    norm_offset: f32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w0q: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w1q: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> w2q: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> nw4: array<vec4<f32>>;

var<workgroup> red: array<f32, 1024>;

// The part the next weight read goes to (the interface of quant_blocks.inc.wgsl reads one
// weight; every branch on it is uniform across the workgroup or fixed per unrolled slot).
var<private> cur: u32;

fn wq(i: u32) -> vec4<u32> {
    if (NPARTS == 1u || cur == 0u) {
        return w0q[i];
    }
    if (cur == 1u) {
        return w1q[i];
    }
    return w2q[i];
}

// Word i of the current part (its 16-byte word read whole: weights are read as 16-byte words
// only, and buffers are padded to 16 bytes).
fn wd(i: u32) -> u32 {
    return wq(i >> 2u)[i & 3u];
}

// 16 bytes from any byte offset: the one or two 16-byte words holding them, funnel-shifted (the
// second only when the bytes straddle it, so never past the padded data).
fn load16(off: u32) -> vec4<u32> {
    let a = wq(off >> 4u);
    if ((off & 15u) == 0u) {
        return a;
    }
    let b = wq((off >> 4u) + 1u);
    // Drop (off & 15) / 4 whole words of the 8-word pair (a, b), then shift by the byte rest.
    let ws = (off >> 2u) & 3u;
    var lo = a;
    var hi = b;
    if ((ws & 2u) != 0u) {
        lo = vec4<u32>(a.z, a.w, b.x, b.y);
        hi = vec4<u32>(b.z, b.w, 0u, 0u);
    }
    if ((ws & 1u) != 0u) {
        lo = vec4<u32>(lo.y, lo.z, lo.w, hi.x);
        hi = vec4<u32>(hi.y, hi.z, hi.w, 0u);
    }
    let sh = (off & 3u) * 8u;
    if (sh == 0u) {
        return lo;
    }
    let next = vec4<u32>(lo.y, lo.z, lo.w, hi.x);
    return (lo >> vec4<u32>(sh)) | (next << vec4<u32>(32u - sh));
}

fn gated() -> bool {
    return EPI >= 2u;
}

// Slots per team.
fn slots() -> u32 {
    return select(R, 2u * R, gated());
}

fn pair(word: u32) -> vec2<f32> {
    if (DTYPE == 1u) {
        return unpack2x16float(word);
    }
    return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}

// Unit u (UE elements) of row `row` of the current part.
fn unit_values(row: u32, u: u32) -> array<f32, 16> {
    if (QTYPE != 0u) {
        let upb = BLOCK / 16u;
        return dequant16(row * ((p.cols / BLOCK) * TS) + (u / upb) * TS, u % upb);
    }
    var o: array<f32, 16>;
    let v = wq(row * (p.cols / UE) + u);
    if (DTYPE == 0u) {
        let f = bitcast<vec4<f32>>(v);
        o[0] = f.x;
        o[1] = f.y;
        o[2] = f.z;
        o[3] = f.w;
    } else {
        for (var i = 0u; i < 4u; i++) {
            let h = pair(v[i]);
            o[2u * i] = h.x;
            o[2u * i + 1u] = h.y;
        }
    }
    return o;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
        @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.wg_end) {
        return;
    }
    let v = sg_id * sg_size + sg_lane;
    let team = v / LPR;
    let tl = v % LPR;

    // This workgroup's part (gated: all workgroups cover the rows of part 0 and part 1 alike).
    var part = 0u;
    var first_wg = 0u;
    var rows = p.rows0;
    var yoff = p.off0;
    if (NPARTS > 2u && !gated() && g >= p.wg2) {
        part = 2u;
        first_wg = p.wg2;
        rows = p.rows2;
        yoff = p.off2;
    } else if (NPARTS > 1u && !gated() && g >= p.wg1) {
        part = 1u;
        first_wg = p.wg1;
        rows = p.rows1;
        yoff = p.off1;
    }
    let row0 = (g - first_wg) * (WG / LPR) * R + team * R;
    let c4 = p.cols / 4u;

    // Norm prologue: inv_rms of each column.
    var inv: array<f32, 8>;
    if (NORM != 0u) {
        var ss: array<f32, 8>;
        for (var t = 0u; t < NC; t++) {
            ss[t] = 0.0;
        }
        for (var i = v; i < c4; i += WG) {
            for (var t = 0u; t < NC; t++) {
                let a = x4[t * c4 + i];
                ss[t] += dot(a, a);
            }
        }
        for (var t = 0u; t < NC; t++) {
            let s = subgroupAdd(ss[t]);
            if (sg_lane == 0u) {
                red[sg_id * NC + t] = s;
            }
        }
        workgroupBarrier();
        for (var t = 0u; t < NC; t++) {
            var total = 0.0;
            for (var i = 0u; i < n_sg; i++) {
                total += red[i * NC + t];
            }
            inv[t] = 1.0 / sqrt(total / f32(p.cols) + p.eps);
        }
        workgroupBarrier();
    }

    var acc: array<f32, 16>;
    for (var k = 0u; k < 16u; k++) {
        acc[k] = 0.0;
    }
    let units = p.cols / UE;
    for (var u = tl; u < units; u += LPR) {
        var wv: array<f32, 64>;
        for (var k = 0u; k < slots(); k++) {
            cur = part;
            if (gated()) {
                cur = k / R;
            }
            let vals = unit_values(min(row0 + k % R, rows - 1u), u);
            for (var i = 0u; i < UE; i++) {
                wv[k * 16u + i] = vals[i];
            }
        }
        if (NORM != 0u) {
            for (var j = 0u; j < UE / 4u; j++) {
                let gw = p.norm_offset + nw4[u * (UE / 4u) + j];
                for (var k = 0u; k < slots(); k++) {
                    for (var i = 0u; i < 4u; i++) {
                        wv[k * 16u + 4u * j + i] *= gw[i];
                    }
                }
            }
        }
        for (var t = 0u; t < NC; t++) {
            for (var j = 0u; j < UE / 4u; j++) {
                let xa = x4[t * c4 + u * (UE / 4u) + j];
                for (var k = 0u; k < slots(); k++) {
                    let b = k * 16u + 4u * j;
                    let wa = vec4<f32>(wv[b], wv[b + 1u], wv[b + 2u], wv[b + 3u]);
                    acc[k * NC + t] += dot(wa, xa);
                }
            }
        }
    }

    // Team sums: within the subgroup first (clusters of LPR lanes when it is larger).
    let sn = slots() * NC;
    if (sg_size <= LPR) {
        for (var k = 0u; k < sn; k++) {
            acc[k] = subgroupAdd(acc[k]);
        }
    } else {
        let cl = sg_lane / LPR;
        for (var k = 0u; k < sn; k++) {
            acc[k] = cluster_sum(acc[k], cl, sg_size);
        }
    }
    // Then across the team's subgroups (when the subgroup is smaller than the team).
    if (sg_size < LPR && sg_lane == 0u) {
        for (var k = 0u; k < sn; k++) {
            red[sg_id * sn + k] = acc[k];
        }
    }
    workgroupBarrier();
    if (sg_size < LPR) {
        for (var k = 0u; k < sn; k++) {
            acc[k] = red_team_sum(team, k, sn, sg_size);
        }
    }

    // Epilogue: every lane of the team holds the sums; lane (r * NC + t) % LPR stores (r, t).
    for (var r = 0u; r < R; r++) {
        let row = row0 + r;
        for (var t = 0u; t < NC; t++) {
            if (row >= rows || (r * NC + t) % LPR != tl) {
                continue;
            }
            var scale = 1.0;
            if (NORM != 0u) {
                scale = inv[t];
            }
            var up = 0.0;
            if (EPI == 2u || EPI == 3u) {
                up = acc[(R + r) * NC + t] * scale;
            }
            epilogue_store(t * p.y_stride + yoff + row, acc[r * NC + t] * scale, up);
        }
    }
}
