//! Parity cases: the second cooperative-matrix prefill attention
//! (`attention_prefill_coop2.wgsl`) against the CPU attention of the f16-rounded q, k and v.
//!
//! The error budget is the first kernel's (`attn_coop`): q, k, v and the probabilities are
//! rounded to f16, sums stay f32; with lazy rescaling the probabilities are exp(s - m) for a
//! running max m up to RESCALE_T below the true one, so they are up to e^8 and keep the same
//! relative f16 rounding (2^-11). Outputs are weighted means of |v| <= 1: 1e-3 absolute bounds
//! the error with margin, the NMSE bound (1e-5) catches systematic errors. Outputs are
//! NaN-poisoned before each run. Rows cover odd query counts (partial tiles), chunks starting
//! mid-cache, GQA groups of 1, 2, 3 and 4, head dims 32..128, softcap, windows, a ring that
//! wraps, both KV types, 2 and 4 subgroups per workgroup, the rescale path (threshold 0,
//! and wide score ranges that move the max by more than the default threshold), and split
//! launches (2 to 16 parts; every tile split, with parts past a short tile's keys empty, or
//! only the heavy tiles as `with_split` picks; short chunks deep in the cache; head dim 256 over
//! value-column halves), whose counters must be back at zero after.
//! On a device that does not run the kernel the case reports one "n/a" row, never a pass.

use vkllm_cpu::AttnParams;
use vkllm_kernels::attention::AttnShape;
use vkllm_kernels::attention_prefill_coop::AttnPrefillCoop;
use vkllm_kernels::attention_prefill_coop2::{CoopAttn2Scratch, CoopAttn2Tile};
use vkllm_kernels::kv_append::KvType;

use super::matmul_coop::not_applicable;
use super::{Ctx, KernelParityRow, Rng, Tol, pack16, row, to_f16};
use vkllm_vk::Device;
use vkllm_vk::Result;

const KERNEL: &str = "attn_prefill_coop2";

const TOL: Tol = Tol {
    max_abs: 1e-3,
    nmse: 1e-5,
};

/// One case: the attention shape and the kernel's configuration.
struct Case {
    n_q: usize,
    n_kv: usize,
    pos0: usize,
    heads: (usize, usize),
    hd: usize,
    softcap: Option<f32>,
    window: Option<usize>,
    ring: Option<usize>,
    kv: KvType,
    nsg: u32,
    /// None: the default threshold.
    rescale_t: Option<f32>,
    /// q and k drawn from [-qk, qk].
    qk: f32,
    /// Score scale; None: 1 / sqrt(hd). 0 gives uniform weights over the visible keys.
    scale: Option<f32>,
    /// Key split: (parts, fewest steps of a split tile), or (parts, 0) for
    /// `CoopAttn2Tile::with_split`'s choice; None: unsplit.
    split: Option<(u32, u32)>,
    /// Keys per step (32 or 64).
    bk: u32,
    /// V loaded one step ahead (the kernel's VAHEAD).
    v_ahead: bool,
}

#[allow(clippy::too_many_arguments)]
fn case(
    n_q: usize,
    n_kv: usize,
    pos0: usize,
    heads: (usize, usize),
    hd: usize,
    kv: KvType,
    nsg: u32,
    rescale_t: Option<f32>,
) -> Case {
    Case {
        n_q,
        n_kv,
        pos0,
        heads,
        hd,
        softcap: None,
        window: None,
        ring: None,
        kv,
        nsg,
        rescale_t,
        qk: 2.0,
        scale: None,
        split: None,
        bk: 32,
        v_ahead: true,
    }
}

/// `c` with each step's V loaded as it is staged.
fn v_staged(c: Case) -> Case {
    Case {
        v_ahead: false,
        ..c
    }
}

/// `c` with 64 keys per step.
fn bk64(c: Case) -> Case {
    Case { bk: 64, ..c }
}

fn cases() -> Vec<Case> {
    let (f32_, f16_) = (KvType::F32, KvType::F16);
    vec![
        // Uniform weights (scale 0): the mean of the visible values.
        Case {
            scale: Some(0.0),
            ..case(37, 37, 0, (4, 2), 64, f32_, 4, None)
        },
        Case {
            scale: Some(0.0),
            ..case(45, 90, 45, (8, 8), 64, f16_, 2, None)
        },
        case(37, 37, 0, (4, 2), 64, f32_, 4, None),
        Case {
            softcap: Some(30.0),
            window: Some(8),
            ..case(37, 50, 13, (4, 2), 64, f16_, 4, None)
        },
        case(100, 161, 61, (16, 8), 128, f32_, 4, None),
        case(100, 161, 61, (16, 8), 128, f16_, 2, Some(0.0)),
        case(129, 129, 0, (8, 2), 128, f16_, 4, None),
        case(77, 77, 0, (32, 8), 64, f16_, 4, Some(0.0)),
        case(45, 90, 45, (8, 8), 64, f32_, 2, None),
        Case {
            window: Some(20),
            ..case(70, 70, 0, (6, 2), 96, f32_, 4, None)
        },
        case(33, 33, 0, (3, 3), 32, f32_, 4, Some(0.0)),
        // Positions 200..264 in a ring of 96 rows with a window of 32.
        Case {
            window: Some(32),
            ring: Some(96),
            ..case(64, 264, 200, (4, 1), 64, f16_, 4, None)
        },
        // Wide score ranges: the running max moves by more than the default threshold.
        Case {
            qk: 8.0,
            ..case(150, 150, 0, (16, 8), 128, f16_, 4, None)
        },
        Case {
            qk: 8.0,
            window: Some(40),
            ..case(90, 120, 30, (8, 4), 80, f32_, 4, None)
        },
        // Head dims past 128 (Qwen3.5/3.6 and Gemma 3 use 256): two workgroups per tile over
        // the value columns, fewer subgroups (shared memory).
        case(100, 161, 61, (16, 2), 256, f16_, 2, None),
        case(129, 129, 0, (8, 2), 256, f16_, 2, Some(0.0)),
        Case {
            qk: 8.0,
            softcap: Some(30.0),
            window: Some(20),
            ..case(70, 90, 20, (4, 4), 192, f16_, 2, None)
        },
        Case {
            window: Some(32),
            ring: Some(96),
            ..case(64, 264, 200, (4, 1), 256, f16_, 1, None)
        },
        // Split launches.
        Case {
            split: Some((2, 1)),
            ..case(100, 161, 61, (16, 8), 128, f16_, 4, None)
        },
        Case {
            split: Some((2, 1)),
            ..case(129, 129, 0, (8, 2), 128, f16_, 4, None)
        },
        Case {
            split: Some((3, 1)),
            ..case(77, 77, 0, (32, 8), 64, f32_, 2, Some(0.0))
        },
        Case {
            qk: 8.0,
            split: Some((2, 0)),
            ..case(300, 300, 0, (16, 8), 128, f16_, 4, None)
        },
        Case {
            window: Some(32),
            ring: Some(96),
            split: Some((4, 2)),
            ..case(64, 264, 200, (4, 1), 64, f16_, 4, None)
        },
        Case {
            softcap: Some(30.0),
            window: Some(40),
            split: Some((3, 2)),
            ..case(90, 120, 30, (8, 4), 80, f32_, 4, None)
        },
        // Short chunks deep in the cache (a turn after a cached conversation): many parts.
        Case {
            split: Some((16, 1)),
            ..case(40, 1500, 1460, (32, 8), 128, f16_, 4, None)
        },
        Case {
            qk: 8.0,
            split: Some((8, 0)),
            ..case(33, 1033, 1000, (16, 8), 64, f32_, 2, None)
        },
        // Split launches over value-column halves (head dim 256, the hybrids' attention).
        Case {
            split: Some((2, 1)),
            ..case(100, 161, 61, (16, 2), 256, f16_, 2, None)
        },
        Case {
            split: Some((4, 0)),
            ..case(64, 1200, 1136, (16, 2), 256, f16_, 2, None)
        },
        Case {
            window: Some(32),
            ring: Some(96),
            split: Some((3, 1)),
            ..case(64, 264, 200, (4, 1), 256, f16_, 1, None)
        },
        // 64 keys per step (queries in registers): partial tiles, GQA 1..4, rescales, softcap,
        // windows, a ring, splits.
        bk64(case(100, 161, 61, (16, 8), 128, f16_, 4, None)),
        bk64(case(129, 129, 0, (8, 2), 128, f16_, 4, Some(0.0))),
        bk64(case(33, 33, 0, (3, 3), 32, f16_, 4, Some(0.0))),
        bk64(Case {
            softcap: Some(30.0),
            window: Some(8),
            ..case(37, 50, 13, (4, 2), 64, f16_, 4, None)
        }),
        bk64(Case {
            window: Some(20),
            ..case(70, 70, 0, (6, 2), 96, f16_, 2, None)
        }),
        bk64(Case {
            window: Some(32),
            ring: Some(96),
            split: Some((4, 2)),
            ..case(64, 264, 200, (4, 1), 64, f16_, 4, None)
        }),
        bk64(Case {
            qk: 8.0,
            split: Some((2, 0)),
            ..case(300, 300, 0, (16, 8), 128, f16_, 4, None)
        }),
        bk64(Case {
            split: Some((16, 1)),
            ..case(40, 1500, 1460, (32, 8), 128, f16_, 4, None)
        }),
        bk64(Case {
            scale: Some(0.0),
            ..case(45, 90, 45, (8, 8), 64, f16_, 2, None)
        }),
        // V loaded as each step stages it (tuning `attn_coop_vahead=0`).
        v_staged(case(100, 161, 61, (16, 2), 256, f16_, 2, None)),
        v_staged(Case {
            qk: 8.0,
            softcap: Some(30.0),
            window: Some(20),
            ..case(70, 90, 20, (4, 4), 192, f16_, 2, None)
        }),
        v_staged(Case {
            split: Some((4, 0)),
            ..case(64, 1200, 1136, (16, 2), 256, f16_, 2, None)
        }),
        v_staged(bk64(Case {
            window: Some(32),
            ring: Some(96),
            split: Some((4, 2)),
            ..case(64, 264, 200, (4, 1), 64, f16_, 4, None)
        })),
        v_staged(case(37, 37, 0, (4, 2), 64, f32_, 4, Some(0.0))),
    ]
}

pub(crate) fn attention_prefill_coop2(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if let Some(reason) = not_applicable(dev) {
        return Ok(vec![KernelParityRow::not_applicable(
            KERNEL,
            "f32/f16 kv",
            reason,
        )]);
    }
    let cx = Ctx { dev };
    let sg = dev.info().subgroup_size;
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    // Every other case also writes the f16 copy of the output (HALF): same f32 rows, and
    // `halves_row`'s check of the copy against them.
    for (i, c) in cases().into_iter().enumerate() {
        let half = i % 2 == 1;
        let (n_q, n_kv, pos0, hd, kv) = (c.n_q, c.n_kv, c.pos0, c.hd, c.kv);
        let (n_heads, n_kv_heads) = c.heads;
        let rows_kv = c.ring.unwrap_or(n_kv).min(n_kv);
        let qn = n_q * n_heads * hd;
        let kvn = rows_kv * n_kv_heads * hd;
        let (_, q) = to_f16(&rng.vec(qn, -c.qk, c.qk));
        let (kh, k) = to_f16(&rng.vec(kvn, -c.qk, c.qk));
        let (vh, v) = to_f16(&rng.vec(kvn, -1.0, 1.0));
        let (kb, vb) = match kv {
            KvType::F32 => (cx.input("k", &k)?, cx.input("v", &v)?),
            KvType::F16 => (cx.input("k", &pack16(&kh))?, cx.input("v", &pack16(&vh))?),
            KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
        };
        let positions: Vec<usize> = (pos0..pos0 + n_q).collect();
        let pos32: Vec<u32> = positions.iter().map(|&p| p as u32).collect();
        let scale = c.scale.unwrap_or(1.0 / (hd as f32).sqrt());
        let p = AttnParams {
            n_heads,
            n_kv_heads,
            head_dim: hd,
            scale,
            softcap: c.softcap,
            window: c.window,
        };
        let mut want = vec![0.0; qn];
        let r = c.ring.unwrap_or(n_kv);
        vkllm_cpu::attention_ring(&q, &k, &v, n_q, n_kv, r, &positions, &p, &mut want);
        let shape = AttnShape {
            n_q,
            n_heads,
            n_kv_heads,
            head_dim: hd,
            n_kv,
            scale,
            softcap: c.softcap,
            window: c.window,
            kv,
            kv_v: kv,
            rot_k: false,
            kv_stride: 0,
            ring: c.ring,
        };
        let group = n_heads / n_kv_heads;
        let mut variant = format!("{} nsg {}", kv.name(), c.nsg);
        if c.bk != 32 {
            variant += &format!(" bk {}", c.bk);
        }
        if !c.v_ahead {
            variant += " v staged";
        }
        let tile = CoopAttn2Tile::with_nsg(c.nsg, hd, group, sg, kv);
        let Some(mut t) = tile.and_then(|t| t.with_bk(c.bk, hd, sg, kv)) else {
            rows.push(KernelParityRow::not_applicable(
                KERNEL,
                variant,
                format!(
                    "{} subgroups of {sg} lanes, {} keys per step at head dim {hd}",
                    c.nsg, c.bk
                ),
            ));
            continue;
        };
        t.v_ahead = c.v_ahead;
        if let Some(th) = c.rescale_t {
            t.rescale_t = th;
            variant += &format!(" rescale_t {th}");
        }
        match c.split {
            Some((n, 0)) => t = t.with_split(n, n_q, pos0),
            Some((n, min)) => {
                t.split = n;
                t.split_min = min;
            }
            None => {}
        }
        if t.split > 1 {
            variant += &format!(" split {} from {} steps", t.split, t.split_min);
        }
        let (qb, pb) = (cx.input("q", &q)?, cx.input("q_pos", &pos32)?);
        let out = cx.output("out", qn)?;
        let out16 = cx.output("out16", qn.div_ceil(2))?;
        let part = cx.output("part", (t.part_bytes(&shape) / 4) as usize)?;
        let n_ctr = (t.counter_bytes(&shape) / 4) as usize;
        let ctr = cx.input("ctr", &vec![0u32; n_ctr])?;
        cx.run(&[&out, &out16, &part], |rec| {
            let a = AttnPrefillCoop {
                q: qb.all(),
                k: kb.all(),
                v: vb.all(),
                q_pos: pb.all(),
                out: out.all(),
            };
            let scratch = (t.split > 1).then(|| CoopAttn2Scratch {
                part: part.all(),
                ctr: ctr.all(),
            });
            rec.dispatch(match half {
                true => a.dispatch_v2_full(&shape, pos0, sg, t, Some(out16.all()), scratch)?,
                false => a.dispatch_v2_full(&shape, pos0, sg, t, None, scratch)?,
            })
        })?;
        variant += &case_suffix(c.softcap, c.window, c.ring, c.scale.map(|_| scale), c.qk);
        let label = format!("q {n_q}@{pos0} kv {n_kv} h {n_heads}/{n_kv_heads} d {hd}");
        let outs = Outputs {
            out: &out,
            out16: half.then_some(&out16),
            ctr: (t.split > 1).then_some((&ctr, n_ctr)),
        };
        rows.extend(output_rows(&cx, (KERNEL, TOL), variant, label, outs, want)?);
    }
    Ok(rows)
}

/// The variant text of a case's options: softcap, window, ring, an explicit scale and a |q|, |k|
/// range other than 2.
pub(crate) fn case_suffix(
    softcap: Option<f32>,
    window: Option<usize>,
    ring: Option<usize>,
    scale: Option<f32>,
    qk: f32,
) -> String {
    let mut v = String::new();
    if let Some(s) = softcap {
        v += &format!(" softcap {s}");
    }
    if let Some(w) = window {
        v += &format!(" window {w}");
    }
    if let Some(r) = ring {
        v += &format!(" ring {r}");
    }
    if let Some(s) = scale {
        v += &format!(" scale {s}");
    }
    if qk != 2.0 {
        v += &format!(" |qk| {qk}");
    }
    v
}

/// A prefill attention launch's outputs to check: `out`, the f16 copy where it was written, and
/// a split launch's counters (with their count).
pub(crate) struct Outputs<'a> {
    pub out: &'a vkllm_vk::Buffer,
    pub out16: Option<&'a vkllm_vk::Buffer>,
    pub ctr: Option<(&'a vkllm_vk::Buffer, usize)>,
}

/// The rows of one prefill attention case: `out` against `want`, the f16 copy against `out`
/// (its own row), and a split launch's counters back at zero (checked with the values).
pub(crate) fn output_rows(
    cx: &Ctx<'_>,
    (kernel, tol): (&'static str, Tol),
    mut variant: String,
    label: String,
    o: Outputs<'_>,
    mut want: Vec<f32>,
) -> Result<Vec<KernelParityRow>> {
    let mut rows = Vec::new();
    let qn = want.len();
    let mut got = cx.read(o.out, qn)?;
    if let Some(out16) = o.out16 {
        let words = cx.dev.read_vec::<u32>(out16, qn / 2)?;
        let v16 = format!("{variant} with f16 copy: halves");
        rows.push(super::basic::halves_row(
            kernel,
            &v16,
            label.clone(),
            &words,
            &got,
        ));
        variant += " with f16 copy";
    }
    if let Some((ctr, n_ctr)) = o.ctr {
        let left = cx.dev.read_vec::<u32>(ctr, n_ctr)?;
        got.extend(left.iter().map(|&c| c as f32));
        want.extend(std::iter::repeat_n(0.0, n_ctr));
    }
    rows.push(row(kernel, variant, label, &got, &want, tol));
    Ok(rows)
}
