//! The facade on the real SmolLM2 (scripts/fetch-models.sh): a cached model opened by name
//! gives transformers' greedy tokens for a raw prompt (fixtures/real golden) on the CPU and on
//! the Vulkan device (lavapipe in CI), a chat through the template answers, a JSON Schema
//! constrains the answer, the fetcher's model names resolve, and a name that is neither a file
//! nor a known model is an error.

use vkllm::{Error, GrammarSpec, Llm, Message, Options, Params, Where};

fn golden() -> (String, Vec<u32>) {
    let dir = std::env::var_os("VKLLM_FIXTURES").map_or_else(
        || std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures")),
        Into::into,
    );
    let text = std::fs::read_to_string(dir.join("real/smollm2-135m.json")).expect("golden");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let case = &doc["cases"][0];
    let margins: Vec<f64> = case["margins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_f64().unwrap())
        .collect();
    assert!(margins[..4].iter().all(|&m| m >= 0.05), "unambiguous steps");
    let ids = case["greedy"].as_array().unwrap()[..4]
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    (case["prompt"].as_str().unwrap().to_string(), ids)
}

#[test]
fn greedy_raw_prompts_match_transformers_on_every_device() {
    let (prompt, want_ids) = golden();
    for device in [Where::Cpu, Where::Gpu] {
        let mut llm = Llm::open(
            "smollm2",
            &Options {
                device: device.clone(),
                ctx: 512,
                ..Options::default()
            },
        )
        .expect("open smollm2 (scripts/fetch-models.sh smollm2)");
        let want = llm.tokenizer().decode(&want_ids, false).unwrap();
        let mut streamed = String::new();
        let a = llm
            .generate(&prompt, &Params::greedy(4), |t| streamed.push_str(t))
            .expect("generate");
        assert_eq!(a.text, want, "{device:?}");
        assert_eq!(streamed, a.text, "{device:?}: stream vs answer");
        assert_eq!(a.usage.generated_tokens, 4);
    }
}

#[test]
fn chats_and_structured_answers() {
    let mut llm = Llm::open(
        "smollm2",
        &Options {
            device: Where::Cpu,
            ctx: 512,
            ..Options::default()
        },
    )
    .expect("open");
    let a = llm
        .chat(
            &[Message::user("What is the capital of France?")],
            &Params::greedy(12),
            |_| {},
        )
        .expect("chat");
    assert!(a.text.contains("Paris"), "{:?}", a.text);
    let p = Params {
        format: Some(GrammarSpec::JsonSchema(serde_json::json!({
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}},
            "required": ["city"], "additionalProperties": false
        }))),
        max_tokens: 60,
        ..Params::default()
    };
    let a = llm
        .chat(
            &[Message::user("The capital of France, as JSON?")],
            &p,
            |_| {},
        )
        .expect("structured chat");
    let v: serde_json::Value = serde_json::from_str(&a.text).expect("JSON");
    assert!(v["city"].is_string(), "{v}");
    // A bad schema is a typed error, not a panic.
    let bad = Params {
        format: Some(GrammarSpec::JsonSchema(serde_json::json!({"type": "nope"}))),
        ..Params::default()
    };
    assert!(matches!(
        llm.chat(&[Message::user("x")], &bad, |_| {}),
        Err(Error::Engine(_))
    ));
    // Model names resolve through the fetcher's table (cached here: nothing is downloaded).
    for name in ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"] {
        let p = vkllm::resolve(name, "python3".as_ref()).expect(name);
        assert!(p.is_file(), "{name}: {}", p.display());
    }
    match Llm::open("no-such-model-xyz", &Options::default()) {
        Err(Error::NotFound { name, .. }) => assert_eq!(name, "no-such-model-xyz"),
        other => panic!("{:?}", other.err()),
    }
}
