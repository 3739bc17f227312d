//! Parity cases of sliding-window ring caches: a layer that keeps `ring` rows stores position `p`
//! in row `p % ring`. KV append with positions past the ring (wrapping), and decode (shared cache
//! and slot-strided) and prefill attention whose windows wrap around the ring, against
//! `vkllm_cpu::kv` and `vkllm_cpu::attention_ring`.

use vkllm_cpu::AttnParams;
use vkllm_cpu::decode::IDLE;
use vkllm_cpu::kv::{kv_rows, kv_write};
use vkllm_kernels::attention::{AttnDecode, AttnPrefill, AttnShape};
use vkllm_kernels::kv_append::{KvAppend, KvType};

use super::attn::{Split, merge_counters};
use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, pack16, row, to_f16};
use vkllm_vk::Buffer;
use vkllm_vk::Device;
use vkllm_vk::Result;

/// As the full-cache attention cases: outputs are convex combinations of |v| <= 1 and the scores
/// differ from the CPU's only by f32 summation order.
const ATTN_TOL: Tol = Tol {
    max_abs: 2e-5,
    nmse: 1e-7,
};

/// The rows a ring of `ring` rows holds after positions `0..n_pos` were written in order: row `r`
/// is the latest position `j < n_pos` with `j % ring == r` (rows never written stay 0, as in a
/// fresh cache).
fn ring_of(full: &[f32], n_pos: usize, ring: usize, width: usize) -> Vec<f32> {
    let mut out = vec![0.0; n_pos.min(ring) * width];
    let rows: Vec<Option<usize>> = (0..n_pos).map(|j| Some(j % ring)).collect();
    kv_write(&mut out, full, width, &rows);
    out
}

/// The device copy of `x` as `kv` stores it, and the values the CPU should see.
fn store(cx: &Ctx<'_>, label: &str, x: &[f32], kv: KvType) -> Result<(Buffer, Vec<f32>)> {
    Ok(match kv {
        KvType::F32 => (cx.input(label, x)?, x.to_vec()),
        KvType::F16 => {
            let (h, back) = to_f16(x);
            (cx.input(label, &pack16(&h))?, back)
        }
        KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
    })
}

fn read_cache(cx: &Ctx<'_>, b: &Buffer, n: usize, kv: KvType) -> Result<Vec<f32>> {
    Ok(match kv {
        KvType::F32 => cx.read(b, n)?,
        KvType::F16 => {
            let w: Vec<u16> = cx.dev.read_vec(b, n)?;
            w.iter()
                .map(|&h| half::f16::from_bits(h).to_f32())
                .collect()
        }
        KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
    })
}

/// KV append into rings: a prefill chunk of consecutive positions wrapping past the end of one
/// ring (row_stride 0), and a batched step over slot regions (stride > ring) with positions far
/// past the ring and an idle slot. Rows not written must keep their old values.
pub(crate) fn kv_append_ring(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    // (tokens, kv_dim, capacity, ring, row_stride, dtype, label)
    let cases = [
        (
            11usize,
            21usize,
            500usize,
            13usize,
            0usize,
            KvType::F32,
            "chunk",
        ),
        (11, 2 * 33, 500, 13, 0, KvType::F16, "chunk"),
        (5, 21, 1000, 9, 12, KvType::F32, "slots"),
        (5, 2 * 33, 1000, 9, 11, KvType::F16, "slots"),
    ];
    for (n, width, cap, ring, stride, kv, label) in cases {
        let pos: Vec<u32> = if stride == 0 {
            // Starts 4 rows before the end of a later lap: wraps after 4 tokens.
            let p0 = 7 * ring + ring - 4;
            (0..n).map(|t| (p0 + t) as u32).collect()
        } else {
            let mut p: Vec<u32> = (0..n)
                .map(|_| (ring + rng.below((cap - ring) as u64) as usize) as u32)
                .collect();
            p[2] = IDLE;
            p
        };
        let regions = if stride == 0 { 1 } else { n };
        let cache_rows = (regions - 1) * stride + ring;
        let k_new = rng.vec(n * width, -4.0, 4.0);
        let v_new = rng.vec(n * width, -4.0, 4.0);
        let init = rng.vec(cache_rows * width, -1.0, 1.0);
        let (kc, mut want_k) = store(&cx, "k_cache", &init, kv)?;
        let (vc, mut want_v) = store(&cx, "v_cache", &init, kv)?;
        let (kb, vb, pb) = (
            cx.input("k", &k_new)?,
            cx.input("v", &v_new)?,
            cx.input("pos", &pos)?,
        );
        cx.run(&[], |r| {
            r.dispatch(
                KvAppend {
                    k_new: kb.all(),
                    v_new: vb.all(),
                    pos: pb.all(),
                    k_cache: kc.all(),
                    v_cache: vc.all(),
                }
                .dispatch_ring(kv, n, width, cap, stride, ring)?,
            )
        })?;
        let positions: Vec<usize> = pos.iter().map(|&p| p as usize).collect();
        let dst = kv_rows(&positions, cap, ring, stride, 0, stride != 0);
        let (nk, nv) = (to_kv(&k_new, kv), to_kv(&v_new, kv));
        kv_write(&mut want_k, &nk, width, &dst);
        kv_write(&mut want_v, &nv, width, &dst);
        // f16: one f16 ulp at |x| < 4 in case a driver rounds pack2x16float differently.
        let tol = match kv {
            KvType::F32 => EXACT,
            KvType::F16 => Tol {
                max_abs: 1.0 / 512.0,
                nmse: 1e-7,
            },
            KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
        };
        let shape = format!("{n} tok kv_dim {width} ring {ring} stride {stride} cap {cap}");
        for (name, b, want) in [("K", &kc, &want_k), ("V", &vc, &want_v)] {
            out.push(row(
                "kv_append",
                format!("ring {label} {} {name}", kv.name()),
                shape.clone(),
                &read_cache(&cx, b, cache_rows * width, kv)?,
                want,
                tol,
            ));
        }
    }
    Ok(out)
}

/// `x` rounded as `kv` stores it.
fn to_kv(x: &[f32], kv: KvType) -> Vec<f32> {
    match kv {
        KvType::F32 => x.to_vec(),
        KvType::F16 => to_f16(x).1,
        KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
    }
}

/// One ring attention case.
struct RingCase {
    /// Queries; with `slots`, one per slot region.
    n_q: usize,
    slots: bool,
    /// Positions written (`n_kv`) and the ring / region rows.
    n_kv: usize,
    ring: usize,
    stride: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    window: usize,
    softcap: Option<f32>,
    kv: KvType,
}

/// Runs decode (`Some(chunk)`, split as `form` says) or prefill (`None`) attention
/// of `c` over rings built from random full histories and compares with
/// `vkllm_cpu::attention_ring`.
fn ring_attention(
    cx: &Ctx<'_>,
    rng: &mut Rng,
    c: &RingCase,
    chunk: Option<usize>,
    form: Split,
) -> Result<KernelParityRow> {
    let width = c.n_kv_heads * c.head_dim;
    let qw = c.n_heads * c.head_dim;
    let regions = if c.slots { c.n_q } else { 1 };
    let ring_rows = c.n_kv.min(c.ring);
    let cache_rows = (regions - 1) * c.stride + ring_rows;
    let (mut k_all, mut v_all) = (vec![0.0; cache_rows * width], vec![0.0; cache_rows * width]);
    let mut pos = Vec::with_capacity(c.n_q);
    let mut n_written = Vec::with_capacity(regions);
    for s in 0..regions {
        // Slot s has written positions 0..n_s (its own history); the shared cache all n_kv.
        let n_s = if c.slots {
            c.n_kv - rng.below((c.n_kv - c.window) as u64) as usize
        } else {
            c.n_kv
        };
        let full_k = rng.vec(n_s * width, -2.0, 2.0);
        let full_v = rng.vec(n_s * width, -1.0, 1.0);
        let (rk, rv) = (
            ring_of(&full_k, n_s, c.ring, width),
            ring_of(&full_v, n_s, c.ring, width),
        );
        let o = s * c.stride * width;
        k_all[o..o + rk.len()].copy_from_slice(&rk);
        v_all[o..o + rv.len()].copy_from_slice(&rv);
        n_written.push(n_s);
    }
    if c.slots {
        pos.extend(n_written.iter().map(|&n| n - 1));
    } else {
        pos.extend(c.n_kv - c.n_q..c.n_kv);
    }
    let (kb, kr) = store(cx, "k", &k_all, c.kv)?;
    let (vb, vr) = store(cx, "v", &v_all, c.kv)?;
    let q = rng.vec(c.n_q * qw, -2.0, 2.0);
    let scale = 1.0 / (c.head_dim as f32).sqrt();
    let p = AttnParams {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        scale,
        softcap: c.softcap,
        window: Some(c.window),
    };
    let mut want = vec![0.0; c.n_q * qw];
    if c.slots {
        for (s, &ps) in pos.iter().enumerate() {
            let rows = n_written[s].min(c.ring) * width;
            let o = s * c.stride * width;
            vkllm_cpu::attention_ring(
                &q[s * qw..(s + 1) * qw],
                &kr[o..o + rows],
                &vr[o..o + rows],
                1,
                n_written[s],
                c.ring,
                &[ps],
                &p,
                &mut want[s * qw..(s + 1) * qw],
            );
        }
    } else {
        vkllm_cpu::attention_ring(&q, &kr, &vr, c.n_q, c.n_kv, c.ring, &pos, &p, &mut want);
    }
    let shape = AttnShape {
        n_q: c.n_q,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        n_kv: c.n_kv,
        scale,
        softcap: c.softcap,
        window: Some(c.window),
        kv: c.kv,
        kv_v: c.kv,
        rot_k: false,
        kv_stride: if c.slots { c.stride } else { 0 },
        ring: Some(c.ring),
    };
    let pos32: Vec<u32> = pos.iter().map(|&p| p as u32).collect();
    let (qb, pb, ob) = (
        cx.input("q", &q)?,
        cx.input("q_pos", &pos32)?,
        cx.output("out", want.len())?,
    );
    let label = match chunk {
        Some(ch) => {
            let (ml, o) = AttnDecode::<vkllm_vk::BufSlice<'_>>::scratch_bytes(&shape, ch);
            let part_ml = cx
                .dev
                .create_buffer("part_ml", ml, vkllm_vk::MemoryKind::Device)?;
            let part_o = cx
                .dev
                .create_buffer("part_o", o, vkllm_vk::MemoryKind::Device)?;
            let counters = merge_counters(cx, &shape)?;
            cx.run(&[&ob, &part_ml, &part_o], |r| {
                let a = AttnDecode {
                    q: qb.all(),
                    k: kb.all(),
                    v: vb.all(),
                    q_pos: pb.all(),
                    part_ml: part_ml.all(),
                    part_o: part_o.all(),
                    out: ob.all(),
                    sink: None,
                };
                r.dispatch_all(form.dispatch(a, &shape, ch.into(), counters.all())?)
            })?;
            "attn_decode"
        }
        None => {
            cx.run(&[&ob], |r| {
                r.dispatch(
                    AttnPrefill {
                        q: qb.all(),
                        k: kb.all(),
                        v: vb.all(),
                        q_pos: pb.all(),
                        out: ob.all(),
                        sink: None,
                    }
                    .dispatch(&shape)?,
                )
            })?;
            "attn_prefill"
        }
    };
    let mut variant = format!(
        "{}ring {}{} w {}",
        form.prefix(),
        if c.slots { "slots " } else { "" },
        c.kv.name(),
        c.window
    );
    if let Some(s) = c.softcap {
        variant += &format!(" softcap {s}");
    }
    Ok(row(
        label,
        variant,
        format!(
            "q {} kv {} ring {} h {}/{} d {}{}",
            c.n_q,
            c.n_kv,
            c.ring,
            c.n_heads,
            c.n_kv_heads,
            c.head_dim,
            chunk.map_or(String::new(), |ch| format!(" chunk {ch}"))
        ),
        &cx.read(&ob, want.len())?,
        &want,
        ATTN_TOL,
    ))
}

#[allow(clippy::too_many_arguments)]
const fn rc(
    n_q: usize,
    slots: bool,
    n_kv: usize,
    ring: usize,
    stride: usize,
    heads: (usize, usize, usize),
    window: usize,
    softcap: Option<f32>,
    kv: KvType,
) -> RingCase {
    RingCase {
        n_q,
        slots,
        n_kv,
        ring,
        stride,
        n_heads: heads.0,
        n_kv_heads: heads.1,
        head_dim: heads.2,
        window,
        softcap,
        kv,
    }
}

/// Split-K decode over rings: one query whose window wraps (chunks of 64 keys over a window of
/// 150), three consecutive queries sharing a ring, the window exactly the ring, a ring larger
/// than the history (no wrap yet), and slot regions each at its own position.
pub(crate) fn attention_ring(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    let decode = [
        (
            rc(1, false, 1003, 167, 0, (8, 2, 64), 150, None, KvType::F32),
            64usize,
        ),
        (
            rc(
                3,
                false,
                700,
                130,
                0,
                (4, 4, 80),
                100,
                Some(20.0),
                KvType::F16,
            ),
            32,
        ),
        (
            rc(1, false, 517, 96, 0, (6, 3, 32), 96, None, KvType::F32),
            256,
        ),
        (
            rc(1, false, 50, 96, 0, (2, 1, 64), 64, None, KvType::F32),
            32,
        ),
        (
            rc(4, true, 600, 77, 81, (6, 3, 64), 70, None, KvType::F32),
            64,
        ),
        (
            rc(
                3,
                true,
                900,
                131,
                131,
                (4, 2, 128),
                131,
                Some(30.0),
                KvType::F16,
            ),
            128,
        ),
    ];
    for (c, chunk) in decode {
        let mut forms = vec![Split::Reference, Split::Gqa];
        if c.kv == KvType::F16 && c.head_dim.is_multiple_of(8) {
            forms.extend([Split::Wide, Split::WideMerged]);
        }
        for form in forms {
            rows.push(ring_attention(&cx, &mut rng, &c, Some(chunk), form)?);
        }
    }
    // Prefill: a chunk of queries whose windows wrap (ring = window + n_q - 1 + a few rows).
    let prefill = [
        rc(37, false, 1000, 70, 0, (4, 2, 64), 30, None, KvType::F32),
        rc(
            20,
            false,
            333,
            60,
            0,
            (3, 3, 80),
            41,
            Some(30.0),
            KvType::F16,
        ),
        rc(16, false, 260, 128, 0, (2, 1, 256), 64, None, KvType::F32),
    ];
    for c in prefill {
        rows.push(ring_attention(&cx, &mut rng, &c, None, Split::Reference)?);
    }
    Ok(rows)
}
