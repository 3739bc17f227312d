//! Encode/decode parity with transformers (and tiktoken) on the whole corpus, for every
//! tokenizer the fixtures cover; and streaming decode, token by token, against full decode.

mod common;

use common::{corpus, ids, read_fixture, tokenizer};
use vkllm_tokenizer::{EncodeOptions, TokenBytes};

/// Compares every case; panics listing the first mismatches and the count.
fn check_encode(name: &str) {
    let tok = tokenizer(name);
    let fixture = read_fixture(&format!("encode_{name}.json"));
    let texts = corpus();
    let cases = fixture["cases"].as_array().expect("cases");
    assert_eq!(
        cases.len(),
        texts.len(),
        "{name}: one case per corpus string"
    );
    let mut failures = Vec::new();
    let mut roundtrips = 0;
    for case in cases {
        let i = case["i"].as_u64().expect("i") as usize;
        let text = &texts[i];
        let want = ids(&case["ids"]);
        let want_plain = ids(&case["plain"]);
        let want_decoded = case["decoded"].as_str().unwrap_or(text);
        let want_skip = case["decoded_skip"].as_str().unwrap_or(want_decoded);
        let got = tok.encode(text, EncodeOptions::default()).expect("encode");
        let got_plain = tok
            .encode(text, EncodeOptions::plain())
            .expect("encode plain");
        let decoded = tok.decode(&want, false).expect("decode");
        let skipped = tok.decode(&want, true).expect("decode skip");
        let mut what = Vec::new();
        if got != want {
            what.push(format!("ids {got:?} != {want:?}"));
        }
        if got_plain != want_plain {
            what.push(format!("plain ids {got_plain:?} != {want_plain:?}"));
        }
        if decoded != want_decoded {
            what.push(format!("decode {decoded:?} != {want_decoded:?}"));
        }
        if skipped != want_skip {
            what.push(format!("decode(skip) {skipped:?} != {want_skip:?}"));
        }
        if want_skip == text && skipped == *text {
            roundtrips += 1;
        }
        if !what.is_empty() {
            failures.push(format!("#{i} {text:?}: {}", what.join("; ")));
        }
    }
    eprintln!(
        "{name}: {}/{} strings match; decode(encode(x)) == x on {roundtrips}",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{name}: {} of {} strings differ from the reference:\n{}",
        failures.len(),
        cases.len(),
        failures
            .iter()
            .take(12)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Streams every corpus string's reference ids through an IncrementalDecoder one token at a
/// time: each piece is whole text (no U+FFFD from a split character unless the full decode has
/// one there) and the pieces concatenate to the full decode.
fn check_stream(name: &str) {
    let tok = tokenizer(name);
    let fixture = read_fixture(&format!("encode_{name}.json"));
    let texts = corpus();
    let mut failures = Vec::new();
    for case in fixture["cases"].as_array().expect("cases") {
        let i = case["i"].as_u64().expect("i") as usize;
        let want = ids(&case["ids"]);
        for skip in [false, true] {
            let full = tok.decode(&want, skip).expect("decode");
            let mut dec = tok.incremental_decoder(skip);
            let mut pieces = Vec::new();
            for &id in &want {
                if let Some(p) = dec.push(id).expect("push") {
                    pieces.push(p);
                }
            }
            let tail = dec.flush().expect("flush");
            let streamed: String = pieces.concat() + &tail;
            let fffd_in_full = full.matches('\u{FFFD}').count();
            let fffd_streamed = pieces
                .iter()
                .map(|p| p.matches('\u{FFFD}').count())
                .sum::<usize>()
                + tail.matches('\u{FFFD}').count();
            if streamed != full || fffd_streamed != fffd_in_full {
                failures.push(format!(
                    "#{i} {:?} skip={skip}: streamed {streamed:?} != {full:?}",
                    texts[i]
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: streaming differs on {}:\n{}",
        failures.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `Tokenizer::token_bytes` (what structured outputs build their token trie from): the bytes
/// of every reference id sequence, special tokens left out, are the text its decode gives
/// (SentencePiece vocabularies may keep the leading space their decoder strips).
fn check_bytes(name: &str) {
    let tok = tokenizer(name);
    let bytes = tok.token_bytes().expect("token bytes");
    assert_eq!(bytes.len(), tok.vocab_size());
    let fixture = read_fixture(&format!("encode_{name}.json"));
    let mut checked = 0;
    for case in fixture["cases"].as_array().expect("cases") {
        let want = ids(&case["ids"]);
        let mut got = Vec::new();
        for &id in &want {
            match &bytes[id as usize] {
                TokenBytes::Text(b) => got.extend_from_slice(b),
                TokenBytes::Special(s) => assert!(tok.is_special(id), "{name}: {id} {s}"),
            }
        }
        let decoded = tok.decode(&want, true).expect("decode");
        let got = String::from_utf8_lossy(&got);
        assert!(
            got == decoded || got.strip_prefix(' ') == Some(decoded.as_str()),
            "{name}: bytes of {want:?} give {got:?}, decode {decoded:?}"
        );
        checked += 1;
    }
    assert!(checked > 10, "{name}: only {checked} cases");
}

macro_rules! parity_tests {
    ($($fn_enc:ident, $fn_stream:ident, $fn_bytes:ident => $name:literal;)*) => {$(
        #[test]
        fn $fn_enc() {
            check_encode($name);
        }

        #[test]
        fn $fn_bytes() {
            check_bytes($name);
        }

        #[test]
        fn $fn_stream() {
            check_stream($name);
        }
    )*};
}

parity_tests! {
    smollm2_gguf_encode, smollm2_gguf_stream, smollm2_gguf_bytes => "smollm2-gguf";
    qwen25coder_gguf_encode, qwen25coder_gguf_stream, qwen25coder_gguf_bytes => "qwen25coder-gguf";
    gemma3_gguf_encode, gemma3_gguf_stream, gemma3_gguf_bytes => "gemma3-gguf";
    gemma3_json_encode, gemma3_json_stream, gemma3_json_bytes => "gemma3-json";
    qwen3_json_encode, qwen3_json_stream, qwen3_json_bytes => "qwen3-json";
    qwen36_tiktoken_encode, qwen36_tiktoken_stream, qwen36_tiktoken_bytes => "qwen36-tiktoken";
}
