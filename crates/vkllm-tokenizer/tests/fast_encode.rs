//! The fast paths against the pipelines they replace (byte-level BPE against `tokenizers`,
//! tiktoken ranks' split on the `regex` crate against `fancy-regex`): which fixture tokenizers
//! take them, and the same ids on the corpus and on random mixes of the pieces that stress each
//! step (added and special tokens, NFC, whitespace runs, digits, contractions).

mod common;

use common::{NAMES, corpus, load};
use vkllm_tokenizer::{EncodeOptions, Tokenizer};

const OPTIONS: [EncodeOptions; 4] = [
    EncodeOptions {
        add_special_tokens: true,
        parse_special: true,
    },
    EncodeOptions {
        add_special_tokens: false,
        parse_special: true,
    },
    EncodeOptions {
        add_special_tokens: true,
        parse_special: false,
    },
    EncodeOptions {
        add_special_tokens: false,
        parse_special: false,
    },
];

/// Pieces whose mixes cross every step's edge cases.
const PIECES: [&str; 34] = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<|",
    "|>",
    " ",
    "   ",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    "\u{a0}",
    "'s",
    "'S",
    "'ll",
    "'",
    "123456",
    "7",
    "a",
    "hello",
    " world",
    "Ünïcödé",
    "e\u{301}",
    "ｆｕｌｌ",
    "한국어",
    "日本語の",
    "🙂",
    "\u{200d}",
    ".",
    "...",
    "#!/usr/bin/env",
    "fn main() {",
];

/// Deterministic mixes of [`PIECES`].
fn mixes(n: usize) -> Vec<String> {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let len = 1 + (next() % 24) as usize;
            (0..len)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect()
        })
        .collect()
}

/// `fast` and `reference` (the same tokenizer with the fast path off) agree on `texts`.
fn same_ids(name: &str, fast: &Tokenizer, reference: &Tokenizer, texts: &[String]) {
    let mut bad = Vec::new();
    for text in texts {
        for opts in OPTIONS {
            let got = fast.encode(text, opts).expect("fast encode");
            let want = reference.encode(text, opts).expect("reference encode");
            if got != want {
                bad.push(format!("{text:?} {opts:?}: {got:?} != {want:?}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{name}: {} of {} encodes differ, first: {:#?}",
        bad.len(),
        texts.len() * OPTIONS.len(),
        &bad[..bad.len().min(5)]
    );
}

#[test]
fn byte_level_tokenizers_take_the_fast_path() {
    for name in NAMES {
        let want = matches!(
            name,
            "smollm2-gguf" | "qwen25coder-gguf" | "qwen3-json" | "qwen36-tiktoken"
        );
        assert_eq!(load(name).fast_encode(), want, "{name}");
    }
}

#[test]
fn fast_path_matches_the_tokenizers_pipeline() {
    let mut texts = corpus().clone();
    texts.extend(mixes(400));
    // A long text: the word cache and the splits over many pieces.
    texts.push(texts.concat());
    let fast_ones = [
        "smollm2-gguf",
        "qwen25coder-gguf",
        "qwen3-json",
        "qwen36-tiktoken",
    ];
    for name in fast_ones {
        let fast = load(name);
        let mut reference = load(name);
        reference.set_fast_encode(false);
        assert!(fast.fast_encode() && !reference.fast_encode(), "{name}");
        same_ids(name, &fast, &reference, &texts);
    }
}
