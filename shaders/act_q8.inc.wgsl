// Activations to int8 per 32-element unit (vkllm-cpu's `quantize_act_q8`), shared by
// matvec_q8a.wgsl (each workgroup into shared memory) and quantize_act_q8.wgsl (once per
// product): an invocation holds 8 consecutive elements (a, b) of a unit whose 4 invocations are
// subgroup lanes 4k .. 4k + 3, and all four call this together (subgroups of >= 4 lanes).
// amax = max |v|, d = amax * (1 / 127), q = round_half_even(v * (127 / amax)) in [-127, 127]
// (0 when amax = 0); s is the unit's code sum.
struct ActQ8Chunk {
    // Elements 0..4 and 4..8 as packed int8.
    qa: u32,
    qb: u32,
    d: f32,
    s: i32,
}

// Four codes in [-127, 127] as packed int8 (pack4xI8 would need naga's Int8 capability).
fn pack_i8(q: vec4<i32>) -> u32 {
    let b = bitcast<vec4<u32>>(q) & vec4<u32>(0xffu);
    return b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
}

fn act_q8_chunk(a: vec4<f32>, b: vec4<f32>) -> ActQ8Chunk {
    let m4 = max(abs(a), abs(b));
    var amax = max(max(m4.x, m4.y), max(m4.z, m4.w));
    amax = max(amax, subgroupShuffleXor(amax, 1u));
    amax = max(amax, subgroupShuffleXor(amax, 2u));
    let id = select(0.0, 127.0 / amax, amax > 0.0);
    let qa = vec4<i32>(clamp(round(a * id), vec4<f32>(-127.0), vec4<f32>(127.0)));
    let qb = vec4<i32>(clamp(round(b * id), vec4<f32>(-127.0), vec4<f32>(127.0)));
    var s = qa.x + qa.y + qa.z + qa.w + qb.x + qb.y + qb.z + qb.w;
    s += subgroupShuffleXor(s, 1u);
    s += subgroupShuffleXor(s, 2u);
    return ActQ8Chunk(pack_i8(qa), pack_i8(qb), amax * (1.0 / 127.0), s);
}
