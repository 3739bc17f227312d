//! Parity of the quantized KV kernels. The append (`kv_append.wgsl` with KV_DTYPE q8_0 / q4_0 /
//! tq4) against `vkllm_cpu::kv_quant`: the scales bit for bit (q4_0: or another candidate scale
//! within 1e-4 of the least squared error), every code the reference's against the stored scale
//! (where x / scale sits within 1e-4 of a rounding boundary the neighbouring code is accepted
//! too: the shader divides with the GPU's precision), the words of rows nobody writes
//! untouched. Then the f16 copy (`kv_to_f16.wgsl`) and the output rotation of rotated values
//! (q4_0, tq4: `kv_unrotate.wgsl`).

use vkllm_cpu::decode::IDLE;
use vkllm_cpu::kv_quant::{
    BLOCK, KvQuant, Q4_0_CANDIDATES, TQ4_LEVELS, largest_magnitude, q4_0_candidate,
};
use vkllm_kernels::kv_append::{KvAppend, KvRot, KvType, KvTypes};
use vkllm_kernels::kv_to_f16::KvToF16;
use vkllm_kernels::kv_unrotate::KvUnrotate;

use super::{Ctx, EXACT, KernelParityRow, Rng, row, to_f16};
use vkllm_vk::Device;
use vkllm_vk::Result;

const ROT_NONE: KvRot = KvRot::NONE;
const ROT_K: KvRot = KvRot { k: true, v: false };
const ROT_V: KvRot = KvRot { k: false, v: true };
const ROT_KV: KvRot = KvRot { k: true, v: true };

/// Whether part `name` ("K" or "V") of a cache rotated as `rot` says stores its units rotated.
fn rotated(rot: KvRot, name: &str) -> bool {
    if name == "K" { rot.k } else { rot.v }
}

/// The rows' label for the rotated parts (tq4's, always rotated, unnamed).
fn rot_label(rot: KvRot) -> &'static str {
    match (rot.k, rot.v) {
        (true, true) => " rotated-K/V cache,",
        (true, false) => " rotated-K cache,",
        (false, true) => " rotated-V cache,",
        (false, false) => "",
    }
}

/// The reference codes of `x`, with the GPU's code where the two are neighbours across a
/// rounding boundary (x / scale within 1e-4 of it).
fn want_codes(f: KvQuant, x: &[f32], scales: &[f32], got: &[f32]) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(e, &v)| {
            let d = scales[e / BLOCK];
            let want = f.code_value(f.encode(v, d));
            let r = if d != 0.0 { v / d } else { 0.0 };
            let neighbour = match f {
                // The levels on both sides of a midpoint within 1e-4 of r.
                KvQuant::Tq4 => TQ4_LEVELS.windows(2).any(|l| {
                    (r - 0.5 * (l[0] + l[1])).abs() < 1e-4
                        && [l[0], l[1]].contains(&got[e])
                        && [l[0], l[1]].contains(&want)
                }),
                // q8_0 rounds at .5; q4_0 (code - 8 = floor(r + 0.5)) too.
                _ => ((r - r.floor()) - 0.5).abs() < 1e-4 && (got[e] - want).abs() == 1.0,
            };
            if neighbour { got[e] } else { want }
        })
        .collect()
}

/// q4_0's stored scale `got` for a block whose reference scale is `want`: the same, or another of
/// the block's candidate scales (within an f16 step of one: the shader divides with the GPU's
/// precision) whose squared error is within 1e-4 of the reference's (a near tie of the search).
fn q4_0_scale(block: &[f32], got: f32, want: f32) -> f32 {
    let q = KvQuant::Q4_0;
    let m = largest_magnitude(block);
    let bits = |a: f32| half::f16::from_f32(a).to_bits();
    let candidate =
        (0..Q4_0_CANDIDATES).any(|j| bits(q4_0_candidate(m, j)).abs_diff(bits(got)) <= 1);
    let (eg, ew) = (q.block_error(block, got), q.block_error(block, want));
    if got != want && candidate && (eg - ew).abs() <= 1e-4 * ew {
        got
    } else {
        want
    }
}

/// Slot-major appends into q8_0, q4_0 and tq4 caches: one idle slot, values with outliers (a
/// block whose largest magnitude is negative, one all zero).
pub(crate) fn kv_append_quant(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let (slots, kv_dim, cap) = (4usize, 192usize, 9usize);
    let mut pos: Vec<u32> = (0..slots).map(|_| rng.below(cap as u64) as u32).collect();
    pos[1] = IDLE;
    // Position 0: centred keys store it less the sink offset.
    pos[2] = 0;
    let mut rows = Vec::new();
    // Centred keys: a shift, inverse scale and sink offset per element of the row.
    let mut centre = rng.vec(kv_dim, -2.0, 2.0);
    centre.extend(rng.vec(kv_dim, 0.05, 4.0));
    centre.extend(rng.vec(kv_dim, -5.0, 5.0));
    let cb = cx.input("centre", &centre)?;
    // (K type, V type, rotated parts, centred K): rotated q8_0 keys with q4_0 (plain and
    // rotated) and with tq4 values, rotated q4_0 values, tq4 keys and values; centred 4-bit keys.
    for (ty, ty_v, rot, centred) in [
        (KvType::Q8_0, KvType::Q8_0, ROT_NONE, false),
        (KvType::Q4_0, KvType::Q4_0, ROT_NONE, false),
        (KvType::Q4_0, KvType::Q4_0, ROT_V, false),
        (KvType::Q8_0, KvType::Q8_0, ROT_K, false),
        (KvType::Q8_0, KvType::Q4_0, ROT_K, false),
        (KvType::Q8_0, KvType::Q4_0, ROT_KV, false),
        (KvType::Q8_0, KvType::Tq4, ROT_KV, false),
        (KvType::Tq4, KvType::Tq4, ROT_KV, false),
        (KvType::Q4_0, KvType::Q8_0, ROT_NONE, true),
        (KvType::Q4_0, KvType::Q4_0, ROT_V, true),
        (KvType::Tq4, KvType::Tq4, ROT_KV, true),
    ] {
        let types = KvTypes { k: ty, v: ty_v };
        let mut k_new = rng.vec(slots * kv_dim, -3.0, 3.0);
        let v_new = rng.vec(slots * kv_dim, -1.0, 1.0);
        k_new[5] = -40.0;
        k_new[kv_dim + 64..kv_dim + 96].fill(0.0);
        k_new[3 * kv_dim..3 * kv_dim + 32].fill(0.0);
        // Poison: every cache word a NaN pattern, so a missed write shows.
        let n = (slots * cap * kv_dim) as u64;
        let poison = |t: KvType| vec![0x7fc0_7fc0u32; t.words(n) as usize];
        let (kb, vb, pb) = (
            cx.input("k", &k_new)?,
            cx.input("v", &v_new)?,
            cx.input("pos", &pos)?,
        );
        let (kc, vc) = (
            cx.input("k_cache", &poison(ty))?,
            cx.input("v_cache", &poison(ty_v))?,
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
                .dispatch_centred(
                    types,
                    rot,
                    centred.then(|| cb.all()),
                    (slots, kv_dim, cap, cap, cap),
                )?,
            )
        })?;
        let shape = format!("{slots} slots x {cap} rows, kv_dim {kv_dim}, one idle");
        for (name, t, src, cache) in [("K", ty, &k_new, &kc), ("V", ty_v, &v_new, &vc)] {
            let f = KvQuant::from_name(t.name()).expect("quantized");
            let row_words = f.words(kv_dim);
            let got: Vec<u32> = dev.read_vec(cache, t.words(n) as usize)?;
            let (mut gs, mut ws, mut gc, mut wc) = (vec![], vec![], vec![], vec![]);
            let mut untouched_got = Vec::new();
            for slot in 0..slots {
                for r in 0..cap {
                    let at = (slot * cap + r) * row_words;
                    let stored = &got[at..at + row_words];
                    if pos[slot] as usize != r {
                        // Halves as numbers: NaN bits compare as values.
                        untouched_got.extend(
                            stored
                                .iter()
                                .flat_map(|w| [(w & 0xffff) as f32, (w >> 16) as f32]),
                        );
                        continue;
                    }
                    // Rotated units: the reference rotates first (the shader's sums, in the same
                    // order, every term exact: the same values).
                    let mut x = src[slot * kv_dim..(slot + 1) * kv_dim].to_vec();
                    if centred && name == "K" {
                        vkllm_cpu::kv_quant::centre(&mut x, &centre[..2 * kv_dim]);
                        if pos[slot] == 0 {
                            let sink = &centre[2 * kv_dim..];
                            x.iter_mut().zip(sink).for_each(|(v, o)| *v -= o);
                        }
                    }
                    if rotated(rot, name) {
                        vkllm_cpu::kv_quant::rotate(&mut x);
                    }
                    let x = &x[..];
                    let want = f.quantize(x);
                    let (mut want_s, _) = f.unpack(&want, kv_dim);
                    let (got_s, got_c) = f.unpack(stored, kv_dim);
                    for (b, w) in want_s.iter_mut().enumerate() {
                        let block = &x[b * BLOCK..(b + 1) * BLOCK];
                        match f {
                            KvQuant::Q4_0 => *w = q4_0_scale(block, got_s[b], *w),
                            KvQuant::Q8_0 | KvQuant::Tq4 => {}
                        }
                    }
                    wc.extend(want_codes(f, x, &want_s, &got_c));
                    gs.extend(got_s);
                    ws.extend(want_s);
                    gc.extend(got_c);
                }
            }
            let want_untouched = vec![0x7fc0 as f32; untouched_got.len()];
            let rot_name = format!(
                "{}{}",
                if centred { " centred-K cache," } else { "" },
                rot_label(rot)
            );
            let variant = |what: &str| format!("{}{rot_name} {name} {what}", types.name());
            rows.push(row("kv_append", variant("scales"), &shape, &gs, &ws, EXACT));
            rows.push(row("kv_append", variant("codes"), &shape, &gc, &wc, EXACT));
            rows.push(row(
                "kv_append",
                variant("untouched rows"),
                &shape,
                &untouched_got,
                &want_untouched,
                EXACT,
            ));
        }
    }
    Ok(rows)
}

/// f16 copies of quantized rows (`kv_to_f16.wgsl`): the reference dequantizes (scale * code, one
/// f32 rounding at most), rotates back (rotated keys, tq4 values; the shader's order) and rounds
/// to f16; the output words past the copy keep their poison.
pub(crate) fn kv_to_f16(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    // (K type, V type, rotated parts, values, values of the sink offset: centred keys' row at
    // position 0).
    for (ty, ty_v, rot, n, sink_n) in [
        (KvType::Q8_0, KvType::Q8_0, ROT_NONE, 5 * 64usize, 0usize),
        (KvType::Q4_0, KvType::Q4_0, ROT_NONE, 7 * 64, 0),
        (KvType::Q4_0, KvType::Q4_0, ROT_V, 3 * 64, 0),
        (KvType::Q8_0, KvType::Q8_0, ROT_K, 6 * 64, 0),
        (KvType::Q8_0, KvType::Q4_0, ROT_K, 3 * 64, 0),
        (KvType::Q8_0, KvType::Q4_0, ROT_KV, 5 * 64, 0),
        (KvType::Q8_0, KvType::Tq4, ROT_KV, 5 * 64, 0),
        (KvType::Tq4, KvType::Tq4, ROT_KV, 7 * 64, 0),
        (KvType::Q4_0, KvType::Q8_0, ROT_NONE, 5 * 64, 192),
        (KvType::Q4_0, KvType::Q4_0, ROT_V, 6 * 64, 64),
        (KvType::Tq4, KvType::Tq4, ROT_KV, 6 * 64, 128),
    ] {
        let types = KvTypes { k: ty, v: ty_v };
        let (f, fv) = (
            KvQuant::from_name(ty.name()).expect("quantized"),
            KvQuant::from_name(ty_v.name()).expect("quantized"),
        );
        let mut k = rng.vec(n, -3.0, 3.0);
        k[7] = 90.0;
        let v = rng.vec(n, -1.0, 1.0);
        let (kw, vw) = (f.quantize(&k), fv.quantize(&v));
        let rot_name = format!(
            "{}{}",
            if sink_n > 0 { " sink-offset K," } else { "" },
            rot_label(rot)
        );
        let (kb, vb) = (cx.input("k", &kw)?, cx.input("v", &vw)?);
        let sink = rng.vec(sink_n.max(1), -5.0, 5.0);
        let sb = cx.input("sink", &sink)?;
        // Poison: f16 NaN pairs, and one word more than the copy needs.
        let poison = vec![0x7e00_7e00u32; n / 2 + 1];
        let (ko, vo) = (cx.input("k_out", &poison)?, cx.input("v_out", &poison)?);
        cx.run(&[], |r| {
            r.dispatch(
                KvToF16 {
                    k: kb.all(),
                    v: vb.all(),
                    k_out: ko.all(),
                    v_out: vo.all(),
                    sink: (sink_n > 0).then(|| (sb.all(), sink_n)),
                }
                .dispatch(types, rot, n)?,
            )
        })?;
        for (name, g, words, out) in [("K", f, &kw, &ko), ("V", fv, &vw, &vo)] {
            // Rotated back term by term in the shader's order: the same f32 values.
            let mut deq = g.dequantize(words, n);
            if rotated(rot, name) {
                vkllm_cpu::kv_quant::unrotate(&mut deq);
            }
            if name == "K" {
                deq.iter_mut()
                    .zip(&sink[..sink_n])
                    .for_each(|(x, o)| *x += o);
            }
            let (_, want) = to_f16(&deq);
            let got: Vec<u16> = dev.read_vec(out, n + 2)?;
            let got_v: Vec<f32> = got[..n]
                .iter()
                .map(|&h| half::f16::from_bits(h).to_f32())
                .collect();
            let shape = format!("{n} values");
            rows.push(row(
                "kv_to_f16",
                format!("{}{rot_name} {name}", types.name()),
                &shape,
                &got_v,
                &want,
                EXACT,
            ));
            let tail: Vec<f32> = got[n..].iter().map(|&h| h as f32).collect();
            rows.push(row(
                "kv_to_f16",
                format!("{}{rot_name} {name} past the end", types.name()),
                shape,
                &tail,
                &[0x7e00 as f32; 2],
                EXACT,
            ));
        }
    }
    Ok(rows)
}

/// The output rotation of tq4 values (`kv_unrotate.wgsl`) against `vkllm_cpu::kv_quant::unrotate`
/// (the same sums in the same order, every product exact), in place over 1 and 7 units; the
/// values past them keep their poison.
pub(crate) fn kv_unrotate(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for units in [1usize, 7] {
        let n = units * 64;
        let mut x = rng.vec(n, -2.0, 2.0);
        x[3] = 50.0;
        let mut want = x.clone();
        vkllm_cpu::kv_quant::unrotate(&mut want);
        // NaN past the values.
        let mut init = x.clone();
        init.extend([f32::NAN; 64]);
        let xb = cx.input("x", &init)?;
        cx.run(&[], |r| r.dispatch(KvUnrotate { x: xb.all() }.dispatch(n)?))?;
        let got = cx.read(&xb, n + 64)?;
        let shape = format!("{units} units");
        rows.push(row(
            "kv_unrotate",
            "in place",
            &shape,
            &got[..n],
            &want,
            EXACT,
        ));
        let tail: Vec<f32> = got[n..]
            .iter()
            .map(|v| f32::from(u8::from(v.is_nan())))
            .collect();
        rows.push(row(
            "kv_unrotate",
            "past the end",
            shape,
            &tail,
            &[1.0; 64],
            EXACT,
        ));
    }
    Ok(rows)
}
