//! Perplexity of a model over a token sequence, by llama.cpp's method (`llama-perplexity`,
//! `perplexity()` in tools/perplexity/perplexity.cpp):
//!
//! - the tokens are cut into `n_chunk = len / ctx` chunks of `ctx` tokens (the tail is dropped);
//! - each chunk is run from an empty cache, its first token replaced by BOS when the tokenizer
//!   adds one;
//! - only the second half is scored: the logits at positions `ctx/2 .. ctx-2` predict the
//!   tokens at `ctx/2 + 1 .. ctx-1` (`ctx - ctx/2 - 1` tokens a chunk), so every scored token
//!   has at least half a context before it;
//! - `PPL = exp(mean NLL)` and its standard error by the delta method,
//!   `PPL * sqrt((mean(NLL^2) - mean(NLL)^2) / (count - 1))`.
//!
//! The log-softmax is accumulated in f64.

use crate::backend::Backend;
use crate::error::ModelError;
use crate::forward::Logits;
use crate::{AnyModel, KvType, KvTypes};

/// Scored positions per forward call.
const SCORE_SLICE: usize = 64;

/// The result of [`perplexity`].
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    pub ppl: f64,
    /// Standard error of `ppl`.
    pub stderr: f64,
    /// Mean negative log-likelihood (nats per token).
    pub mean_nll: f64,
    /// Tokens scored.
    pub count: usize,
    /// Chunks evaluated.
    pub chunks: usize,
    /// Running PPL after each chunk (what llama-perplexity prints as `[i]ppl`).
    pub running: Vec<f64>,
}

/// `-log softmax(logits)[target]`, in f64.
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    let t = logits.get(target as usize).copied().unwrap_or(f32::NAN) as f64;
    -(t - max - sum.ln())
}

/// Perplexity of `model` over `tokens` in chunks of `ctx` (see the module doc); `bos` replaces
/// the first token of every chunk when given. `on_chunk(i, n_chunks, running_ppl)` reports
/// progress.
pub fn perplexity<B: Backend>(
    model: &AnyModel,
    b: &mut B,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    on_chunk: &mut dyn FnMut(usize, usize, f64),
) -> Result<Perplexity, ModelError> {
    perplexity_kv(model, b, tokens, ctx, bos, KvType::F32, on_chunk)
}

/// [`perplexity`] with the KV cache stored as `kv` (its effect on quality: docs/quantization.md).
#[allow(clippy::too_many_arguments)]
pub fn perplexity_kv<B: Backend>(
    model: &AnyModel,
    b: &mut B,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    kv: impl Into<KvTypes>,
    on_chunk: &mut dyn FnMut(usize, usize, f64),
) -> Result<Perplexity, ModelError> {
    if ctx < 4 {
        return Err(ModelError::Config {
            field: "ctx".into(),
            msg: format!("context {ctx} is too short for perplexity (at least 4)"),
        });
    }
    let n_chunk = tokens.len() / ctx;
    if n_chunk == 0 {
        return Err(ModelError::Config {
            field: "ctx".into(),
            msg: format!(
                "the text has {} tokens, fewer than one chunk of {ctx}; use a smaller --ctx",
                tokens.len()
            ),
        });
    }
    let vocab = model.cfg().vocab_size;
    if let Some(&id) = tokens
        .iter()
        .chain(bos.as_ref())
        .find(|&&t| t as usize >= vocab)
    {
        return Err(ModelError::TokenOutOfRange { id, vocab });
    }
    let first = ctx / 2;
    let st = model.new_state(b, ctx, kv)?;
    let (mut sum, mut sum2, mut count) = (0f64, 0f64, 0usize);
    let mut running = Vec::with_capacity(n_chunk);
    for i in 0..n_chunk {
        let mut chunk = tokens[i * ctx..(i + 1) * ctx].to_vec();
        if let Some(bos) = bos {
            chunk[0] = bos;
        }
        // Unscored prefix, then the scored half with all its logits, a slice at a time (the
        // logits of a whole half-context of a 256k vocabulary would be hundreds of MiB). Every
        // chunk starts from position 0 (a recurrent state is reset).
        model.rewind(b, &st, 0)?;
        model.forward(b, &st, &chunk[..first], 0, Logits::Last)?;
        let mut pos = first;
        while pos < ctx - 1 {
            let end = (pos + SCORE_SLICE).min(ctx - 1);
            let logits = model.forward(b, &st, &chunk[pos..end], pos, Logits::All)?;
            for (j, p) in (pos..end).enumerate() {
                let v = nll(&logits[j * vocab..(j + 1) * vocab], chunk[p + 1]);
                sum += v;
                sum2 += v * v;
                count += 1;
            }
            pos = end;
        }
        let ppl = (sum / count as f64).exp();
        running.push(ppl);
        on_chunk(i, n_chunk, ppl);
    }
    let mean = sum / count as f64;
    let ppl = mean.exp();
    let var = sum2 / count as f64 - mean * mean;
    let stderr = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        ppl,
        stderr,
        mean_nll: mean,
        count,
        chunks: n_chunk,
        running,
    })
}
