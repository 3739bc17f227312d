//! Template behaviour checked against what Jinja2 under transformers 5.24 renders (the expected
//! strings were produced by transformers' `_compile_jinja_template(...).render(...)`).

use serde_json::json;

use super::*;

fn template(src: &str) -> ChatTemplate {
    ChatTemplate::new("t", src, TemplateOrigin::User("test".into()), vec![])
        .unwrap_or_else(|e| panic!("{e}"))
}

fn render_ctx(src: &str, messages: Json, opts: RenderOptions) -> Result<String> {
    template(src).render(&messages, &opts)
}

#[test]
fn python_semantics_match_jinja2_under_transformers() {
    let src = "{{ none }}|{{ true }}|{{ 1.0 }}|{{ x }}|{{ 'a  '.strip() }}|{{ tools is none }}|\
{% for i in [1,2,3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}|{{ [3,2,1][::-1] }}|\
{{ {'a': \"<&'>\"}|tojson }}|{{ y|tojson(indent=2) }}|{{ \"%s-%d\"|format(\"a\", 3) }}|{{ 7 // 2 }}|\
{{ 2 ** 10 }}|{{ \"x\" * 3 }}|{{ 'A,B'.split(',') }}|{{ 'abc'.upper() }}|{{ 1 / 2 }}\n  {%- if true %}\n    line\n  {%- endif %}\n";
    let mut opts = RenderOptions::default();
    opts.kwargs
        .insert("x".into(), json!({"a": [1, null, "it's"]}));
    opts.kwargs.insert("y".into(), json!([1, {"b": 2}]));
    let got = render_ctx(src, json!([{"role": "user", "content": "hi"}]), opts).unwrap();
    let want = "None|True|1.0|{'a': [1, None, \"it's\"]}|a|True|1|[1, 2, 3]|{\"a\": \"<&'>\"}|\
[\n  1,\n  {\n    \"b\": 2\n  }\n]|a-3|3|1024|xxx|['A', 'B']|ABC|0.5    line";
    assert_eq!(got, want);
}

#[test]
fn messages_are_normalized_like_transformers() {
    // transformers drops null keys and aliases reasoning fields:
    // {'thinking': 'r', 'role': 'assistant', 'content': 'x', 'reasoning': 'r',
    //  'reasoning_content': 'r'}
    let got = render_ctx(
        "{{ messages[0]|tojson }}",
        json!([{"role": "assistant", "content": "x", "reasoning": "r", "extra": null}]),
        RenderOptions::default(),
    )
    .unwrap();
    assert_eq!(
        got,
        r#"{"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r", "reasoning_content": "r"}"#
    );
}

#[test]
fn generation_blocks_render_their_body() {
    let src = "A{% generation %}B{% endgeneration %}C {%- generation -%} D {%- endgeneration -%} E";
    assert_eq!(
        rewrite_generation_tags(src),
        "A{% if true %}B{% endif %}C {%- if true -%} D {%- endif -%} E"
    );
    let got = render_ctx(src, json!([{"role": "user"}]), RenderOptions::default()).unwrap();
    assert_eq!(got, "ABCDE");
}

#[test]
fn raise_exception_is_a_typed_error_with_its_message() {
    let src = "{% macro check(m) %}{{ raise_exception('bad role: ' + m.role) }}{% endmacro %}\
{% for m in messages %}{{ check(m) }}{% endfor %}";
    match render_ctx(src, json!([{"role": "robot"}]), RenderOptions::default()) {
        Err(TokenizerError::TemplateRaised { message, .. }) => {
            assert_eq!(message, "bad role: robot")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn syntax_errors_carry_their_line() {
    let src = "line one\n{% if messages %}\n{{ messages[0].content }\n{% endif %}";
    match ChatTemplate::new("broken", src, TemplateOrigin::User("test".into()), vec![]) {
        Err(TokenizerError::TemplateSyntax { name, line, .. }) => {
            assert_eq!(name, "broken");
            assert_eq!(line, 3);
        }
        other => panic!("{other:?}"),
    }
    let src = "ok\n{% for x in messages %}\n{{ x }}\n";
    assert!(matches!(
        ChatTemplate::new("unclosed", src, TemplateOrigin::User("test".into()), vec![]),
        Err(TokenizerError::TemplateSyntax { .. })
    ));
}

#[test]
fn render_errors_carry_their_line() {
    // Calling an unknown method on line 2.
    let src = "first\n{{ messages[0].content.no_such_method() }}";
    match render_ctx(
        src,
        json!([{"role": "user", "content": "x"}]),
        RenderOptions::default(),
    ) {
        Err(TokenizerError::TemplateRender { line, .. }) => assert_eq!(line, 2),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_messages_are_rejected() {
    let t = template("{{ messages }}");
    for bad in [json!({"role": "user"}), json!([]), json!(["text"])] {
        assert!(matches!(
            t.render(&bad, &RenderOptions::default()),
            Err(TokenizerError::BadMessages { .. })
        ));
    }
}

#[test]
fn special_tokens_are_template_variables_and_kwargs_override_them() {
    let t = ChatTemplate::new(
        "t",
        "{{ bos_token }}{{ eos_token }}",
        TemplateOrigin::User("test".into()),
        vec![
            ("bos_token".into(), "<s>".into()),
            ("eos_token".into(), "</s>".into()),
        ],
    )
    .unwrap();
    let msgs = json!([{"role": "user", "content": "x"}]);
    assert_eq!(
        t.render(&msgs, &RenderOptions::default()).unwrap(),
        "<s></s>"
    );
    let mut opts = RenderOptions::default();
    opts.kwargs.insert("eos_token".into(), json!("<end>"));
    assert_eq!(t.render(&msgs, &opts).unwrap(), "<s><end>");
}

#[test]
fn builtin_table_knows_the_families() {
    for fam in BUILTIN_FAMILIES {
        let (name, src) = builtin_template(fam).unwrap();
        ChatTemplate::new(
            name,
            src,
            TemplateOrigin::Builtin {
                family: name.into(),
            },
            vec![],
        )
        .unwrap_or_else(|e| panic!("{fam}: {e}"));
    }
    assert_eq!(builtin_template("gemma3").unwrap().0, "gemma3");
    assert!(builtin_template("no-such-family").is_none());
}

#[test]
fn continue_final_message_leaves_the_turn_open() {
    // transformers' apply_chat_template(m, continue_final_message=True) on these templates.
    let m = json!([
        {"role": "user", "content": "Write a haiku."},
        {"role": "assistant", "content": "Autumn moonlight  "}
    ]);
    let opts = RenderOptions {
        continue_final_message: true,
        ..RenderOptions::default()
    };
    let (_, qwen3) = builtin_template("qwen3").unwrap();
    let got = template(qwen3).render(&m, &opts).unwrap();
    assert_eq!(
        got,
        "<|im_start|>user\nWrite a haiku.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nAutumn moonlight  "
    );
    let (_, gemma3) = builtin_template("gemma3").unwrap();
    let t = ChatTemplate::new(
        "g",
        gemma3,
        TemplateOrigin::User("test".into()),
        vec![("bos_token".into(), "<bos>".into())],
    )
    .unwrap();
    assert_eq!(
        t.render(&m, &opts).unwrap(),
        "<bos><start_of_turn>user\nWrite a haiku.<end_of_turn>\n<start_of_turn>model\nAutumn moonlight"
    );
    let both = RenderOptions {
        continue_final_message: true,
        add_generation_prompt: true,
        ..RenderOptions::default()
    };
    assert!(matches!(
        template(qwen3).render(&m, &both),
        Err(TokenizerError::BadMessages { .. })
    ));
}
