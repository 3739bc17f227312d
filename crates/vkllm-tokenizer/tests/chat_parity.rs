//! Chat templates rendered byte-identical to transformers' `apply_chat_template`, prompt ids
//! identical, and template errors (raise_exception) where transformers raises.

mod common;

use common::{ids, read_fixture, tokenizer};
use serde_json::{Map, Value as Json};
use vkllm_tokenizer::{RenderOptions, TemplateOrigin, TokenizerError};

/// Strings of `v` (all but `role` values).
fn strings<'a>(v: &'a Json, out: &mut Vec<&'a str>) {
    match v {
        Json::String(s) => out.push(s),
        Json::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Json::Object(o) => o
            .iter()
            .filter(|(k, _)| k.as_str() != "role")
            .for_each(|(_, x)| strings(x, out)),
        _ => {}
    }
}

/// `encode_chat` (special spellings in messages stay text): the same text as the rendered
/// prompt, and as many control tokens as transformers' ids less one per spelling in the
/// messages; the same ids as transformers' when the messages spell none.
fn check_guarded(
    tok: &vkllm_tokenizer::Tokenizer,
    messages: &Json,
    opts: &RenderOptions,
    parsed: &[u32],
    rendered: &str,
) -> Result<(), String> {
    let guarded = tok.encode_chat(messages, opts).map_err(|e| e.to_string())?;
    let text = tok.decode(&guarded, false).map_err(|e| e.to_string())?;
    let want_text = tok.decode(parsed, false).map_err(|e| e.to_string())?;
    if text != want_text || text != rendered {
        return Err(format!("guarded text differs: {text:?}"));
    }
    let mut texts = Vec::new();
    strings(messages, &mut texts);
    let spelled: usize = tok
        .special_spellings()
        .iter()
        .map(|sp| {
            texts
                .iter()
                .map(|t| t.matches(sp.as_str()).count())
                .sum::<usize>()
        })
        .sum();
    let specials = |ids: &[u32]| ids.iter().filter(|&&i| tok.is_special(i)).count();
    if specials(&guarded) + spelled != specials(parsed) {
        return Err(format!(
            "{} control tokens guarded, {} parsed, {spelled} spelled in the messages",
            specials(&guarded),
            specials(parsed)
        ));
    }
    if spelled == 0 && guarded != parsed {
        return Err("guarded ids differ with no special spelled".into());
    }
    Ok(())
}

fn check_chat(name: &str) {
    let tok = tokenizer(name);
    let convs = read_fixture("chat_conversations.json");
    let fixture = read_fixture(&format!("chat_{name}.json"));
    let mut failures = Vec::new();
    let cases = fixture["cases"].as_array().expect("cases");
    for (k, case) in cases.iter().enumerate() {
        let conv_name = case["conversation"].as_str().expect("conversation");
        let conv = &convs["conversations"][conv_name];
        let opts = RenderOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().expect("flag"),
            tools: conv.get("tools").cloned(),
            documents: None,
            kwargs: case["kwargs"].as_object().cloned().unwrap_or_else(Map::new),
            continue_final_message: false,
        };
        let label = format!(
            "case {k} ({conv_name}, gen={}, {:?})",
            opts.add_generation_prompt, opts.kwargs
        );
        let got = tok.apply_chat_template(&conv["messages"], &opts);
        match (&case["rendered"], &case["error"], got) {
            (Json::String(want), _, Ok(got)) => {
                if &got != want {
                    failures.push(format!("{label}: rendered\n{got:?}\nwant\n{want:?}"));
                } else if let Some(want_ids) = case.get("ids") {
                    // transformers parses specials everywhere: the option that does the same.
                    let parsed = tok
                        .encode_chat_parsing_specials(&conv["messages"], &opts)
                        .expect("encode_chat_parsing_specials");
                    if parsed != ids(want_ids) {
                        failures.push(format!("{label}: prompt ids differ"));
                    }
                    if let Err(e) = check_guarded(tok, &conv["messages"], &opts, &parsed, &got) {
                        failures.push(format!("{label}: {e}"));
                    }
                }
            }
            (Json::String(_), _, Err(e)) => failures.push(format!("{label}: error {e}")),
            (_, Json::Object(err), Ok(got)) => failures.push(format!(
                "{label}: rendered {got:?} but transformers raised {err:?}"
            )),
            (_, Json::Object(err), Err(e)) => {
                let want_msg = err["message"].as_str().unwrap_or_default();
                if err["type"] == "TemplateError" {
                    match &e {
                        TokenizerError::TemplateRaised { message, .. } if message == want_msg => {}
                        other => failures.push(format!(
                            "{label}: want raise_exception({want_msg:?}), got {other}"
                        )),
                    }
                }
            }
            (r, e, _) => panic!("{label}: fixture has neither rendered nor error: {r} {e}"),
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} chat cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn smollm2_gguf_chat() {
    check_chat("smollm2-gguf");
}

#[test]
fn qwen25coder_gguf_chat() {
    check_chat("qwen25coder-gguf");
}

#[test]
fn qwen3_json_chat() {
    check_chat("qwen3-json");
}

#[test]
fn gemma3_json_chat() {
    check_chat("gemma3-json");
}

/// Qwen3.5/3.6 (vocabulary in tiktoken form, no template with it): the built-in `qwen3_5`
/// template is the published one, so its renderings and ids are transformers' (tools in the
/// XML `<function=...>` format, thinking on by default, earlier reasoning dropped).
#[test]
fn qwen36_tiktoken_chat_with_the_builtin_template() {
    let tok = tokenizer("qwen36-tiktoken");
    let t = tok.chat_template().expect("the built-in qwen3_5 template");
    assert_eq!(t.name(), "qwen3_5");
    check_chat("qwen36-tiktoken");
}

#[test]
fn gemma3_gguf_chat_uses_the_builtin_family_template() {
    let tok = tokenizer("gemma3-gguf");
    let t = tok.chat_template().expect("a built-in template");
    assert_eq!(
        t.origin(),
        &TemplateOrigin::Builtin {
            family: "gemma3".into()
        }
    );
    check_chat("gemma3-gguf");
}

#[test]
fn end_of_generation_sets() {
    // The ids are those of the models' published vocabularies (their tokenizer_config /
    // generation_config): EOS plus each family's end-of-turn marker.
    let want: [(&str, &[u32]); 6] = [
        // <|endoftext|> 0, <|im_end|> 2
        ("smollm2-gguf", &[0, 2]),
        // <|endoftext|> 151643, <|im_end|> 151645
        ("qwen25coder-gguf", &[151643, 151645]),
        ("qwen3-json", &[151643, 151645]),
        // <eos> 1, <end_of_turn> 106
        ("gemma3-gguf", &[1, 106]),
        ("gemma3-json", &[1, 106]),
        // <|endoftext|> 248044, <|im_end|> 248046
        ("qwen36-tiktoken", &[248044, 248046]),
    ];
    for (name, ids) in want {
        let got: Vec<u32> = tokenizer(name).eog_ids().iter().copied().collect();
        assert_eq!(got, ids, "{name}");
    }
}
