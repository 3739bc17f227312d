//! Parity of the fused attention input step (`rope_kv_append`): per-head q/k RMSNorm, RoPE and
//! the KV append in one dispatch, against `vkllm_cpu::rope_kv_append` (the unfused reference ops
//! composed).

use vkllm_cpu::decode::IDLE;
use vkllm_cpu::{Rope, RopeKvAppendSpec, RopeScaling, RopeStyle, rope_kv_append};
use vkllm_kernels::kv_append::KvType;
use vkllm_kernels::rope::RopeLayout;
use vkllm_kernels::rope_kv_append::{HeadNorm, RopeKvAppend, RopeKvAppendShape, RopeKvGrid};

use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, pack16, row, to_f16};
use vkllm_vk::Device;
use vkllm_vk::Result;

struct Case {
    label: &'static str,
    n_tok: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    rotary_dim: usize,
    style: RopeStyle,
    norm_offset: Option<f32>,
    kv: KvType,
    /// Slot-major (row_stride = the region's rows, one idle token) or one sequence (row_stride 0).
    slots: bool,
    /// Rows a region keeps (37 = every position of the 37-position cache; fewer: a sliding
    /// window's ring, positions wrap).
    ring: usize,
    /// q, k and v as slices of one packed `[n_tok, q + k + v]` buffer (token strides), as the
    /// fused q/k/v projection leaves them.
    packed: bool,
}

pub(crate) fn rope_kv_append_case(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let cases = [
        Case {
            label: "qwen3 norm neox slots f32",
            n_tok: 5,
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 128,
            rotary_dim: 128,
            style: RopeStyle::NeoX,
            norm_offset: Some(0.0),
            kv: KvType::F32,
            slots: true,
            ring: 37,
            packed: true,
        },
        Case {
            label: "gemma norm(1+w) neox f16",
            n_tok: 7,
            n_heads: 3,
            n_kv_heads: 1,
            head_dim: 256,
            rotary_dim: 256,
            style: RopeStyle::NeoX,
            norm_offset: Some(1.0),
            kv: KvType::F16,
            slots: false,
            ring: 16,
            packed: true,
        },
        Case {
            label: "no norm interleaved partial",
            n_tok: 3,
            n_heads: 5,
            n_kv_heads: 5,
            head_dim: 80,
            rotary_dim: 32,
            style: RopeStyle::Interleaved,
            norm_offset: None,
            kv: KvType::F32,
            slots: true,
            ring: 37,
            packed: false,
        },
        Case {
            label: "slots f16 hd 66",
            n_tok: 4,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 66,
            rotary_dim: 66,
            style: RopeStyle::NeoX,
            norm_offset: Some(0.0),
            kv: KvType::F16,
            slots: true,
            ring: 10,
            packed: false,
        },
        Case {
            label: "neox partial f16 packed",
            n_tok: 9,
            n_heads: 8,
            n_kv_heads: 2,
            head_dim: 64,
            rotary_dim: 32,
            style: RopeStyle::NeoX,
            norm_offset: None,
            kv: KvType::F16,
            slots: false,
            ring: 37,
            packed: true,
        },
        Case {
            label: "llama interleaved f16 packed",
            n_tok: 11,
            n_heads: 8,
            n_kv_heads: 2,
            head_dim: 64,
            rotary_dim: 64,
            style: RopeStyle::Interleaved,
            norm_offset: None,
            kv: KvType::F16,
            slots: true,
            ring: 37,
            packed: true,
        },
    ];
    let mut rows = Vec::new();
    // Every case with one token per workgroup, with 2, 3 or 4 (the cases' token counts leave
    // a partial last group; the slot cases put an idle token inside a group), and with one
    // invocation per pair (head_dim / 2 of 64, 128, 40 and 33 per unit: whole units of 256,
    // 240 and 231 invocations per workgroup, a partial last workgroup).
    let runs = cases.iter().enumerate().flat_map(|(i, c)| {
        [
            (c, RopeKvGrid::PerHead { tokens: 1 }),
            (c, RopeKvGrid::PerHead { tokens: 2 + i % 3 }),
            (c, RopeKvGrid::Pairs),
        ]
    });
    for (c, grid) in runs {
        let rope = Rope {
            theta: 10_000.0,
            rotary_dim: c.rotary_dim,
            style: c.style,
            scaling: RopeScaling::None,
        };
        let (hd, max_tok, max_pos) = (c.head_dim, 37usize, 40usize);
        let kv_dim = c.n_kv_heads * hd;
        let q = rng.vec(c.n_tok * c.n_heads * hd, -2.0, 2.0);
        let k = rng.vec(c.n_tok * kv_dim, -2.0, 2.0);
        let v = rng.vec(c.n_tok * kv_dim, -2.0, 2.0);
        let qw = rng.vec(hd, 0.5, 1.5);
        let kw = rng.vec(hd, 0.5, 1.5);
        let mut pos: Vec<u32> = if c.slots {
            (0..c.n_tok)
                .map(|_| rng.below(max_tok as u64) as u32)
                .collect()
        } else {
            // A prefill chunk: consecutive positions.
            let p0 = rng.below((max_tok - c.n_tok) as u64) as u32;
            (0..c.n_tok as u32).map(|i| p0 + i).collect()
        };
        if c.slots {
            pos[1] = IDLE;
        }
        let region = c.ring.min(max_tok);
        let row_stride = if c.slots { region } else { 0 };
        let cache_rows = if c.slots { c.n_tok * region } else { region };
        // Cache contents outside the written rows must survive.
        let init = rng.vec(cache_rows * kv_dim, -1.0, 1.0);
        let conv = |x: &[f32]| -> (Vec<u32>, Vec<f32>) {
            match c.kv {
                KvType::F32 => (bytemuck::cast_slice(x).to_vec(), x.to_vec()),
                KvType::F16 => {
                    let (h, b) = to_f16(x);
                    (pack16(&h), b)
                }
                KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
            }
        };
        let (init_words, init_back) = conv(&init);
        let mut table = Vec::with_capacity(max_pos * c.rotary_dim);
        for p in 0..max_pos {
            let (cs, sn) = rope.cos_sin(p);
            for (a, b) in cs.into_iter().zip(sn) {
                table.push(a);
                table.push(b);
            }
        }
        let bufs = (
            cx.input("q", &q)?,
            cx.input("k", &k)?,
            cx.input("v", &v)?,
            cx.input("q_norm", &qw)?,
            cx.input("k_norm", &kw)?,
            cx.input("pos", &pos)?,
            cx.input("table", &table)?,
        );
        let qo = cx.output("q_out", q.len())?;
        let (qd, width) = (c.n_heads * hd, c.n_heads * hd + 2 * kv_dim);
        let packed: Vec<f32> = (0..c.n_tok)
            .flat_map(|t| {
                q[t * qd..(t + 1) * qd]
                    .iter()
                    .chain(&k[t * kv_dim..(t + 1) * kv_dim])
                    .chain(&v[t * kv_dim..(t + 1) * kv_dim])
                    .copied()
            })
            .collect();
        let pb = cx.input("qkv", &packed)?;
        let (kc, vc) = (
            cx.input("k_cache", &init_words)?,
            cx.input("v_cache", &init_words)?,
        );
        let shape = RopeKvAppendShape {
            n_tok: c.n_tok,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: hd,
            rotary_dim: c.rotary_dim,
            layout: match c.style {
                RopeStyle::Interleaved => RopeLayout::Interleaved,
                RopeStyle::NeoX => RopeLayout::NeoX,
            },
            max_pos,
            norm: c.norm_offset.map(|offset| HeadNorm { eps: 1e-6, offset }),
            kv: c.kv,
            max_tok,
            row_stride,
            ring: c.ring,
            tok_strides: c.packed.then_some((width, width)),
            grid,
        };
        let f = 4u64;
        let (q_in, k_in, v_in) = if c.packed {
            let len = pb.size();
            (
                pb.slice(0, len)?,
                pb.slice(f * qd as u64, len - f * qd as u64)?,
                pb.slice(f * (qd + kv_dim) as u64, len - f * (qd + kv_dim) as u64)?,
            )
        } else {
            (bufs.0.all(), bufs.1.all(), bufs.2.all())
        };
        cx.run(&[&qo], |r| {
            r.dispatch(
                RopeKvAppend {
                    q: q_in,
                    k: k_in,
                    v: v_in,
                    q_norm: bufs.3.all(),
                    k_norm: bufs.4.all(),
                    pos: bufs.5.all(),
                    table: bufs.6.all(),
                    q_out: qo.all(),
                    k_cache: kc.all(),
                    v_cache: vc.all(),
                }
                .dispatch(&shape)?,
            )
        })?;
        let spec = RopeKvAppendSpec {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: hd,
            rope: &rope,
            norm: c.norm_offset.map(|o| (&qw[..], &kw[..], 1e-6, o)),
            max_tok,
            row_stride,
            ring: c.ring,
        };
        let mut want_q = vec![0.0; q.len()];
        let (mut want_k, mut want_v) = (init_back.clone(), init_back.clone());
        rope_kv_append(
            &q,
            &k,
            &v,
            &pos,
            &spec,
            &mut want_q,
            &mut want_k,
            &mut want_v,
        );
        let (want_k, want_v) = (conv(&want_k).1, conv(&want_v).1);
        let read_cache = |b: &vkllm_vk::Buffer| -> Result<Vec<f32>> {
            Ok(match c.kv {
                KvType::F32 => cx.read(b, init.len())?,
                KvType::F16 => {
                    let w: Vec<u16> = dev.read_vec(b, init.len())?;
                    w.iter()
                        .map(|&h| half::f16::from_bits(h).to_f32())
                        .collect()
                }
                KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
            })
        };
        // q and k: the norm's sum of squares is reduced in another order than the CPU's f64 sum
        // and the driver may contract the rotation into FMAs: a few f32 ulps of |x| < 8. An f16
        // cache admits one f16 ulp at |x| < 8 (the f32 difference can straddle a rounding
        // boundary). V is a plain copy (exact in f32, correctly rounded in f16).
        let (tol_f32, tol_k) = (
            Tol {
                max_abs: 1e-5,
                nmse: 1e-11,
            },
            match c.kv {
                KvType::F32 => Tol {
                    max_abs: 1e-5,
                    nmse: 1e-11,
                },
                KvType::F16 => Tol {
                    max_abs: 1.0 / 128.0,
                    nmse: 1e-6,
                },
                KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
            },
        );
        let q_len = c.n_heads * hd;
        let (mut got_q, mut ref_q, mut idle_nan) = (Vec::new(), Vec::new(), true);
        let got_all = cx.read(&qo, q.len())?;
        for (t, &p) in pos.iter().enumerate() {
            let r = t * q_len..(t + 1) * q_len;
            if p == IDLE {
                idle_nan &= got_all[r].iter().all(|x| x.is_nan());
            } else {
                got_q.extend_from_slice(&got_all[r.clone()]);
                ref_q.extend_from_slice(&want_q[r]);
            }
        }
        let shape_s = format!(
            "{} tok {}+{} heads x {hd}, {}, ring {}{}, {}",
            c.n_tok,
            c.n_heads,
            c.n_kv_heads,
            c.kv.name(),
            c.ring,
            if c.packed { ", packed qkv" } else { "" },
            match grid {
                RopeKvGrid::PerHead { tokens } => format!("{tokens} tok/group"),
                RopeKvGrid::Pairs => "pairs".to_string(),
            }
        );
        rows.push(row(
            "rope_kv_append",
            format!("{} q", c.label),
            shape_s.clone(),
            &got_q,
            &ref_q,
            tol_f32,
        ));
        // Idle tokens: q rows NaN (1.0 per row that is, compared with 1.0 expected).
        if c.slots {
            rows.push(row(
                "rope_kv_append",
                format!("{} idle q NaN", c.label),
                shape_s.clone(),
                &[if idle_nan { 1.0 } else { 0.0 }],
                &[1.0],
                EXACT,
            ));
        }
        rows.push(row(
            "rope_kv_append",
            format!("{} K", c.label),
            shape_s.clone(),
            &read_cache(&kc)?,
            &want_k,
            tol_k,
        ));
        rows.push(row(
            "rope_kv_append",
            format!("{} V", c.label),
            shape_s,
            &read_cache(&vc)?,
            &want_v,
            EXACT,
        ));
    }
    Ok(rows)
}
