//! Chat prompts: messages (in the Hugging Face shape both APIs are converted to) plus tools,
//! rendered with the model's chat template and encoded. Templates with tool support get the
//! tools as they are; for templates without it the server writes the tools into the system
//! message and past calls and results into the text, in the Hermes `<tool_call>` format, and
//! parses replies in that format.

use serde_json::{Map, Value as Json, json};
use vkllm_tokenizer::{RenderOptions, Tokenizer};

use vkllm_engine::GrammarSpec;

use super::error::{Api, ApiError, Kind};
use super::output::{ParserSpec, ToolFormat};
use super::structured;

/// Which tool use the request allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Named(String),
}

/// A chat request, API-neutral.
#[derive(Clone, Debug)]
pub struct ChatInput {
    /// `{role, content (string), tool_calls?, tool_call_id?, name?, reasoning_content?}`.
    pub messages: Vec<Json>,
    /// `{"type": "function", "function": {name, description, parameters}}` each.
    pub tools: Vec<Json>,
    pub choice: ToolChoice,
    /// More than one call per reply allowed.
    pub parallel: bool,
    /// Template variables (`enable_thinking`, ...).
    pub kwargs: Map<String, Json>,
}

/// A rendered, encoded chat prompt and how to read the reply.
pub struct ChatPrompt {
    pub ids: Vec<u32>,
    pub parser: ParserSpec,
    /// A stop string the server adds (the closing tag of a forced call).
    pub tool_stop: Option<String>,
    /// A forced call's grammar: the rest of the call after the prefilled start, its arguments
    /// matching the tool's schema.
    pub call_grammar: Option<GrammarSpec>,
}

/// The function names of `tools`.
fn tool_names(tools: &[Json]) -> Vec<&str> {
    tools
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Json::as_str))
        .collect()
}

/// `arguments` as an object where it is a JSON string (templates print it with `tojson`).
fn normalise_calls(msg: &mut Json) {
    if let Some(Json::Array(calls)) = msg.get_mut("tool_calls") {
        for c in calls {
            if let Some(args) = c.pointer_mut("/function/arguments")
                && let Json::String(s) = args
                && let Ok(v) = serde_json::from_str::<Json>(s)
            {
                *args = v;
            }
        }
    }
}

/// One line per function: `name(arg: type, ...): description`.
fn signature(t: &Json) -> String {
    let f = &t["function"];
    let name = f["name"].as_str().unwrap_or_default();
    let required: Vec<&str> = f
        .pointer("/parameters/required")
        .and_then(Json::as_array)
        .map(|r| r.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let args: Vec<String> = f
        .pointer("/parameters/properties")
        .and_then(Json::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(k, v)| {
                    let ty = v["type"].as_str().unwrap_or("any");
                    let opt = if required.contains(&k.as_str()) {
                        ""
                    } else {
                        "?"
                    };
                    format!("{k}{opt}: {ty}")
                })
                .collect()
        })
        .unwrap_or_default();
    let desc = f["description"].as_str().unwrap_or_default();
    format!("- {name}({}): {desc}", args.join(", "))
}

/// An example call of the first function, arguments filled with placeholders.
fn example_call(t: &Json) -> String {
    let f = &t["function"];
    let args: Map<String, Json> = f
        .pointer("/parameters/properties")
        .and_then(Json::as_object)
        .map(|p| p.keys().map(|k| (k.clone(), json!("..."))).collect())
        .unwrap_or_default();
    json!({"name": f["name"], "arguments": args}).to_string()
}

fn tools_prompt(tools: &[Json]) -> String {
    let mut s = String::from("# Tools\n\nYou can call these functions:\n");
    for t in tools {
        s.push_str(&signature(t));
        s.push('\n');
    }
    s.push_str(
        "\nTo call a function, reply with its name and arguments as JSON inside \
         <tool_call></tool_call> tags, for example:\n<tool_call>\n",
    );
    s.push_str(&tools.first().map(example_call).unwrap_or_default());
    s.push_str("\n</tool_call>");
    s
}

fn text_of(msg: &Json) -> String {
    msg.get("content")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Rewrites tool use as plain text for templates that do not know it.
fn inline_tools(messages: Vec<Json>, tools: &[Json]) -> Vec<Json> {
    let mut out: Vec<Json> = Vec::with_capacity(messages.len() + 1);
    let mut iter = messages.into_iter().peekable();
    if !tools.is_empty() {
        let sys = match iter.peek() {
            Some(m) if m["role"] == "system" => {
                let text = text_of(m);
                iter.next();
                format!("{text}\n\n{}", tools_prompt(tools))
            }
            _ => tools_prompt(tools),
        };
        out.push(json!({"role": "system", "content": sys.trim_start()}));
    }
    for m in iter {
        match m["role"].as_str() {
            Some("assistant") if m.get("tool_calls").is_some_and(|c| !c.is_null()) => {
                let mut text = text_of(&m);
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let call = json!({
                        "name": c.pointer("/function/name").cloned().unwrap_or(Json::Null),
                        "arguments": c.pointer("/function/arguments").cloned().unwrap_or(json!({})),
                    });
                    text.push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
                }
                out.push(json!({"role": "assistant", "content": text.trim_start()}));
            }
            Some("tool") => {
                let block = format!("<tool_response>\n{}\n</tool_response>", text_of(&m));
                match out.last_mut() {
                    Some(prev) if prev["role"] == "user" && prev["tool_results"] == true => {
                        let merged = format!("{}\n{block}", text_of(prev));
                        prev["content"] = Json::String(merged);
                    }
                    _ => out.push(json!({"role": "user", "content": block, "tool_results": true})),
                }
            }
            _ => out.push(m),
        }
    }
    for m in &mut out {
        if let Some(o) = m.as_object_mut() {
            o.remove("tool_results");
        }
    }
    out
}

/// Renders and encodes `input` with the model's template.
pub fn build(tok: &Tokenizer, api: Api, input: ChatInput) -> Result<ChatPrompt, ApiError> {
    if input.messages.is_empty() {
        return Err(ApiError::bad(
            api,
            "messages",
            "at least one message is needed",
        ));
    }
    let names = tool_names(&input.tools);
    if let ToolChoice::Named(n) = &input.choice
        && !names.contains(&n.as_str())
    {
        return Err(ApiError::bad(
            api,
            "tool_choice",
            format!("tool_choice names `{n}`, which is not in `tools`"),
        ));
    }
    if input.choice == ToolChoice::Required && input.tools.is_empty() {
        return Err(ApiError::bad(
            api,
            "tool_choice",
            "tool_choice `required` needs `tools`",
        ));
    }
    let tools_on = !input.tools.is_empty() && input.choice != ToolChoice::None;
    let tools_json = Json::Array(input.tools.clone());
    let mut opts = RenderOptions {
        add_generation_prompt: true,
        tools: tools_on.then(|| tools_json.clone()),
        kwargs: input.kwargs.clone(),
        ..RenderOptions::default()
    };
    let template = tok.chat_template_for(&opts).map_err(|e| {
        ApiError::new(
            api,
            Kind::BadRequest,
            format!("{e}; use the completions endpoint with a raw prompt"),
        )
    })?;
    let source = template.source();
    let native = source.contains("tools");
    let (format, messages) = if native {
        let mut ms = input.messages;
        ms.iter_mut().for_each(normalise_calls);
        (ToolFormat::detect(source), ms)
    } else {
        opts.tools = None;
        let shown: &[Json] = if tools_on { &input.tools } else { &[] };
        (ToolFormat::Hermes, inline_tools(input.messages, shown))
    };
    // Special tokens spelled in message text stay text (only the template writes turns).
    let guarded = tok.guard_messages(&Json::Array(messages));
    let mut prompt = template
        .render(&guarded.messages, &opts)
        .map_err(|e| ApiError::new(api, Kind::BadRequest, format!("chat template: {e}")))?;
    let think = source
        .contains("<think>")
        .then(|| prompt.trim_end().ends_with("<think>"));
    // `required` with a single tool is that tool, named.
    let forced = match (&input.choice, names.as_slice()) {
        (ToolChoice::Required, [only]) if tools_on => Some(Some(*only)),
        (ToolChoice::Required, _) if tools_on => Some(None),
        (ToolChoice::Named(n), _) if tools_on => Some(Some(n.as_str())),
        _ => None,
    };
    let mut parser = ParserSpec {
        think: think.filter(|_| forced.is_none()),
        tools: tools_on.then_some((format, forced.is_some() || !input.parallel)),
        names: names.iter().map(|n| n.to_string()).collect(),
        schemas: input
            .tools
            .iter()
            .filter_map(|t| {
                Some((
                    structured::tool_name(t)?.to_string(),
                    structured::tool_schema(t),
                ))
            })
            .collect(),
        prefill: String::new(),
    };
    let mut tool_stop = None;
    let call_grammar = forced.map(|name| structured::forced_call(format, name, &input.tools));
    if let Some(name) = forced {
        let pre = format.prefill(name);
        prompt.push_str(&pre);
        parser.prefill = pre;
        tool_stop = format.close_tag().map(str::to_string);
    }
    let ids = tok
        .encode_guarded(&prompt, &guarded)
        .map_err(|e| ApiError::new(api, Kind::BadRequest, format!("encoding the prompt: {e}")))?;
    Ok(ChatPrompt {
        ids,
        parser,
        tool_stop,
        call_grammar,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_become_text_for_templates_without_them() {
        let tools = vec![json!({"type": "function", "function": {"name": "f", "parameters": {}}})];
        let msgs = vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "42"}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "43"}),
        ];
        let out = inline_tools(msgs, &tools);
        assert_eq!(out.len(), 4);
        let sys = out[0]["content"].as_str().unwrap();
        assert!(sys.starts_with("Be brief.\n\n# Tools"));
        assert!(sys.contains("\n- f(): \n"), "{sys}");
        assert_eq!(
            out[2]["content"],
            "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</tool_call>"
        );
        assert_eq!(out[3]["role"], "user");
        assert_eq!(
            out[3]["content"],
            "<tool_response>\n42\n</tool_response>\n<tool_response>\n43\n</tool_response>"
        );
        assert!(out[3].get("tool_results").is_none());
        // No tools, no system message added.
        let out = inline_tools(vec![json!({"role": "user", "content": "x"})], &[]);
        assert_eq!(out, vec![json!({"role": "user", "content": "x"})]);
    }

    #[test]
    fn tool_signatures_and_example() {
        let t = json!({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                           "required": ["city"]}}});
        assert_eq!(
            signature(&t),
            "- get_weather(city: string, days?: integer): Weather now"
        );
        assert_eq!(
            example_call(&t),
            r#"{"name":"get_weather","arguments":{"city":"...","days":"..."}}"#
        );
    }

    #[test]
    fn string_arguments_become_objects() {
        let mut m = json!({"role": "assistant", "tool_calls": [
            {"function": {"name": "f", "arguments": "{\"a\": [1]}"}},
            {"function": {"name": "g", "arguments": "not json"}}]});
        normalise_calls(&mut m);
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            json!({"a": [1]})
        );
        assert_eq!(m["tool_calls"][1]["function"]["arguments"], "not json");
    }
}
