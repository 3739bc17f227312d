//! `perplexity` (llama.cpp's method) and `divergence_kv` against a direct f64 recomputation
//! from whole-chunk `Logits::All` forwards, written out here independently; and the NLL and KL
//! divergence of hand-made cases.

use vkllm_models::fixtures::Fixture;
use vkllm_models::perplexity::{divergence_kv, kl_divergence, nll, perplexity};
use vkllm_models::{AnyModel, CpuBackend, KvType, Logits, Model, ModelError};

#[test]
fn nll_of_a_hand_made_case() {
    // softmax([0, ln 3]) = [1/4, 3/4].
    let l = [0.0f32, 3f32.ln()];
    assert!((nll(&l, 1) - (4.0f64 / 3.0).ln()).abs() < 1e-7);
    assert!((nll(&l, 0) - 4f64.ln()).abs() < 1e-7);
}

#[test]
fn kl_divergence_of_a_hand_made_case() {
    // P = softmax([0, ln 3]) = [1/4, 3/4], Q = [1/2, 1/2]: KL = 1/4 ln(1/2) + 3/4 ln(3/2).
    let (p, q) = ([0.0f32, 3f32.ln()], [5.0f32, 5.0]);
    let (kl, same) = kl_divergence(&p, &q);
    let want = 0.25 * 0.5f64.ln() + 0.75 * 1.5f64.ln();
    assert!((kl - want).abs() < 1e-7, "{kl} vs {want}");
    assert!(!same, "argmax 1 against a tie (first index)");
    let (kl, same) = kl_divergence(&p, &[1.0, 1.0 + 3f32.ln()]);
    assert!(kl.abs() < 1e-7 && same, "{kl}");
}

/// The logits of every position of each chunk (BOS in front), one forward per chunk from an
/// empty cache of `kv`.
fn chunk_logits(
    model: &Model,
    b: &mut CpuBackend,
    tokens: &[u32],
    ctx: usize,
    kv: KvType,
) -> Vec<(Vec<u32>, Vec<f32>)> {
    tokens
        .chunks_exact(ctx)
        .map(|c| {
            let cache = model.new_kv_slots(b, ctx, 1, kv).unwrap();
            let logits = model.forward(b, &cache, c, 0, Logits::All).unwrap();
            (c.to_vec(), logits)
        })
        .collect()
}

/// `divergence_kv` of an f16 cache against f32 against the KL divergence, perplexities and
/// top-token agreement computed here from whole-chunk forwards of each cache; and a cache
/// against itself diverges by nothing.
#[test]
fn divergence_matches_a_direct_recomputation() {
    let fx = Fixture::load("llama").unwrap();
    let mut tokens = fx.prompt("long").unwrap().ids;
    tokens.extend(fx.prompt("short").unwrap().ids);
    let ctx = 48;
    let mut b = CpuBackend::new();
    let any = AnyModel::from(Model::load(fx.config.clone(), &fx.weights, &mut b, 16).unwrap());
    let model = any.as_dense().unwrap();
    let vocab = model.cfg.vocab_size;
    let mut div = |kv: KvType, reference: KvType| {
        divergence_kv(
            &any,
            &mut b,
            &tokens,
            ctx,
            None,
            kv.into(),
            reference.into(),
            &mut |_, _, _| {},
        )
        .unwrap()
    };
    let r = div(KvType::F16, KvType::F32);
    let own = div(KvType::F16, KvType::F16);
    let base = chunk_logits(model, &mut b, &tokens, ctx, KvType::F32);
    let test = chunk_logits(model, &mut b, &tokens, ctx, KvType::F16);
    let (mut kls, mut same, mut nll_p, mut nll_q) = (Vec::new(), 0, 0.0, 0.0);
    for ((ids, lp), (_, lq)) in base.iter().zip(&test) {
        for j in ctx / 2..ctx - 1 {
            let lsm = |l: &[f32]| -> Vec<f64> {
                let row: Vec<f64> = l[j * vocab..(j + 1) * vocab]
                    .iter()
                    .map(|&x| f64::from(x))
                    .collect();
                let m = row.iter().cloned().fold(f64::MIN, f64::max);
                let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
                row.iter().map(|x| x - lse).collect()
            };
            let (p, q) = (lsm(lp), lsm(lq));
            kls.push(
                p.iter()
                    .zip(&q)
                    .map(|(a, b)| a.exp() * (a - b))
                    .sum::<f64>(),
            );
            let top = |x: &[f64]| (0..x.len()).fold(0, |m, i| if x[i] > x[m] { i } else { m });
            same += usize::from(top(&p) == top(&q));
            nll_p -= p[ids[j + 1] as usize];
            nll_q -= q[ids[j + 1] as usize];
        }
    }
    let n = kls.len() as f64;
    let kl = kls.iter().sum::<f64>() / n;
    assert_eq!(r.test.count, kls.len());
    assert!(kl > 0.0, "f16 keys and values change the logits");
    assert!((r.mean_kl - kl).abs() <= 1e-6 * kl, "{} vs {kl}", r.mean_kl);
    assert_eq!(r.same_top, same as f64 / n);
    assert!((r.reference.mean_nll - nll_p / n).abs() < 1e-9);
    assert!((r.test.mean_nll - nll_q / n).abs() < 1e-9);
    assert!(own.mean_kl.abs() < 1e-12 && own.same_top == 1.0, "{own:?}");
    assert_eq!(own.test.ppl, r.test.ppl);
}

/// The reference: each chunk in one forward from an empty cache, every position's logits, the
/// log-softmax in f64 written out from scratch.
fn reference(
    model: &Model,
    b: &mut CpuBackend,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
) -> (f64, f64, usize) {
    let vocab = model.cfg.vocab_size;
    let mut nlls = Vec::new();
    for c in tokens.chunks_exact(ctx) {
        let mut c = c.to_vec();
        if let Some(t) = bos {
            c[0] = t;
        }
        let kv = model.new_kv(b, ctx).unwrap();
        let logits = model.forward(b, &kv, &c, 0, Logits::All).unwrap();
        for j in ctx / 2..ctx - 1 {
            let row: Vec<f64> = logits[j * vocab..(j + 1) * vocab]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            nlls.push(lse - row[c[j + 1] as usize]);
        }
    }
    let n = nlls.len() as f64;
    let mean = nlls.iter().sum::<f64>() / n;
    let ppl = mean.exp();
    let var = nlls.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (ppl, ppl * (var / (n - 1.0)).sqrt(), nlls.len())
}

#[test]
fn matches_a_direct_f64_recomputation() {
    for (family, ctx, bos) in [
        ("llama", 64, Some(1)),
        ("qwen2", 90, None),
        ("gemma3", 40, Some(2)),
    ] {
        let fx = Fixture::load(family).unwrap();
        let mut tokens = fx.prompt("long").unwrap().ids;
        tokens.extend(fx.prompt("short").unwrap().ids);
        let mut b = CpuBackend::new();
        // A prefill chunk of 16 makes the scored half run as several forwards.
        let any = AnyModel::from(Model::load(fx.config.clone(), &fx.weights, &mut b, 16).unwrap());
        let model = any.as_dense().unwrap();
        let mut seen = Vec::new();
        let r = perplexity(&any, &mut b, &tokens, ctx, bos, &mut |i, n, p| {
            seen.push((i, n, p))
        })
        .unwrap();
        let (ppl, stderr, count) = reference(model, &mut b, &tokens, ctx, bos);
        let n_chunks = tokens.len() / ctx;
        assert_eq!((r.chunks, r.count), (n_chunks, count), "{family}");
        assert_eq!(count, n_chunks * (ctx - ctx / 2 - 1));
        assert!(
            (r.ppl - ppl).abs() <= 1e-9 * ppl,
            "{family}: {} vs {ppl}",
            r.ppl
        );
        assert!(
            (r.stderr - stderr).abs() <= 1e-6 * stderr,
            "{family}: {} vs {stderr}",
            r.stderr
        );
        assert_eq!(seen.len(), n_chunks);
        assert_eq!(seen.last().unwrap().2, r.ppl);
        assert!((r.mean_nll.exp() - r.ppl).abs() < 1e-12 * r.ppl);
        eprintln!(
            "{family}: ctx {ctx}, {n_chunks} chunks, PPL {:.4} +/- {:.4}",
            r.ppl, r.stderr
        );
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let fx = Fixture::load("llama").unwrap();
    let mut b = CpuBackend::new();
    let model = AnyModel::from(Model::load(fx.config.clone(), &fx.weights, &mut b, 16).unwrap());
    let ids = fx.prompt("short").unwrap().ids;
    let e = perplexity(&model, &mut b, &ids, 64, None, &mut |_, _, _| {}).unwrap_err();
    assert!(matches!(e, ModelError::Config { .. }), "{e}");
    let mut bad = ids.clone();
    bad[3] = 256;
    let e = perplexity(&model, &mut b, &bad, 8, None, &mut |_, _, _| {}).unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::TokenOutOfRange {
                id: 256,
                vocab: 256
            }
        ),
        "{e}"
    );
}
