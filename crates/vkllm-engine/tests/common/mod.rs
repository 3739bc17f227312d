//! A 256-token test vocabulary: one character per id, `</s>` (id 255) the end of generation;
//! [`drive`], requests joining and leaving a generator step by step.

#![allow(dead_code)]

use vkllm_engine::{Generator, SlotParams, TokenOut};
use vkllm_tokenizer::Tokenizer;

/// The end-of-generation id of [`char_tokenizer`].
pub const EOS: u32 = 255;

/// The character of id `i < 256`: digits, letters, punctuation, then Latin-1 letters.
pub fn char_of(i: u32) -> char {
    const ASCII: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?-+*/=()[]{}<>'\"#&%$@^_|~";
    let ascii: Vec<char> = ASCII.chars().collect();
    match ascii.get(i as usize) {
        Some(&c) => c,
        None => char::from_u32(0x100 + i).expect("a Latin Extended letter"),
    }
}

/// BPE with no merges over 255 single characters plus `</s>` (special, the EOS, id 255),
/// decoded by concatenation.
pub fn char_tokenizer() -> Tokenizer {
    char_tokenizer_eos(EOS)
}

/// [`char_tokenizer`] with the EOS at id `eos` (the other ids keep their characters).
pub fn char_tokenizer_eos(eos: u32) -> Tokenizer {
    let mut vocab = serde_json::Map::new();
    for i in (0..256).filter(|&i| i != eos) {
        vocab.insert(char_of(i).to_string(), i.into());
    }
    vocab.insert("</s>".into(), eos.into());
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{"id": eos, "content": "</s>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "vocab": vocab, "merges": []}
    });
    let config = r#"{"eos_token": "</s>"}"#;
    Tokenizer::from_hf_json("chars", &json.to_string(), Some(config)).expect("test tokenizer")
}

/// The ids of `text` under [`char_tokenizer`].
pub fn ids(text: &str) -> Vec<u32> {
    text.chars()
        .map(|c| {
            (0..EOS)
                .find(|&i| char_of(i) == c)
                .expect("a test character")
        })
        .collect()
}

#[test]
fn char_tokenizer_round_trips() {
    let t = char_tokenizer();
    let text = format!("Hello, world! {}{}", char_of(100), char_of(254));
    let enc = t
        .encode(&text, vkllm_tokenizer::EncodeOptions::plain())
        .expect("encode");
    assert_eq!(enc, ids(&text));
    assert_eq!(t.decode(&enc, true).expect("decode"), text);
    assert!(t.is_eog(EOS));
    assert_eq!(t.vocab_size(), 256);
}

/// `n` ids in 3..256 from a fixed LCG (prompts for the fixture models).
pub fn lcg_ids(n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            3 + ((s >> 33) as u32) % 253
        })
        .collect()
}

/// Runs `reqs` (prompt, params, tokens wanted, the step index it joins at) on `g`: each starts
/// at its round, and ends with its tokens or when a step leaves its slot out (as the runner
/// treats a full context).
pub fn drive(
    g: &mut dyn Generator,
    reqs: &[(Vec<u32>, SlotParams, usize, usize)],
) -> Vec<Vec<TokenOut>> {
    let mut out: Vec<Vec<TokenOut>> = vec![Vec::new(); reqs.len()];
    let mut slot_of: Vec<Option<usize>> = vec![None; reqs.len()];
    let mut round = 0;
    loop {
        for (i, r) in reqs.iter().enumerate() {
            if r.3 == round && slot_of[i].is_none() && out[i].is_empty() {
                let (s, first) = g.start(&r.0, &r.1).expect("start");
                slot_of[i] = Some(s);
                out[i].push(first);
            }
        }
        let pending = reqs.iter().any(|r| r.3 > round);
        if slot_of.iter().all(Option::is_none) && !pending {
            return out;
        }
        let stepped = g.step().expect("step");
        for (i, s) in slot_of.iter_mut().enumerate() {
            if let Some(slot) = *s
                && !stepped.iter().any(|(t, _)| *t == slot)
            {
                g.release(slot);
                *s = None;
                out[i].truncate(reqs[i].2);
            }
        }
        for (s, toks) in stepped {
            let i = slot_of
                .iter()
                .position(|x| *x == Some(s))
                .expect("owned slot");
            out[i].extend(toks);
        }
        for (i, r) in reqs.iter().enumerate() {
            if let Some(s) = slot_of[i]
                && out[i].len() >= r.2
            {
                out[i].truncate(r.2);
                g.release(s);
                slot_of[i] = None;
            }
        }
        round += 1;
    }
}
