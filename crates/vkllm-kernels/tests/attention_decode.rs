//! The decode split's binding with adaptive chunks (the grid and partials cover the most chunks
//! any query's position can take, bad chunk settings are refused) and the wide split's limits.

use vkllm_kernels::attention::{ADAPT_CHUNKS, AttnDecode, AttnShape, Chunking};
use vkllm_kernels::kv_append::KvType;
use vkllm_kernels::{Error, KernelBuffer};

#[derive(Clone, Copy, Debug)]
struct Fake(u64);
impl KernelBuffer for Fake {
    fn byte_len(&self) -> u64 {
        self.0
    }
}

fn shape(n_q: usize, n_kv: usize, window: Option<usize>) -> AttnShape {
    AttnShape {
        n_q,
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
        n_kv,
        scale: 0.088,
        softcap: None,
        window,
        kv: KvType::F16,
        kv_v: KvType::F16,
        rot_k: false,
        kv_stride: n_kv,
        ring: None,
    }
}

fn op(s: &AttnShape, c: Chunking) -> AttnDecode<Fake> {
    let (ml, o) = AttnDecode::<Fake>::scratch_bytes(s, c);
    let qb = 4 * (s.n_q * s.n_heads * s.head_dim) as u64;
    let kvb = 2 * (s.n_q * s.n_kv * s.n_kv_heads * s.head_dim) as u64;
    AttnDecode {
        q: Fake(qb),
        k: Fake(kvb),
        v: Fake(kvb),
        q_pos: Fake(4 * s.n_q as u64),
        part_ml: Fake(ml),
        part_o: Fake(o),
        out: Fake(qb),
        sink: None,
    }
}

#[test]
fn adaptive_chunks_size_grid_and_partials() {
    // An 8B-shaped step over a 33,408-position cache: chunks of 256 cover it in 131; a query
    // near the start takes 16-key chunks, up to ADAPT_CHUNKS of them.
    let s = shape(2, 33_408, None);
    assert_eq!(AttnDecode::<Fake>::n_chunks(&s, 256), 131);
    let adaptive = Chunking::adaptive(256, 16);
    assert_eq!(AttnDecode::<Fake>::n_chunks(&s, adaptive), 131);
    let [split, merge] = op(&s, adaptive).dispatch_gqa(&s, adaptive).unwrap();
    assert_eq!(split.groups, [131, 8, 2]);
    assert_eq!(merge.groups, [32, 2, 4]);
    // A 4,096-position cache: chunks of 32 take 128, so do 16-key ones (the target).
    let s = shape(1, 4096, None);
    assert_eq!(AttnDecode::<Fake>::n_chunks(&s, 32), 128);
    assert_eq!(
        AttnDecode::<Fake>::n_chunks(&s, Chunking::adaptive(32, 8)),
        ADAPT_CHUNKS
    );
    // A short cache: no more chunks than its keys fill.
    let s = shape(1, 100, None);
    assert_eq!(
        AttnDecode::<Fake>::n_chunks(&s, Chunking::adaptive(16, 8)),
        13
    );
    // A window bounds the span.
    let s = shape(1, 10_000, Some(512));
    assert_eq!(
        AttnDecode::<Fake>::n_chunks(&s, Chunking::adaptive(64, 16)),
        32
    );
    // The partials follow the count: fixed-size buffers are too small for the adaptive grid.
    let s = shape(1, 4096, None);
    let small = op(&s, 64.into());
    assert!(matches!(
        small.dispatch_gqa(&s, Chunking::adaptive(64, 16)),
        Err(Error::BufferTooSmall { .. })
    ));
}

#[test]
fn adaptive_chunk_settings_are_checked() {
    let s = shape(1, 4096, None);
    for bad in [
        Chunking::adaptive(64, 4),
        Chunking { chunk: 64, min: 24 },
        Chunking { chunk: 32, min: 64 },
    ] {
        assert!(
            op(&s, 64.into()).dispatch_gqa(&s, bad).is_err(),
            "{bad:?} accepted"
        );
    }
    // The reference split has no adaptive form.
    assert!(op(&s, 64.into()).dispatch(&s, 64).is_ok());
}

#[test]
fn wide_split_takes_f16_slots_and_quantized_units() {
    let s = shape(2, 33_408, None);
    let adaptive = Chunking::adaptive(256, 16);
    let [split, merge] = op(&s, adaptive).dispatch_wide(&s, adaptive).unwrap();
    // The grouped split's grid and the shared merge; the group and head size are constants of
    // the pipeline.
    assert_eq!(split.groups, [131, 8, 2]);
    assert_eq!(merge.groups, [32, 2, 4]);
    assert_eq!(split.kernel.name, "attn_decode_split_wide");
    assert_eq!(merge.kernel.name, "attn_decode_merge");
    let ov = split.overrides.to_string();
    assert!(ov.contains("GQ=4") && ov.contains("HD=128"), "{ov}");
    // Quantized caches take the quantized form with its types and rotation as constants.
    let q = AttnShape {
        kv: KvType::Q8_0,
        kv_v: KvType::Tq4,
        rot_k: true,
        ..s
    };
    let [split, _] = op(&q, adaptive).dispatch_wide(&q, adaptive).unwrap();
    assert_eq!(split.kernel.name, "attn_decode_split_wide_quant");
    assert_eq!(split.groups, [131, 8, 2]);
    let ov = split.overrides.to_string();
    assert!(
        ov.contains("KV_DTYPE=2") && ov.contains("KV_DTYPE_V=4") && ov.contains("KV_ROT_K=1"),
        "{ov}"
    );
    // f16 mixed with another type, f16 heads that are not whole 16-byte slots, quantized heads
    // that are not whole 64-value units, groups past GQA_MAX and chunks past 256 are refused.
    let refused = [
        AttnShape {
            kv_v: KvType::F32,
            ..s
        },
        AttnShape { head_dim: 68, ..s },
        AttnShape {
            kv: KvType::Q8_0,
            kv_v: KvType::Q8_0,
            head_dim: 96,
            n_kv_heads: 8,
            ..s
        },
        AttnShape { n_heads: 72, ..s },
    ];
    for bad in refused {
        assert_eq!(AttnDecode::<Fake>::wide_applies(&bad), bad.n_heads == 72);
        assert!(
            op(&bad, 64.into()).dispatch_wide(&bad, 64).is_err(),
            "{bad:?} accepted"
        );
    }
    assert!(op(&s, 512.into()).dispatch_wide(&s, 512).is_err());
    assert!(
        op(&s, 64.into())
            .dispatch_wide(&s, Chunking::adaptive(64, 4))
            .is_err()
    );
}

/// A sink offset goes with quantized keys only and covers a whole K row (8 heads of 128).
#[test]
fn sink_offsets_are_checked() {
    let c = Chunking::from(64);
    let f16 = shape(1, 300, None);
    let q = AttnShape {
        kv: KvType::Q4_0,
        kv_v: KvType::Q4_0,
        ..f16
    };
    let with = |s: &AttnShape, bytes: u64| AttnDecode {
        sink: Some(Fake(bytes)),
        ..op(s, c)
    };
    assert!(matches!(
        with(&f16, 4096).dispatch_gqa(&f16, c),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        with(&q, 4 * 1024 - 4).dispatch_gqa(&q, c),
        Err(Error::BufferTooSmall { .. })
    ));
    let [split, _] = with(&q, 4 * 1024).dispatch_gqa(&q, c).unwrap();
    assert_eq!(split.buffers.len(), 8);
}

#[test]
fn wide_merged_split_is_one_dispatch_with_counters() {
    let s = shape(2, 33_408, None);
    let adaptive = Chunking::adaptive(256, 16);
    let counters = Fake(4 * 2 * 8);
    let d = op(&s, adaptive)
        .dispatch_wide_merged(&s, adaptive, counters)
        .unwrap();
    // The wide split's grid, its own entry, the split's bindings plus the counters.
    assert_eq!(d.groups, [131, 8, 2]);
    assert_eq!(d.kernel.name, "attn_decode_wide_merged");
    assert_eq!(d.kernel.entry, "split_merge");
    assert_eq!(d.buffers.len(), d.kernel.bindings.len());
    assert_eq!(d.buffers.last().unwrap().0, 4 * 2 * 8);
    // Quantized caches keep split + merge.
    let q = AttnShape {
        kv: KvType::Q4_0,
        kv_v: KvType::Q4_0,
        ..s
    };
    assert!(!AttnDecode::<Fake>::wide_merge_fits(&q, adaptive));
    assert!(
        op(&q, adaptive)
            .dispatch_wide_merged(&q, adaptive, counters)
            .is_err()
    );
    // One counter short, and more chunk weights than the merging workgroup stages (4 heads per
    // kv head x 1,044 chunks of 32 keys > 4096), are refused.
    assert!(matches!(
        op(&s, adaptive).dispatch_wide_merged(&s, adaptive, Fake(4 * 2 * 8 - 4)),
        Err(Error::BufferTooSmall { .. })
    ));
    assert!(AttnDecode::<Fake>::wide_merge_fits(&s, adaptive));
    assert!(!AttnDecode::<Fake>::wide_merge_fits(&s, 32));
    assert!(
        op(&s, 32.into())
            .dispatch_wide_merged(&s, 32, counters)
            .is_err()
    );
}
