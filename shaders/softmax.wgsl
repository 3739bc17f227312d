// Softmax over rows: out = exp(x - max) / sum(exp(x - max)); a row of all -inf gives zeros
// (a fully masked row), as the CPU op does.
//
// Shapes: x, out: [rows, n] f32 (out may be x).
// Workgroup: WG invocations (default 256) per row, striding over it (coalesced); max and sum are
// reduced with subgroupMax/subgroupAdd then across subgroups through shared memory (any subgroup
// size >= 4). Three passes over the row (max, sum, write); rows up to vocabulary size (~256k) are
// read from cache/L2 after the first pass.
// Shared memory: 64 f32 (256 B).
// #include reduce.inc.wgsl

override WG: u32 = 256;

struct Params {
    rows: u32,
    n: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.n;
    let neg_inf = bitcast<f32>(0xff800000u);
    var m = neg_inf;
    for (var i = lid; i < p.n; i += WG) {
        m = max(m, x[base + i]);
    }
    m = wg_max(m, sg_id, sg_lane, n_sg);
    if (m == neg_inf) {
        for (var i = lid; i < p.n; i += WG) {
            out[base + i] = 0.0;
        }
        return;
    }
    var s = 0.0;
    for (var i = lid; i < p.n; i += WG) {
        s += exp(x[base + i] - m);
    }
    s = wg_sum(s, sg_id, sg_lane, n_sg);
    let inv = 1.0 / s;
    for (var i = lid; i < p.n; i += WG) {
        out[base + i] = exp(x[base + i] - m) * inv;
    }
}
