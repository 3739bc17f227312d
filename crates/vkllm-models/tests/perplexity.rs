//! `perplexity` (llama.cpp's method) against a direct f64 recomputation from whole-chunk
//! `Logits::All` forwards, written out here independently; and the NLL of a hand-made case.

use vkllm_models::fixtures::Fixture;
use vkllm_models::perplexity::{nll, perplexity};
use vkllm_models::{AnyModel, CpuBackend, Logits, Model, ModelError};

#[test]
fn nll_of_a_hand_made_case() {
    // softmax([0, ln 3]) = [1/4, 3/4].
    let l = [0.0f32, 3f32.ln()];
    assert!((nll(&l, 1) - (4.0f64 / 3.0).ln()).abs() < 1e-7);
    assert!((nll(&l, 0) - 4f64.ln()).abs() < 1e-7);
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
