// The sampler's exact arithmetic (vkllm_cpu::sampler v2): bit tests, exp_s, the top-p weight,
// log_s, Philox4x32-10 and the f32 of an exact 48-bit mass. Included by sample.wgsl; compiled
// with NoContraction like it, so every + - * rounds as the CPU's does.

// NaN / finiteness by bit tests: compilers may fold `x != x` to false.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u;
}

fn exp_s(x_in: f32) -> f32 {
    if (is_nan(x_in) || bitcast<u32>(x_in) == 0xff800000u || x_in < -86.0) {
        return 0.0;
    }
    let x = min(x_in, 0.0);
    let log2e = bitcast<f32>(0x3fb8aa3bu);
    let ln2_hi = bitcast<f32>(0x3f318000u);
    let ln2_lo = bitcast<f32>(0xb95e8083u);
    let k = floor(x * log2e + 0.5);
    let r = (x - k * ln2_hi) - k * ln2_lo;
    var q = bitcast<f32>(0x39500d01u) * r + bitcast<f32>(0x3ab60b61u);
    q = q * r + bitcast<f32>(0x3c088889u);
    q = q * r + bitcast<f32>(0x3d2aaaabu);
    q = q * r + bitcast<f32>(0x3e2aaaabu);
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r + 1.0;
    let scale = bitcast<f32>(u32(i32(k) + 127) << 23u);
    return q * scale;
}

// floor(exp_s(d) * 2^24): the top-p weight, in [0, 2^24].
fn weight_q(d: f32) -> u32 {
    return u32(floor(exp_s(d) * 16777216.0));
}

// log for positive normal x (the specification's log_s).
fn log_s(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    var e = i32((bits >> 23u) & 0xffu) - 127;
    var m = bitcast<f32>((bits & 0x007fffffu) | 0x3f800000u);
    if (m > bitcast<f32>(0x3fb504f3u)) {
        m = m * 0.5;
        e = e + 1;
    }
    let f = m - 1.0;
    var q = bitcast<f32>(0xbd800000u);
    q = q * f + bitcast<f32>(0x3d888889u);
    q = q * f + bitcast<f32>(0xbd924925u);
    q = q * f + bitcast<f32>(0x3d9d89d9u);
    q = q * f + bitcast<f32>(0xbdaaaaabu);
    q = q * f + bitcast<f32>(0x3dba2e8cu);
    q = q * f + bitcast<f32>(0xbdcccccdu);
    q = q * f + bitcast<f32>(0x3de38e39u);
    q = q * f + bitcast<f32>(0xbe000000u);
    q = q * f + bitcast<f32>(0x3e124925u);
    q = q * f + bitcast<f32>(0xbe2aaaabu);
    q = q * f + bitcast<f32>(0x3e4ccccdu);
    q = q * f + bitcast<f32>(0xbe800000u);
    q = q * f + bitcast<f32>(0x3eaaaaabu);
    q = q * f + bitcast<f32>(0xbf000000u);
    q = q * f + 1.0;
    q = q * f;
    let ef = f32(e);
    let r = q + ef * bitcast<f32>(0xb95e8083u);
    return r + ef * bitcast<f32>(0x3f318000u);
}

// (high, low) words of the 64-bit product a * b.
fn mulhilo(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, a * b);
}

fn philox(ctr_in: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = ctr_in;
    var k = key;
    for (var round = 0u; round < 10u; round++) {
        if (round > 0u) {
            k.x += 0x9e3779b9u;
            k.y += 0xbb67ae85u;
        }
        let r0 = mulhilo(0xd2511f53u, c.x);
        let r1 = mulhilo(0xcd9e8d57u, c.z);
        c = vec4<u32>(r1.x ^ c.y ^ k.x, r1.y, r0.x ^ c.w ^ k.y, r0.y);
    }
    return c;
}

// f32 of the exact sum hi * 2^12 + lo (hi, lo < 2^32, sum < 2^48), rounded once.
fn mass_f32(hi: u32, lo: u32) -> f32 {
    let a = hi << 12u;
    let l = a + lo;
    let carry = select(0u, 1u, l < a);
    let h = (hi >> 20u) + carry;
    let top = (h << 8u) | (l >> 24u);
    return f32(top) * 16777216.0 + f32(l & 0xffffffu);
}
