// Greedy sampling: out[row] = index of the largest logit of the row (lowest index on ties; NaN
// never wins; a row with no non-NaN value gives 0).
//
// Shapes: logits [rows, n] f32; out [rows] u32.
// Workgroup: 256 invocations per row; each scans a strided slice (coalesced) keeping its best
// (value, index), then a shared-memory tree reduction (no subgroup-size assumption).
// Shared memory: 256 x (f32 + u32) = 2 KiB.

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;

struct Params {
    rows: u32,
    n: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

// Is (v, i) better than (bv, bi)? Indices are NONE for "no value yet".
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    if (i == NONE) {
        return false;
    }
    if (bi == NONE) {
        return true;
    }
    return v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= p.rows) {
        return;
    }
    var bv = 0.0;
    var bi = NONE;
    for (var c = lid; c < p.n; c += WG) {
        let v = logits[row * p.n + c];
        // NaN (by a bit test: compilers may fold `v != v`) is skipped.
        if ((bitcast<u32>(v) & 0x7fffffffu) <= 0x7f800000u && better(v, c, bv, bi)) {
            bv = v;
            bi = c;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            let ov = best_v[lid + stride];
            let oi = best_i[lid + stride];
            if (better(ov, oi, best_v[lid], best_i[lid])) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[row] = select(best_i[0], 0u, best_i[0] == NONE);
    }
}
