enable f16;
enable wgpu_cooperative_matrix;
// The cooperative operations run in loops over `var` counters, which naga takes as non-uniform
// (they are uniform: push constants and workgroup ids); its uniformity check is off here.
diagnostic(off, derivative_uniformity);

// The grouped expert products of moe_experts_grouped.wgsl (stages 0, 1, 2 of `grouped`: same
// bindings, push constants, slot lists and outputs) on cooperative matrices
// (VK_KHR_cooperative_matrix, f16 x f16 -> f32, 16 x 16 x 16, subgroup scope):
//   stage 0 (w = gate, src = x):   act[slot, r] = gate[e] . x[t]
//   stage 1 (w = up,   src = x):   act[slot, r] = silu(act[slot, r]) * (up[e] . x[t])
//   stage 2 (w = down, src = act): y[slot, c] = down[e] . act[slot]
// (slot = t * top_k + choice, listed per expert e by the `group` entry of that file).
// Precision: the source rows and the dequantized weights are rounded to f16, products summed in
// f32 (vkllm_cpu::moe_experts_f16 is the oracle).
//
// Workgroup: 4 subgroups of SG invocations (WG = 4 SG; SG 16, 32 or 64) own a tile of BM = 32
// slots x BN = 128 rows of one expert (wid.z); subgroup s computes rows 32 s .. 32 s + 32 as
// 2 x 2 accumulator tiles. K is walked in steps of BK = 32 columns through two shared-memory
// stages: the next step's source slice (gathered rows, f32 -> f16) and weight slice (blocks
// dequantized by `dequant16`) are loaded into registers before this step's multiplications and
// stored after them, one barrier per step. Grid (ceil(rows / BN), ceil(n / BM), E): tiles past
// the expert's slot count return at once. Each tile goes through a per-subgroup 16 x 16 scratch
// to its slots' rows (bounds-checked).
// Shared memory: 2 stages x (32 + 128) rows x 80 bytes + 4 KiB scratch + 36 words (~29 KiB).
// Needs cols a multiple of 32 and of BLOCK (Rust checks).
// #include quant_blocks.inc.wgsl
// #include quant_words.inc.wgsl
// #include moe_grouped_io.inc.wgsl

override SG: u32 = 32;
override WG: u32 = 128;
// Staged slots of a slice per invocation: 256 / WG.
override NPI: u32 = 2;
const BM: u32 = 32u;
const BN: u32 = 128u;
const BK: u32 = 32u;
// vec4<f16> per staged row (BK / 4 + 2: 16-byte aligned rows, 8 rows over different banks).
const LDV: u32 = 10u;
const SA: u32 = 320u;
const SB: u32 = 1280u;

var<workgroup> sa: array<vec4<f16>, 640>; // [stage][BM][LDV]
var<workgroup> sb: array<vec4<f16>, 2560>; // [stage][BN][LDV]
var<workgroup> sc: array<f32, 1024>; // [subgroup][16 x 16]
var<workgroup> tile_slots: array<u32, 32>;
// Every workgroup variable is a whole number of 16-byte words: a driver may lay them out in any
// order, and the cooperative loads and stores need 16-byte aligned stage and scratch arrays.
var<workgroup> wg_count: array<u32, 4>;

// The prefetch registers: NPI source slots and NPI dequantized weight units.
var<private> px: array<vec4<f32>, 4>;
var<private> pw: array<vec4<f16>, 16>;

// Loads this invocation's slots of the slices at k0: source slot i (row i / 8, columns
// k0 + 4 (i % 8) ..) and weight unit i (row i / 2, columns k0 + 16 (i % 2) ..), zero past the
// tile's slots and the expert's rows.
fn fetch(lid: u32, e: u32, nt: u32, r0: u32, k0: u32) {
    let rb = (p.cols / BLOCK) * TS;
    for (var j = 0u; j < NPI; j++) {
        let i = lid + j * WG;
        let s = i / 8u;
        var v = vec4<f32>(0.0);
        if (s < nt) {
            var row = tile_slots[s];
            if (p.stage != 2u) {
                row = row / p.top_k;
            }
            let o = row * p.cols + k0 + 4u * (i % 8u);
            v = vec4<f32>(src[o], src[o + 1u], src[o + 2u], src[o + 3u]);
        }
        px[j] = v;
        let r = r0 + i / 2u;
        let u = k0 / 16u + i % 2u;
        // (Assigned on both paths: naga initialises a function's variables once, at entry.)
        var d: array<f32, 16>;
        if (r < p.rows) {
            d = dequant16(unit_block((e * p.rows + r) * rb, u), u % (BLOCK / 16u));
        } else {
            d = array<f32, 16>();
        }
        for (var q = 0u; q < 4u; q++) {
            pw[4u * j + q] = vec4<f16>(vec4<f32>(d[4u * q], d[4u * q + 1u], d[4u * q + 2u],
                                                 d[4u * q + 3u]));
        }
    }
}

// Stores the prefetch registers into `stage`.
fn stash(lid: u32, stage: u32) {
    for (var j = 0u; j < NPI; j++) {
        let i = lid + j * WG;
        sa[stage * SA + (i / 8u) * LDV + i % 8u] = vec4<f16>(px[j]);
        let o = stage * SB + (i / 2u) * LDV + 4u * (i % 2u);
        for (var q = 0u; q < 4u; q++) {
            sb[o + q] = pw[4u * j + q];
        }
    }
}

// Accumulator tile c (slots m0.., rows r0.. of the tile) to its slots' rows of dst through the
// subgroup's scratch (stage 1 gates the stored gate values). Uniform control flow (barriers).
fn put(c: coop_mat16x16<f32, C>, sg_id: u32, lane: u32, nt: u32, m0: u32, r0: u32) {
    let scratch = sg_id * 256u;
    coopStoreT(c, &sc[scratch], 16u);
    workgroupBarrier();
    for (var q = lane; q < 256u; q += SG) {
        let m = m0 + q / 16u;
        let r = r0 + q % 16u;
        if (m < nt && r < p.rows) {
            let o = tile_slots[m] * p.rows + r;
            let v = sc[scratch + q];
            if (p.stage == 1u) {
                let g = dst[o];
                dst[o] = (g / (1.0 + exp(-g))) * v;
            } else {
                dst[o] = v;
            }
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let e = wid.z;
    if (lid == 0u) {
        wg_count[0] = lists[p.n_experts * p.n + e];
    }
    let count = workgroupUniformLoad(&wg_count[0]);
    let t0 = wid.y * BM;
    if (t0 >= count) {
        return;
    }
    let nt = min(BM, count - t0);
    let r0 = wid.x * BN;
    if (lid < BM) {
        var slot = 0u;
        if (lid < nt) {
            slot = lists[e * p.n + t0 + lid];
        }
        tile_slots[lid] = slot;
    }
    workgroupBarrier();
    let sn = sg_id * 32u;
    var c00: coop_mat16x16<f32, C>;
    var c01: coop_mat16x16<f32, C>;
    var c10: coop_mat16x16<f32, C>;
    var c11: coop_mat16x16<f32, C>;
    fetch(lid, e, nt, r0, 0u);
    stash(lid, 0u);
    workgroupBarrier();
    var it = 0u;
    for (var k0 = 0u; k0 < p.cols; k0 += BK) {
        let kn = k0 + BK;
        if (kn < p.cols) {
            fetch(lid, e, nt, r0, kn);
        }
        let cur = it & 1u;
        for (var kk = 0u; kk < BK / 4u; kk += 4u) {
            let pa = cur * SA + kk;
            let pb = cur * SB + sn * LDV + kk;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sa[pa], LDV);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&sa[pa + 16u * LDV], LDV);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&sb[pb], LDV);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&sb[pb + 16u * LDV], LDV);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        if (kn < p.cols) {
            // The other stage was last read in the step before, which the barrier closed.
            stash(lid, 1u - cur);
        }
        it += 1u;
        workgroupBarrier();
    }
    put(c00, sg_id, lane, nt, 0u, r0 + sn);
    put(c01, sg_id, lane, nt, 0u, r0 + sn + 16u);
    put(c10, sg_id, lane, nt, 16u, r0 + sn);
    put(c11, sg_id, lane, nt, 16u, r0 + sn + 16u);
}
