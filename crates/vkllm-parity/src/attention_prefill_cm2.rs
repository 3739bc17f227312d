//! Parity cases: the workgroup-scope cooperative-matrix prefill attention
//! (`attention_prefill_cm2.comp`) against the CPU attention of the f16-rounded q, k and v.
//!
//! The error budget is coop2's (q, k, v and the probabilities in the P V product rounded to
//! f16, sums f32): 1e-3 absolute on weighted means of |v| <= 1, NMSE 1e-5; with the scale
//! folded into the staged queries the oracle reads those f16(q x scale), scaled back. Outputs
//! are NaN-poisoned before each run. Rows cover partial query tiles, chunks starting mid-cache
//! (a partial first key step), GQA groups of 1 to 16, head dims 32..256, softcap, windows, a
//! ring as long as the cache, wide score ranges (the running max moving by a lot), uniform
//! weights, and split launches (2 to 16 parts, some parts past a tile's keys), whose counters
//! must be back at zero after; tiles of 32..128 rows and 32 or 64 keys with the row sums on
//! the tensor cores and the tiles loaded a step ahead; every other case also writes the f16
//! copy of the output.
//! On a device without VK_NV_cooperative_matrix2 the case reports one "n/a" row, never a pass.

use vkllm_cpu::AttnParams;
use vkllm_kernels::attention::AttnShape;
use vkllm_kernels::attention_prefill_cm2::CmAttnTile;
use vkllm_kernels::attention_prefill_coop::AttnPrefillCoop;
use vkllm_kernels::attention_prefill_coop2::CoopAttn2Scratch;

use super::attention_prefill_coop2::{Outputs, case_suffix, output_rows};
use super::{Ctx, KernelParityRow, Rng, Tol, pack16, to_f16};
use vkllm_vk::Device;
use vkllm_vk::Result;

const KERNEL: &str = "attn_prefill_cm2";

const TOL: Tol = Tol {
    max_abs: 1e-3,
    nmse: 1e-5,
};

#[derive(Clone, Copy)]
struct Case {
    n_q: usize,
    n_kv: usize,
    pos0: usize,
    heads: (usize, usize),
    hd: usize,
    softcap: Option<f32>,
    window: Option<usize>,
    ring: Option<usize>,
    /// q and k drawn from [-qk, qk].
    qk: f32,
    /// Score scale; None: 1 / sqrt(hd). 0 gives uniform weights over the visible keys.
    scale: Option<f32>,
    /// Key split: (parts, fewest steps of a split tile), or (parts, 0) for `with_split`'s
    /// choice; None: unsplit.
    split: Option<(u32, u32)>,
    /// Rows x keys per step; None: `CmAttnTile::for_shape`'s.
    tile: Option<(u32, u32)>,
    /// Row sums on the tensor cores (`CmAttnTile::sum_mma`).
    sum_mma: bool,
    /// The next step's tiles loaded ahead (`CmAttnTile::prefetch`).
    prefetch: bool,
    /// The scale folded into the staged queries (`CmAttnTile::qscale`).
    qscale: bool,
    /// Steps inside the cache loaded unclamped (`CmAttnTile::unclamped`).
    unclamped: bool,
    /// Row statistics as rows x 16 matrices (`CmAttnTile::stats16`).
    stats16: bool,
    /// The output in two column halves (`CmAttnTile::o_halves`).
    o_halves: bool,
}

fn case(n_q: usize, n_kv: usize, pos0: usize, heads: (usize, usize), hd: usize) -> Case {
    Case {
        n_q,
        n_kv,
        pos0,
        heads,
        hd,
        softcap: None,
        window: None,
        ring: None,
        qk: 2.0,
        scale: None,
        split: None,
        tile: None,
        sum_mma: true,
        prefetch: false,
        qscale: true,
        unclamped: true,
        stats16: true,
        o_halves: false,
    }
}

/// `c` with the output in two column halves.
fn halves(c: Case) -> Case {
    Case {
        o_halves: true,
        ..c
    }
}

/// `c` with the row statistics as rows x keys matrices (the reference to rows x 16).
fn wide_stats(c: Case) -> Case {
    Case {
        stats16: false,
        ..c
    }
}

/// `c` with every step's K and V loaded through the clamped layout (the reference).
fn clamped(c: Case) -> Case {
    Case {
        unclamped: false,
        ..c
    }
}

/// `c` with the scores scaled each key step (the reference to the folded scale).
fn scaled_each_step(c: Case) -> Case {
    Case { qscale: false, ..c }
}

/// `c` with the row sums reduced over the f32 probabilities (the reference).
fn reduced(c: Case) -> Case {
    Case {
        sum_mma: false,
        ..c
    }
}

/// `c` with `rows` x `keys` per step and the tiles loaded a step ahead.
fn tiled(rows: u32, keys: u32, c: Case) -> Case {
    Case {
        tile: Some((rows, keys)),
        prefetch: true,
        ..c
    }
}

/// Cases over the kernel's edges for an option's rows: uniform weights, partial and whole last
/// steps, clamped loads, splits, a softcap with a window, head dims 32..256 (multiples of 32),
/// a ring as long as the cache, reduced sums with the scale each step, two other tiles.
fn spread() -> Vec<Case> {
    vec![
        Case {
            scale: Some(0.0),
            ..case(37, 37, 0, (4, 2), 64)
        },
        case(100, 161, 61, (16, 8), 128),
        clamped(case(128, 128, 0, (8, 2), 128)),
        case(33, 33, 0, (3, 3), 32),
        Case {
            split: Some((16, 1)),
            ..case(40, 1500, 1460, (32, 8), 128)
        },
        Case {
            qk: 8.0,
            softcap: Some(30.0),
            window: Some(40),
            split: Some((3, 2)),
            ..case(90, 120, 30, (8, 4), 96)
        },
        Case {
            split: Some((4, 0)),
            ..case(64, 1200, 1136, (16, 2), 256)
        },
        Case {
            window: Some(20),
            ring: Some(70),
            ..case(70, 70, 0, (6, 2), 64)
        },
        reduced(scaled_each_step(case(77, 77, 0, (32, 8), 64))),
        Case {
            tile: Some((64, 32)),
            ..case(20, 300, 280, (64, 8), 128)
        },
        Case {
            tile: Some((128, 16)),
            ..case(70, 70, 0, (6, 2), 96)
        },
    ]
}

fn cases() -> Vec<Case> {
    let options = spread()
        .into_iter()
        .flat_map(|c| [wide_stats(c), halves(c)]);
    let mut cases = vec![
        Case {
            scale: Some(0.0),
            ..case(37, 37, 0, (4, 2), 64)
        },
        case(37, 37, 0, (4, 2), 64),
        case(100, 161, 61, (16, 8), 128),
        case(129, 129, 0, (8, 2), 128),
        case(77, 77, 0, (32, 8), 64),
        case(45, 90, 45, (8, 8), 64),
        case(33, 33, 0, (3, 3), 32),
        case(70, 70, 0, (6, 2), 96),
        case(20, 300, 280, (64, 8), 128),
        Case {
            softcap: Some(30.0),
            window: Some(8),
            ..case(37, 50, 13, (4, 2), 64)
        },
        Case {
            window: Some(20),
            ring: Some(70),
            ..case(70, 70, 0, (6, 2), 80)
        },
        Case {
            qk: 8.0,
            ..case(150, 150, 0, (16, 8), 128)
        },
        Case {
            qk: 8.0,
            window: Some(40),
            ..case(90, 120, 30, (8, 4), 80)
        },
        case(100, 161, 61, (16, 2), 256),
        Case {
            qk: 8.0,
            softcap: Some(30.0),
            window: Some(20),
            ..case(70, 90, 20, (4, 4), 192)
        },
        // Split launches.
        Case {
            split: Some((2, 1)),
            ..case(100, 161, 61, (16, 8), 128)
        },
        Case {
            split: Some((3, 1)),
            ..case(77, 77, 0, (32, 8), 64)
        },
        Case {
            qk: 8.0,
            split: Some((2, 0)),
            ..case(300, 300, 0, (16, 8), 128)
        },
        Case {
            softcap: Some(30.0),
            window: Some(40),
            split: Some((3, 2)),
            ..case(90, 120, 30, (8, 4), 80)
        },
        Case {
            split: Some((16, 1)),
            ..case(40, 1500, 1460, (32, 8), 128)
        },
        Case {
            qk: 8.0,
            split: Some((8, 0)),
            ..case(33, 1033, 1000, (16, 8), 64)
        },
        Case {
            split: Some((4, 0)),
            ..case(64, 1200, 1136, (16, 2), 256)
        },
        // Head dim 256, split: a group of 6 (2 rows of 32 idle), one of 16 (two queries a
        // tile).
        Case {
            split: Some((2, 0)),
            ..case(37, 700, 663, (24, 4), 256)
        },
        Case {
            split: Some((3, 1)),
            ..case(21, 400, 379, (16, 1), 256)
        },
        // Row sums reduced over the f32 probabilities.
        reduced(case(100, 161, 61, (16, 8), 128)),
        reduced(case(100, 161, 61, (16, 2), 256)),
        reduced(Case {
            softcap: Some(30.0),
            window: Some(40),
            split: Some((3, 2)),
            ..case(90, 120, 30, (8, 4), 80)
        }),
        // The scale folded into the staged queries.
        scaled_each_step(case(100, 161, 61, (16, 8), 128)),
        scaled_each_step(Case {
            scale: Some(0.0),
            ..case(37, 37, 0, (4, 2), 64)
        }),
        scaled_each_step(Case {
            qk: 8.0,
            scale: Some(3.0),
            ..case(150, 150, 0, (16, 8), 128)
        }),
        scaled_each_step(Case {
            qk: 8.0,
            softcap: Some(30.0),
            window: Some(20),
            ..case(70, 90, 20, (4, 4), 192)
        }),
        scaled_each_step(Case {
            split: Some((4, 0)),
            ..case(64, 1200, 1136, (16, 2), 256)
        }),
        scaled_each_step(reduced(Case {
            softcap: Some(30.0),
            window: Some(40),
            split: Some((3, 2)),
            ..case(90, 120, 30, (8, 4), 80)
        })),
        scaled_each_step(tiled(64, 64, case(20, 300, 280, (64, 8), 128))),
        // Every step loaded clamped (the reference): a partial last step, whole steps only
        // (n_kv a multiple of 32), splits, windows with a softcap, head dims 64..256, a ring
        // as long as the cache, the reduced sums.
        clamped(case(100, 161, 61, (16, 8), 128)),
        clamped(case(128, 128, 0, (8, 2), 128)),
        clamped(Case {
            split: Some((16, 1)),
            ..case(40, 1500, 1460, (32, 8), 128)
        }),
        clamped(Case {
            softcap: Some(30.0),
            window: Some(40),
            split: Some((3, 2)),
            ..case(90, 120, 30, (8, 4), 80)
        }),
        clamped(Case {
            split: Some((4, 0)),
            ..case(64, 1200, 1136, (16, 2), 256)
        }),
        clamped(Case {
            window: Some(20),
            ring: Some(70),
            ..case(70, 70, 0, (6, 2), 80)
        }),
        clamped(reduced(scaled_each_step(case(77, 77, 0, (32, 8), 64)))),
        clamped(Case {
            tile: Some((64, 64)),
            ..case(20, 300, 280, (64, 8), 128)
        }),
        // Row statistics as rows x keys matrices (the reference) and the output in column
        // halves, each over the spread below; then with the tiles loaded ahead, and both.
        wide_stats(tiled(64, 64, case(20, 300, 280, (64, 8), 128))),
        wide_stats(clamped(tiled(32, 64, case(45, 90, 45, (8, 8), 64)))),
        halves(wide_stats(reduced(case(100, 161, 61, (16, 8), 128)))),
        // Other tiles, the next step's tiles loaded ahead.
        tiled(64, 64, case(100, 161, 61, (16, 8), 128)),
        tiled(64, 32, case(129, 129, 0, (8, 2), 128)),
        tiled(32, 64, case(45, 90, 45, (8, 8), 64)),
        tiled(128, 32, case(70, 70, 0, (6, 2), 96)),
        tiled(
            64,
            32,
            Case {
                qk: 8.0,
                softcap: Some(30.0),
                window: Some(40),
                split: Some((3, 2)),
                ..case(90, 120, 30, (8, 4), 80)
            },
        ),
        tiled(
            32,
            64,
            Case {
                split: Some((16, 1)),
                ..case(40, 1500, 1460, (32, 8), 128)
            },
        ),
    ];
    cases.extend(options);
    cases
}

pub(crate) fn attention_prefill_cm2(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if !dev.coopmat2() {
        let reason = match dev.info().cooperative_matrix2 {
            true => "cooperative matrices switched off (tuning `coopmat=0`)",
            false => "device lacks VK_NV_cooperative_matrix2 or its features",
        };
        return Ok(vec![KernelParityRow::not_applicable(
            KERNEL, "f16 kv", reason,
        )]);
    }
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for (i, c) in cases().into_iter().enumerate() {
        let half = i % 2 == 1;
        let (n_q, n_kv, pos0, hd) = (c.n_q, c.n_kv, c.pos0, c.hd);
        let (n_heads, n_kv_heads) = c.heads;
        let qn = n_q * n_heads * hd;
        let kvn = n_kv * n_kv_heads * hd;
        let (_, q) = to_f16(&rng.vec(qn, -c.qk, c.qk));
        let (kh, k) = to_f16(&rng.vec(kvn, -c.qk, c.qk));
        let (vh, v) = to_f16(&rng.vec(kvn, -1.0, 1.0));
        let (kb, vb) = (cx.input("k", &pack16(&kh))?, cx.input("v", &pack16(&vh))?);
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
        // qscale stages f16(q x mul): the oracle reads those roundings, scaled back.
        let mul = match c.softcap {
            Some(_) => scale,
            None => scale * std::f32::consts::LOG2_E,
        };
        let q_ref = match c.qscale && mul != 0.0 {
            true => {
                let scaled: Vec<f32> = q.iter().map(|&x| x * mul).collect();
                to_f16(&scaled).1.iter().map(|&x| x / mul).collect()
            }
            false => q.clone(),
        };
        let mut want = vec![0.0; qn];
        vkllm_cpu::attention_ring(&q_ref, &k, &v, n_q, n_kv, n_kv, &positions, &p, &mut want);
        let shape = AttnShape {
            n_q,
            n_heads,
            n_kv_heads,
            head_dim: hd,
            n_kv,
            scale,
            softcap: c.softcap,
            window: c.window,
            kv: vkllm_kernels::kv_append::KvType::F16,
            kv_v: vkllm_kernels::kv_append::KvType::F16,
            rot_k: false,
            kv_stride: 0,
            ring: c.ring,
        };
        let mut variant = "f16".to_string();
        let Some(mut t) = CmAttnTile::for_shape(&shape) else {
            rows.push(KernelParityRow::not_applicable(
                KERNEL,
                variant,
                format!("head dim {hd}, heads {n_heads}/{n_kv_heads}"),
            ));
            continue;
        };
        if let Some((br, bc)) = c.tile {
            match t.with_tile(br, bc, &shape) {
                Some(tt) => t = tt,
                None => {
                    rows.push(KernelParityRow::not_applicable(
                        KERNEL,
                        variant,
                        format!("{br}x{bc} at head dim {hd}"),
                    ));
                    continue;
                }
            }
        }
        t.sum_mma = c.sum_mma;
        t.prefetch = c.prefetch;
        t.qscale = c.qscale;
        t.unclamped = c.unclamped;
        t.stats16 = c.stats16;
        t.o_halves = c.o_halves;
        variant += &format!(" {}x{}", t.br, t.bc);
        if t.sum_mma {
            variant += " mma sums";
        }
        if t.prefetch {
            variant += " prefetch";
        }
        if t.qscale {
            variant += " qscale";
        }
        if t.unclamped {
            variant += " unclamped";
        }
        if t.stats16 {
            variant += " stats16";
        }
        if t.o_halves {
            variant += " halves";
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
        let part = cx.output("part", (t.part_bytes(&shape) / 4).max(1) as usize)?;
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
            let o16 = half.then(|| out16.all());
            rec.dispatch(a.dispatch_cm2(&shape, pos0, t, o16, scratch)?)
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
