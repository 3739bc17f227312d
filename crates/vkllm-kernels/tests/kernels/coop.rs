//! The cooperative-matrix matmul's launches (`matmul_coop.wgsl`): every variant specialises and
//! emits SPIR-V, and the typed binding rejects tilings, configurations and segments it cannot run.

use vkllm_kernels::matvec::MatShape;
use vkllm_kernels::{Error, SpirvOptions, WeightType, compile_spirv};

use super::Fake;

/// Every weight type and both tilings of the cooperative-matrix matmul specialise (naga emits
/// CooperativeMatrixKHR, Float16 and the Vulkan memory model for them).
#[test]
fn coop_matmul_variants_emit_spirv() {
    use vkllm_kernels::matmul_coop::{CoopTile, MATMUL_COOP, MatmulCoop};
    let types = [WeightType::F32, WeightType::F16, WeightType::Bf16]
        .into_iter()
        .chain(WeightType::QUANTIZED);
    for (i, dt) in types.enumerate() {
        let tile = if i % 2 == 0 {
            CoopTile::LARGE
        } else {
            CoopTile::SMALL
        };
        let s = MatShape {
            dtype: dt,
            rows: 300,
            cols: 512,
            row_offset: 0,
            accumulate: false,
        };
        let w = Fake(dt.storage_bytes(300 * 512));
        let d = MatmulCoop {
            w,
            x: Fake(4 * 40 * 512),
            y: Fake(4 * 40 * 300),
        }
        .dispatch(&s, 40, 300, 32, tile)
        .unwrap_or_else(|e| panic!("{}: {e}", dt.name()));
        assert_eq!(d.groups, [300u32.div_ceil(tile.bn() as u32), 1, 1]);
        let words = compile_spirv(&MATMUL_COOP, &d.overrides, SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", dt.name()));
        // OpCapability CooperativeMatrixKHR (6022) and OpMemoryModel Logical Vulkan (3).
        let has = |op: u32, operands: &[u32]| {
            let mut i = 5;
            while i < words.len() {
                let n = (words[i] >> 16) as usize;
                if words[i] & 0xffff == op && words[i + 1..].starts_with(operands) {
                    return true;
                }
                i += n.max(1);
            }
            false
        };
        assert!(has(17, &[6022]), "{}: no CooperativeMatrixKHR", dt.name());
        assert!(
            has(14, &[0, 3]),
            "{}: not the Vulkan memory model",
            dt.name()
        );
    }
}

/// Split-K, K step 64, one stage, quantized prefetch and the direct epilogue specialise for every
/// weight type; the grid's z is the split and the scratch must cover every tile's partials and counter.
#[test]
fn coop_matmul_split_variants_emit_spirv() {
    use vkllm_kernels::matmul_coop::{CoopConfig, CoopTile, MATMUL_COOP, MatmulCoop, SplitScratch};
    let types = [WeightType::F32, WeightType::F16, WeightType::Bf16]
        .into_iter()
        .chain(WeightType::QUANTIZED);
    for (i, dt) in types.enumerate() {
        let (tile, bk, stages) = match i % 3 {
            0 => (CoopTile::TINY, 64, 2),
            1 => (CoopTile::SMALL, 64, 1),
            _ => (CoopTile::LARGE, 32, 2),
        };
        let cfg = CoopConfig {
            tile,
            bk,
            split: 3,
            stages,
            prefetch_quant: i % 2 == 0,
            x_f16: i % 4 == 1,
            // The split epilogue's cooperative sum of the partials (direct) on every other type.
            direct: i % 2 == 1,
        };
        assert!(cfg.fits(32), "{cfg:?}");
        let s = MatShape {
            dtype: dt,
            rows: 300,
            cols: 512,
            row_offset: 0,
            accumulate: true,
        };
        // 300 rows x 40 tokens: ceil(300 / bn) x 1 tiles of bm x bn f32, 3 splits each.
        let tiles = 300usize.div_ceil(tile.bn());
        let part = (tiles * 3 * tile.bm() * tile.bn() * 4) as u64;
        assert_eq!(cfg.scratch_bytes(300, 40), (part, 4 * tiles as u64));
        let mk = |part_len: u64, scratch: bool| {
            MatmulCoop {
                w: Fake(dt.storage_bytes(300 * 512)),
                x: Fake(4 * 40 * 512),
                y: Fake(4 * 40 * 300),
            }
            .dispatch_with(
                &s,
                40,
                300,
                32,
                &cfg,
                scratch.then_some(SplitScratch {
                    part: Fake(part_len),
                    counters: Fake(4 * tiles as u64),
                }),
            )
        };
        assert!(matches!(
            mk(part - 4, true),
            Err(Error::BufferTooSmall {
                binding: "part",
                ..
            })
        ));
        assert!(matches!(mk(part, false), Err(Error::Shape { .. })));
        let d = mk(part, true).unwrap_or_else(|e| panic!("{}: {e}", dt.name()));
        assert_eq!(d.groups, [tiles as u32, 1, 3]);
        compile_spirv(&MATMUL_COOP, &d.overrides, SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{} {cfg:?}: {e}", dt.name()));
    }
    // Two stages of K step 64 fit only 64 x 64 tiles in the shader's arrays (2 x 64 rows of
    // 72 halves); one stage fits 128 rows.
    let with = |tile, bk, stages| CoopConfig {
        tile,
        bk,
        split: 1,
        stages,
        prefetch_quant: false,
        x_f16: false,
        direct: false,
    };
    assert!(with(CoopTile::TINY, 64, 2).fits(32));
    // f16 X halves the X slots: 4 subgroups of 4 x 4 tiles at K step 64 read 8 slots of X per
    // invocation (16 as f32, too many), and 8 of 16-bit W (16 of f32 W, too many).
    let wide = CoopTile {
        sgm: 2,
        sgn: 2,
        wm: 4,
        wn: 4,
    };
    let wide_h = CoopConfig {
        x_f16: true,
        ..with(wide, 64, 1)
    };
    assert!(!with(wide, 64, 1).fits_for(32, WeightType::F16));
    assert!(wide_h.fits_for(32, WeightType::F16) && wide_h.fits_for(32, WeightType::Q4_K));
    assert!(!wide_h.fits_for(32, WeightType::F32) && !wide_h.fits(32));
    assert!(!with(CoopTile::SMALL, 64, 2).fits(32));
    assert!(with(CoopTile::SMALL, 64, 1).fits(32));
    assert!(with(CoopTile::LARGE, 64, 1).fits(32));
    assert!(!with(CoopTile::LARGE, 48, 1).fits(32));
    assert!(!with(CoopTile::LARGE, 32, 3).fits(32));
    assert!(
        !CoopConfig {
            split: 17,
            ..with(CoopTile::TINY, 32, 2)
        }
        .fits(32)
    );
    // 1024 columns at K step 64: 16 steps, 4 per share of a 4-way split; 1000 columns: 16
    // steps (the last partial), 6 per share of 3 (the last has 4).
    assert_eq!(
        CoopConfig {
            split: 4,
            ..with(CoopTile::TINY, 64, 2)
        }
        .share_steps(1024),
        4
    );
    assert_eq!(
        CoopConfig {
            split: 3,
            ..with(CoopTile::TINY, 64, 2)
        }
        .share_steps(1000),
        6
    );
}

#[test]
fn coop_matmul_groups_check_their_segments() {
    use vkllm_kernels::matmul_coop::{
        CoopConfig, CoopSegment, CoopTile, MATMUL_COOP, MatmulCoopGroup, SplitScratch,
    };
    let cfg = CoopConfig {
        tile: CoopTile::SMALL,
        bk: 64,
        split: 2,
        stages: 1,
        prefetch_quant: false,
        x_f16: true,
        direct: false,
    };
    let seg = |dtype: WeightType, rows: usize, cols: usize| CoopSegment {
        w: Fake(dtype.storage_bytes((rows * cols) as u64)),
        y: Fake(4 * 40 * rows as u64),
        shape: MatShape {
            dtype,
            rows,
            cols,
            row_offset: 0,
            accumulate: false,
        },
        y_stride: rows,
    };
    let group = |segments: Vec<CoopSegment<Fake>>, cfg: &CoopConfig| {
        let rows: Vec<usize> = segments.iter().map(|s| s.shape.rows).collect();
        let (pb, cb) = cfg.scratch_bytes_segments(&rows, 40);
        MatmulCoopGroup {
            x: Fake(2 * 40 * 512),
            segments,
            glu: None,
        }
        .dispatch_with(
            40,
            32,
            cfg,
            Some(SplitScratch {
                part: Fake(pb),
                counters: Fake(cb),
            }),
        )
    };
    // Workgroup columns: ceil(rows / 128) per segment, summed (3 + 1 + 1); split scratch for
    // each segment's own tiles.
    for dt in [WeightType::F16, WeightType::Q8_0, WeightType::Q4_K] {
        let d = group(
            vec![seg(dt, 300, 512), seg(dt, 100, 512), seg(dt, 7, 512)],
            &cfg,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", dt.name()));
        assert_eq!(d.groups, [5, 1, 2]);
        compile_spirv(&MATMUL_COOP, &d.overrides, SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", dt.name()));
        // The direct epilogue (unsplit): its per-segment cooperative loads and stores of Y.
        let direct = CoopConfig {
            split: 1,
            direct: true,
            ..cfg
        };
        let d = group(
            vec![seg(dt, 300, 512), seg(dt, 100, 512), seg(dt, 7, 512)],
            &direct,
        )
        .unwrap_or_else(|e| panic!("{} direct: {e}", dt.name()));
        assert_eq!(d.overrides.get("CM_DIRECT"), Some(1.0));
        compile_spirv(&MATMUL_COOP, &d.overrides, SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{} direct: {e}", dt.name()));
    }
    assert_eq!(
        cfg.scratch_bytes_segments(&[300, 100, 7], 40),
        (5 * 2 * 64 * 128 * 4, 5 * 4)
    );
    let f16 = |rows| seg(WeightType::F16, rows, 512);
    // Mixed types or widths, too many segments, none, or a group on the original launch.
    let bad = [
        (vec![f16(64), seg(WeightType::Q8_0, 64, 512)], cfg),
        (vec![f16(64), seg(WeightType::F16, 64, 256)], cfg),
        (vec![f16(64), f16(64), f16(64), f16(64)], cfg),
        (vec![], cfg),
        (vec![f16(64), f16(64)], CoopConfig::plain(CoopTile::SMALL)),
    ];
    for (segments, c) in bad {
        let n = segments.len();
        assert!(
            matches!(group(segments, &c), Err(Error::Shape { .. })),
            "{n} segments, {c:?}"
        );
    }
}

#[test]
fn coop_matmul_rejects_bad_tilings() {
    use vkllm_kernels::matmul_coop::{CoopTile, MatmulCoop};
    let s = MatShape {
        dtype: WeightType::F16,
        rows: 64,
        cols: 64,
        row_offset: 0,
        accumulate: false,
    };
    let mk = || MatmulCoop {
        w: Fake(64 * 64 * 2),
        x: Fake(4 * 64 * 64),
        y: Fake(4 * 64 * 64),
    };
    let too_big = CoopTile {
        sgm: 4,
        sgn: 4,
        wm: 4,
        wn: 4,
    };
    // 4 subgroups of 32 would need 8 X slots per invocation for 128 tokens.
    let few_threads = CoopTile {
        sgm: 2,
        sgn: 2,
        wm: 4,
        wn: 4,
    };
    assert!(!few_threads.fits(32) && few_threads.fits(64));
    assert!(matches!(
        mk().dispatch(&s, 64, 64, 32, few_threads),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        mk().dispatch(&s, 64, 64, 32, too_big),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        mk().dispatch(&s, 64, 64, 24, CoopTile::SMALL),
        Err(Error::Shape { .. })
    ));
    // x too small for n tokens.
    assert!(matches!(
        mk().dispatch(&s, 65, 64, 32, CoopTile::SMALL),
        Err(Error::BufferTooSmall { binding: "x", .. })
    ));
    // 4096 rows x 512 tokens: 32 x 4 workgroups of 128 x 128.
    assert_eq!(
        CoopTile::for_shape(4096, 512, 32, 128),
        Some(CoopTile::LARGE)
    );
    // 2048 x 512: 64 large, 128 of 64 x 128.
    assert_eq!(
        CoopTile::for_shape(2048, 512, 32, 128),
        Some(CoopTile::SMALL)
    );
    // 1024 x 512: 64 of 64 x 128, 128 of 64 x 64; 1024 x 100: smallest.
    assert_eq!(
        CoopTile::for_shape(1024, 512, 32, 128),
        Some(CoopTile::TINY)
    );
    assert_eq!(
        CoopTile::for_shape(1024, 100, 32, 128),
        Some(CoopTile::TINY)
    );
    // Subgroups of 64: 512-invocation workgroups, 2 X slots each for the large tiling.
    assert_eq!(
        CoopTile::for_shape(4096, 512, 64, 128),
        Some(CoopTile::LARGE)
    );
    // Subgroups of 8: no tiling has a whole number of slots per invocation <= 4.
    assert_eq!(CoopTile::for_shape(4096, 512, 8, 128), None);
    assert!(CoopTile::LARGE.fits(32) && CoopTile::SMALL.fits(32) && CoopTile::TINY.fits(32));
    assert_eq!((CoopTile::LARGE.bm(), CoopTile::LARGE.bn()), (128, 128));
    assert_eq!((CoopTile::SMALL.bm(), CoopTile::SMALL.bn()), (64, 128));
}

/// The gated launch (GLU): gate and up interleaved in one grid of ceil(2 rows / BN) columns,
/// both activations and the f16 copy specialise, and the binding refuses what the epilogue
/// cannot do.
#[test]
fn coop_matmul_glu_launches_check_their_inputs() {
    use vkllm_kernels::activation::Activation;
    use vkllm_kernels::matmul_coop::{
        CoopConfig, CoopGlu, CoopSegment, CoopTile, MATMUL_COOP, MatmulCoopGroup,
    };
    let cfg = |tile| CoopConfig {
        tile,
        bk: 64,
        split: 1,
        stages: 1,
        prefetch_quant: false,
        x_f16: true,
        direct: false,
    };
    let seg = |dtype: WeightType, rows: usize| CoopSegment {
        w: Fake(dtype.storage_bytes((rows * 512) as u64)),
        y: Fake(4 * 40 * rows as u64),
        shape: MatShape {
            dtype,
            rows,
            cols: 512,
            row_offset: 0,
            accumulate: false,
        },
        y_stride: rows,
    };
    let launch = |segments, c: &CoopConfig, act, half: Option<Fake>| {
        MatmulCoopGroup {
            x: Fake(2 * 40 * 512),
            segments,
            glu: Some(CoopGlu { act, half }),
        }
        .dispatch_with(40, 32, c, None)
    };
    let f16 = WeightType::F16;
    for (tile, act, half) in [
        (CoopTile::WIDE, Activation::Silu, true),
        (CoopTile::LARGE, Activation::GeluTanh, false),
        (CoopTile::SMALL, Activation::Silu, false),
    ] {
        let h = half.then_some(Fake(2 * 40 * 300));
        let d = launch(vec![seg(f16, 300), seg(f16, 300)], &cfg(tile), act, h)
            .unwrap_or_else(|e| panic!("{tile:?}: {e}"));
        // 600 interleaved rows over BN = 128.
        assert_eq!(d.groups, [5, 1, 1], "{tile:?}");
        let glu = if act == Activation::Silu { 1.0 } else { 2.0 };
        assert_eq!(d.overrides.get("GLU"), Some(glu));
        assert_eq!(d.overrides.get("GLU_HALF"), Some(half as u32 as f64));
        compile_spirv(&MATMUL_COOP, &d.overrides, SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{tile:?}: {e}"));
    }
    // BF16 and F32 weights too.
    for dt in [WeightType::Bf16, WeightType::F32] {
        let d = launch(
            vec![seg(dt, 64), seg(dt, 64)],
            &cfg(CoopTile::SMALL),
            Activation::Silu,
            None,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", dt.name()));
        compile_spirv(&MATMUL_COOP, &d.overrides, SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", dt.name()));
    }
    let large = cfg(CoopTile::LARGE);
    let split = CoopConfig { split: 2, ..large };
    let direct = CoopConfig {
        direct: true,
        ..large
    };
    let mut acc = seg(f16, 64);
    acc.shape.accumulate = true;
    let mut offset = seg(f16, 64);
    offset.shape.row_offset = 2;
    offset.y_stride = 66;
    let q8 = WeightType::Q8_0;
    let bad: Vec<(Vec<CoopSegment<Fake>>, CoopConfig, bool)> = vec![
        (vec![seg(f16, 64)], large, false),
        (vec![seg(f16, 64), seg(f16, 64), seg(f16, 64)], large, false),
        (vec![seg(f16, 64), seg(f16, 32)], large, false),
        (vec![seg(q8, 64), seg(q8, 64)], large, false),
        (vec![seg(f16, 64), seg(f16, 64)], split, false),
        (vec![seg(f16, 64), seg(f16, 64)], direct, false),
        (vec![acc, acc], large, false),
        (vec![seg(f16, 63), seg(f16, 63)], large, true),
        (vec![offset, offset], large, true),
    ];
    for (i, (segments, c, half)) in bad.into_iter().enumerate() {
        let h = half.then_some(Fake(2 * 40 * 66));
        assert!(
            matches!(
                launch(segments, &c, Activation::Silu, h),
                Err(Error::Shape { .. })
            ),
            "case {i}"
        );
    }
}

#[test]
fn cm2_groups_check_their_segments() {
    use vkllm_kernels::matmul_cm2::{Cm2Segment, CmTile, MATMUL_CM2_GROUP, MatmulCm2Group};
    let (n, cols) = (130usize, 264usize);
    let seg = |rows: usize| Cm2Segment {
        w: Fake(2 * (rows * cols) as u64),
        y: Fake(4 * (n * rows) as u64),
        rows,
    };
    let group = |segments| MatmulCm2Group {
        x: Fake(2 * (n * cols) as u64),
        segments,
    };
    // 300, 72 and 72 rows make 5 + 2 + 2 row tiles of 64; 130 tokens 3 token tiles.
    let d = group(vec![seg(300), seg(72), seg(72)])
        .dispatch(cols, n, CmTile::SMALL)
        .unwrap();
    assert_eq!(d.kernel.name, MATMUL_CM2_GROUP.name);
    assert_eq!(d.groups, [9, 3, 1]);
    assert_eq!(d.buffers.len(), MATMUL_CM2_GROUP.bindings.len());
    // Push constants: n, rows0, cols, rows1, rows2.
    let words: Vec<u32> = d
        .push
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(&words[..5], &[130, 300, 264, 72, 72]);
    // Token tiles first: the grid's axes swap.
    let d = group(vec![seg(256), seg(128)])
        .dispatch(cols, n, CmTile::LARGE.with_tokens_first(true))
        .unwrap();
    assert_eq!(d.groups, [2, 3, 1]);
    let bad = |r: Result<_, Error>| assert!(matches!(r, Err(Error::Shape { .. })));
    bad(group(vec![seg(300)]).dispatch(cols, n, CmTile::SMALL));
    bad(group(vec![seg(1), seg(1), seg(1), seg(1)]).dispatch(cols, n, CmTile::SMALL));
    bad(group(vec![seg(300), seg(0)]).dispatch(cols, n, CmTile::SMALL));
    bad(group(vec![seg(300), seg(72)]).dispatch(cols + 4, n, CmTile::SMALL));
    let short_y = Cm2Segment {
        y: Fake(4 * (n * 72) as u64 - 4),
        ..seg(72)
    };
    let r = group(vec![seg(300), short_y]).dispatch(cols, n, CmTile::SMALL);
    assert!(matches!(r, Err(Error::BufferTooSmall { binding: "y", .. })));
}
