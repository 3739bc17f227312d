//! The second cooperative-matrix prefill attention specialises for every head dim, KV type,
//! subgroup size, workgroup size and GQA group it accepts, and rejects what it does not run.

use vkllm_kernels::attention::AttnShape;
use vkllm_kernels::attention_prefill_coop::AttnPrefillCoop;
use vkllm_kernels::attention_prefill_coop2::{ATTN_PREFILL_COOP2, CoopAttn2Tile};
use vkllm_kernels::kv_append::KvType;
use vkllm_kernels::{KernelBuffer, SpirvOptions, compile_spirv};

#[derive(Clone, Copy)]
struct Fake(u64);
impl KernelBuffer for Fake {
    fn byte_len(&self) -> u64 {
        self.0
    }
}

fn shape(n_q: usize, heads: usize, kv_heads: usize, hd: usize, kv: KvType) -> AttnShape {
    AttnShape {
        n_q,
        n_heads: heads,
        n_kv_heads: kv_heads,
        head_dim: hd,
        n_kv: n_q + 7,
        scale: 0.125,
        softcap: None,
        window: None,
        kv,
        kv_v: kv,
        rot_k: false,
        kv_stride: 0,
        ring: None,
    }
}

fn op() -> AttnPrefillCoop<Fake> {
    let big = Fake(1 << 30);
    AttnPrefillCoop {
        q: big,
        k: big,
        v: big,
        q_pos: big,
        out: big,
    }
}

#[test]
fn variants_emit_spirv() {
    let mut n = 0;
    for hd in [32, 64, 96, 128] {
        for kv in [KvType::F32, KvType::F16] {
            for sg in [16, 32, 64] {
                for (nsg, bk) in [(2, 32), (4, 32), (2, 64), (4, 64)] {
                    for (heads, kv_heads) in [(16, 8), (32, 8), (6, 2)] {
                        let group = heads / kv_heads;
                        let Some(t) = CoopAttn2Tile::with_nsg(nsg, hd, group, sg, kv)
                            .and_then(|t| t.with_bk(bk, hd, sg, kv))
                        else {
                            continue;
                        };
                        // Every other variant loads V as it stages it.
                        let t = CoopAttn2Tile {
                            v_ahead: n % 2 == 0,
                            ..t
                        };
                        let s = shape(100, heads, kv_heads, hd, kv);
                        let d = op().dispatch_v2(&s, 7, sg, t).expect("valid shape");
                        // Tiles of 16 * nsg / group queries, one workgroup per kv head.
                        let bq = 16 * nsg as usize / group;
                        assert_eq!(d.groups, [100usize.div_ceil(bq) as u32, kv_heads as u32, 1]);
                        let words = compile_spirv(
                            &ATTN_PREFILL_COOP2,
                            &d.overrides,
                            SpirvOptions::default(),
                        )
                        .unwrap_or_else(|e| panic!("hd {hd} sg {sg} nsg {nsg} bk {bk}: {e}"));
                        assert_eq!(words[0], 0x0723_0203);
                        if let Ok(dir) = std::env::var("VKLLM_DUMP_SPIRV") {
                            let bytes: Vec<u8> =
                                words.iter().flat_map(|w| w.to_le_bytes()).collect();
                            let name = format!(
                                "{dir}/coop2_{hd}_{}_{sg}_{nsg}_{group}_{bk}.spv",
                                kv.name()
                            );
                            std::fs::write(name, bytes).expect("dump");
                        }
                        n += 1;
                    }
                }
            }
        }
    }
    assert!(n >= 150, "only {n} variants");
}

#[test]
fn rejects_what_it_cannot_run() {
    let t = CoopAttn2Tile::for_shape(128, 2, 32, KvType::F16).expect("qwen3 shape");
    // Queries past the cache.
    let s = shape(100, 16, 8, 128, KvType::F16);
    assert!(op().dispatch_v2(&s, 8, 32, t).is_err());
    // Per-slot caches are decode only.
    let mut s2 = shape(10, 16, 8, 128, KvType::F16);
    s2.kv_stride = 64;
    assert!(op().dispatch_v2(&s2, 0, 32, t).is_err());
    // Head dim 256.
    let s3 = shape(10, 16, 8, 256, KvType::F16);
    assert!(op().dispatch_v2(&s3, 0, 32, t).is_err());
    // A GQA group of 32.
    let s4 = shape(10, 32, 1, 128, KvType::F16);
    assert!(op().dispatch_v2(&s4, 0, 32, t).is_err());
    // A negative threshold.
    let bad = CoopAttn2Tile {
        rescale_t: -1.0,
        ..t
    };
    assert!(
        op().dispatch_v2(&shape(10, 16, 8, 128, KvType::F16), 0, 32, bad)
            .is_err()
    );
    // 64 keys per step past head dim 128, over f32, or 48 keys.
    let s5 = shape(10, 16, 8, 256, KvType::F16);
    let t5 = CoopAttn2Tile::for_shape(256, 2, 32, KvType::F16).expect("hd 256");
    assert!(op().dispatch_v2(&s5, 0, 32, t5).is_ok());
    assert!(
        op().dispatch_v2(&s5, 0, 32, CoopAttn2Tile { bk: 64, ..t5 })
            .is_err()
    );
    let s6 = shape(10, 16, 8, 128, KvType::F32);
    assert!(
        op().dispatch_v2(&s6, 0, 32, CoopAttn2Tile { bk: 64, ..t })
            .is_err()
    );
    let s7 = shape(10, 16, 8, 128, KvType::F16);
    assert!(
        op().dispatch_v2(&s7, 0, 32, CoopAttn2Tile { bk: 64, ..t })
            .is_ok()
    );
    assert!(
        op().dispatch_v2(&s7, 0, 32, CoopAttn2Tile { bk: 48, ..t })
            .is_err()
    );
    // An unknown skip bit.
    let bad = CoopAttn2Tile { skip: 16, ..t };
    assert!(
        op().dispatch_v2(&shape(10, 16, 8, 128, KvType::F16), 0, 32, bad)
            .is_err()
    );
    // Small buffers.
    let mut small = op();
    small.out = Fake(4);
    assert!(
        small
            .dispatch_v2(&shape(10, 16, 8, 128, KvType::F16), 0, 32, t)
            .is_err()
    );
}

#[test]
fn split_launches() {
    use vkllm_kernels::attention_prefill_coop2::CoopAttn2Scratch;
    let s = shape(512, 16, 8, 128, KvType::F16);
    let t = CoopAttn2Tile::for_shape(128, 2, 32, KvType::F16).expect("supported");
    // 512 queries from position 0: the heaviest tile walks 16 steps, so tiles of 9 or more
    // are split in 2 (no part longer than 8 steps); a one-step chunk cannot be split.
    let t2 = t.with_split(2, 512, 0);
    assert_eq!((t2.split, t2.split_min), (2, 9));
    assert_eq!(t.with_split(2, 20, 0).split, 1);
    assert_eq!(t.with_split(1, 512, 0).split, 1);
    let sc = |part: u64, ctr: u64| {
        Some(CoopAttn2Scratch {
            part: Fake(part),
            ctr: Fake(ctr),
        })
    };
    let (pb, cb) = (t2.part_bytes(&s), t2.counter_bytes(&s));
    // 16 tiles x 8 kv heads, 2 parts of 64 rows of 130 floats each.
    assert_eq!(pb, 16 * 8 * 2 * 64 * 130 * 4);
    assert_eq!(cb, 16 * 8 * 4);
    let d = op()
        .dispatch_v2_full(&s, 0, 32, t2, None, sc(pb, cb))
        .expect("valid split");
    assert_eq!(d.groups, [32, 8, 1]);
    compile_spirv(&ATTN_PREFILL_COOP2, &d.overrides, SpirvOptions::default())
        .unwrap_or_else(|e| panic!("split: {e}"));
    // Missing or short scratch, and splits outside 1..=MAX_SPLIT, are errors.
    assert!(op().dispatch_v2_full(&s, 0, 32, t2, None, None).is_err());
    assert!(
        op().dispatch_v2_full(&s, 0, 32, t2, None, sc(pb - 4, cb))
            .is_err()
    );
    assert!(
        op().dispatch_v2_full(&s, 0, 32, t2, None, sc(pb, cb - 4))
            .is_err()
    );
    let over = vkllm_kernels::attention_prefill_coop2::MAX_SPLIT + 1;
    for bad in [(0, 1), (over, 1), (2, 0)] {
        let b = CoopAttn2Tile {
            split: bad.0,
            split_min: bad.1,
            ..t
        };
        assert!(
            op().dispatch_v2_full(&s, 0, 32, b, None, sc(1 << 30, 1 << 20))
                .is_err(),
            "{bad:?}"
        );
    }
}

/// The default split. Without a multiprocessor count: a full chunk from position 0 keeps 2
/// parts, a short chunk deep in the cache gets enough parts for ~512 workgroups (Llama-3.1-8B:
/// 4 query tiles x 8 kv heads; the 35B-A3B's head dim 256: 16 tiles x 2 kv heads x 2 column
/// halves), capped at MAX_SPLIT and at 8 steps per part. With one: the wave rule. Value-column
/// launches split and count per column half.
#[test]
fn auto_split_fills_the_grid_and_its_waves() {
    use vkllm_kernels::attention_prefill_coop2::{CoopAttn2Scratch, MAX_SPLIT};
    let t128 = CoopAttn2Tile::with_nsg(4, 128, 4, 32, KvType::F16).expect("supported");
    // Without a multiprocessor count: ~512 workgroups, at least 2; 9 steps at position 200
    // (parts of at least 8 steps) allow only the minimum 2.
    for (n_q, pos0, want) in [
        (512, 0, 2),
        (64, 8192, 16),
        (64, 200, 2),
        (64, 1000, 4),
        (20, 0, 2),
    ] {
        let s = shape(n_q, 32, 8, 128, KvType::F16);
        assert_eq!(t128.auto_split(&s, pos0, None), want, "{n_q}@{pos0}");
    }
    let t256 = CoopAttn2Tile::with_nsg(2, 256, 8, 32, KvType::F16).expect("supported");
    let s = shape(64, 16, 2, 256, KvType::F16);
    assert_eq!(t256.auto_split(&s, 8192, None), 8);
    assert!(t256.auto_split(&s, 1 << 20, None) <= MAX_SPLIT);
    // The wave rule on 132 multiprocessors (8 subgroups each: 264 workgroups of 4, 528 of 2),
    // against the H200 sweep of session 32 (the kernel alone, 64-key steps, us): 240 queries at
    // 8192, 120 workgroups: 2 fills one wave (422; the first rule's 5: 507); 64 at 8192, 32
    // workgroups: 8 fill 256 of 264 (190; 16: 288); 512 queries, 256 workgroups, already a wave
    // (4096: 410 unsplit, 467 split 2); few steps: no split (parts of at least 8 steps).
    let w64 = t128.with_bk(64, 128, 32, KvType::F16).expect("64 keys");
    let cu = Some(132);
    for (n_q, pos0, want) in [
        (240, 8192, 2),
        (64, 8192, 8),
        (512, 4096, 1),
        (512, 32768, 1),
        (64, 100, 1),
    ] {
        let s = shape(n_q, 32, 8, 128, KvType::F16);
        assert_eq!(w64.auto_split(&s, pos0, cu), want, "{n_q}@{pos0}");
    }
    // Head dim 256, 16/2 heads, 240 queries at 8192: 60 tiles x 2 kv heads x 2 column halves
    // = 240 workgroups of 2 subgroups; 2 parts fill one wave of 528.
    assert_eq!(t256.wave(132), 528);
    assert_eq!(
        t256.auto_split(&shape(240, 16, 2, 256, KvType::F16), 8192, cu),
        2
    );
    let t = t256.with_split(8, 64, 8192);
    assert_eq!(t.split, 8);
    // One counter per (column half, kv head, tile): 2 x 2 x 16.
    assert_eq!(t.counter_bytes(&s), 4 * 64);
    let deep = AttnShape {
        n_kv: 8192 + 64,
        ..s
    };
    let scratch = CoopAttn2Scratch {
        part: Fake(t.part_bytes(&deep)),
        ctr: Fake(t.counter_bytes(&deep)),
    };
    let d = op()
        .dispatch_v2_full(&deep, 8192, 32, t, None, Some(scratch))
        .expect("a split launch over column halves");
    assert_eq!(d.groups, [16 * 8, 2, 2]);
    compile_spirv(&ATTN_PREFILL_COOP2, &d.overrides, SpirvOptions::default())
        .unwrap_or_else(|e| panic!("split over column halves: {e}"));
    // The same with V loaded as each step stages it.
    let staged = CoopAttn2Tile {
        v_ahead: false,
        ..t
    };
    let scratch = CoopAttn2Scratch {
        part: Fake(t.part_bytes(&deep)),
        ctr: Fake(t.counter_bytes(&deep)),
    };
    let d = op()
        .dispatch_v2_full(&deep, 8192, 32, staged, None, Some(scratch))
        .expect("V staged");
    compile_spirv(&ATTN_PREFILL_COOP2, &d.overrides, SpirvOptions::default())
        .unwrap_or_else(|e| panic!("V staged at head dim 256: {e}"));
}
