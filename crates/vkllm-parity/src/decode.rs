//! Parity cases of the batched decode step: KV append and split-K attention over a slot-major
//! cache (query i is slot i), logprobs records, and the device-side advance between steps.

use vkllm_cpu::AttnParams;
use vkllm_cpu::decode::{IDLE, SlotsState, advance};
use vkllm_kernels::attention::{AttnDecode, AttnShape, Chunking};
use vkllm_kernels::decode_advance::{DecodeAdvance, DecodeAdvanceShape};
use vkllm_kernels::kv_append::{KvAppend, KvType};
use vkllm_kernels::logprobs::{Logprobs, LogprobsShape};
use vkllm_kernels::sample::SampleSettings;

use super::attn::{Split, merge_counters, split_forms, stored};
use super::{Ctx, EXACT, KernelParityRow, Rng, Tol, pack16, row, to_f16};
use vkllm_vk::Device;
use vkllm_vk::Result;

/// Slot-major KV append: token t writes row t * cap + pos[t]; an idle slot writes nothing.
pub(crate) fn kv_append_slots(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let (slots, kv_dim, cap) = (5usize, 2 * 33usize, 37usize);
    let mut pos: Vec<u32> = (0..slots).map(|_| rng.below(cap as u64) as u32).collect();
    pos[2] = IDLE;
    let k_new = rng.vec(slots * kv_dim, -4.0, 4.0);
    let v_new = rng.vec(slots * kv_dim, -4.0, 4.0);
    let init = rng.vec(slots * cap * kv_dim, -1.0, 1.0);
    let (kb, vb, pb) = (
        cx.input("k", &k_new)?,
        cx.input("v", &v_new)?,
        cx.input("pos", &pos)?,
    );
    let (kc, vc) = (cx.input("k_cache", &init)?, cx.input("v_cache", &init)?);
    cx.run(&[], |r| {
        r.dispatch(
            KvAppend {
                k_new: kb.all(),
                v_new: vb.all(),
                pos: pb.all(),
                k_cache: kc.all(),
                v_cache: vc.all(),
            }
            .dispatch_slots(KvType::F32, slots, kv_dim, cap, cap)?,
        )
    })?;
    let (mut want_k, mut want_v) = (init.clone(), init);
    for (t, &p) in pos.iter().enumerate() {
        if p == IDLE {
            continue;
        }
        let d = (t * cap + p as usize) * kv_dim;
        want_k[d..d + kv_dim].copy_from_slice(&k_new[t * kv_dim..(t + 1) * kv_dim]);
        want_v[d..d + kv_dim].copy_from_slice(&v_new[t * kv_dim..(t + 1) * kv_dim]);
    }
    let shape = format!("{slots} slots x {cap} rows, kv_dim {kv_dim}, one idle");
    let n = slots * cap * kv_dim;
    Ok(vec![
        row(
            "kv_append",
            "slots f32 K",
            shape.clone(),
            &cx.read(&kc, n)?,
            &want_k,
            EXACT,
        ),
        row(
            "kv_append",
            "slots f32 V",
            shape,
            &cx.read(&vc, n)?,
            &want_v,
            EXACT,
        ),
    ])
}

/// Split-K decode attention with kv_stride: query i attends to slot i's region only.
pub(crate) fn attention_slots(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    // (The third case's slots sit at depths where the adaptive split picks chunks of 8, 8, 16
    // and 64 keys: 1, 38, 94 and 65 live chunks in a grid of 128.)
    let deep: &[u32] = &[3, 300, 1500, 4099];
    for (slots, cap, n_heads, n_kv_heads, hd, window, kv, fixed) in [
        (
            3usize,
            300usize,
            4usize,
            2usize,
            64usize,
            None,
            KvType::F32,
            &[][..],
        ),
        (4, 130, 6, 3, 80, Some(50usize), KvType::F16, &[]),
        (4, 4100, 8, 2, 64, None, KvType::F16, deep),
        // Quantized caches read in place (rotated q8_0 keys at 8B's heads; q4_0 windowed).
        (3, 700, 16, 4, 128, None, KvType::Q8_0, &[]),
        (2, 333, 8, 2, 64, Some(100), KvType::Q4_0, &[]),
    ] {
        let q = rng.vec(slots * n_heads * hd, -2.0, 2.0);
        let kn = slots * cap * n_kv_heads * hd;
        let (k, v) = (rng.vec(kn, -2.0, 2.0), rng.vec(kn, -1.0, 1.0));
        let (kb, kr, vb, vr) = match kv {
            KvType::F32 => (cx.input("k", &k)?, k, cx.input("v", &v)?, v),
            KvType::F16 => {
                let (kh, kr) = to_f16(&k);
                let (vh, vr) = to_f16(&v);
                (
                    cx.input("k", &pack16(&kh))?,
                    kr,
                    cx.input("v", &pack16(&vh))?,
                    vr,
                )
            }
            KvType::Q8_0 | KvType::Q4_0 | KvType::Tq4 => {
                let (kw, kr) = stored(&k, kv, kv == KvType::Q8_0);
                let (vw, vr) = stored(&v, kv, false);
                (cx.input("k", &kw)?, kr, cx.input("v", &vw)?, vr)
            }
        };
        let pos: Vec<u32> = if fixed.is_empty() {
            (0..slots).map(|_| rng.below(cap as u64) as u32).collect()
        } else {
            fixed.to_vec()
        };
        let scale = 1.0 / (hd as f32).sqrt();
        let p = AttnParams {
            n_heads,
            n_kv_heads,
            head_dim: hd,
            scale,
            softcap: None,
            window,
        };
        let qw = n_heads * hd;
        let sw = cap * n_kv_heads * hd;
        let mut want = vec![0.0; slots * qw];
        for s in 0..slots {
            vkllm_cpu::attention(
                &q[s * qw..(s + 1) * qw],
                &kr[s * sw..(s + 1) * sw],
                &vr[s * sw..(s + 1) * sw],
                1,
                cap,
                &[pos[s] as usize],
                &p,
                &mut want[s * qw..(s + 1) * qw],
            );
        }
        let shape = AttnShape {
            n_q: slots,
            n_heads,
            n_kv_heads,
            head_dim: hd,
            n_kv: cap,
            scale,
            softcap: None,
            window,
            kv,
            kv_v: kv,
            rot_k: kv == KvType::Q8_0,
            kv_stride: cap,
            ring: None,
        };
        let chunk = 64;
        let adaptive = Chunking::adaptive(chunk, 8);
        let (ml, o) = AttnDecode::<vkllm_vk::BufSlice<'_>>::scratch_bytes(&shape, adaptive);
        let part_ml = dev.create_buffer("part_ml", ml, vkllm_vk::MemoryKind::Device)?;
        let part_o = dev.create_buffer("part_o", o, vkllm_vk::MemoryKind::Device)?;
        let (qb, pb, out) = (
            cx.input("q", &q)?,
            cx.input("q_pos", &pos)?,
            cx.output("out", want.len())?,
        );
        let runs = split_forms(&shape, true).into_iter().flat_map(|form| {
            let fixed = (form, Chunking::from(chunk));
            match form {
                Split::Reference => vec![fixed],
                _ => vec![fixed, (form, adaptive)],
            }
        });
        for (form, chunking) in runs {
            let label = format!(
                "slots {}{}{}{}",
                form.prefix(),
                if chunking.min > 0 { "adaptive " } else { "" },
                kv.name(),
                window.map_or(String::new(), |w| format!(" window {w}"))
            );
            let counters = merge_counters(&cx, &shape)?;
            cx.run(&[&out, &part_ml, &part_o], |r| {
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
                r.dispatch_all(form.dispatch(a, &shape, chunking, counters.all())?)
            })?;
            rows.push(row(
                "attn_decode",
                label.clone(),
                format!("{slots} slots x {cap} h {n_heads}/{n_kv_heads} d {hd}"),
                &cx.read(&out, want.len())?,
                &want,
                // As the single-sequence decode case: convex combinations of |v| <= 1.
                Tol {
                    max_abs: 2e-5,
                    nmse: 1e-7,
                },
            ));
            // No workgroup (an idle slot's included) left a count behind.
            if form == Split::WideMerged {
                let n = slots * n_kv_heads;
                let ctr: Vec<u32> = dev.read_vec(&counters, n)?;
                let ctr: Vec<f32> = ctr.iter().map(|&x| x as f32).collect();
                rows.push(row(
                    "attn_decode",
                    format!("{label} counters"),
                    format!("{slots} slots x {cap} h {n_heads}/{n_kv_heads} d {hd}"),
                    &ctr,
                    &vec![0.0; n],
                    super::EXACT,
                ));
            }
        }
    }
    Ok(rows)
}

/// Logprobs records against vkllm-cpu's f64 log_softmax / top_logprobs.
pub(crate) fn logprobs(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let (v, rows, n_top, ring_steps) = (5003usize, 4usize, 20usize, 3usize);
    let mut logits = rng.vec(rows * v, -8.0, 8.0);
    // An exact tie with the row maximum (id order decides) and a NaN.
    let m = logits[..v].iter().cloned().fold(f32::MIN, f32::max);
    logits[17] = m;
    logits[4000] = m;
    logits[v + 9] = f32::NAN;
    let chosen: Vec<u32> = (0..rows).map(|_| rng.below(v as u64) as u32).collect();
    let want_n: Vec<u32> = vec![20, 0, u32::MAX, 7];
    let step = 2u32;
    let shape = LogprobsShape {
        vocab: v,
        rows,
        n_top,
        ring_steps,
    };
    let words = shape.record_words();
    let (lb, cb, wb, ctl) = (
        cx.input("logits", &logits)?,
        cx.input("chosen", &chosen)?,
        cx.input("want", &want_n)?,
        cx.input("ctl", &[step])?,
    );
    let out = cx.output("out", words * rows * ring_steps)?;
    cx.run(&[&out], |r| {
        r.dispatch(
            Logprobs {
                logits: lb.all(),
                chosen: cb.all(),
                want: wb.all(),
                ctl: ctl.all(),
                out: out.all(),
            }
            .dispatch(&shape)?,
        )
    })?;
    let got: Vec<u32> = dev.read_vec(&out, words * rows * ring_steps)?;
    let (mut got_lp, mut want_lp, mut got_ids, mut want_ids) = (vec![], vec![], vec![], vec![]);
    for r in 0..rows {
        if want_n[r] == u32::MAX {
            continue;
        }
        let row_logits = &logits[r * v..(r + 1) * v];
        let rec = &got[(step as usize * rows + r) * words..][..words];
        let lp = vkllm_cpu::log_softmax(row_logits);
        let top = vkllm_cpu::top_logprobs(row_logits, want_n[r] as usize);
        got_lp.push(f32::from_bits(rec[0]));
        want_lp.push(lp[chosen[r] as usize]);
        got_ids.push(rec[1] as f32);
        want_ids.push(top.len() as f32);
        for (t, &(id, l)) in top.iter().enumerate() {
            got_ids.push(rec[2 + 2 * t] as f32);
            want_ids.push(id as f32);
            got_lp.push(f32::from_bits(rec[3 + 2 * t]));
            want_lp.push(l);
        }
    }
    let shape_s = format!("{rows} rows x vocab {v}, top <= {n_top}");
    Ok(vec![
        row(
            "logprobs",
            "ids + counts",
            shape_s.clone(),
            &got_ids,
            &want_ids,
            EXACT,
        ),
        // f32 max/sum/log against the f64 reference: |logprob| <= ~20, sum of 5003 terms in
        // tree order: a few ulps of 20 (2e-6 each); 2e-5 bounds it with margin.
        row(
            "logprobs",
            "values",
            shape_s,
            &got_lp,
            &want_lp,
            Tol {
                max_abs: 2e-5,
                nmse: 1e-9,
            },
        ),
    ])
}

/// The device-side advance between recorded steps against vkllm-cpu's `advance`.
pub(crate) fn decode_advance(dev: &Device, seed: u64) -> Result<Vec<KernelParityRow>> {
    let cx = Ctx { dev };
    let mut rng = Rng::new(seed);
    let (slots, v, cap, ring_steps) = (70usize, 97usize, 40usize, 4usize);
    let mut st = SlotsState {
        ids: (0..slots).map(|_| rng.below(v as u64) as u32).collect(),
        pos: (0..slots)
            .map(|i| match i % 7 {
                0 => IDLE,
                1 => cap as u32 - 1,
                _ => rng.below(cap as u64 - 1) as u32,
            })
            .collect(),
        steps: (0..slots)
            .map(|i| {
                if i % 5 == 0 {
                    u32::MAX as u64
                } else {
                    rng.below(1000)
                }
            })
            .collect(),
        live: (0..slots).map(|i| i % 7 != 0).collect(),
        use_counts: (0..slots).map(|i| i % 2 == 0).collect(),
        counts: (0..slots * v).map(|_| rng.below(3) as u32).collect(),
    };
    let sampled: Vec<u32> = (0..slots).map(|_| rng.below(v as u64) as u32).collect();
    let cfg: Vec<_> = (0..slots)
        .map(|r| {
            let mut row = SampleSettings {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                repetition_penalty: 1.0,
                presence_penalty: 0.0,
                frequency_penalty: 0.0,
                seed: 1,
                seq_id: r as u64,
                step: st.steps[r],
                n_bias: 0,
                use_counts: st.use_counts[r],
                masked: false,
            }
            .row();
            row.live = st.live[r] as u32;
            row
        })
        .collect();
    let step = 1u32;
    let ring_init = vec![7u32; slots * ring_steps];
    let (sb, ib, pb, gb, cb, rb, ctl) = (
        cx.input("sampled", &sampled)?,
        cx.input("ids", &st.ids)?,
        cx.input("pos", &st.pos)?,
        cx.input("cfg", &cfg)?,
        cx.input("counts", &st.counts)?,
        cx.input("ring", &ring_init)?,
        cx.input("ctl", &[step])?,
    );
    cx.run(&[], |r| {
        r.dispatch(
            DecodeAdvance {
                sampled: sb.all(),
                ids: ib.all(),
                pos: pb.all(),
                cfg: gb.all(),
                counts: cb.all(),
                ring: rb.all(),
                ctl: ctl.all(),
            }
            .dispatch(&DecodeAdvanceShape {
                rows: slots,
                vocab: v,
                capacity: cap,
                ring_steps,
                counts: true,
            })?,
        )
    })?;
    let mut ring = ring_init;
    advance(&mut st, &sampled, v, cap, &mut ring, step as usize);
    let got_cfg: Vec<vkllm_kernels::sample::SampleRow> = dev.read_vec(&gb, slots)?;
    let u = |x: &[u32]| x.iter().map(|&w| w as f32).collect::<Vec<f32>>();
    let mut got_state = u(&dev.read_vec::<u32>(&ib, slots)?);
    got_state.extend(u(&dev.read_vec::<u32>(&pb, slots)?));
    got_state.extend(got_cfg.iter().map(|c| c.step_lo as f32));
    got_state.extend(got_cfg.iter().map(|c| c.step_hi as f32));
    got_state.extend(got_cfg.iter().map(|c| c.live as f32));
    got_state.extend(u(&dev.read_vec::<u32>(&rb, slots * ring_steps)?));
    got_state.extend(u(&dev.read_vec::<u32>(&ctl, 1)?));
    let mut want_state = u(&st.ids);
    want_state.extend(u(&st.pos));
    want_state.extend(st.steps.iter().map(|&s| s as u32 as f32));
    want_state.extend(st.steps.iter().map(|&s| (s >> 32) as f32));
    want_state.extend(st.live.iter().map(|&l| l as u32 as f32));
    want_state.extend(u(&ring));
    want_state.push((step + 1) as f32);
    let shape = format!("{slots} slots, vocab {v}, capacity {cap}");
    Ok(vec![
        row(
            "decode_advance",
            "ids/pos/step/live/ring",
            shape.clone(),
            &got_state,
            &want_state,
            EXACT,
        ),
        row(
            "decode_advance",
            "counts",
            shape,
            &u(&dev.read_vec::<u32>(&cb, slots * v)?),
            &u(&st.counts),
            EXACT,
        ),
    ])
}
