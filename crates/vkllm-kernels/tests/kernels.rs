//! Kernel-set tests that need no GPU: every entry point specialises and emits SPIR-V, and the
//! typed bindings reject bad shapes and small buffers.

use vkllm_kernels::matvec::{MatShape, Matvec};
use vkllm_kernels::{
    Error, KernelBuffer, Overrides, SpirvOptions, WeightType, all_kernels, compile_spirv,
};

#[path = "kernels/coop.rs"]
mod coop;
#[path = "kernels/prune.rs"]
mod prune;

#[derive(Clone, Copy)]
struct Fake(u64);
impl KernelBuffer for Fake {
    fn byte_len(&self) -> u64 {
        self.0
    }
}

#[test]
fn every_kernel_emits_spirv() {
    for k in all_kernels() {
        let words = compile_spirv(k, &Overrides::new(), SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(words[0], 0x0723_0203, "{}: not SPIR-V", k.name);
        assert!(words.len() > 50, "{}", k.name);
    }
}

#[test]
fn dtype_variants_emit_spirv() {
    for k in [
        &vkllm_kernels::matvec::MATVEC,
        &vkllm_kernels::matmul::MATMUL,
        &vkllm_kernels::embedding::EMBEDDING,
    ] {
        for dt in [WeightType::F32, WeightType::F16, WeightType::Bf16] {
            let o = Overrides::new().set("DTYPE", dt.code());
            compile_spirv(k, &o, SpirvOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        }
    }
    let o = Overrides::new()
        .set("HD", 256.0)
        .set("BK", 8.0)
        .set("KV_DTYPE", 1.0);
    compile_spirv(
        &vkllm_kernels::attention::ATTN_PREFILL,
        &o,
        SpirvOptions::default(),
    )
    .unwrap();
}

#[test]
fn unknown_override_is_an_error() {
    let o = Overrides::new().set("NO_SUCH_CONSTANT", 1.0);
    match compile_spirv(
        &vkllm_kernels::softmax::SOFTMAX,
        &o,
        SpirvOptions::default(),
    ) {
        Err(Error::Override {
            kernel: "softmax", ..
        }) => {}
        other => panic!(
            "expected an override error, got {:?}",
            other.map(|w| w.len())
        ),
    }
}

#[test]
fn overrides_are_order_independent() {
    let a = Overrides::new().set("A", 1.0).set("B", 2.0);
    let b = Overrides::new().set("B", 2.0).set("A", 1.0);
    assert_eq!(a, b);
    assert_eq!(a.to_string(), "{A=1,B=2}");
    assert_eq!(a.clone().set("A", 3.0).get("A"), Some(3.0));
}

#[test]
fn bindings_check_shapes_and_sizes() {
    let s = MatShape {
        dtype: WeightType::F16,
        rows: 4,
        cols: 7,
        row_offset: 0,
        accumulate: false,
    };
    let big = Fake(1 << 20);
    assert!(matches!(
        Matvec {
            w: big,
            x: big,
            y: big
        }
        .dispatch(&s),
        Err(Error::Shape {
            kernel: "matvec",
            ..
        })
    ));
    let s = MatShape { cols: 8, ..s };
    // 4 x 8 f16 = 64 bytes of weights.
    match (Matvec {
        w: Fake(60),
        x: big,
        y: big,
    })
    .dispatch(&s)
    {
        Err(Error::BufferTooSmall {
            binding: "w",
            need: 64,
            have: 60,
            ..
        }) => {}
        other => panic!("expected BufferTooSmall, got {:?}", other.map(|d| d.groups)),
    }
    let d = Matvec {
        w: Fake(64),
        x: big,
        y: big,
    }
    .dispatch(&s)
    .unwrap();
    assert_eq!(d.buffers.len(), d.kernel.bindings.len());
    assert_eq!(d.push.len() as u32, d.kernel.push_size);
    assert_eq!(d.groups, [2, 1, 1], "2 rows per workgroup");
}

#[test]
fn large_grids_fold_into_two_dimensions() {
    let k = &vkllm_kernels::softmax::SOFTMAX;
    assert_eq!(vkllm_kernels::grid_for(k, 151_936).unwrap(), [65535, 3, 1]);
    assert_eq!(vkllm_kernels::grid_for(k, 7).unwrap(), [7, 1, 1]);
    assert!(vkllm_kernels::grid_for(k, 0).is_err());
}

/// The sampler is compiled with NoContraction on every float add/sub/mul (no FMA fusion), other
/// kernels are not.
#[test]
fn exact_fp_kernels_forbid_contraction() {
    // OpDecorate (opcode 71, 3 words) with decoration NoContraction (42).
    let count = |w: &[u32]| {
        w.windows(3)
            .filter(|x| x[0] == (3 << 16 | 71) && x[2] == 42)
            .count()
    };
    let o = Overrides::new();
    let s = compile_spirv(
        &vkllm_kernels::sample::SAMPLE_FINISH,
        &o,
        SpirvOptions::default(),
    )
    .unwrap();
    // OpFAdd/OpFSub/OpFMul results of the sampler: at least the 7 Horner steps of exp_s.
    assert!(
        count(&s) >= 14,
        "only {} NoContraction decorations",
        count(&s)
    );
    let m = compile_spirv(&vkllm_kernels::matvec::MATVEC, &o, SpirvOptions::default()).unwrap();
    assert_eq!(count(&m), 0);
}

#[test]
fn quantized_variants_emit_spirv() {
    use vkllm_kernels::mat_quant::{EMBEDDING_QUANT, MATMUL_QUANT, MATVEC_QUANT, format_overrides};
    for dt in WeightType::QUANTIZED {
        for k in [&MATVEC_QUANT, &MATMUL_QUANT, &EMBEDDING_QUANT] {
            compile_spirv(k, &format_overrides(dt), SpirvOptions::default())
                .unwrap_or_else(|e| panic!("{} {}: {e}", k.name, dt.name()));
        }
    }
}

#[test]
fn weight_type_block_sizes_match_ggml() {
    // ggml-common.h: (id, elements per block, bytes per block).
    let expect = [
        (WeightType::Q4_0, 2, 32, 18),
        (WeightType::Q4_1, 3, 32, 20),
        (WeightType::Q5_0, 6, 32, 22),
        (WeightType::Q5_1, 7, 32, 24),
        (WeightType::Q8_0, 8, 32, 34),
        (WeightType::Q2_K, 10, 256, 84),
        (WeightType::Q3_K, 11, 256, 110),
        (WeightType::Q4_K, 12, 256, 144),
        (WeightType::Q5_K, 13, 256, 176),
        (WeightType::Q6_K, 14, 256, 210),
        (WeightType::IQ4_NL, 20, 32, 18),
        (WeightType::IQ4_XS, 23, 256, 136),
    ];
    assert_eq!(expect.len(), WeightType::QUANTIZED.len());
    for (t, id, block, bytes) in expect {
        assert!(t.is_quantized());
        assert_eq!(t.ggml_id(), id, "{t:?}");
        assert_eq!(WeightType::from_ggml_id(id), Some(t));
        assert_eq!(t.block_size(), block, "{t:?}");
        assert_eq!(t.bytes(), bytes, "{t:?}");
    }
    assert_eq!(WeightType::from_ggml_id(30), Some(WeightType::Bf16));
    assert_eq!(WeightType::from_ggml_id(4), None, "Q4_2 is gone from ggml");
    assert!(!WeightType::F16.is_quantized());
    // 3 rows of 37 Q8_0 blocks: 3774 bytes, padded to 3776.
    assert_eq!(WeightType::Q8_0.row_bytes(32 * 37), Some(1258));
    assert_eq!(WeightType::Q8_0.storage_bytes(3 * 32 * 37), 3776);
    assert_eq!(WeightType::Q4_K.row_bytes(384), None);
    assert_eq!(WeightType::F16.storage_bytes(7), 16);
}

#[test]
fn quantized_bindings_check_shapes_and_sizes() {
    let big = Fake(1 << 20);
    let s = MatShape {
        dtype: WeightType::Q6_K,
        rows: 3,
        cols: 768 + 32,
        row_offset: 0,
        accumulate: false,
    };
    let mv = |w: u64, s: &MatShape| {
        Matvec {
            w: Fake(w),
            x: big,
            y: big,
        }
        .dispatch(s)
    };
    assert!(matches!(
        mv(1 << 20, &s),
        Err(Error::Shape {
            kernel: "matvec_quant",
            ..
        })
    ));
    let s = MatShape { cols: 768, ..s };
    // 3 rows x 3 blocks x 210 bytes = 1890, padded to 1892.
    match mv(1890, &s) {
        Err(Error::BufferTooSmall {
            binding: "w",
            need: 1892,
            have: 1890,
            ..
        }) => {}
        other => panic!("expected BufferTooSmall, got {:?}", other.map(|d| d.groups)),
    }
    let d = mv(1892, &s).unwrap();
    assert_eq!(d.kernel.name, "matvec_quant");
    assert_eq!(d.push.len() as u32, d.kernel.push_size);
    assert_eq!(d.overrides.get("QTYPE"), Some(14.0));
    assert_eq!(d.overrides.get("TS"), Some(210.0));
    // 48 units per row: 64-invocation workgroups of 4 rows.
    assert_eq!(d.overrides.get("WG"), Some(64.0));
    assert_eq!(d.groups, [1, 1, 1], "4 rows per workgroup");
    let long = MatShape {
        rows: 5,
        cols: 4096,
        ..s
    };
    let d = mv(5 * 16 * 210, &long).unwrap();
    assert_eq!(d.overrides.get("WG"), Some(256.0));
    assert_eq!(d.groups, [3, 1, 1], "2 rows per workgroup");
    let m = quant_matmul(&s);
    assert_eq!(m.kernel.name, "matmul_quant");
    assert_eq!(m.groups, [1, 1, 1]);
}

fn quant_matmul(s: &MatShape) -> vkllm_kernels::Dispatch<Fake> {
    let big = Fake(1 << 20);
    vkllm_kernels::matmul::Matmul {
        w: big,
        x: big,
        y: big,
    }
    .dispatch(s, 5, s.rows)
    .unwrap()
}

/// The fused matvec's binding refuses what the kernel cannot do and sizes its grid per part.
#[test]
fn fused_matvec_checks_its_op() {
    use vkllm_kernels::matvec_fused::{
        Epilogue, GatedAct, MatvecFused, MatvecOp, MatvecPart, MatvecTuning, NormPrologue,
    };
    let big = Fake(1 << 24);
    let run = |op: &MatvecOp, parts: usize, norm: bool| {
        MatvecFused {
            w: vec![big; parts],
            x: big,
            y: big,
            norm_w: norm.then_some(big),
        }
        .dispatch(op)
    };
    let shape_err = |r: Result<vkllm_kernels::Dispatch<Fake>, Error>| {
        matches!(
            r,
            Err(Error::Shape {
                kernel: "matvec_fused",
                ..
            })
        )
    };
    let plain = MatvecOp::plain(WeightType::F16, 1000, 1024);
    // 1000 rows at 4 teams x 1 row per workgroup: 250 workgroups.
    let d = run(&plain, 1, false).unwrap();
    assert_eq!(d.groups, [250, 1, 1]);
    assert_eq!(d.overrides.get("LPR"), Some(32.0));
    assert_eq!(d.overrides.get("UE"), Some(8.0));
    // Three parts: per-part workgroup ranges (100 -> 25, 7 -> 2, 9 -> 3).
    let qkv = MatvecOp {
        parts: vec![
            MatvecPart {
                rows: 100,
                y_offset: 0,
            },
            MatvecPart {
                rows: 7,
                y_offset: 100,
            },
            MatvecPart {
                rows: 9,
                y_offset: 107,
            },
        ],
        y_stride: 116,
        ..plain.clone()
    };
    assert_eq!(run(&qkv, 3, false).unwrap().groups, [30, 1, 1]);
    assert!(shape_err(run(&qkv, 2, false)), "one weight per part");
    assert!(
        shape_err(run(
            &MatvecOp {
                y_stride: 115,
                ..qkv.clone()
            },
            3,
            false
        )),
        "part past y_stride"
    );
    for n in [0, 9] {
        let op = MatvecOp {
            n_cols: n,
            ..plain.clone()
        };
        assert!(shape_err(run(&op, 1, false)), "n = {n}");
    }
    // f16 rows must be whole 16-byte words.
    let odd = MatvecOp::plain(WeightType::F16, 4, 1020);
    assert!(!odd.fast_supported());
    assert!(shape_err(run(&odd, 1, false)));
    // Gated: two parts of equal rows.
    let gated = MatvecOp {
        parts: vec![
            MatvecPart {
                rows: 8,
                y_offset: 0,
            },
            MatvecPart {
                rows: 9,
                y_offset: 0,
            },
        ],
        y_stride: 8,
        epilogue: Epilogue::Gated {
            act: GatedAct::Silu,
        },
        ..plain.clone()
    };
    assert!(shape_err(run(&gated, 2, false)));
    let mut ok = gated.clone();
    ok.parts[1].rows = 8;
    assert_eq!(run(&ok, 2, false).unwrap().overrides.get("EPI"), Some(2.0));
    // norm_w exactly when the op has a norm.
    let normed = MatvecOp {
        norm: Some(NormPrologue {
            eps: 1e-6,
            offset: 1.0,
        }),
        ..plain.clone()
    };
    assert!(shape_err(run(&normed, 1, false)));
    assert!(shape_err(run(&plain, 1, true)));
    assert!(run(&normed, 1, true).is_ok());
    // Tuning limits: 5 rows per team; 8 columns x 4 slots over the 16 accumulators.
    for t in [(128, 32, 5), (100, 32, 1), (128, 256, 1)] {
        let op = MatvecOp {
            tuning: Some(MatvecTuning {
                wg: t.0,
                lanes: t.1,
                rows_per_team: t.2,
            }),
            ..plain.clone()
        };
        assert!(shape_err(run(&op, 1, false)), "{t:?}");
    }
    let op = MatvecOp {
        n_cols: 8,
        tuning: Some(MatvecTuning {
            wg: 128,
            lanes: 32,
            rows_per_team: 2,
        }),
        ..ok.clone()
    };
    assert!(shape_err(run(&op, 2, false)));
    // Weights are read as 16-byte words: a Q8_0 part of 3 x 32 (102 bytes) needs 112.
    let q = MatvecOp::plain(WeightType::Q8_0, 3, 32);
    match (MatvecFused {
        w: vec![Fake(104)],
        x: big,
        y: big,
        norm_w: None,
    })
    .dispatch(&q)
    {
        Err(Error::BufferTooSmall {
            binding: "w",
            need: 112,
            have: 104,
            ..
        }) => {}
        other => panic!("expected BufferTooSmall, got {:?}", other.map(|d| d.groups)),
    }
}

/// Every weight type x fusion of the fused matvec specialises into SPIR-V.
#[test]
fn fused_matvec_variants_emit_spirv() {
    use vkllm_kernels::matvec_fused::{
        Epilogue, GatedAct, MatvecFused, MatvecOp, MatvecPart, NormPrologue,
    };
    let big = Fake(1 << 24);
    let types = [WeightType::F32, WeightType::F16, WeightType::Bf16]
        .into_iter()
        .chain(WeightType::QUANTIZED);
    for dtype in types {
        let plain = MatvecOp::plain(dtype, 64, 256);
        let part = |y_offset| MatvecPart { rows: 64, y_offset };
        let variants = [
            MatvecOp {
                n_cols: 8,
                epilogue: Epilogue::Accumulate,
                ..plain.clone()
            },
            MatvecOp {
                parts: vec![part(0), part(64), part(128)],
                y_stride: 192,
                n_cols: 3,
                norm: Some(NormPrologue {
                    eps: 1e-6,
                    offset: 0.0,
                }),
                ..plain.clone()
            },
            MatvecOp {
                parts: vec![part(0), part(0)],
                epilogue: Epilogue::Gated {
                    act: GatedAct::GeluTanh,
                },
                ..plain.clone()
            },
        ];
        for op in variants {
            let d = MatvecFused {
                w: vec![big; op.parts.len()],
                x: big,
                y: big,
                norm_w: op.norm.map(|_| big),
            }
            .dispatch(&op)
            .unwrap_or_else(|e| panic!("{dtype:?}: {e}"));
            compile_spirv(d.kernel, &d.overrides, SpirvOptions::default())
                .unwrap_or_else(|e| panic!("{dtype:?} {:?}: {e}", op.epilogue));
        }
    }
}

#[test]
fn dequant_f16_checks_its_shapes() {
    use vkllm_kernels::dequant_f16::{DEQUANT_F16, DequantF16, f16_bytes};
    let mk = |dtype: WeightType, rows: usize, cols: usize, w: u64, out: u64| {
        DequantF16 {
            w: Fake(w),
            out: Fake(out),
        }
        .dispatch(dtype, rows, cols)
    };
    for dt in WeightType::QUANTIZED {
        let cols = 3 * dt.block_size();
        let w = dt.row_bytes(cols as u64).unwrap() * 7;
        let d = mk(dt, 7, cols, w, f16_bytes(7, cols)).unwrap_or_else(|e| panic!("{e}"));
        // One invocation per 16 elements, 256 per workgroup.
        assert_eq!(d.groups, [(7 * cols / 16).div_ceil(256) as u32, 1, 1]);
        compile_spirv(&DEQUANT_F16, &d.overrides, SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", dt.name()));
        assert!(matches!(
            mk(dt, 7, cols, w - 1, f16_bytes(7, cols)),
            Err(Error::BufferTooSmall { binding: "w", .. })
        ));
        assert!(matches!(
            mk(dt, 7, cols, w, f16_bytes(7, cols) - 4),
            Err(Error::BufferTooSmall { binding: "out", .. })
        ));
        assert!(matches!(
            mk(dt, 7, cols + 16, w * 2, f16_bytes(7, cols + 16)),
            Err(Error::Shape { .. })
        ));
    }
    assert!(matches!(
        mk(WeightType::F16, 4, 64, 512, 512),
        Err(Error::Shape { .. })
    ));
}

#[test]
fn rope_kv_append_groups_tokens() {
    use vkllm_kernels::kv_append::KvType;
    use vkllm_kernels::rope::RopeLayout;
    use vkllm_kernels::rope_kv_append::{
        MAX_TOKENS_PER_GROUP, ROPE_KV_APPEND, ROPE_KV_APPEND_PAIRS, RopeKvAppend,
        RopeKvAppendShape, RopeKvGrid,
    };
    let shape = |grid: RopeKvGrid, head_dim: usize, kv: KvType| RopeKvAppendShape {
        n_tok: 13,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim,
        rotary_dim: head_dim,
        layout: RopeLayout::NeoX,
        max_pos: 32,
        norm: None,
        kv,
        max_tok: 32,
        row_stride: 0,
        ring: 32,
        tok_strides: None,
        grid,
    };
    let big = Fake(1 << 20);
    let mk = |grid, head_dim, kv| {
        RopeKvAppend {
            q: big,
            k: big,
            v: big,
            q_norm: big,
            k_norm: big,
            pos: big,
            table: big,
            q_out: big,
            k_cache: big,
            v_cache: big,
        }
        .dispatch(&shape(grid, head_dim, kv))
    };
    // 13 tokens: ceil(13 / tpw) workgroup rows of the 6 heads.
    for tpw in 1..=MAX_TOKENS_PER_GROUP {
        let d = mk(RopeKvGrid::PerHead { tokens: tpw }, 64, KvType::F32)
            .unwrap_or_else(|e| panic!("{tpw}: {e}"));
        assert_eq!(d.groups, [6, 13usize.div_ceil(tpw) as u32, 1]);
        compile_spirv(&ROPE_KV_APPEND, &d.overrides, SpirvOptions::default())
            .unwrap_or_else(|e| panic!("{tpw}: {e}"));
    }
    for tpw in [0, MAX_TOKENS_PER_GROUP + 1] {
        let grid = RopeKvGrid::PerHead { tokens: tpw };
        assert!(
            matches!(mk(grid, 64, KvType::F32), Err(Error::Shape { .. })),
            "{tpw}"
        );
    }
    // Pairs: 13 tokens x 6 heads x head_dim / 2 invocations in workgroups of whole heads.
    for (hd, wg) in [(64usize, 256usize), (80, 240), (66, 231), (512, 256)] {
        for kv in [KvType::F32, KvType::F16] {
            let d = mk(RopeKvGrid::Pairs, hd, kv).unwrap_or_else(|e| panic!("{hd}: {e}"));
            assert_eq!(d.kernel.entry, "pairs");
            let groups = (13 * 6 * hd / 2).div_ceil(wg) as u32;
            assert_eq!(d.groups, [groups, 1, 1], "{hd}");
            compile_spirv(&ROPE_KV_APPEND_PAIRS, &d.overrides, SpirvOptions::default())
                .unwrap_or_else(|e| panic!("{hd}: {e}"));
        }
    }
}
