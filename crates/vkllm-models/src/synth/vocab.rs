//! Synthetic vocabularies for `vkllm synth`: the `tokenizer.ggml.*` keys a real conversion
//! writes, filled with made-up tokens of the right count so that any engine (and
//! vkllm-tokenizer) can load and run the file.
//!
//! - Byte-level BPE (`gpt2`): the model's special tokens where the real vocabulary has them, the
//!   256 byte symbols (GPT-2's byte-to-unicode map), then tokens made by merging two earlier
//!   tokens (each with its merge rule, so every token is reachable), then `[PAD<i>]` filler like
//!   llama.cpp's converter writes for ids the tokenizer leaves unused.
//! - SentencePiece (`llama`: Gemma, Mistral): the model's leading specials (Gemma's `<pad> <eos>
//!   <bos> <unk>` ..., Mistral's `<unk> <s> </s> [INST]` ...) and `[control_<i>]` filler up to
//!   its reserved count, the 256 byte tokens `<0x00>`..`<0xFF>`, then pieces with decreasing
//!   scores.

use std::collections::HashSet;

use vkllm_gguf::{MetaArray, MetaValue};

/// llama.cpp's token types.
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

/// Which kind of tokenizer a shape's real vocabulary is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// Byte-level BPE with llama.cpp pre-tokenizer name `pre`; `specials` are placed at
    /// `special_base` (and ids follow on); `n_pad` `[PAD<i>]` tokens end the vocabulary.
    Bpe {
        pre: &'static str,
        specials: &'static [&'static str],
        special_base: SpecialBase,
        n_pad: usize,
    },
    /// SentencePiece: `head` first (`<unk>` typed unknown, the rest control), then
    /// `[control_<i>]` tokens until `controls` ids are taken.
    Spm {
        head: &'static [&'static str],
        controls: usize,
    },
}

/// Where a BPE vocabulary's special tokens sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecialBase {
    /// Ids 0.. (SmolLM2).
    Start,
    /// Right after the normal tokens, before the padding (Qwen, Llama 3).
    End,
}

/// The vocabulary's arrays.
pub struct Vocab {
    pub tokens: Vec<String>,
    pub token_type: Vec<i32>,
    /// BPE only.
    pub merges: Vec<String>,
    /// SPM only.
    pub scores: Vec<f32>,
}

impl Vocab {
    /// The id of a token (specials are looked up by name when the metadata is written).
    pub fn id(&self, token: &str) -> Option<u32> {
        self.tokens
            .iter()
            .position(|t| t == token)
            .map(|i| i as u32)
    }

    /// `tokenizer.ggml.tokens`, `token_type` (and `merges` or `scores`).
    pub fn metadata(self) -> Vec<(&'static str, MetaValue)> {
        let mut m = vec![
            (
                "tokenizer.ggml.tokens",
                MetaValue::Array(MetaArray::String(self.tokens)),
            ),
            (
                "tokenizer.ggml.token_type",
                MetaValue::Array(MetaArray::I32(self.token_type)),
            ),
        ];
        if !self.merges.is_empty() {
            m.push((
                "tokenizer.ggml.merges",
                MetaValue::Array(MetaArray::String(self.merges)),
            ));
        }
        if !self.scores.is_empty() {
            m.insert(
                1,
                (
                    "tokenizer.ggml.scores",
                    MetaValue::Array(MetaArray::F32(self.scores)),
                ),
            );
        }
        m
    }
}

/// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others for code
/// points from 256 up, in byte order.
fn byte_symbols() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next = 256u32;
    (0..256u32)
        .map(|b| {
            let cp = if printable(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(cp).unwrap_or('?')
        })
        .collect()
}

/// SplitMix64, for choosing merge pairs (deterministic, no dependency).
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A byte-level BPE vocabulary of exactly `size` tokens.
///
/// # Panics
/// If `size` cannot hold the specials, the 256 bytes and the padding (a shape-table bug).
pub fn bpe(size: usize, specials: &[&str], base: SpecialBase, n_pad: usize) -> Vocab {
    let n_normal = size - specials.len() - n_pad;
    assert!(n_normal >= 256, "vocabulary of {size} too small");
    let mut tokens: Vec<String> = byte_symbols().into_iter().map(String::from).collect();
    let mut seen: HashSet<String> = tokens.iter().cloned().collect();
    let mut merges = Vec::with_capacity(n_normal - 256);
    let mut rng = Mix(0x5eed_70c3);
    while tokens.len() < n_normal {
        // Left: any earlier token; right: a byte (3 in 4) or any token; at most 16 chars.
        let l = rng.below(tokens.len());
        let r = if rng.below(4) == 0 {
            rng.below(tokens.len())
        } else {
            rng.below(256)
        };
        let (a, b) = (&tokens[l], &tokens[r]);
        if a.chars().count() + b.chars().count() > 16 {
            continue;
        }
        let t = format!("{a}{b}");
        if seen.insert(t.clone()) {
            merges.push(format!("{a} {b}"));
            tokens.push(t);
        }
    }
    let mut types = vec![NORMAL; tokens.len()];
    let special_tokens = specials.iter().map(|s| s.to_string());
    match base {
        SpecialBase::Start => {
            tokens.splice(0..0, special_tokens);
            types.splice(0..0, specials.iter().map(|_| CONTROL));
        }
        SpecialBase::End => {
            tokens.extend(special_tokens);
            types.extend(specials.iter().map(|_| CONTROL));
        }
    }
    let first_pad = tokens.len();
    tokens.extend((first_pad..size).map(|i| format!("[PAD{i}]")));
    types.resize(size, UNUSED);
    Vocab {
        tokens,
        token_type: types,
        merges,
        scores: Vec::new(),
    }
}

/// A SentencePiece vocabulary of exactly `size` tokens: `head`, control filler up to id
/// `controls`, the byte tokens, pieces.
///
/// # Panics
/// If `size` leaves fewer than 300 ids for the bytes and pieces (a shape-table bug).
pub fn spm(size: usize, head: &[&str], controls: usize) -> Vocab {
    let n_special = controls.max(head.len());
    assert!(size >= n_special + 300, "vocabulary of {size} too small");
    let mut tokens: Vec<String> = head.iter().map(|t| t.to_string()).collect();
    let mut types: Vec<i32> = head
        .iter()
        .map(|t| if *t == "<unk>" { UNKNOWN } else { CONTROL })
        .collect();
    for i in tokens.len()..n_special {
        tokens.push(format!("[control_{i}]"));
        types.push(CONTROL);
    }
    for b in 0..256 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(BYTE);
    }
    // Pieces: the word-start marker alone, every printable ASCII character with and without
    // it, then words of two to six letters, half with the marker.
    let letters: Vec<char> = ('a'..='z').chain('A'..='Z').collect();
    let mut seen: HashSet<String> = tokens.iter().cloned().collect();
    let mut rng = Mix(0x05ee_d5e9);
    tokens.push("\u{2581}".into());
    types.push(NORMAL);
    for c in (33u8..=126).map(char::from) {
        for s in [format!("\u{2581}{c}"), c.to_string()] {
            if seen.insert(s.clone()) {
                tokens.push(s);
                types.push(NORMAL);
            }
        }
    }
    while tokens.len() < size {
        let len = 2 + rng.below(5);
        let mut s: String = (0..len).map(|_| letters[rng.below(26)]).collect();
        if rng.below(2) == 0 {
            s.insert(0, '\u{2581}');
        }
        if seen.insert(s.clone()) {
            tokens.push(s);
            types.push(NORMAL);
        }
    }
    let scores = (0..size)
        .map(|i| if types[i] == NORMAL { -(i as f32) } else { 0.0 })
        .collect();
    Vocab {
        tokens,
        token_type: types,
        merges: Vec::new(),
        scores,
    }
}
