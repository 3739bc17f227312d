// f32 -> f16: out holds `n` halves, two per little-endian u32 word (element 2i in the low half,
// 2i + 1 in the high half; the high half of the last word is 0 when n is odd).
//
// Used to hand cooperative-matrix matmuls their activations as f16 (`matmul_coop.wgsl`, XH = 1):
// half the bytes per read and half the prefetch registers. Rounding: pack2x16float, i.e. to one
// of the two f16 values around each input (the parity test accepts either); inputs must be
// within f16 range (|v| <= 65504), as for the matmul itself.
// Workgroup: WG invocations, one output word each; 2-D grid as elementwise.wgsl (word =
// (wid.y * num_workgroups.x + wid.x) * WG + lid). Shared memory: none. Memory bound.

override WG: u32 = 256;

struct Params {
    n: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(WG)
fn to_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    let e = 2u * i;
    if (e >= p.n) {
        return;
    }
    var hi = 0.0;
    if (e + 1u < p.n) {
        hi = a[e + 1u];
    }
    out[i] = pack2x16float(vec2<f32>(a[e], hi));
}
