// Elementwise f32 ops: add (out = a + b), scale (out = s * a), copy (out = a),
// softcap (out = cap * tanh(a / cap)), mul_rows (out[i] = a[i] * b[i % m]: b one row of m).
//
// Shapes: flat arrays of `n` f32; `out` may be the same buffer as `a` (each invocation reads its
// element before writing it).
// Workgroup: WG invocations (default 256), one element each; the grid is 2-D (x <= 65535) so
// arrays of any length fit: element = (wid.y * num_workgroups.x + wid.x) * WG + lid.
// Shared memory: none. Memory bound: one coalesced read per input, one write.

override WG: u32 = 256;

struct Params {
    n: u32,
    // scale factor for `scale`, cap for `softcap`, unused otherwise
    s: f32,
    // row length for `mul_rows`
    m: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i < p.n) {
        out[i] = a[i] + b[i];
    }
}

@compute @workgroup_size(WG)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i < p.n) {
        out[i] = p.s * a[i];
    }
}

@compute @workgroup_size(WG)
fn copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i < p.n) {
        out[i] = a[i];
    }
}

@compute @workgroup_size(WG)
fn softcap(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i < p.n) {
        // tanh saturates to +-1 in f32 beyond |t| = 9.1; clamping keeps drivers whose tanh is
        // built from exp away from inf/inf.
        let t = clamp(a[i] / p.s, -15.0, 15.0);
        out[i] = p.s * tanh(t);
    }
}

@compute @workgroup_size(WG)
fn mul_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i < p.n) {
        out[i] = a[i] * b[i % p.m];
    }
}
