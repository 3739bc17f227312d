//! `tokenizer.ggml.model = llama`: SentencePiece vocabularies (scores, byte fallback), rebuilt
//! as a BPE with merges recovered from the vocabulary, the way transformers does it.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper,
    PreTokenizerWrapper, SplitDelimiterBehavior, TokenizerBuilder,
};

use super::{GgufVocab, post_processor, token_type};
use crate::chat::python_isspace;
use crate::error::{Result, TokenizerError};
use crate::tokenizer::SpecialIds;

const SPACE: char = '\u{2581}';

fn is_gemma(arch: &str) -> bool {
    matches!(arch, "gemma" | "gemma2" | "gemma3" | "gemma3n")
}

/// Recovers BPE merges from a vocabulary, as transformers' `generate_merges`: every split of a
/// token into two vocabulary tokens is a merge; merges are ordered by the token's score (best
/// first), then by the lengths of the two halves (longer first); ties keep vocabulary order.
///
/// `order` lists the distinct tokens in first-seen order with their score; `ids` maps a token
/// to its (last) id.
pub(crate) fn generate_merges(
    order: &[(&str, f64)],
    ids: &HashMap<&str, u32>,
) -> Vec<(String, String)> {
    // (score, len_l, len_r, left, right), in insertion order.
    let mut merges: Vec<(f64, usize, usize, &str, &str)> = Vec::new();
    for &(token, score) in order {
        let mut local = Vec::new();
        let bounds: Vec<usize> = token.char_indices().map(|(i, _)| i).skip(1).collect();
        for b in bounds {
            let (l, r) = token.split_at(b);
            if let (Some(&il), Some(&ir)) = (ids.get(l), ids.get(r)) {
                local.push((il, ir, l, r));
            }
        }
        local.sort_by_key(|&(il, ir, _, _)| (il, ir));
        for (_, _, l, r) in local {
            merges.push((score, l.chars().count(), r.chars().count(), l, r));
        }
    }
    // Python: sorted(key=(score, len_l, len_r), reverse=True), stable.
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    merges
        .into_iter()
        .map(|(_, _, _, l, r)| (l.to_string(), r.to_string()))
        .collect()
}

fn err(v: &GgufVocab, key: &str, e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::BadKey {
        what: v.path.clone(),
        key: key.to_string(),
        message: e.to_string(),
    }
}

pub(super) fn build(v: &GgufVocab, special: &SpecialIds) -> Result<tokenizers::Tokenizer> {
    let gemma = is_gemma(&v.architecture);
    // Gemma files store runs of spaces as real spaces; the vocabulary spells them with U+2581.
    let respelled: Vec<String> = v
        .tokens
        .iter()
        .map(|t| {
            if gemma && t.contains(' ') && t.chars().all(python_isspace) {
                SPACE.to_string().repeat(t.chars().count())
            } else {
                t.clone()
            }
        })
        .collect();

    // Python dicts: first-seen order, last value wins.
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for (i, t) in respelled.iter().enumerate() {
        if ids.insert(t.as_str(), i as u32).is_none() {
            order.push(t.as_str());
        }
    }
    let scored: Vec<(&str, f64)> = if gemma {
        // Gemma's scores do not follow its merge order; the position in the file does.
        order.iter().map(|t| (*t, -(ids[t] as f64))).collect()
    } else {
        let scores = v
            .scores
            .as_ref()
            .ok_or_else(|| TokenizerError::MissingKey {
                what: v.path.clone(),
                key: "tokenizer.ggml.scores".into(),
            })?;
        order
            .iter()
            .map(|t| (*t, scores[ids[t] as usize] as f64))
            .collect()
    };
    let merges = match &v.merges {
        Some(m) => m
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| err(v, "tokenizer.ggml.merges", format!("{m:?} is not `a b`")))
            })
            .collect::<Result<Vec<_>>>()?,
        None => generate_merges(&scored, &ids),
    };
    let vocab: Vocab = ids.iter().map(|(t, i)| (t.to_string(), *i)).collect();

    // transformers' GemmaTokenizer names `<unk>` in the model; its LlamaTokenizer built from a
    // GGUF names none (byte fallback covers every character either way).
    let unk = gemma.then(|| "<unk>".to_string());
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .fuse_unk(true)
        .byte_fallback(true);
    if let Some(u) = unk.filter(|u| ids.contains_key(u.as_str())) {
        builder = builder.unk_token(u);
    }
    let model = builder
        .build()
        .map_err(|e| err(v, "tokenizer.ggml.tokens", e))?;

    let replace_ws =
        Replace::new(" ", SPACE.to_string()).map_err(|e| err(v, "tokenizer.ggml.model", e))?;
    let replace_back = tokenizers::decoders::DecoderWrapper::Replace(
        Replace::new(SPACE.to_string(), " ").map_err(|e| err(v, "tokenizer.ggml.model", e))?,
    );
    let (normalizer, pre_tok, decoder): (
        Option<NormalizerWrapper>,
        Option<PreTokenizerWrapper>,
        DecoderWrapper,
    ) = if gemma {
        let split = Split::new(
            SplitPattern::String(" ".into()),
            SplitDelimiterBehavior::MergedWithPrevious,
            false,
        )
        .map_err(|e| err(v, "tokenizer.ggml.model", e))?;
        (
            Some(replace_ws.into()),
            Some(split.into()),
            DecoderSequence::new(vec![
                replace_back,
                ByteFallback::new().into(),
                Fuse::new().into(),
            ])
            .into(),
        )
    } else {
        // transformers' LlamaTokenizer always prepends on the first piece (it does not read
        // `add_space_prefix`).
        let prepend = PrependScheme::First;
        (
            None,
            Some(Metaspace::new(SPACE, prepend, false).into()),
            DecoderSequence::new(vec![
                replace_back,
                ByteFallback::new().into(),
                Fuse::new().into(),
                Strip::new(' ', 1, 0).into(),
            ])
            .into(),
        )
    };
    // llama.cpp and transformers add BOS to a SentencePiece vocabulary that does not say.
    let post = post_processor(v, special, true)?;
    let mut tok: tokenizers::Tokenizer = TokenizerBuilder::<
        ModelWrapper,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    >::new()
    .with_model(model.into())
    .with_normalizer(normalizer)
    .with_pre_tokenizer(pre_tok)
    .with_post_processor(Some(PostProcessorWrapper::Template(post)))
    .with_decoder(Some(decoder))
    .build()
    .map_err(|e| err(v, "tokenizer.ggml.tokens", e))?
    .into();

    // Control tokens, and the unk/bos/eos/pad tokens (transformers' tokenizer classes add
    // those as special even when the file types `<unk>` UNKNOWN), are matched whole.
    let named: Vec<usize> = [special.unk, special.bos, special.eos, special.pad]
        .into_iter()
        .flatten()
        .map(|i| i as usize)
        .collect();
    let control: Vec<AddedToken> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| v.token_type(*i) == token_type::CONTROL || named.contains(i))
        .map(|(_, t)| AddedToken::from(t.clone(), true).normalized(false))
        .collect();
    tok.add_special_tokens(&control);
    // User-defined tokens are matched whole. Runs of spaces are matched after the normalizer
    // has turned spaces into U+2581, under their vocabulary spelling.
    let user: Vec<AddedToken> = (0..v.tokens.len())
        .filter(|&i| v.token_type(i) == token_type::USER_DEFINED)
        .map(|i| {
            let respelled_run = respelled[i] != v.tokens[i];
            AddedToken::from(respelled[i].clone(), false).normalized(respelled_run)
        })
        .collect();
    tok.add_tokens(&user);
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_follow_score_then_lengths() {
        // Hand-worked: vocab a b c ab bc abc with scores; "abc" splits as (a, bc) and (ab, c).
        let toks = [
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("ab", -1.0),
            ("bc", -2.0),
            ("abc", -0.5),
        ];
        let ids: HashMap<&str, u32> = toks
            .iter()
            .enumerate()
            .map(|(i, (t, _))| (*t, i as u32))
            .collect();
        let m = generate_merges(&toks, &ids);
        // abc (-0.5) first: its splits sorted by (len_l, len_r) descending: (ab, c) then (a, bc);
        // then ab (-1.0), then bc (-2.0).
        let want = [("ab", "c"), ("a", "bc"), ("a", "b"), ("b", "c")];
        let got: Vec<(&str, &str)> = m.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(got, want);
    }
}
