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
    let vocab = model.cfg().vocab_size;
    let mut tally = Tally::default();
    each_scored(model, b, tokens, ctx, bos, &[kv.into()], &mut |s| match s {
        Scored::Token(logits, target) => tally.add(nll(&logits[0][..vocab], target)),
        Scored::Chunk(i, n) => on_chunk(i, n, tally.chunk_done()),
    })?;
    Ok(tally.finish())
}

/// How far one KV type's next-token distributions are from another's over the same scored
/// tokens (llama-perplexity's `--kl-divergence`, both runs side by side): far less noisy than
/// the difference of two perplexities, whose tokens flip both ways.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    /// The perplexity with the reference cache.
    pub reference: Perplexity,
    /// The perplexity with the cache under test.
    pub test: Perplexity,
    /// Mean `KL(P_reference || P_test)` per scored token, nats.
    pub mean_kl: f64,
    /// Standard error of `mean_kl`.
    pub kl_stderr: f64,
    /// Fraction of scored tokens whose most likely next token is the same in both.
    pub same_top: f64,
}

/// `KL(softmax(p) || softmax(q))` in f64, and whether both logits have the same argmax.
pub fn kl_divergence(p: &[f32], q: &[f32]) -> (f64, bool) {
    let log_softmax = |x: &[f32]| -> Vec<f64> {
        let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let lse = x.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
        x.iter().map(|&v| v as f64 - lse).collect()
    };
    let (lp, lq) = (log_softmax(p), log_softmax(q));
    let kl = lp
        .iter()
        .zip(&lq)
        .map(|(&a, &b)| a.exp() * (a - b))
        .sum::<f64>();
    let top = |x: &[f64]| {
        x.iter()
            .enumerate()
            .fold(
                (0, f64::NEG_INFINITY),
                |m, (i, &v)| if v > m.1 { (i, v) } else { m },
            )
            .0
    };
    (kl.max(0.0), top(&lp) == top(&lq))
}

/// [`perplexity_kv`] with the cache stored as `kv` and as `reference`, on the same chunks:
/// both perplexities and the divergence of `kv`'s distributions from the reference's.
#[allow(clippy::too_many_arguments)]
pub fn divergence_kv<B: Backend>(
    model: &AnyModel,
    b: &mut B,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    kv: KvTypes,
    reference: KvTypes,
    on_chunk: &mut dyn FnMut(usize, usize, f64),
) -> Result<Divergence, ModelError> {
    let vocab = model.cfg().vocab_size;
    let (mut r, mut t, mut kl) = (Tally::default(), Tally::default(), Tally::default());
    let mut same = 0usize;
    each_scored(
        model,
        b,
        tokens,
        ctx,
        bos,
        &[reference, kv],
        &mut |s| match s {
            Scored::Token(logits, target) => {
                let (p, q) = (&logits[0][..vocab], &logits[1][..vocab]);
                r.add(nll(p, target));
                t.add(nll(q, target));
                let (d, top) = kl_divergence(p, q);
                kl.add(d);
                same += usize::from(top);
            }
            Scored::Chunk(i, n) => {
                r.chunk_done();
                on_chunk(i, n, t.chunk_done());
            }
        },
    )?;
    let n = kl.count.max(1) as f64;
    let (mean_kl, var) = (kl.sum / n, kl.sum2 / n - (kl.sum / n).powi(2));
    Ok(Divergence {
        kl_stderr: match kl.count > 1 && var > 0.0 {
            true => (var / (n - 1.0)).sqrt(),
            false => 0.0,
        },
        mean_kl,
        same_top: same as f64 / n,
        reference: r.finish(),
        test: t.finish(),
    })
}

/// Running sums of per-token values (NLLs or divergences).
#[derive(Default)]
struct Tally {
    sum: f64,
    sum2: f64,
    count: usize,
    running: Vec<f64>,
}

impl Tally {
    fn add(&mut self, v: f64) {
        self.sum += v;
        self.sum2 += v * v;
        self.count += 1;
    }

    /// Ends a chunk: the running perplexity, kept in `running`.
    fn chunk_done(&mut self) -> f64 {
        let ppl = (self.sum / self.count.max(1) as f64).exp();
        self.running.push(ppl);
        ppl
    }

    /// The perplexity of the NLLs added, `running` one entry per chunk.
    fn finish(self) -> Perplexity {
        let count = self.count.max(1) as f64;
        let mean = self.sum / count;
        let ppl = mean.exp();
        let var = self.sum2 / count - mean * mean;
        let stderr = if var > 0.0 && self.count > 1 {
            (var / (count - 1.0)).sqrt() * ppl
        } else {
            0.0
        };
        Perplexity {
            ppl,
            stderr,
            mean_nll: mean,
            count: self.count,
            chunks: self.running.len(),
            running: self.running,
        }
    }
}

/// What [`each_scored`] reports.
enum Scored<'a> {
    /// A scored position's logits (one slice per state) and the token they predict.
    Token(&'a [&'a [f32]], u32),
    /// Chunk `i` of `n` done.
    Chunk(usize, usize),
}

/// Runs the chunks of the module doc through one state per cache type of `kvs`, reporting
/// every scored position and the end of every chunk to `each`.
#[allow(clippy::too_many_arguments)]
fn each_scored<B: Backend>(
    model: &AnyModel,
    b: &mut B,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    kvs: &[KvTypes],
    each: &mut dyn FnMut(Scored<'_>),
) -> Result<(), ModelError> {
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
    let states = kvs
        .iter()
        .map(|&kv| model.new_state(b, ctx, kv))
        .collect::<Result<Vec<_>, _>>()?;
    for i in 0..n_chunk {
        let mut chunk = tokens[i * ctx..(i + 1) * ctx].to_vec();
        if let Some(bos) = bos {
            chunk[0] = bos;
        }
        // Unscored prefix, then the scored half with all its logits, a slice at a time (the
        // logits of a whole half-context of a 256k vocabulary would be hundreds of MiB). Every
        // chunk starts from position 0 (a recurrent state is reset).
        for st in &states {
            model.rewind(b, st, 0)?;
            model.forward(b, st, &chunk[..first], 0, Logits::Last)?;
        }
        let mut pos = first;
        while pos < ctx - 1 {
            let end = (pos + SCORE_SLICE).min(ctx - 1);
            let logits = states
                .iter()
                .map(|st| model.forward(b, st, &chunk[pos..end], pos, Logits::All))
                .collect::<Result<Vec<_>, _>>()?;
            for (j, p) in (pos..end).enumerate() {
                let rows: Vec<&[f32]> = logits
                    .iter()
                    .map(|l| &l[j * vocab..(j + 1) * vocab])
                    .collect();
                each(Scored::Token(&rows, chunk[p + 1]));
            }
            pos = end;
        }
        each(Scored::Chunk(i, n_chunk));
    }
    Ok(())
}
