// Gated activations fused with the multiply (the MLP's GLU):
//   silu_mul:      out = silu(gate) * up,      silu(x) = x / (1 + exp(-x))
//   gelu_tanh_mul: out = gelu_tanh(gate) * up, gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
// Shapes: gate, up, out: flat arrays of `n` f32 (out may alias gate or up).
// Workgroup: WG invocations (default 256), one element each, 2-D grid as in elementwise.wgsl.
// Shared memory: none. Memory bound (two reads, one write per element).
// HALF: 1 also writes `out` as f16 pairs to out16 ([n / 2] u32, n even; to_f16.wgsl's layout),
// for a cooperative-matrix matmul that reads it as f16 X: each invocation then computes the
// pair (2i, 2i + 1) (the grid covers n / 2 invocations), each element by the same expression.
override HALF: u32 = 0;

override WG: u32 = 256;

struct Params {
    n: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> out16: array<u32>;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

fn silu_mul_at(i: u32) -> f32 {
    let g = gate[i];
    // exp(-g) overflows to inf for g < -88: g / inf = -0, the right limit.
    return (g / (1.0 + exp(-g))) * up[i];
}

fn gelu_tanh_mul_at(i: u32) -> f32 {
    let g = gate[i];
    let inner = 0.7978845608028654 * (g + 0.044715 * g * g * g);
    // tanh is +-1 in f32 beyond |x| = 9.1; the clamp avoids inf/inf in exp-based tanh.
    let t = tanh(clamp(inner, -15.0, 15.0));
    return (0.5 * g * (1.0 + t)) * up[i];
}

// HALF: the pair (2i, 2i + 1), both read before either is written (out may alias gate or up).
fn store_pair(i: u32, a: f32, b: f32) {
    out[2u * i] = a;
    out[2u * i + 1u] = b;
    out16[i] = pack2x16float(vec2<f32>(a, b));
}

@compute @workgroup_size(WG)
fn silu_mul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (HALF == 1u) {
        if (2u * i < p.n) {
            store_pair(i, silu_mul_at(2u * i), silu_mul_at(2u * i + 1u));
        }
        return;
    }
    if (i < p.n) {
        out[i] = silu_mul_at(i);
    }
}

@compute @workgroup_size(WG)
fn gelu_tanh_mul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (HALF == 1u) {
        if (2u * i < p.n) {
            store_pair(i, gelu_tanh_mul_at(2u * i), gelu_tanh_mul_at(2u * i + 1u));
        }
        return;
    }
    if (i < p.n) {
        out[i] = gelu_tanh_mul_at(i);
    }
}
