//! Parity cases of the one-dispatch decode attention (`attn_decode_fused`: grouped split whose
//! last workgroup per (kv head, query) merges) against `vkllm_cpu::attention_ring`.
//!
//! The grid is sized for `n_pos` keys (as a recorded decode step is, for the whole cache) while
//! each query's position decides how many chunks are live: contexts of 1 key, one key short of a
//! chunk, exactly a chunk (single pass, no partials), a chunk and one, many chunks; slots with
//! their own caches (stride larger than the rows), queries sharing one cache, ring caches with
//! windows that wrap, idle slots (position u32::MAX) in windowed layers, odd head counts and
//! groupings up to 8. Each case dispatches twice in one recording (the output re-poisoned in
//! between) and once more in a second submission, so a counter the kernel failed to reset shows
//! up as an unwritten (NaN) output; the counters are then checked to be zero.

use vkllm_cpu::AttnParams;
use vkllm_cpu::decode::IDLE as IDLE_POS;
use vkllm_kernels::attention::{AttnDecode, AttnDecodeFused, AttnShape};
use vkllm_kernels::kv_append::KvType;

use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, pack16, row, to_f16};
use vkllm_vk::Buffer;
use vkllm_vk::Device;
use vkllm_vk::Result;

/// As the split + merge cases: outputs are convex combinations of |v| <= 1 and the scores differ
/// from the CPU's only by f32 summation order.
const ATTN_TOL: Tol = Tol {
    max_abs: 2e-5,
    nmse: 1e-7,
};

struct Case {
    /// Query positions (one per query).
    pos: &'static [usize],
    /// Every query reads cache 0 (kv_stride 0) instead of its own slot's.
    shared: bool,
    /// Key positions the grid covers (the shape's n_kv; every position is below it).
    n_pos: usize,
    /// Rows each cache keeps (position j in row j % ring); `None`: the full cache.
    ring: Option<usize>,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    softcap: Option<f32>,
    window: Option<usize>,
    kv: KvType,
    chunk: usize,
    label: &'static str,
}

/// An idle slot's position (`vkllm_cpu::decode::IDLE`): in a windowed layer it sees no key (the
/// CPU op's rule: a zero output), and it must not leave a counter behind.
const IDLE: usize = IDLE_POS as usize;

const CASES: &[Case] = &[
    Case {
        pos: &[0],
        shared: true,
        n_pos: 1,
        ring: None,
        n_heads: 7,
        n_kv_heads: 7,
        head_dim: 64,
        softcap: None,
        window: None,
        kv: KvType::F32,
        chunk: 16,
        label: "context 1",
    },
    Case {
        pos: &[14],
        shared: true,
        n_pos: 15,
        ring: None,
        n_heads: 14,
        n_kv_heads: 2,
        head_dim: 64,
        softcap: None,
        window: None,
        kv: KvType::F16,
        chunk: 16,
        label: "chunk - 1",
    },
    Case {
        pos: &[15],
        shared: true,
        n_pos: 16,
        ring: None,
        n_heads: 8,
        n_kv_heads: 1,
        head_dim: 128,
        softcap: None,
        window: None,
        kv: KvType::F32,
        chunk: 16,
        label: "chunk",
    },
    Case {
        pos: &[16],
        shared: true,
        n_pos: 17,
        ring: None,
        n_heads: 6,
        n_kv_heads: 3,
        head_dim: 80,
        softcap: Some(20.0),
        window: None,
        kv: KvType::F16,
        chunk: 16,
        label: "chunk + 1",
    },
    Case {
        pos: &[2999],
        shared: true,
        n_pos: 3000,
        ring: None,
        n_heads: 8,
        n_kv_heads: 1,
        head_dim: 64,
        softcap: None,
        window: None,
        kv: KvType::F16,
        chunk: 16,
        label: "many chunks",
    },
    // A recorded step: the grid covers 700 keys (44 chunks), the slots see 1, 10, 21, 700 keys.
    Case {
        pos: &[0, 9, 20, 699],
        shared: false,
        n_pos: 700,
        ring: None,
        n_heads: 16,
        n_kv_heads: 8,
        head_dim: 128,
        softcap: None,
        window: None,
        kv: KvType::F16,
        chunk: 16,
        label: "slots",
    },
    Case {
        pos: &[5, IDLE, 39, 150],
        shared: false,
        n_pos: 200,
        ring: Some(40),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 64,
        softcap: Some(30.0),
        window: Some(33),
        kv: KvType::F16,
        chunk: 16,
        label: "slots ring",
    },
    Case {
        pos: &[297, 298, 299],
        shared: true,
        n_pos: 300,
        ring: None,
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 128,
        softcap: None,
        window: None,
        kv: KvType::F32,
        chunk: 64,
        label: "shared queries",
    },
    Case {
        pos: &[100, IDLE, 255],
        shared: false,
        n_pos: 256,
        ring: None,
        n_heads: 16,
        n_kv_heads: 2,
        head_dim: 256,
        softcap: None,
        window: Some(70),
        kv: KvType::F32,
        chunk: 32,
        label: "slots window",
    },
];

/// `x` as a `kv` cache stores it (words), and the f32 values that are (what the CPU should see).
pub(super) fn stored(x: &[f32], kv: KvType) -> (Vec<u32>, Vec<f32>) {
    match kv {
        KvType::F32 => (bytemuck::cast_slice(x).to_vec(), x.to_vec()),
        KvType::F16 => {
            let (h, back) = to_f16(x);
            (pack16(&h), back)
        }
        KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => unreachable!("an f32 or f16 case"),
    }
}

/// The device copy of `x` as `kv` stores it, and the values the CPU should see.
fn store(cx: &Ctx<'_>, label: &str, x: &[f32], kv: KvType) -> Result<(Buffer, Vec<f32>)> {
    let (words, back) = stored(x, kv);
    Ok((cx.input(label, &words)?, back))
}

/// The "not applicable" row of a grouped-split kernel on a device whose subgroups may be
/// narrower than 8 lanes (its 8-lane clusters), else `None`.
pub(super) fn grouped_split_na(dev: &Device, kernel: &'static str) -> Option<KernelParityRow> {
    let info = dev.info();
    let min_sg = if info.min_subgroup_size > 0 {
        info.min_subgroup_size
    } else {
        info.subgroup_size
    };
    (min_sg < 8).then(|| {
        KernelParityRow::not_applicable(
            kernel,
            "all",
            format!("subgroups of {min_sg} lanes (the grouped split needs >= 8)"),
        )
    })
}

/// The decode reference for queries at `pos` (one per query; `IDLE` ones stay zero, windowed
/// cases only): query i (`q[i]`, `p.n_heads * head_dim` values) attends to keys 0..=pos[i],
/// in rows j % ring of its cache (`stride` rows after the previous query's; 0: one shared
/// cache) of `k`, `v` (`[rows, n_kv_heads * head_dim]`).
pub(super) fn slots_reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos: &[usize],
    stride: usize,
    ring: usize,
    p: &AttnParams,
) -> Vec<f32> {
    let (qw, width) = (p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim);
    let mut want = vec![0.0; pos.len() * qw];
    for (i, &pos) in pos.iter().enumerate() {
        if pos == IDLE {
            // Sees no key (windowed cases only): stays zero.
            assert!(p.window.is_some(), "idle slots only in windowed cases");
            continue;
        }
        // The keys written so far are positions 0..=pos, in rows (j % ring) of this query's cache.
        let base = i * stride * width;
        let rows = (pos + 1).min(ring) * width;
        vkllm_cpu::attention_ring(
            &q[i * qw..(i + 1) * qw],
            &k[base..base + rows],
            &v[base..base + rows],
            1,
            pos + 1,
            ring,
            &[pos],
            p,
            &mut want[i * qw..(i + 1) * qw],
        );
    }
    want
}

/// Query positions as a table shows them (`idle` for an idle slot).
pub(super) fn show_positions(pos: &[usize]) -> String {
    let shown: Vec<String> = pos
        .iter()
        .map(|&p| {
            if p == IDLE {
                "idle".into()
            } else {
                p.to_string()
            }
        })
        .collect();
    shown.join(",")
}

pub(crate) fn attention_fused(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    if let Some(na) = grouped_split_na(dev, "attn_decode_fused") {
        return Ok(vec![na]);
    }
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for c in CASES {
        rows.extend(run_case(&cx, &mut rng, c, false)?);
        // The wide split whose last workgroup merges, on the cases it takes (f16 caches, heads
        // of whole 16-byte slots): the same counter discipline.
        if c.kv == KvType::F16 && c.head_dim.is_multiple_of(8) {
            rows.extend(run_case(&cx, &mut rng, c, true)?);
        }
    }
    Ok(rows)
}

/// `wide`: `AttnDecode::dispatch_wide_merged` (`attn_decode_wide_merged`), else
/// `AttnDecodeFused::dispatch`.
fn run_case(cx: &Ctx<'_>, rng: &mut Rng, c: &Case, wide: bool) -> Result<Vec<KernelParityRow>> {
    let kernel = if wide {
        "attn_decode_wide_merged"
    } else {
        "attn_decode_fused"
    };
    let n_q = c.pos.len();
    let ring = c.ring.unwrap_or(c.n_pos);
    let rows_per_cache = c.n_pos.min(ring);
    // Slot caches a few rows apart (stride > rows), so a wrong stride reads the wrong slot.
    let stride = if c.shared { 0 } else { rows_per_cache + 3 };
    let caches = if c.shared { 1 } else { n_q };
    let width = c.n_kv_heads * c.head_dim;
    let cache_words = ((caches - 1) * stride + rows_per_cache) * width;
    let (kb, kr) = store(cx, "k", &rng.vec(cache_words, -2.0, 2.0), c.kv)?;
    let (vb, vr) = store(cx, "v", &rng.vec(cache_words, -1.0, 1.0), c.kv)?;
    let qw = c.n_heads * c.head_dim;
    let q = rng.vec(n_q * qw, -2.0, 2.0);
    let scale = 1.0 / (c.head_dim as f32).sqrt();
    let p = AttnParams {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        scale,
        softcap: c.softcap,
        window: c.window,
    };
    let want = slots_reference(&q, &kr, &vr, c.pos, stride, ring, &p);
    let shape = AttnShape {
        n_q,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
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
    let pos32: Vec<u32> = c.pos.iter().map(|&p| p as u32).collect();
    let (qb, pb, out) = (
        cx.input("q", &q)?,
        cx.input("q_pos", &pos32)?,
        cx.output("out", want.len())?,
    );
    let (ml, o) = AttnDecode::<vkllm_vk::BufSlice<'_>>::scratch_bytes(&shape, c.chunk);
    let part_ml = cx
        .dev
        .create_buffer("part_ml", ml, vkllm_vk::MemoryKind::Device)?;
    let part_o = cx
        .dev
        .create_buffer("part_o", o, vkllm_vk::MemoryKind::Device)?;
    let n_ctr = AttnDecodeFused::<vkllm_vk::BufSlice<'_>>::counter_bytes(&shape) as usize / 4;
    let counters = cx.input("counters", &vec![0u32; n_ctr])?;
    let fused = |r: &mut vkllm_vk::Recorder| {
        if wide {
            let a = AttnDecode {
                q: qb.all(),
                k: kb.all(),
                v: vb.all(),
                q_pos: pb.all(),
                part_ml: part_ml.all(),
                part_o: part_o.all(),
                out: out.all(),
                sink: None,
            };
            return r.dispatch(a.dispatch_wide_merged(&shape, c.chunk, counters.all())?);
        }
        r.dispatch(
            AttnDecodeFused {
                q: qb.all(),
                k: kb.all(),
                v: vb.all(),
                q_pos: pb.all(),
                part_ml: part_ml.all(),
                part_o: part_o.all(),
                out: out.all(),
                counters: counters.all(),
            }
            .dispatch(&shape, c.chunk)?,
        )
    };
    // Twice in one recording (out poisoned again in between), then in a second submission.
    cx.run(&[&out, &part_ml, &part_o], |r| {
        fused(r)?;
        r.fill(out.all(), f32::NAN.to_bits())?;
        fused(r)
    })?;
    let mut got = cx.read(&out, want.len())?;
    cx.run(&[&out, &part_ml, &part_o], |r| fused(r))?;
    got.extend(cx.read(&out, want.len())?);
    let want2: Vec<f32> = want.iter().chain(&want).copied().collect();
    let ctr: Vec<u32> = cx.dev.read_vec(&counters, n_ctr)?;
    let ctr_f: Vec<f32> = ctr.iter().map(|&x| x as f32).collect();
    let mut variant = format!("{} {}", c.label, c.kv.name());
    if let Some(s) = c.softcap {
        variant += &format!(" softcap {s}");
    }
    if let Some(w) = c.window {
        variant += &format!(" window {w}");
    }
    let shape_s = format!(
        "q@[{}] kv {}{} h {}/{} d {} chunk {}",
        show_positions(c.pos),
        c.n_pos,
        c.ring.map_or(String::new(), |r| format!(" ring {r}")),
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.chunk
    );
    Ok(vec![
        row(
            kernel,
            variant.clone(),
            shape_s.clone(),
            &got,
            &want2,
            ATTN_TOL,
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
