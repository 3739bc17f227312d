// Decode matvec for CPU Vulkan implementations (Mesa lavapipe / llvmpipe): the op of
// matvec_fused.wgsl (same push constants, bindings and overrides NC, NPARTS, NORM, EPI, QTYPE,
// DTYPE; see that file for the math) in a layout that suits a CPU running the shader as SIMD
// vectors of subgroup-size lanes: ONE INVOCATION PER WEIGHT ROW.
//
// Why: llvmpipe runs each subgroup as one SIMD vector (8 lanes with AVX2) and a workgroup as a
// loop over its subgroups on one CPU thread. A storage-buffer load inside a loop becomes a loop
// over the lanes (test the lane's mask, bounds-check, load one scalar, insert it), even when
// every lane reads the same address, so the cost is the number of loads a lane issues;
// subgroup reductions and constant-lane broadcasts are register shuffles. matvec_fused.wgsl's
// teams of lanes per row load every weight word and every x element per lane, pick 16-byte
// words apart per lane, and end in subgroup/shared-memory reductions. Here each lane walks its
// own row from start to end (the loop is uniform: no lane idles, no reductions, no shared
// memory, no barriers); it loads only its row's words, as few as the format holds (Q8_0: 9
// words per 32 elements, Q4_1 and Q4_0: 5), and one vec4 of x per unit (lane l loads vec4
// l % (UE / 4)): the unit's other x values come by `subgroupBroadcast` from the lane that
// loaded them. Needs subgroups of at least UE / 4 lanes (8 for the 32-element units): the
// runtime picks this kernel for CPU devices with 8 or more lanes. An order of magnitude faster
// than matvec_fused.wgsl there (docs/benchmarks-history.md).
//
// Units: 32 elements (one block) for Q4_0, Q4_1, Q8_0, decoded straight from the block's words;
// 16 elements through quant_blocks.inc.wgsl's `dequant16` for the other block formats; 4 (f32)
// or 8 (f16, bf16) elements of a float row (4 words). A unit is decoded once per slot and used
// for every column. Slots: one row, or (gated epilogue) the gate row and the up row.
// Workgroup: WG invocations x R = WG * R consecutive rows of one part (rows past the part's end read its
// last row and store nothing, so every lane stays active for the broadcasts). The norm
// prologue's sum of squares: lanes take every min(sg_size, WG)-th vec4 of x, then a subgroup sum.
// Rows per invocation R (1, 2 or 4: slots = R, or 2R gated; slots x NC <= 16 sums): each x
// vec4 loaded and broadcast once serves R rows. Registers: the sums, one unit (8 vec4) per slot.
// Shared memory: none.
// On GPUs this layout is slow (a warp's 32 rows are 32 strided streams): they keep
// matvec_fused.wgsl.

// #include quant_blocks.inc.wgsl
// #include quant_words.inc.wgsl
// #include matvec_epilogue.inc.wgsl

override WG: u32 = 32;
// Rows per invocation (consecutive rows; gated: R gate rows and the same R up rows).
override R: u32 = 1;
override NC: u32 = 1;
// Elements per unit: 32 (Q4_0/Q4_1/Q8_0), 16 (other block formats), 4 (f32), 8 (f16/bf16).
override UE: u32 = 32;
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
    wg1: u32,
    wg2: u32,
    wg_end: u32,
    eps: f32,
    norm_offset: f32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w0: array<u32>;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w1: array<u32>;
@group(0) @binding(4) var<storage, read> w2: array<u32>;
@group(0) @binding(5) var<storage, read> nw4: array<vec4<f32>>;

// The part the next weight read goes to (uniform per workgroup, or fixed per unrolled slot).
var<private> cur: u32;

// Word i of the current part: the interface of quant_blocks.inc.wgsl.
fn wd(i: u32) -> u32 {
    if (NPARTS == 1u || cur == 0u) {
        return w0[i];
    }
    if (cur == 1u) {
        return w1[i];
    }
    return w2[i];
}

fn gated() -> bool {
    return EPI >= 2u;
}

fn pair(word: u32) -> vec2<f32> {
    if (DTYPE == 1u) {
        return unpack2x16float(word);
    }
    return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}

// Qs word k of a 2-byte-aligned block whose data start 2 bytes in: `ws` are the words from the
// block's first word on; `odd` when the block starts 2 bytes into that word.
fn shifted(ws: array<u32, 9>, k: u32, odd: bool) -> u32 {
    return select((ws[k] >> 16u) | (ws[k + 1u] << 16u), ws[k + 1u], odd);
}

// The nibbles of qs word q: low nibbles (elements 4k..4k+3 of a Q4 block) and high ones
// (elements 16+4k..).
fn nibbles(q: u32) -> array<vec4<u32>, 2> {
    let b = vec4<u32>(q) >> vec4<u32>(0u, 8u, 16u, 24u);
    return array<vec4<u32>, 2>(b & vec4<u32>(15u), (b >> vec4<u32>(4u)) & vec4<u32>(15u));
}

// Unit u of row `row` of the current part as UE / 4 vec4s (elements 4j..4j+3 in [j]).
fn unit_vals(row: u32, u: u32) -> array<vec4<f32>, 8> {
    var o: array<vec4<f32>, 8>;
    if (QTYPE == 0u) {
        // Four words of the row: 4 f32 or 8 16-bit values.
        let base = (row * (p.cols / UE) + u) * 4u;
        let a = vec4<u32>(wd(base), wd(base + 1u), wd(base + 2u), wd(base + 3u));
        if (DTYPE == 0u) {
            o[0] = bitcast<vec4<f32>>(a);
        } else {
            o[0] = vec4<f32>(pair(a.x), pair(a.y));
            o[1] = vec4<f32>(pair(a.z), pair(a.w));
        }
        return o;
    }
    let nb = p.cols / BLOCK;
    if (QTYPE == 2u || QTYPE == 3u || QTYPE == 8u) {
        // One whole 32-element block (UE == BLOCK == 32) at byte `off` (always even).
        let off = (row * nb + u) * TS;
        let i = off >> 2u;
        let odd = (off & 2u) != 0u;
        var ws: array<u32, 9>;
        let nw = select(5u, 9u, QTYPE == 8u);
        for (var k = 0u; k < 9u; k++) {
            if (k < nw) {
                ws[k] = wd(i + k);
            }
        }
        if (QTYPE == 8u) {
            // Q8_0: f16 d, 32 i8: f32(q) * d.
            let d = f16_bits(select(ws[0], ws[0] >> 16u, odd));
            for (var k = 0u; k < 8u; k++) {
                let q = bitcast<vec4<i32>>(vec4<u32>(shifted(ws, k, odd)) << vec4<u32>(24u, 16u, 8u, 0u));
                o[k] = vec4<f32>(q >> vec4<u32>(24u)) * d;
            }
        } else if (QTYPE == 2u) {
            // Q4_0: f16 d, 16 bytes of nibbles: d * (nib - 8).
            let d = f16_bits(select(ws[0], ws[0] >> 16u, odd));
            for (var k = 0u; k < 4u; k++) {
                let n = nibbles(shifted(ws, k, odd));
                o[k] = d * vec4<f32>(vec4<i32>(n[0]) - vec4<i32>(8));
                o[4u + k] = d * vec4<f32>(vec4<i32>(n[1]) - vec4<i32>(8));
            }
        } else {
            // Q4_1 (20-byte blocks: always word-aligned): f16 d, f16 m, nibbles: d * nib + m.
            let d = f16_bits(ws[0]);
            let m = f16_bits(ws[0] >> 16u);
            for (var k = 0u; k < 4u; k++) {
                let n = nibbles(ws[k + 1u]);
                o[k] = d * vec4<f32>(n[0]) + m;
                o[4u + k] = d * vec4<f32>(n[1]) + m;
            }
        }
        return o;
    }
    // Other block formats: 16 elements of a block through dequant16.
    let upb = BLOCK / 16u;
    let v = dequant16(row * nb * TS + (u / upb) * TS, u % upb);
    for (var j = 0u; j < 4u; j++) {
        o[j] = vec4<f32>(v[4u * j], v[4u * j + 1u], v[4u * j + 2u], v[4u * j + 3u]);
    }
    return o;
}

// The UE / 4 vec4s of x (or of the norm weights) a unit needs, from `mine` (lane l holds vec4
// l % (UE / 4)): constant-lane broadcasts, which llvmpipe does with a register extract.
fn spread(mine: vec4<f32>) -> array<vec4<f32>, 8> {
    var o: array<vec4<f32>, 8>;
    o[0] = subgroupBroadcast(mine, 0u);
    if (UE >= 8u) {
        o[1] = subgroupBroadcast(mine, 1u);
    }
    if (UE >= 16u) {
        o[2] = subgroupBroadcast(mine, 2u);
        o[3] = subgroupBroadcast(mine, 3u);
    }
    if (UE >= 32u) {
        o[4] = subgroupBroadcast(mine, 4u);
        o[5] = subgroupBroadcast(mine, 5u);
        o[6] = subgroupBroadcast(mine, 6u);
        o[7] = subgroupBroadcast(mine, 7u);
    }
    return o;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32) {
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.wg_end) {
        return;
    }
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
    let my_row = ((g - first_wg) * WG + lid) * R;
    let c4 = p.cols / 4u;

    // Norm prologue: inv_rms of each column (lanes take every `lanes`-th vec4, then a
    // subgroup sum). A workgroup smaller than the device's subgroup (8 invocations on a GPU
    // with 32-lane subgroups) is one partial subgroup of WG lanes.
    var inv: array<f32, 8>;
    let lanes = min(sg_size, WG);
    if (NORM != 0u) {
        for (var t = 0u; t < NC; t++) {
            var s = vec4<f32>(0.0);
            for (var i = sg_lane; i < c4; i += lanes) {
                let a = x4[t * c4 + i];
                s += a * a;
            }
            let total = subgroupAdd(s.x + s.y + s.z + s.w);
            inv[t] = 1.0 / sqrt(total / f32(p.cols) + p.eps);
        }
    }

    var acc: array<f32, 16>;
    for (var k = 0u; k < 16u; k++) {
        acc[k] = 0.0;
    }
    let nslots = select(R, 2u * R, gated());
    let uv = UE / 4u;
    let units = p.cols / UE;
    // Lane l loads vec4 l % uv of each unit of x; the others come by broadcast.
    let my_vec = sg_lane % uv;
    let last = rows - 1u;
    for (var u = 0u; u < units; u++) {
        // The lane's own vec4 of the norm weights: applied to x before the broadcast.
        var g = vec4<f32>(1.0);
        if (NORM != 0u) {
            g = p.norm_offset + nw4[u * uv + my_vec];
        }
        // The unit of each row (gated: then of each up row), decoded once for every column. The
        // part is set before each decode loop and not changed inside it, so `wd` resolves to
        // one binding when the loops unroll (a part chosen per lane would load from all three).
        // Every lane stays active to the end (the broadcasts need the whole subgroup): rows
        // past the end read the last row.
        var v: array<array<vec4<f32>, 8>, 4>;
        cur = part;
        for (var k = 0u; k < R; k++) {
            v[k] = unit_vals(min(my_row + k, last), u);
        }
        if (gated()) {
            cur = 1u;
            for (var k = 0u; k < R; k++) {
                v[R + k] = unit_vals(min(my_row + k, last), u);
            }
        }
        for (var t = 0u; t < NC; t++) {
            let xs = spread(x4[t * c4 + u * uv + my_vec] * g);
            for (var k = 0u; k < nslots; k++) {
                var s = 0.0;
                for (var j = 0u; j < uv; j++) {
                    s += dot(v[k][j], xs[j]);
                }
                acc[k * NC + t] += s;
            }
        }
    }

    for (var r = 0u; r < R; r++) {
        let row = my_row + r;
        for (var t = 0u; t < NC; t++) {
            if (row >= rows) {
                continue;
            }
            var scale = 1.0;
            if (NORM != 0u) {
                scale = inv[t];
            }
            var up = 0.0;
            if (gated()) {
                up = acc[(R + r) * NC + t] * scale;
            }
            epilogue_store(t * p.y_stride + yoff + row, acc[r * NC + t] * scale, up);
        }
    }
}
