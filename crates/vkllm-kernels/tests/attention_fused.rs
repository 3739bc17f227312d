//! The fused decode attention kernel's binding and the memory-ordering facts its "last workgroup
//! merges" pattern relies on (checked in the emitted SPIR-V, since naga chooses them).

use vkllm_kernels::attention::{
    ATTN_DECODE_FUSED, AttnDecode, AttnDecodeFused, AttnShape, GQA_MAX,
};
use vkllm_kernels::kv_append::KvType;
use vkllm_kernels::{Error, KernelBuffer, Overrides, SpirvOptions, compile_spirv};

#[derive(Clone, Copy, Debug)]
struct Fake(u64);
impl KernelBuffer for Fake {
    fn byte_len(&self) -> u64 {
        self.0
    }
}

fn shape(n_q: usize, n_heads: usize, n_kv_heads: usize, n_kv: usize) -> AttnShape {
    AttnShape {
        n_q,
        n_heads,
        n_kv_heads,
        head_dim: 64,
        n_kv,
        scale: 0.125,
        softcap: None,
        window: None,
        kv: KvType::F16,
        kv_v: KvType::F16,
        rot_k: false,
        kv_stride: if n_q > 1 { n_kv } else { 0 },
        ring: None,
    }
}

/// Buffers exactly as large as `s` needs with chunk `chunk`, counters `counters` bytes.
fn op(s: &AttnShape, chunk: usize, counters: u64) -> AttnDecodeFused<Fake> {
    let (ml, o) = AttnDecode::<Fake>::scratch_bytes(s, chunk);
    let qb = 4 * (s.n_q * s.n_heads * s.head_dim) as u64;
    let kvb = 2 * (s.n_q * s.n_kv * s.n_kv_heads * s.head_dim) as u64;
    AttnDecodeFused {
        q: Fake(qb),
        k: Fake(kvb),
        v: Fake(kvb),
        q_pos: Fake(4 * s.n_q as u64),
        part_ml: Fake(ml),
        part_o: Fake(o),
        out: Fake(qb),
        counters: Fake(counters),
    }
}

#[test]
fn fused_binding_grid_and_checks() {
    // 3 slots, 14 query heads over 2 kv heads (7 per group), 333 keys in chunks of 16: 21 chunks.
    let s = shape(3, 14, 2, 333);
    let need = AttnDecodeFused::<Fake>::counter_bytes(&s);
    assert_eq!(need, 4 * 3 * 2);
    let d = op(&s, 16, need).dispatch(&s, 16).unwrap();
    assert_eq!(d.groups, [21, 2, 3]);
    assert_eq!(d.buffers.len(), ATTN_DECODE_FUSED.bindings.len());
    // Counters one word short.
    assert!(matches!(
        op(&s, 16, need - 4).dispatch(&s, 16),
        Err(Error::BufferTooSmall { .. })
    ));
    // Chunks outside 16..=256 or not powers of two.
    for chunk in [8, 24, 512] {
        assert!(op(&s, 16, need).dispatch(&s, chunk).is_err(), "{chunk}");
    }
    // More query heads per kv head than the grouped split holds.
    let wide = shape(1, 2 * (GQA_MAX + 1), 2, 100);
    let n = AttnDecodeFused::<Fake>::counter_bytes(&wide);
    assert!(op(&wide, 16, n).dispatch(&wide, 16).is_err());
    // Partials sized for a larger chunk than dispatched.
    let mut small = op(&s, 16, need);
    small.part_o = Fake(AttnDecode::<Fake>::scratch_bytes(&s, 32).1);
    assert!(small.dispatch(&s, 16).is_err());
}

/// The partial buffers are `Coherent` (their stores and loads are non-private under the GLSL450
/// memory model), and the kernel's storage barriers are control barriers with Device memory scope
/// and AcquireRelease | UniformMemory semantics: the release/acquire fences around the counter's
/// atomic add.
#[test]
fn fused_spirv_orders_partials_at_device_scope() {
    let o = Overrides::new().set("KV_DTYPE", 1.0);
    let w = compile_spirv(&ATTN_DECODE_FUSED, &o, SpirvOptions::default()).unwrap();
    let mut consts = std::collections::HashMap::new();
    let mut coherent = Vec::new();
    let mut barriers = Vec::new();
    let mut atomic_adds = 0;
    let mut i = 5;
    while i < w.len() {
        let (count, op) = ((w[i] >> 16) as usize, w[i] & 0xffff);
        assert!(count > 0 && i + count <= w.len(), "malformed SPIR-V");
        match op {
            // OpConstant %type %id value
            43 if count == 4 => {
                consts.insert(w[i + 2], w[i + 3]);
            }
            // OpDecorate %id Coherent(23)
            71 if w[i + 2] == 23 => coherent.push(w[i + 1]),
            // OpControlBarrier %exec %mem %semantics
            224 => barriers.push((w[i + 1], w[i + 2], w[i + 3])),
            // OpAtomicIAdd
            234 => atomic_adds += 1,
            _ => {}
        }
        i += count;
    }
    // part_ml and part_o (the merge reads other workgroups' partials), k and v (the folded input
    // step appends the current key and reads it back after a storage barrier).
    assert_eq!(coherent.len(), 4, "part_ml, part_o, k and v are Coherent");
    assert_eq!(atomic_adds, 1);
    let (device, workgroup) = (1u32, 2u32);
    let acq_rel_uniform = 0x8 | 0x40;
    let storage = barriers
        .iter()
        .filter(|(e, m, s)| {
            consts.get(e) == Some(&workgroup)
                && consts.get(m) == Some(&device)
                && consts.get(s) == Some(&acq_rel_uniform)
        })
        .count();
    assert!(storage >= 3, "{storage} device-scope storage barriers");
}
