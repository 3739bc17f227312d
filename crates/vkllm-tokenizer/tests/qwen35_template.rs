//! The built-in Qwen3.5 chat template (Qwen3.5's published one, docs/chat-templates.md): ChatML turns,
//! thinking on by default (the assistant turn opens with `<think>\n`), `enable_thinking=false`
//! closes an empty think block, reasoning of earlier turns dropped from the history. Expected
//! strings are written out from that format by hand.

use serde_json::json;
use vkllm_tokenizer::chat::builtin_template;
use vkllm_tokenizer::{ChatTemplate, RenderOptions, TemplateOrigin};

fn qwen35() -> ChatTemplate {
    let (name, src) = builtin_template("qwen35").expect("qwen35 is in the table");
    assert_eq!(name, "qwen3_5");
    assert_eq!(builtin_template("qwen35moe").map(|t| t.0), Some("qwen3_5"));
    ChatTemplate::new(
        name,
        src,
        TemplateOrigin::Builtin {
            family: name.into(),
        },
        vec![],
    )
    .expect("template compiles")
}

fn opts(thinking: Option<bool>) -> RenderOptions {
    let mut o = RenderOptions::generation(true);
    if let Some(t) = thinking {
        o.kwargs.insert("enable_thinking".into(), json!(t));
    }
    o
}

#[test]
fn thinking_on_by_default_and_off_on_request() {
    let t = qwen35();
    let m = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"}
    ]);
    let head = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n";
    let on = format!("{head}<|im_start|>assistant\n<think>\n");
    assert_eq!(t.render(&m, &opts(None)).expect("render"), on);
    assert_eq!(t.render(&m, &opts(Some(true))).expect("render"), on);
    assert_eq!(
        t.render(&m, &opts(Some(false))).expect("render"),
        format!("{head}<|im_start|>assistant\n<think>\n\n</think>\n\n")
    );
    // Without a generation prompt nothing is opened.
    assert_eq!(
        t.render(&m, &RenderOptions::generation(false))
            .expect("render"),
        head
    );
}

#[test]
fn earlier_reasoning_is_dropped_from_the_history() {
    let t = qwen35();
    let m = json!([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nsay hello\n</think>\n\nHello!"},
        {"role": "user", "content": "Bye"}
    ]);
    assert_eq!(
        t.render(&m, &opts(Some(false))).expect("render"),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n\
         <|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
}
