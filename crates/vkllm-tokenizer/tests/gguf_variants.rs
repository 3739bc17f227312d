//! GGUF vocabularies through the other pre-tokenizer paths and a non-Gemma SentencePiece
//! vocabulary, against transformers' GGUF loader on the same corpus.

mod common;

use common::{corpus, fetched, ids, read_fixture};
use serde_json::Value as Json;
use vkllm_tokenizer::{EncodeOptions, GgufVocab, Tokenizer};

fn compare_ids(name: &str, tok: &Tokenizer, want: &[Json]) {
    let texts = corpus();
    assert_eq!(
        want.len(),
        texts.len(),
        "{name}: one entry per corpus string"
    );
    let mut failures = Vec::new();
    for (i, (text, w)) in texts.iter().zip(want).enumerate() {
        let got = tok.encode(text, EncodeOptions::default()).expect("encode");
        if got != ids(w) {
            failures.push(format!("#{i} {text:?}: {got:?} != {w}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} differ:\n{}",
        failures.len(),
        texts.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn with_pre(known: &str, pre: &str) -> Tokenizer {
    let mut v = GgufVocab::from_file(&fetched(known)).expect("read GGUF");
    v.pre = Some(pre.to_string());
    Tokenizer::from_gguf_vocab(&v).expect("build")
}

#[test]
fn smollm2_vocabulary_with_gpt2_pre() {
    let f = read_fixture("encode_smollm2-gguf-pre-gpt2.json");
    compare_ids(
        "smollm2 pre=gpt2",
        &with_pre("smollm2", "gpt2"),
        f["ids"].as_array().unwrap(),
    );
}

#[test]
fn qwen25_vocabulary_with_llama_bpe_pre() {
    let f = read_fixture("encode_qwen25coder-gguf-pre-llama-bpe.json");
    compare_ids(
        "qwen2.5 pre=llama-bpe",
        &with_pre("qwen25coder", "llama-bpe"),
        f["ids"].as_array().unwrap(),
    );
}

fn synthetic_spm() -> (Json, Tokenizer) {
    let f = read_fixture("encode_synthetic-spm.json");
    let v = &f["vocab"];
    let strings = |k: &str| -> Vec<String> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let vocab = GgufVocab {
        architecture: v["architecture"].as_str().unwrap().into(),
        model: v["model"].as_str().unwrap().into(),
        tokens: strings("tokens"),
        scores: Some(
            v["scores"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect(),
        ),
        token_types: Some(
            v["token_types"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap() as i32)
                .collect(),
        ),
        bos: Some(v["bos"].as_u64().unwrap() as u32),
        eos: Some(v["eos"].as_u64().unwrap() as u32),
        unk: Some(v["unk"].as_u64().unwrap() as u32),
        add_bos: v["add_bos"].as_bool(),
        path: "synthetic-spm".into(),
        ..GgufVocab::default()
    };
    let tok = Tokenizer::from_gguf_vocab(&vocab).expect("build");
    (f, tok)
}

#[test]
fn synthetic_sentencepiece_vocabulary() {
    let (f, tok) = synthetic_spm();
    compare_ids("synthetic spm", &tok, f["ids"].as_array().unwrap());
    let texts = corpus();
    let mut failures = Vec::new();
    for (i, w) in f["ids"].as_array().unwrap().iter().enumerate() {
        let w = ids(w);
        for (skip, key) in [(false, "decoded"), (true, "decoded_skip")] {
            let want = f[key][i].as_str().unwrap();
            let got = tok.decode(&w, skip).unwrap();
            if got != want {
                failures.push(format!("#{i} {:?} {key}: {got:?} != {want:?}", texts[i]));
            }
            // Streaming, token by token, gives the same text.
            let mut d = tok.incremental_decoder(skip);
            let streamed = d.push_all(&w).unwrap() + &d.flush().unwrap();
            if streamed != got {
                failures.push(format!("#{i} streamed {streamed:?} != {got:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures[..failures.len().min(10)].join("\n")
    );
}
