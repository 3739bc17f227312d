//! Parity cases: RoPE and attention (decode split-K, prefill tiled).

use vkllm_cpu::kv_quant::KvQuant;
use vkllm_cpu::{AttnParams, Rope, RopeScaling, RopeStyle};
use vkllm_kernels::attention::{AttnDecode, AttnPrefill, AttnShape, Chunking};
use vkllm_kernels::kv_append::KvType;
use vkllm_kernels::kv_unrotate::KvUnrotate;
use vkllm_kernels::rope::{Rope as RopeK, RopeLayout, RopeShape};

use super::{Ctx, KernelParityRow, Rng, Tol, pack16, row, to_f16};
use vkllm_vk::Buffer;
use vkllm_vk::Device;
use vkllm_vk::Result;

pub(crate) fn rope(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    let llama3 = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position: 8192,
    };
    // Qwen2.5's published YaRN setting (factor 4 over 32k), at positions past 32k.
    let yarn = RopeScaling::Yarn {
        factor: 4.0,
        original_max_position: 32768,
        beta_fast: 32.0,
        beta_slow: 1.0,
        attention_factor: 1.138_629_4,
        truncate: true,
    };
    for (style, rotary_dim, head_dim, scaling, label) in [
        (
            RopeStyle::Interleaved,
            64usize,
            64usize,
            RopeScaling::None,
            "interleaved",
        ),
        (
            RopeStyle::NeoX,
            128,
            128,
            llama3,
            "neox llama3, positions 32768..",
        ),
        (
            RopeStyle::NeoX,
            32,
            64,
            RopeScaling::None,
            "neox partial 32/64",
        ),
        (
            RopeStyle::Interleaved,
            16,
            80,
            RopeScaling::Linear { factor: 4.0 },
            "interleaved partial linear",
        ),
        (
            RopeStyle::NeoX,
            128,
            128,
            yarn,
            "neox yarn, positions 32768..",
        ),
    ] {
        let cfg = Rope {
            theta: 10000.0,
            rotary_dim,
            style,
            scaling,
        };
        let (n_tok, n_heads) = (9usize, 3usize);
        let (first, max_pos) = match scaling {
            RopeScaling::Yarn { .. } | RopeScaling::Llama3 { .. } => (32768usize, 40000usize),
            _ => (0, 5000),
        };
        let x = rng.vec(n_tok * n_heads * head_dim, -2.0, 2.0);
        let pos: Vec<u32> = (0..n_tok)
            .map(|_| (first as u64 + rng.below((max_pos - first) as u64)) as u32)
            .collect();
        // The table holds exactly the CPU op's (cos, sin) per position.
        let mut table = Vec::with_capacity(max_pos * rotary_dim);
        for p in 0..max_pos {
            let (c, s) = cfg.cos_sin(p);
            for (c, s) in c.into_iter().zip(s) {
                table.push(c);
                table.push(s);
            }
        }
        let (xb, pb, tb) = (
            cx.input("x", &x)?,
            cx.input("pos", &pos)?,
            cx.input("table", &table)?,
        );
        cx.run(&[], |r| {
            r.dispatch(
                RopeK {
                    x: xb.all(),
                    pos: pb.all(),
                    table: tb.all(),
                }
                .dispatch(&RopeShape {
                    n_tok,
                    n_heads,
                    head_dim,
                    rotary_dim,
                    layout: match style {
                        RopeStyle::Interleaved => RopeLayout::Interleaved,
                        RopeStyle::NeoX => RopeLayout::NeoX,
                    },
                    max_pos,
                })?,
            )
        })?;
        let mut want = x.clone();
        let positions: Vec<usize> = pos.iter().map(|&p| p as usize).collect();
        cfg.apply_rows(&mut want, n_tok, n_heads, head_dim, &positions);
        // Same table, same products: only a fused multiply-add the driver may form differs
        // (<= 1 ulp of |x| <= 2.83, YaRN's attention factor 1.14 makes it 3.2).
        let tol = Tol {
            max_abs: 1e-6,
            nmse: 1e-12,
        };
        rows.push(row(
            "rope",
            label,
            format!("{n_tok} tok x {n_heads} heads x {head_dim}"),
            &cx.read(&xb, x.len())?,
            &want,
            tol,
        ));
    }
    Ok(rows)
}

struct AttnCase {
    n_q: usize,
    n_kv: usize,
    q_pos0: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    softcap: Option<f32>,
    window: Option<usize>,
    kv: KvType,
    /// K stored rotated (q8_0, tq4; heads of whole 64-value units).
    rot_k: bool,
    /// V's type when it differs from K's.
    kv_v: Option<KvType>,
    /// The key at position 0 read plus a sink offset (centred quantized keys).
    sink: bool,
}

impl AttnCase {
    const fn rotated(self) -> Self {
        AttnCase {
            rot_k: true,
            ..self
        }
    }

    const fn values(self, t: KvType) -> Self {
        AttnCase {
            kv_v: Some(t),
            ..self
        }
    }

    const fn sinked(self) -> Self {
        AttnCase { sink: true, ..self }
    }
}

struct AttnData {
    q: Buffer,
    k: Buffer,
    v: Buffer,
    pos: Buffer,
    out: Buffer,
    /// The sink offset in the cache's stored space.
    sink: Option<Buffer>,
    want: Vec<f32>,
    shape: AttnShape,
}

/// Outputs are convex combinations of v rows (|v| <= 1): errors come from the scores (f32 dot
/// in another order, ~1e-6) through exp; 2e-5 absolute bounds them with margin.
const ATTN_TOL: Tol = Tol {
    max_abs: 2e-5,
    nmse: 1e-7,
};

/// `x` as a cache of `t` stores it (words) and the values the CPU attends over: the blocks
/// dequantized (rotated back when `rot`, and always for tq4).
pub(crate) fn stored(x: &[f32], t: KvType, rot: bool) -> (Vec<u32>, Vec<f32>) {
    match t {
        KvType::F32 => (bytemuck::cast_slice(x).to_vec(), x.to_vec()),
        KvType::F16 => {
            let (h, back) = to_f16(x);
            (pack16(&h), back)
        }
        KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => {
            let f = KvQuant::from_name(t.name()).expect("a quantized type");
            let rot = rot || f.always_rotated();
            let mut xq = x.to_vec();
            if rot {
                vkllm_cpu::kv_quant::rotate(&mut xq);
            }
            let w = f.quantize(&xq);
            let mut back = f.dequantize(&w, x.len());
            if rot {
                vkllm_cpu::kv_quant::unrotate(&mut back);
            }
            (w, back)
        }
    }
}

/// A tq4 V cache's attention sums rotated values: its output rotated back, as the backend does.
fn unrotate_out(r: &mut vkllm_vk::Recorder, d: &AttnData) -> Result<()> {
    if d.shape.kv_v == KvType::Tq4 {
        r.dispatch(KvUnrotate { x: d.out.all() }.dispatch(d.want.len())?)?;
    }
    Ok(())
}

fn attn_data(cx: &Ctx<'_>, rng: &mut Rng, c: &AttnCase) -> Result<AttnData> {
    let qn = c.n_q * c.n_heads * c.head_dim;
    let kvn = c.n_kv * c.n_kv_heads * c.head_dim;
    let q = rng.vec(qn, -2.0, 2.0);
    let k = rng.vec(kvn, -2.0, 2.0);
    let v = rng.vec(kvn, -1.0, 1.0);
    let (kw, mut kr) = stored(&k, c.kv, c.rot_k);
    let (vw, vr) = stored(&v, c.kv_v.unwrap_or(c.kv), false);
    // A sink offset (one large channel, like a real model's first key): the reference adds it
    // to the dequantized key at position 0, the kernels read it rotated like the blocks.
    let sink = match c.sink {
        true => {
            let kv_dim = c.n_kv_heads * c.head_dim;
            let mut off = rng.vec(kv_dim, -3.0, 3.0);
            off[1] = 12.0;
            kr[..kv_dim].iter_mut().zip(&off).for_each(|(x, o)| *x += o);
            let rotated = c.rot_k || c.kv == KvType::Tq4;
            if rotated {
                vkllm_cpu::kv_quant::rotate(&mut off);
            }
            Some(cx.input("sink", &off)?)
        }
        false => None,
    };
    let (kb, vb) = (cx.input("k", &kw)?, cx.input("v", &vw)?);
    let positions: Vec<usize> = (0..c.n_q).map(|i| c.q_pos0 + i).collect();
    let pos32: Vec<u32> = positions.iter().map(|&p| p as u32).collect();
    let scale = 1.0 / (c.head_dim as f32).sqrt();
    let p = AttnParams {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        scale,
        softcap: c.softcap,
        window: c.window,
    };
    let mut want = vec![0.0; qn];
    vkllm_cpu::attention(&q, &kr, &vr, c.n_q, c.n_kv, &positions, &p, &mut want);
    Ok(AttnData {
        q: cx.input("q", &q)?,
        k: kb,
        v: vb,
        pos: cx.input("q_pos", &pos32)?,
        out: cx.output("out", qn)?,
        sink,
        want,
        shape: AttnShape {
            n_q: c.n_q,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            n_kv: c.n_kv,
            scale,
            softcap: c.softcap,
            window: c.window,
            kv: c.kv,
            kv_v: c.kv_v.unwrap_or(c.kv),
            rot_k: c.rot_k,
            kv_stride: 0,
            ring: None,
        },
    })
}

fn describe(c: &AttnCase) -> (String, String) {
    let mut variant = c.kv.name().to_string();
    if c.rot_k {
        variant += " rotated K";
    }
    if let Some(t) = c.kv_v {
        variant += &format!(", V {}", t.name());
    }
    if c.sink {
        variant += " sink";
    }
    if let Some(s) = c.softcap {
        variant += &format!(" softcap {s}");
    }
    if let Some(w) = c.window {
        variant += &format!(" window {w}");
    }
    let shape = format!(
        "q {}@{} kv {} h {}/{} d {}",
        c.n_q, c.q_pos0, c.n_kv, c.n_heads, c.n_kv_heads, c.head_dim
    );
    (variant, shape)
}

#[allow(clippy::too_many_arguments)]
const fn case(
    n_q: usize,
    n_kv: usize,
    q_pos0: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    softcap: Option<f32>,
    window: Option<usize>,
    kv: KvType,
) -> AttnCase {
    AttnCase {
        n_q,
        n_kv,
        q_pos0,
        n_heads,
        n_kv_heads,
        head_dim,
        softcap,
        window,
        kv,
        rot_k: false,
        kv_v: None,
        sink: false,
    }
}

/// The decode split passes (all but the last share the merge).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Split {
    Reference,
    Gqa,
    Wide,
    /// The wide split whose last workgroup per (query, kv head) merges: one dispatch.
    WideMerged,
}

/// The split forms a case runs: the reference (unless its chunk is too small for it), the
/// grouped split, and its wide forms where the shape takes them (the merging one: f16 caches).
pub(crate) fn split_forms(s: &AttnShape, reference: bool) -> Vec<Split> {
    let mut forms = vec![Split::Gqa];
    if reference {
        forms.insert(0, Split::Reference);
    }
    if AttnDecode::<vkllm_vk::BufSlice<'_>>::wide_applies(s) {
        forms.push(Split::Wide);
        if s.kv == KvType::F16 {
            forms.push(Split::WideMerged);
        }
    }
    forms
}

/// Zeroed merge counters for [`Split::WideMerged`] over `s` (one u32 per query and kv head).
pub(crate) fn merge_counters(cx: &Ctx<'_>, s: &AttnShape) -> Result<Buffer> {
    cx.input("counters", &vec![0u32; s.n_q * s.n_kv_heads])
}

impl Split {
    /// `counters`: zero before the dispatch, read only by [`Split::WideMerged`].
    pub(crate) fn dispatch<'a>(
        self,
        a: AttnDecode<vkllm_vk::BufSlice<'a>>,
        s: &AttnShape,
        c: Chunking,
        counters: vkllm_vk::BufSlice<'a>,
    ) -> Result<Vec<vkllm_kernels::Dispatch<vkllm_vk::BufSlice<'a>>>> {
        Ok(match self {
            Split::Reference => a.dispatch(s, c.chunk)?.into(),
            Split::Gqa => a.dispatch_gqa(s, c)?.into(),
            Split::Wide => a.dispatch_wide(s, c)?.into(),
            Split::WideMerged => vec![a.dispatch_wide_merged(s, c, counters)?],
        })
    }

    /// The row label's prefix.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Split::Reference => "",
            Split::Gqa => "gqa ",
            Split::Wide => "wide ",
            Split::WideMerged => "wide merged ",
        }
    }
}

pub(crate) fn attention_decode(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    let cases = [
        (
            case(1, 700, 699, 8, 2, 64, None, None, KvType::F32),
            256usize,
        ),
        (
            case(1, 700, 699, 8, 2, 64, Some(20.0), Some(100), KvType::F16),
            256,
        ),
        (case(3, 300, 297, 4, 4, 128, None, None, KvType::F32), 64),
        (
            case(2, 1000, 500, 6, 3, 256, None, Some(300), KvType::F16),
            128,
        ),
        // Qwen2.5-0.5B's grouping (7 query heads per kv head) and the most the grouped split
        // takes (8), small chunks.
        (case(1, 333, 332, 14, 2, 64, None, None, KvType::F16), 16),
        // Many chunks for the merge (188).
        (case(1, 3000, 2999, 8, 1, 64, None, None, KvType::F16), 16),
        (
            case(2, 517, 400, 16, 2, 128, Some(30.0), None, KvType::F32),
            64,
        ),
        // The grouped split's smallest chunk (8 keys; the reference split takes >= 16):
        // Qwen3-0.6B's heads at a short context, a windowed softcapped grouping of 7.
        (case(1, 145, 144, 16, 8, 128, None, None, KvType::F16), 8),
        (
            case(2, 333, 300, 14, 2, 64, Some(20.0), Some(100), KvType::F32),
            8,
        ),
        // The wide split's shapes: Llama-3.1-8B's heads at its chunk, head_dim 96 (12 slots,
        // key groups not dividing the workgroup) with three queries and a softcap, one query
        // head per kv head with head_dim 40 (5 slots), 8 heads of 256 (two passes over the
        // heads' partials).
        (
            case(1, 1500, 1499, 32, 8, 128, None, None, KvType::F16),
            256,
        ),
        (
            case(3, 777, 775, 12, 4, 96, Some(30.0), None, KvType::F16),
            64,
        ),
        (case(2, 401, 399, 5, 5, 40, None, Some(50), KvType::F16), 32),
        (case(1, 2049, 2048, 8, 1, 256, None, None, KvType::F16), 256),
        // Quantized caches read in place: Llama-3.1-8B's grouping (4) and head_dim 128, a
        // windowed q4_0 case with two queries, Qwen3-0.6B's heads at the smallest chunk.
        (case(1, 700, 699, 32, 8, 128, None, None, KvType::Q8_0), 64),
        (
            case(2, 517, 400, 8, 2, 64, Some(30.0), Some(100), KvType::Q4_0),
            16,
        ),
        (case(1, 145, 144, 16, 8, 128, None, None, KvType::Q4_0), 8),
        // The most query heads per kv head the grouped and wide splits take (8) over q4_0.
        (
            case(1, 1100, 1099, 64, 8, 128, None, None, KvType::Q4_0),
            128,
        ),
        (case(1, 300, 299, 14, 2, 64, None, None, KvType::Q8_0), 16),
        // Rotated keys (q8_0's default where heads are whole units): 8B's grouping, and a
        // windowed softcapped case with two queries and heads of 64.
        (
            case(1, 700, 699, 32, 8, 128, None, None, KvType::Q8_0).rotated(),
            64,
        ),
        (
            case(2, 517, 400, 8, 2, 64, Some(30.0), Some(100), KvType::Q8_0).rotated(),
            16,
        ),
        // Gemma 3 270M's heads (4 query heads of 256 on one kv head).
        (
            case(1, 300, 299, 4, 1, 256, None, None, KvType::Q8_0).rotated(),
            16,
        ),
        // Rotated q8_0 keys with q4_0 values (--kv-type-k q8_0 --kv-type-v q4_0), and the other
        // way round.
        (
            case(1, 700, 699, 32, 8, 128, None, None, KvType::Q8_0)
                .rotated()
                .values(KvType::Q4_0),
            64,
        ),
        (
            case(2, 333, 300, 14, 2, 64, Some(20.0), Some(100), KvType::Q4_0).values(KvType::Q8_0),
            16,
        ),
        // tq4 values (rotated; the output is rotated back by kv_unrotate) with rotated q8_0 keys
        // at 8B's grouping, and tq4 keys and values windowed and softcapped with two queries.
        (
            case(1, 700, 699, 32, 8, 128, None, None, KvType::Q8_0)
                .rotated()
                .values(KvType::Tq4),
            64,
        ),
        (
            case(2, 517, 400, 8, 2, 64, Some(30.0), Some(100), KvType::Tq4).rotated(),
            16,
        ),
        // Centred keys' sink offset at position 0: 8B's grouping over q4_0, rotated q8_0 at the
        // smallest chunk, Gemma 3's tq4 heads, a window that still sees position 0 (and one
        // above that does not).
        (
            case(1, 700, 699, 32, 8, 128, None, None, KvType::Q4_0).sinked(),
            64,
        ),
        (
            case(2, 145, 143, 16, 8, 128, None, None, KvType::Q8_0)
                .rotated()
                .sinked(),
            8,
        ),
        (
            case(1, 300, 299, 4, 1, 256, None, None, KvType::Tq4)
                .rotated()
                .sinked(),
            16,
        ),
        (
            case(2, 90, 88, 8, 2, 64, Some(30.0), Some(100), KvType::Q4_0)
                .values(KvType::Q8_0)
                .sinked(),
            16,
        ),
        (
            case(2, 517, 400, 8, 2, 64, None, Some(100), KvType::Q4_0).sinked(),
            16,
        ),
    ];
    for (c, chunk) in cases {
        let d = attn_data(&cx, &mut rng, &c)?;
        let (ml, o) = AttnDecode::<vkllm_vk::BufSlice<'_>>::scratch_bytes(&d.shape, chunk);
        let part_ml = dev.create_buffer("part_ml", ml, vkllm_vk::MemoryKind::Device)?;
        let part_o = dev.create_buffer("part_o", o, vkllm_vk::MemoryKind::Device)?;
        // The reference split, then the grouped-query split and its wide form for f16 caches
        // (their partials, same merge).
        let counters = merge_counters(&cx, &d.shape)?;
        for form in split_forms(&d.shape, chunk >= 16) {
            let (variant, shape) = describe(&c);
            cx.run(&[&d.out, &part_ml, &part_o], |r| {
                let a = AttnDecode {
                    q: d.q.all(),
                    k: d.k.all(),
                    v: d.v.all(),
                    q_pos: d.pos.all(),
                    part_ml: part_ml.all(),
                    part_o: part_o.all(),
                    out: d.out.all(),
                    sink: d.sink.as_ref().map(|b| b.all()),
                };
                r.dispatch_all(form.dispatch(a, &d.shape, chunk.into(), counters.all())?)?;
                unrotate_out(r, &d)
            })?;
            let got = cx.read(&d.out, d.want.len())?;
            rows.push(row(
                "attn_decode",
                format!("{}{variant}", form.prefix()),
                format!("{shape} chunk {chunk}"),
                &got,
                &d.want,
                ATTN_TOL,
            ));
        }
        // The merging workgroups left every counter at zero for the next dispatch.
        if split_forms(&d.shape, false).contains(&Split::WideMerged) {
            let n = d.shape.n_q * d.shape.n_kv_heads;
            let ctr: Vec<f32> = dev
                .read_vec::<u32>(&counters, n)?
                .iter()
                .map(|&x| x as f32)
                .collect();
            let (variant, shape) = describe(&c);
            rows.push(row(
                "attn_decode",
                format!("wide merged {variant} counters"),
                format!("{shape} chunk {chunk}"),
                &ctr,
                &vec![0.0; n],
                super::EXACT,
            ));
        }
    }
    Ok(rows)
}

pub(crate) fn attention_prefill(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    let cases = [
        case(37, 37, 0, 4, 2, 64, None, None, KvType::F32),
        case(37, 50, 13, 4, 2, 64, Some(30.0), Some(8), KvType::F16),
        case(20, 20, 0, 2, 1, 256, None, None, KvType::F32),
        case(17, 17, 0, 3, 3, 80, None, Some(5), KvType::F32),
        case(37, 50, 13, 4, 2, 64, Some(30.0), Some(8), KvType::Q8_0),
        case(21, 40, 19, 8, 2, 128, None, None, KvType::Q4_0),
        case(20, 20, 0, 2, 1, 256, None, None, KvType::Q8_0),
        case(21, 40, 19, 8, 2, 128, None, None, KvType::Q8_0).rotated(),
        case(20, 20, 0, 2, 1, 256, Some(30.0), Some(7), KvType::Q8_0).rotated(),
        case(21, 40, 19, 8, 2, 128, None, None, KvType::Q8_0)
            .rotated()
            .values(KvType::Q4_0),
        case(37, 50, 13, 4, 2, 64, Some(30.0), Some(8), KvType::Q8_0)
            .rotated()
            .values(KvType::Tq4),
        case(21, 40, 19, 8, 2, 128, None, None, KvType::Tq4).rotated(),
        // Centred keys' sink offset at position 0 (a window that sees it for the first queries).
        case(21, 40, 19, 8, 2, 128, None, None, KvType::Q4_0).sinked(),
        case(37, 37, 0, 4, 2, 64, Some(30.0), Some(8), KvType::Tq4)
            .rotated()
            .sinked(),
        case(20, 20, 0, 2, 1, 256, None, None, KvType::Q8_0)
            .rotated()
            .sinked(),
    ];
    for c in cases {
        let d = attn_data(&cx, &mut rng, &c)?;
        cx.run(&[&d.out], |r| {
            r.dispatch(
                AttnPrefill {
                    q: d.q.all(),
                    k: d.k.all(),
                    v: d.v.all(),
                    q_pos: d.pos.all(),
                    out: d.out.all(),
                    sink: d.sink.as_ref().map(|b| b.all()),
                }
                .dispatch(&d.shape)?,
            )?;
            unrotate_out(r, &d)
        })?;
        let (variant, shape) = describe(&c);
        let got = cx.read(&d.out, d.want.len())?;
        rows.push(row("attn_prefill", variant, shape, &got, &d.want, ATTN_TOL));
    }
    Ok(rows)
}
