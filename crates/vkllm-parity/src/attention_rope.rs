//! Parity cases of the decode attention with the input step folded in (`attn_decode_rope`:
//! `attention_fused.wgsl` with ROPE = 1) against the reference ops composed:
//! `vkllm_cpu::rope_kv_append` (per-head RMSNorm, RoPE, the KV append) then
//! `vkllm_cpu::attention_ring` on the updated cache.
//!
//! Queries read their projections from a packed buffer with padded offsets (so a wrong k/v
//! offset or token stride reads the wrong words). Cases: Qwen3-like slots (norm, NeoX, f16 cache,
//! 1..700 keys, the grid sized for the whole cache as a recorded step is), a Llama-like single
//! sequence (no norm, GQA 4), a Gemma-like ring with window, softcap, interleaved partial
//! rotation, `1 + w` norm and an idle slot, a context of one key, and many chunks with GQA 8.
//! Checked: the output, the whole K and V caches (the appended rows and every other row intact)
//! and the merge counters (zero after the dispatch).

use vkllm_cpu::decode::IDLE as IDLE_POS;
use vkllm_cpu::{AttnParams, Rope, RopeKvAppendSpec, RopeScaling, RopeStyle, rope_kv_append};
use vkllm_kernels::attention::{
    AttnDecode, AttnDecodeFused, AttnDecodeRope, AttnRope, AttnShape, Chunking,
};
use vkllm_kernels::kv_append::KvType;
use vkllm_kernels::rope::RopeLayout;
use vkllm_kernels::rope_kv_append::HeadNorm;

use super::attention_fused::{grouped_split_na, show_positions, slots_reference, stored};
use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, row};
use vkllm_vk::Device;
use vkllm_vk::Result;

const KERNEL: &str = "attn_decode_rope";
const WIDE_KERNEL: &str = "attn_decode_wide_rope";
const IDLE: usize = IDLE_POS as usize;

struct Case {
    label: &'static str,
    /// Query positions (one per query; `IDLE` only in windowed cases).
    pos: &'static [usize],
    /// One query on cache 0 (kv_stride 0, a single sequence) instead of slot caches.
    shared: bool,
    /// Key positions the grid covers (the shape's n_kv and the positions' bound, max_tok).
    n_pos: usize,
    ring: Option<usize>,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    rotary_dim: usize,
    style: RopeStyle,
    /// `Some(offset)`: per-head RMSNorm with weights `offset + w`.
    norm_offset: Option<f32>,
    softcap: Option<f32>,
    window: Option<usize>,
    kv: KvType,
    chunk: usize,
}

const CASES: &[Case] = &[
    Case {
        label: "qwen3 slots",
        pos: &[0, 9, 20, 699],
        shared: false,
        n_pos: 700,
        ring: None,
        n_heads: 16,
        n_kv_heads: 8,
        head_dim: 128,
        rotary_dim: 128,
        style: RopeStyle::NeoX,
        norm_offset: Some(0.0),
        softcap: None,
        window: None,
        kv: KvType::F16,
        chunk: 16,
    },
    Case {
        label: "llama one sequence",
        pos: &[298],
        shared: true,
        n_pos: 299,
        ring: None,
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 64,
        rotary_dim: 64,
        style: RopeStyle::NeoX,
        norm_offset: None,
        softcap: None,
        window: None,
        kv: KvType::F32,
        chunk: 16,
    },
    Case {
        label: "gemma ring",
        pos: &[5, IDLE, 39, 150],
        shared: false,
        n_pos: 200,
        ring: Some(40),
        n_heads: 6,
        n_kv_heads: 2,
        head_dim: 64,
        rotary_dim: 32,
        style: RopeStyle::Interleaved,
        norm_offset: Some(1.0),
        softcap: Some(30.0),
        window: Some(33),
        kv: KvType::F16,
        chunk: 16,
    },
    Case {
        label: "context 1",
        pos: &[0],
        shared: true,
        n_pos: 1,
        ring: None,
        n_heads: 7,
        n_kv_heads: 7,
        head_dim: 80,
        rotary_dim: 80,
        style: RopeStyle::Interleaved,
        norm_offset: None,
        softcap: None,
        window: None,
        kv: KvType::F32,
        chunk: 16,
    },
    Case {
        label: "many chunks",
        pos: &[2999],
        shared: true,
        n_pos: 3000,
        ring: None,
        n_heads: 8,
        n_kv_heads: 1,
        head_dim: 128,
        rotary_dim: 64,
        style: RopeStyle::NeoX,
        norm_offset: Some(0.0),
        softcap: None,
        window: None,
        kv: KvType::F16,
        chunk: 16,
    },
];

pub(crate) fn attention_rope(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if let Some(na) = grouped_split_na(dev, KERNEL) {
        return Ok(vec![na]);
    }
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for c in CASES {
        rows.extend(run_case(&cx, &mut rng, c, false)?);
        // The wide split's form (f16 caches, heads of whole 16-byte slots), adaptive chunks.
        if c.kv == KvType::F16 && c.head_dim.is_multiple_of(8) {
            rows.extend(run_case(&cx, &mut rng, c, true)?);
        }
    }
    Ok(rows)
}

/// `wide`: [`AttnDecodeRope::dispatch_wide`] with adaptive chunks from 8 up to the case's chunk
/// x 4 (`attn_decode_wide_rope`), else [`AttnDecodeRope::dispatch`].
fn run_case(cx: &Ctx<'_>, rng: &mut Rng, c: &Case, wide: bool) -> Result<Vec<KernelParityRow>> {
    let kernel = if wide { WIDE_KERNEL } else { KERNEL };
    let chunking = match wide {
        true => Chunking::adaptive(4 * c.chunk, 8),
        false => c.chunk.into(),
    };
    let n_q = c.pos.len();
    assert!(!c.shared || n_q == 1, "a shared cache takes one query");
    let hd = c.head_dim;
    let ring = c.ring.unwrap_or(c.n_pos);
    let rows_per_cache = c.n_pos.min(ring);
    let stride = if c.shared { 0 } else { rows_per_cache + 3 };
    let (qd, kd) = (c.n_heads * hd, c.n_kv_heads * hd);
    let cache_words = ((n_q - 1) * stride + rows_per_cache) * kd;
    let (k_words, k_init) = stored(&rng.vec(cache_words, -2.0, 2.0), c.kv);
    let (v_words, v_init) = stored(&rng.vec(cache_words, -1.0, 1.0), c.kv);
    let (q, k, v) = (
        rng.vec(n_q * qd, -2.0, 2.0),
        rng.vec(n_q * kd, -2.0, 2.0),
        rng.vec(n_q * kd, -1.0, 1.0),
    );
    let (qw, kw) = (rng.vec(hd, 0.5, 1.5), rng.vec(hd, 0.5, 1.5));
    let rope = Rope {
        theta: 10000.0,
        rotary_dim: c.rotary_dim,
        style: c.style,
        scaling: RopeScaling::None,
    };
    let max_pos = c.n_pos + 2;
    let mut table = Vec::with_capacity(max_pos * c.rotary_dim);
    for p in 0..max_pos {
        let (cs, sn) = rope.cos_sin(p);
        for (a, b) in cs.into_iter().zip(sn) {
            table.push(a);
            table.push(b);
        }
    }
    // Packed rows with gaps: q at 0, k at qd + 2, v at qd + 2 + kd + 3, rows of v_off + kd + 1.
    let (k_off, v_off) = (qd + 2, qd + kd + 5);
    let tok_stride = v_off + kd + 1;
    let mut packed = rng.vec(n_q * tok_stride, -9.0, 9.0);
    for t in 0..n_q {
        let r = t * tok_stride;
        packed[r..r + qd].copy_from_slice(&q[t * qd..(t + 1) * qd]);
        packed[r + k_off..r + k_off + kd].copy_from_slice(&k[t * kd..(t + 1) * kd]);
        packed[r + v_off..r + v_off + kd].copy_from_slice(&v[t * kd..(t + 1) * kd]);
    }

    // The reference: the input step, the cache as the device stores it, then attention.
    let pos32: Vec<u32> = c.pos.iter().map(|&p| p as u32).collect();
    let spec = RopeKvAppendSpec {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: hd,
        rope: &rope,
        norm: c.norm_offset.map(|o| (&qw[..], &kw[..], 1e-6, o)),
        max_tok: c.n_pos,
        row_stride: stride,
        ring,
    };
    let mut q_rot = vec![0.0; q.len()];
    let (mut k_ref, mut v_ref) = (k_init.clone(), v_init.clone());
    rope_kv_append(
        &q, &k, &v, &pos32, &spec, &mut q_rot, &mut k_ref, &mut v_ref,
    );
    let (k_ref, v_ref) = (stored(&k_ref, c.kv).1, stored(&v_ref, c.kv).1);
    let scale = 1.0 / (hd as f32).sqrt();
    let p = AttnParams {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: hd,
        scale,
        softcap: c.softcap,
        window: c.window,
    };
    let want = slots_reference(&q_rot, &k_ref, &v_ref, c.pos, stride, ring, &p);

    let shape = AttnShape {
        n_q,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: hd,
        n_kv: c.n_pos,
        scale,
        softcap: c.softcap,
        window: c.window,
        kv: c.kv,
        kv_v: c.kv,
        rot_k: false,
        kv_stride: stride,
        ring: c.ring,
    };
    let r = AttnRope {
        rotary_dim: c.rotary_dim,
        layout: match c.style {
            RopeStyle::Interleaved => RopeLayout::Interleaved,
            RopeStyle::NeoX => RopeLayout::NeoX,
        },
        max_pos,
        norm: c.norm_offset.map(|offset| HeadNorm { eps: 1e-6, offset }),
        max_tok: c.n_pos,
        tok_stride,
        k_off,
        v_off,
    };
    let (qkv_b, qn_b, kn_b, tab_b) = (
        cx.input("qkv", &packed)?,
        cx.input("q_norm", &qw)?,
        cx.input("k_norm", &kw)?,
        cx.input("table", &table)?,
    );
    let (kb, vb, pb) = (
        cx.input("k", &k_words)?,
        cx.input("v", &v_words)?,
        cx.input("q_pos", &pos32)?,
    );
    let out = cx.output("out", want.len())?;
    let (ml, o) = AttnDecode::<vkllm_vk::BufSlice<'_>>::scratch_bytes(&shape, chunking);
    let part_ml = cx
        .dev
        .create_buffer("part_ml", ml, vkllm_vk::MemoryKind::Device)?;
    let part_o = cx
        .dev
        .create_buffer("part_o", o, vkllm_vk::MemoryKind::Device)?;
    let n_ctr = AttnDecodeFused::<vkllm_vk::BufSlice<'_>>::counter_bytes(&shape) as usize / 4;
    let counters = cx.input("counters", &vec![0u32; n_ctr])?;
    cx.run(&[&out, &part_ml, &part_o], |rec| {
        let op = AttnDecodeRope {
            qkv: qkv_b.all(),
            q_norm: qn_b.all(),
            k_norm: kn_b.all(),
            table: tab_b.all(),
            k: kb.all(),
            v: vb.all(),
            q_pos: pb.all(),
            part_ml: part_ml.all(),
            part_o: part_o.all(),
            out: out.all(),
            counters: counters.all(),
        };
        rec.dispatch(match wide {
            true => op.dispatch_wide(&shape, chunking, &r)?,
            false => op.dispatch(&shape, c.chunk, &r)?,
        })
    })?;
    let got = cx.read(&out, want.len())?;
    let read_cache = |b: &vkllm_vk::Buffer| -> Result<Vec<f32>> {
        Ok(match c.kv {
            KvType::F32 => cx.read(b, cache_words)?,
            KvType::F16 => {
                let w: Vec<u16> = cx.dev.read_vec(b, cache_words)?;
                w.iter()
                    .map(|&h| half::f16::from_bits(h).to_f32())
                    .collect()
            }
            KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
        })
    };
    let ctr: Vec<u32> = cx.dev.read_vec(&counters, n_ctr)?;
    let ctr_f: Vec<f32> = ctr.iter().map(|&x| x as f32).collect();

    // Tolerances. The rotated q and k differ from the CPU's by a few f32 ulps (the norm's sum is
    // reduced in another order; the driver may contract the rotation into FMAs). With an f32
    // cache that moves the output by ~1e-6 (as split + merge: 2e-5). With an f16 cache the
    // appended key can round to the neighbouring f16 value (one f16 ulp, 2^-9 at |k| < 2, where
    // the f32 values straddle a rounding boundary): its score moves by up to ~2^-9 * |q| * scale
    // (|q| <= ~4 after the norm), so the output by up to ~1e-3 (the weights of one key). The
    // cache: K as rope_kv_append's parity (a few ulps in f32, one f16 ulp at |x| < 8), V a copy.
    let (out_tol, k_tol) = match c.kv {
        KvType::F32 => (
            Tol {
                max_abs: 2e-5,
                nmse: 1e-7,
            },
            Tol {
                max_abs: 1e-5,
                nmse: 1e-11,
            },
        ),
        KvType::F16 => (
            Tol {
                max_abs: 1e-3,
                nmse: 1e-6,
            },
            Tol {
                max_abs: 1.0 / 128.0,
                nmse: 1e-6,
            },
        ),
        KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
    };
    let variant = format!("{} {}", c.label, c.kv.name());
    let shape_s = format!(
        "q@[{}] kv {}{} h {}/{} d {} rot {} chunk {}{}",
        show_positions(c.pos),
        c.n_pos,
        c.ring.map_or(String::new(), |r| format!(" ring {r}")),
        c.n_heads,
        c.n_kv_heads,
        hd,
        c.rotary_dim,
        chunking.chunk,
        if chunking.min > 0 { " adaptive" } else { "" }
    );
    Ok(vec![
        row(
            kernel,
            variant.clone(),
            shape_s.clone(),
            &got,
            &want,
            out_tol,
        ),
        row(
            kernel,
            format!("{variant} K cache"),
            shape_s.clone(),
            &read_cache(&kb)?,
            &k_ref,
            k_tol,
        ),
        row(
            kernel,
            format!("{variant} V cache"),
            shape_s.clone(),
            &read_cache(&vb)?,
            &v_ref,
            EXACT,
        ),
        row(
            kernel,
            format!("{variant} counters"),
            shape_s,
            &ctr_f,
            &vec![0.0; n_ctr],
            EXACT,
        ),
    ])
}
