//! `tokenizer.ggml.model = gpt2`: byte-level BPE with the pre-tokenizer llama.cpp names in
//! `tokenizer.ggml.pre`.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper,
    PreTokenizerWrapper, SplitDelimiterBehavior, TokenizerBuilder,
};

use super::{GgufVocab, post_processor, token_type};
use crate::error::{Result, TokenizerError};
use crate::tokenizer::SpecialIds;

/// Llama 3's split (`llama-bpe`, `llama3`, ...): digits in groups of three.
pub(crate) const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: single digits.
pub(crate) const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's split: marks join letters.
const QWEN35: &str = crate::tiktoken::QWEN35_PATTERN;

/// How a `tokenizer.ggml.pre` name pre-tokenizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pre {
    /// `ByteLevel(use_regex=true)`: GPT-2's split inside the byte-level step.
    Gpt2,
    /// `Digits(individual) + ByteLevel(use_regex=true)` (SmolLM).
    Smollm,
    /// `Split(regex, isolated) + ByteLevel(use_regex=false)`, NFC first when `nfc`.
    Regex { pattern: &'static str, nfc: bool },
}

/// The pre-tokenizer for a llama.cpp pre name; `None` for a name we do not know.
fn pre_for(name: &str) -> Option<Pre> {
    let regex = |pattern, nfc| Some(Pre::Regex { pattern, nfc });
    match name {
        "gpt2" | "default" | "gpt-2" | "starcoder" | "refact" | "olmo" | "phi-2" => Some(Pre::Gpt2),
        "smollm" => Some(Pre::Smollm),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "dbrx"
        | "smaug-bpe" => regex(LLAMA3, false),
        "qwen2" | "deepseek-r1-qwen" | "megrez" => regex(QWEN2, true),
        "qwen35" => regex(QWEN35, true),
        _ => None,
    }
}

/// GPT-2's byte -> printable character table.
pub(crate) fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
        table[b as usize] = if printable {
            b as char
        } else {
            let c = char::from_u32(256 + n).unwrap_or('\u{fffd}');
            n += 1;
            c
        };
    }
    table
}

fn backend_err(what: &str, key: &str, e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::BadKey {
        what: what.to_string(),
        key: key.to_string(),
        message: e.to_string(),
    }
}

pub(super) fn build(v: &GgufVocab, special: &SpecialIds) -> Result<tokenizers::Tokenizer> {
    let pre_name = v.pre.as_deref().unwrap_or("default");
    let pre = pre_for(pre_name).ok_or_else(|| TokenizerError::Unsupported {
        what: v.path.clone(),
        kind: "tokenizer.ggml.pre",
        name: pre_name.to_string(),
    })?;

    // Tokens are stored in the byte alphabet already; one that is not (a mislabelled special
    // written in plain UTF-8) is respelled byte by byte, as transformers does.
    let table = bytes_to_unicode();
    let alphabet: std::collections::HashSet<char> = table.iter().copied().collect();
    let spelled = |t: &str| t.chars().all(|c| alphabet.contains(&c));
    let mut vocab = Vocab::default();
    for (i, t) in v.tokens.iter().enumerate() {
        let key = if spelled(t) {
            t.clone()
        } else {
            t.bytes().map(|b| table[b as usize]).collect()
        };
        vocab.insert(key, i as u32);
    }
    let merges = v
        .merges
        .as_ref()
        .ok_or_else(|| TokenizerError::MissingKey {
            what: v.path.clone(),
            key: "tokenizer.ggml.merges".into(),
        })?;
    let mut pairs = Vec::with_capacity(merges.len());
    for (i, m) in merges.iter().enumerate() {
        let (a, b) = m.split_once(' ').ok_or_else(|| {
            backend_err(
                &v.path,
                "tokenizer.ggml.merges",
                format!("merge {i} ({m:?}) is not `a b`"),
            )
        })?;
        pairs.push((a.to_string(), b.to_string()));
    }
    let model = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .build()
        .map_err(|e| backend_err(&v.path, "tokenizer.ggml.merges", e))?;

    let (normalizer, pre_tok): (Option<NormalizerWrapper>, PreTokenizerWrapper) = match pre {
        Pre::Gpt2 => (None, ByteLevel::new(false, true, true).into()),
        Pre::Smollm => (
            None,
            Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
        ),
        Pre::Regex { pattern, nfc } => {
            let split = Split::new(
                SplitPattern::Regex(pattern.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| TokenizerError::Regex {
                what: v.path.clone(),
                pattern: pattern.to_string(),
                message: e.to_string(),
            })?;
            (
                nfc.then(|| NFC.into()),
                Sequence::new(vec![
                    split.into(),
                    ByteLevel::new(false, true, false).into(),
                ])
                .into(),
            )
        }
    };
    let post = post_processor(v, special, false)?;
    let mut tok: tokenizers::Tokenizer = TokenizerBuilder::<
        ModelWrapper,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    >::new()
    .with_model(model.into())
    .with_normalizer(normalizer)
    .with_pre_tokenizer(Some(pre_tok))
    .with_post_processor(Some(PostProcessorWrapper::Template(post)))
    .with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevelDecoder::default())))
    .build()
    .map_err(|e| backend_err(&v.path, "tokenizer.ggml.tokens", e))?
    .into();

    // Control tokens become special added tokens (matched whole, skipped by skip_special);
    // user-defined ones plain added tokens. A control token outside the byte alphabet is a
    // llama.cpp mislabel and is left alone, as transformers leaves it.
    let control: Vec<AddedToken> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, t)| v.token_type(*i) == token_type::CONTROL && spelled(t))
        .map(|(_, t)| AddedToken::from(t.clone(), true).normalized(false))
        .collect();
    tok.add_special_tokens(&control);
    let user: Vec<AddedToken> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, t)| v.token_type(*i) == token_type::USER_DEFINED && spelled(t))
        .map(|(_, t)| AddedToken::from(t.clone(), false).normalized(false))
        .collect();
    tok.add_tokens(&user);
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_gpt2s() {
        let t = bytes_to_unicode();
        // Known spellings: space is 'Ġ' (U+0120), newline 'Ċ' (U+010A), '!' itself.
        assert_eq!(t[b' ' as usize], '\u{120}');
        assert_eq!(t[b'\n' as usize], '\u{10a}');
        assert_eq!(t[b'!' as usize], '!');
        assert_eq!(t[0xad], '\u{143}');
        let distinct: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn unknown_pre_name_is_an_error() {
        assert!(pre_for("no-such-pre").is_none());
        assert_eq!(pre_for("smollm"), Some(Pre::Smollm));
        assert!(matches!(
            pre_for("qwen2"),
            Some(Pre::Regex { nfc: true, .. })
        ));
    }
}
