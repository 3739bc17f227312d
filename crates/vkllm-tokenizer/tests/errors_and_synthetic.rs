//! Malformed inputs give typed errors with their position (never a panic), and small synthetic
//! vocabularies tokenize as worked out by hand.

use vkllm_tokenizer::{
    EncodeOptions, GgufVocab, Tokenizer, TokenizerError, TokenizerSource, token_type,
};

/// A minimal valid tokenizer.json: BPE over "a", "b", "ab", "<s>" as a special added token.
const TINY: &str = r#"{
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [
    {"id": 3, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": null,
  "post_processor": null,
  "decoder": null,
  "model": {"type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false,
            "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3}, "merges": ["a b"]}
}"#;

#[test]
fn tiny_tokenizer_json_encodes_and_decodes() {
    let t = Tokenizer::from_hf_json("tiny", TINY, None).unwrap();
    assert_eq!(t.encode("abab", EncodeOptions::default()).unwrap(), [2, 2]);
    assert_eq!(
        t.encode("ba<s>", EncodeOptions::default()).unwrap(),
        [1, 0, 3]
    );
    assert!(t.is_special(3));
    assert!(!t.is_special(2));
    assert_eq!(t.vocab_size(), 4);
    assert!(matches!(
        t.decode(&[7], false),
        Err(TokenizerError::UnknownId {
            id: 7,
            vocab_size: 4
        })
    ));
}

#[test]
fn malformed_tokenizer_json_reports_line_and_column() {
    // Line 4: a missing comma between two keys.
    let broken = TINY.replacen("\"padding\": null,", "\"padding\": null", 1);
    match Tokenizer::from_hf_json("broken.json", &broken, None) {
        Err(TokenizerError::Json {
            what, line, column, ..
        }) => {
            assert_eq!(what, "broken.json");
            assert_eq!(line, 5);
            assert!(column > 0);
        }
        other => panic!("{other:?}"),
    }
    // Valid JSON, but not a tokenizer: the model type is unknown.
    let wrong = TINY.replacen("\"type\": \"BPE\"", "\"type\": \"NoSuchModel\"", 1);
    match Tokenizer::from_hf_json("wrong.json", &wrong, None) {
        Err(TokenizerError::Json { line, .. }) => assert!(line >= 1),
        Err(TokenizerError::TokenizerJson { .. }) => {}
        other => panic!("{other:?}"),
    }
    // Truncated file.
    match Tokenizer::from_hf_json("cut.json", &TINY[..100], None) {
        Err(TokenizerError::Json { line, .. }) => assert!(line >= 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_config_and_template_report_positions() {
    let config = "{\n  \"eos_token\": \"<s>\",\n  \"chat_template\": 5\n}";
    assert!(matches!(
        Tokenizer::from_hf_json("tiny", TINY, Some(config)),
        Err(TokenizerError::BadKey { key, .. }) if key == "chat_template"
    ));
    let config = "{\n  \"eos_token\": \"<s>\"\n  \"x\": 1\n}";
    assert!(matches!(
        Tokenizer::from_hf_json("tiny", TINY, Some(config)),
        Err(TokenizerError::Json { line: 3, .. })
    ));
    let config = r#"{"chat_template": "{% for m in messages %}\n{{ m.content }\n{% endfor %}"}"#;
    assert!(matches!(
        Tokenizer::from_hf_json("tiny", TINY, Some(config)),
        Err(TokenizerError::TemplateSyntax { line: 2, .. })
    ));
    // A good config: eos from it, the template works.
    let config = r#"{"eos_token": "<s>", "chat_template": "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"}"#;
    let t = Tokenizer::from_hf_json("tiny", TINY, Some(config)).unwrap();
    assert_eq!(t.special_ids().eos, Some(3));
    assert!(t.is_eog(3));
    let msgs = serde_json::json!([{"role": "user", "content": "ab"}]);
    let prompt = t
        .apply_chat_template(&msgs, &vkllm_tokenizer::RenderOptions::default())
        .unwrap();
    assert_eq!(prompt, "ab<s>");
    assert_eq!(
        t.encode_chat(&msgs, &vkllm_tokenizer::RenderOptions::default())
            .unwrap(),
        [2, 3]
    );
}

#[test]
fn named_templates_pick_tool_use_when_tools_are_given() {
    let config = r#"{"chat_template": [
        {"name": "default", "template": "plain:{{ messages[0].content }}"},
        {"name": "tool_use", "template": "tools:{{ tools|length }}:{{ messages[0].content }}"}
    ]}"#;
    let t = Tokenizer::from_hf_json("tiny", TINY, Some(config)).unwrap();
    let msgs = serde_json::json!([{"role": "user", "content": "ab"}]);
    let mut opts = vkllm_tokenizer::RenderOptions::default();
    assert_eq!(t.apply_chat_template(&msgs, &opts).unwrap(), "plain:ab");
    opts.tools = Some(serde_json::json!([{"type": "function"}]));
    assert_eq!(t.apply_chat_template(&msgs, &opts).unwrap(), "tools:1:ab");
}

#[test]
fn bad_gguf_files_and_vocabularies_are_typed_errors() {
    let dir = std::env::temp_dir().join(format!("vkllm-tok-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("garbage.gguf");
    std::fs::write(&path, b"GGUF\x03\x00\x00\x00not really").unwrap();
    assert!(matches!(
        Tokenizer::from_path(&path),
        Err(TokenizerError::Gguf { .. })
    ));
    std::fs::remove_dir_all(&dir).ok();

    let mut v = byte_level_vocab();
    v.pre = Some("no-such-pre".into());
    assert!(matches!(
        Tokenizer::from_gguf_vocab(&v),
        Err(TokenizerError::Unsupported {
            kind: "tokenizer.ggml.pre",
            ..
        })
    ));
    let mut v = byte_level_vocab();
    v.model = "bert".into();
    assert!(matches!(
        Tokenizer::from_gguf_vocab(&v),
        Err(TokenizerError::Unsupported {
            kind: "tokenizer.ggml.model",
            ..
        })
    ));
    let mut v = byte_level_vocab();
    v.token_types = Some(vec![1; 3]);
    assert!(matches!(
        Tokenizer::from_gguf_vocab(&v),
        Err(TokenizerError::BadKey { key, .. }) if key == "tokenizer.ggml.token_type"
    ));
    let mut v = byte_level_vocab();
    v.eos = Some(1_000_000);
    assert!(matches!(
        Tokenizer::from_gguf_vocab(&v),
        Err(TokenizerError::BadKey { key, .. }) if key == "tokenizer.ggml.eos_token_id"
    ));
    let mut v = byte_level_vocab();
    v.merges = Some(vec!["nospace".into()]);
    assert!(matches!(
        Tokenizer::from_gguf_vocab(&v),
        Err(TokenizerError::BadKey { key, .. }) if key == "tokenizer.ggml.merges"
    ));
}

/// GPT-2's byte alphabet (256 tokens), then "Ġa" (256), "ab" (257), "<|end|>" (258, control),
/// "<x>" (259, user-defined).
fn byte_level_vocab() -> GgufVocab {
    let mut tokens = Vec::new();
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
        tokens.push(if printable {
            (b as char).to_string()
        } else {
            let c = char::from_u32(256 + n).unwrap();
            n += 1;
            c.to_string()
        });
    }
    tokens.extend([
        "\u{120}a".into(),
        "ab".into(),
        "<|end|>".into(),
        "<x>".into(),
    ]);
    let mut types = vec![token_type::NORMAL; 258];
    types.push(token_type::CONTROL);
    types.push(token_type::USER_DEFINED);
    GgufVocab {
        architecture: "llama".into(),
        model: "gpt2".into(),
        pre: Some("qwen2".into()),
        tokens,
        token_types: Some(types),
        merges: Some(vec!["\u{120} a".into(), "a b".into()]),
        eos: Some(258),
        path: "synthetic".into(),
        ..GgufVocab::default()
    }
}

#[test]
fn synthetic_byte_level_vocabulary() {
    let t = Tokenizer::from_gguf_vocab(&byte_level_vocab()).unwrap();
    assert!(matches!(t.source(), TokenizerSource::Gguf { .. }));
    // qwen2 split: " a" | "b" | "<|end|>" (special) | "<x>" (user-defined) | "ab"
    // " a" -> Ġa (256); "ab" -> ab (257); ASCII bytes are their own ids.
    let ids = t
        .encode(" ab<|end|><x>ab", EncodeOptions::default())
        .unwrap();
    assert_eq!(ids, [256, b'b' as u32, 258, 259, 257]);
    // Plain text: the control token is spelled out, the user-defined one still whole.
    let plain = t.encode(" ab<|end|><x>ab", EncodeOptions::plain()).unwrap();
    assert_eq!(
        plain,
        [
            256,
            b'b' as u32,
            b'<' as u32,
            b'|' as u32,
            b'e' as u32,
            b'n' as u32,
            b'd' as u32,
            b'|' as u32,
            b'>' as u32,
            259,
            257
        ]
    );
    assert_eq!(t.decode(&ids, false).unwrap(), " ab<|end|><x>ab");
    assert_eq!(t.decode(&ids, true).unwrap(), " ab<x>ab");
    assert_eq!(t.eog_ids().iter().copied().collect::<Vec<_>>(), [258]);
    // NFC (qwen2): "e" + U+0301 becomes "é" = bytes C3 A9 -> their byte tokens.
    let e = t.encode("e\u{301}", EncodeOptions::default()).unwrap();
    assert_eq!(e, [0xc3, 0xa9]);
}

#[test]
fn add_bos_and_add_eos_flags() {
    let mut v = byte_level_vocab();
    v.bos = Some(259);
    v.add_bos = Some(true);
    v.add_eos = Some(true);
    let t = Tokenizer::from_gguf_vocab(&v).unwrap();
    assert_eq!(
        t.encode("a", EncodeOptions::default()).unwrap(),
        [259, 97, 258]
    );
    assert_eq!(t.encode("a", EncodeOptions::plain()).unwrap(), [97]);
    // Byte-level vocabularies add nothing unless the file says so.
    let t = Tokenizer::from_gguf_vocab(&byte_level_vocab()).unwrap();
    assert_eq!(t.encode("a", EncodeOptions::default()).unwrap(), [97]);
}

#[test]
fn incremental_decoder_holds_split_characters() {
    let t = Tokenizer::from_gguf_vocab(&byte_level_vocab()).unwrap();
    // "é" is two byte tokens: nothing after the first, the whole character after the second.
    let mut d = t.incremental_decoder(false);
    assert_eq!(d.push(0xc3).unwrap(), None);
    assert_eq!(d.push(0xa9).unwrap().as_deref(), Some("é"));
    assert_eq!(d.push(b'!' as u32).unwrap().as_deref(), Some("!"));
    // A dangling lead byte comes out as U+FFFD only at flush.
    assert_eq!(d.push(0xe4).unwrap(), None);
    assert_eq!(d.flush().unwrap(), "\u{FFFD}");
    assert_eq!(d.len(), 4);
}
