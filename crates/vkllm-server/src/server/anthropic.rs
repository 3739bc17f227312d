//! The Anthropic Messages API: `POST /v1/messages` (whole or streamed with Anthropic's event
//! sequence) and `POST /v1/messages/count_tokens`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Map, Value as Json, json};
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{GrammarSpec, SlotParams};

use super::chat::{self, ChatInput, ChatPrompt, ToolChoice};
use super::error::{Api, ApiError};
use super::fields::Fields;
use super::generate::{ChoiceEvent, ChoiceState, Finish, GenSpec, Generation, launch};
use super::output::{Piece, Reply, ToolCall};
use super::structured;
use super::{AppState, body_bytes, random_id};

const API: Api = Api::Anthropic;

/// Block keys that only hint (prompt caching is automatic here) or are empty.
fn hint_key(k: &str, v: &Json) -> bool {
    k == "cache_control"
        || v.is_null()
        || (k == "citations" && v.as_array().is_some_and(Vec::is_empty))
}

/// The text of a `tool_result`'s content (a string or text blocks).
fn result_text(at: &str, v: Option<&Json>) -> Result<String, ApiError> {
    match v {
        None | Some(Json::Null) => Ok(String::new()),
        Some(Json::String(s)) => Ok(s.clone()),
        Some(Json::Array(blocks)) => blocks
            .iter()
            .map(|b| match (b["type"].as_str(), b["text"].as_str()) {
                (Some("text"), Some(t)) => Ok(t.to_string()),
                (t, _) => Err(ApiError::unsupported(
                    API,
                    at,
                    &format!("tool_result content of type {t:?} (only text)"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|v| v.join("\n")),
        Some(_) => Err(ApiError::bad(
            API,
            at,
            "tool_result content must be a string or blocks",
        )),
    }
}

/// Anthropic messages (and `system`) to the Hugging Face shape.
fn messages(system: Option<Json>, v: Json) -> Result<Vec<Json>, ApiError> {
    let mut out = Vec::new();
    match system {
        None => {}
        Some(Json::String(s)) => out.push(json!({"role": "system", "content": s})),
        Some(Json::Array(blocks)) => {
            let mut texts = Vec::new();
            for b in &blocks {
                match (b["type"].as_str(), b["text"].as_str()) {
                    (Some("text"), Some(t)) => texts.push(t),
                    _ => return Err(ApiError::bad(API, "system", "system blocks must be text")),
                }
            }
            out.push(json!({"role": "system", "content": texts.join("\n")}));
        }
        Some(_) => {
            return Err(ApiError::bad(
                API,
                "system",
                "`system` must be a string or text blocks",
            ));
        }
    }
    let Json::Array(list) = v else {
        return Err(ApiError::bad(API, "messages", "`messages` must be a list"));
    };
    for (i, m) in list.into_iter().enumerate() {
        let role = match m["role"].as_str() {
            Some(r @ ("user" | "assistant")) => r,
            _ => {
                return Err(ApiError::bad(
                    API,
                    &format!("messages[{i}].role"),
                    "`role` must be user or assistant",
                ));
            }
        };
        if let Some(k) = m.as_object().and_then(|o| {
            o.keys()
                .find(|k| !["role", "content"].contains(&k.as_str()))
        }) {
            return Err(ApiError::unsupported(
                API,
                &format!("messages[{i}].{k}"),
                "this message field is not",
            ));
        }
        let blocks = match &m["content"] {
            Json::String(s) => vec![json!({"type": "text", "text": s})],
            Json::Array(b) => b.clone(),
            _ => {
                return Err(ApiError::bad(
                    API,
                    &format!("messages[{i}].content"),
                    "content must be a string or blocks",
                ));
            }
        };
        let mut text = Vec::new();
        let mut calls = Vec::new();
        let mut results = Vec::new();
        let mut reasoning = String::new();
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("messages[{i}].content[{j}]");
            let ty = b["type"].as_str().unwrap_or_default();
            let allowed: &[&str] = match (role, ty) {
                (_, "text") => &["type", "text"],
                ("user", "tool_result") => &["type", "tool_use_id", "content", "is_error"],
                ("assistant", "tool_use") => &["type", "id", "name", "input"],
                ("assistant", "thinking") => &["type", "thinking", "signature"],
                ("assistant", "redacted_thinking") => &["type", "data"],
                _ => {
                    return Err(ApiError::unsupported(
                        API,
                        &at,
                        &format!("`{ty}` blocks in {role} messages"),
                    ));
                }
            };
            if let Some((k, _)) = b
                .as_object()
                .into_iter()
                .flatten()
                .find(|(k, v)| !allowed.contains(&k.as_str()) && !hint_key(k, v))
            {
                return Err(ApiError::unsupported(
                    API,
                    &format!("{at}.{k}"),
                    "this block field is not",
                ));
            }
            match ty {
                "text" => text.push(b["text"].as_str().unwrap_or_default().to_string()),
                "tool_result" => {
                    let mut body = result_text(&at, b.get("content"))?;
                    if b["is_error"] == true {
                        body = format!("Error: {body}");
                    }
                    results.push(json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": body}));
                }
                "tool_use" => calls.push(json!({
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": b.get("input").cloned().unwrap_or(json!({}))},
                })),
                "thinking" => reasoning.push_str(b["thinking"].as_str().unwrap_or_default()),
                // Redacted reasoning is opaque to a local model: nothing to show it.
                _ => {}
            }
        }
        out.extend(results);
        if role == "assistant" {
            let mut msg = json!({"role": "assistant", "content": text.join("\n")});
            if !calls.is_empty() {
                msg["tool_calls"] = Json::Array(calls);
            }
            if !reasoning.is_empty() {
                msg["reasoning_content"] = reasoning.into();
            }
            out.push(msg);
        } else if !text.is_empty() {
            out.push(json!({"role": "user", "content": text.join("\n")}));
        }
    }
    Ok(out)
}

/// `tools`, `tool_choice`, `thinking`: the chat input besides the messages.
fn chat_input(f: &mut Fields, msgs: Vec<Json>) -> Result<ChatInput, ApiError> {
    let tools = match f.take("tools") {
        None => Vec::new(),
        Some(Json::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let custom = t.get("type").is_none_or(|ty| ty == "custom");
                match (custom, t["name"].as_str()) {
                    (true, Some(name)) => Ok(json!({"type": "function", "function": {
                        "name": name,
                        "description": t.get("description").cloned().unwrap_or(Json::Null),
                        "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
                    }})),
                    (false, _) => Err(ApiError::unsupported(
                        API,
                        &format!("tools[{i}]"),
                        &format!("server tools ({}); only custom tools with input_schema", t["type"]),
                    )),
                    _ => Err(ApiError::bad(API, &format!("tools[{i}]"), "a tool needs a `name`")),
                }
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(ApiError::bad(API, "tools", "`tools` must be a list")),
    };
    let (choice, parallel) = match f.take("tool_choice") {
        None => (ToolChoice::Auto, true),
        Some(v) => {
            let parallel = v["disable_parallel_tool_use"] != true;
            let choice = match (v["type"].as_str(), v["name"].as_str()) {
                (Some("auto"), _) => ToolChoice::Auto,
                (Some("any"), _) => ToolChoice::Required,
                (Some("none"), _) => ToolChoice::None,
                (Some("tool"), Some(n)) => ToolChoice::Named(n.to_string()),
                _ => {
                    return Err(ApiError::bad(
                        API,
                        "tool_choice",
                        "`tool_choice` must be auto, any, none or {type: tool, name}",
                    ));
                }
            };
            (choice, parallel)
        }
    };
    let mut kwargs = Map::new();
    match f.take("thinking") {
        None => {}
        Some(t) => match t["type"].as_str() {
            Some("enabled" | "adaptive" | "between_tools") => {
                kwargs.insert("enable_thinking".into(), true.into());
            }
            Some("disabled") => {
                kwargs.insert("enable_thinking".into(), false.into());
            }
            _ => {
                return Err(ApiError::bad(
                    API,
                    "thinking",
                    "`thinking.type` must be enabled, adaptive, between_tools or disabled",
                ));
            }
        },
    }
    Ok(ChatInput {
        messages: msgs,
        tools,
        choice,
        parallel,
        kwargs,
    })
}

/// Reads the fields both endpoints share and renders the prompt; with a structured output
/// (`format`) thinking is off unless the request turned it on. Returns the tools too.
fn prompt(
    state: &AppState,
    f: &mut Fields,
    format: bool,
) -> Result<(String, ChatPrompt, Vec<Json>), ApiError> {
    let model = f
        .string("model")?
        .ok_or_else(|| ApiError::bad(API, "model", "`model` is required"))?;
    state.check_model(API, &model)?;
    let msgs = messages(f.take("system"), f.require("messages")?)?;
    let mut input = chat_input(f, msgs)?;
    if format {
        input
            .kwargs
            .entry("enable_thinking")
            .or_insert(Json::Bool(false));
    }
    let tools = input.tools.clone();
    Ok((model, chat::build(&state.tokenizer, API, input)?, tools))
}

pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let size = body.as_ref().map_or(0, |b| b.len());
    let run = move || -> Result<usize, ApiError> {
        let bytes = body_bytes(API, body)?;
        let mut f = Fields::parse(API, &bytes)?;
        let format = output_format(&mut f)?;
        let (_, p, _) = prompt(&state, &mut f, format.is_some())?;
        f.finish()?;
        Ok(p.ids.len())
    };
    match super::off_runtime(API, size, run).await {
        Ok(n) => axum::Json(json!({"input_tokens": n})).into_response(),
        Err(e) => e.into_response(),
    }
}

struct Prepared {
    spec: GenSpec,
    prompt: ChatPrompt,
    tool_stop: Option<usize>,
    model: String,
    id: String,
}

fn parse(state: &AppState, bytes: &[u8]) -> Result<(Prepared, bool), ApiError> {
    let mut f = Fields::parse(API, bytes)?;
    let format = output_format(&mut f)?;
    let (model, prompt, tools) = prompt(state, &mut f, format.is_some())?;
    let max_tokens = f
        .integer("max_tokens", 1, u32::MAX as u64)?
        .ok_or_else(|| ApiError::bad(API, "max_tokens", "`max_tokens` is required"))?;
    let mut stop = match f.take("stop_sequences") {
        None => Vec::new(),
        Some(Json::Array(a)) => a
            .into_iter()
            .map(|v| match v {
                Json::String(s) => Ok(s),
                _ => Err(ApiError::bad(
                    API,
                    "stop_sequences",
                    "stop sequences must be strings",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ApiError::bad(
                API,
                "stop_sequences",
                "`stop_sequences` must be a list",
            ));
        }
    };
    let sampling = SamplingParams {
        temperature: f.number("temperature", 0.0, 1.0)?.unwrap_or(1.0),
        top_p: f.number("top_p", 0.0, 1.0)?.unwrap_or(1.0),
        top_k: f.integer("top_k", 0, u32::MAX as u64)?.unwrap_or(0) as usize,
        ..SamplingParams::default()
    };
    let stream = f.bool("stream")?.unwrap_or(false);
    let user = match f.take("metadata") {
        None => None,
        Some(m) => m["user_id"].as_str().map(str::to_string),
    };
    f.only(
        "service_tier",
        &[json!("auto"), json!("standard_only")],
        "there is one tier",
    )?;
    f.only("speed", &[json!("standard")], "there is one speed")?;
    // Prompt caching is automatic (the longest cached prefix of a slot is reused).
    f.take("cache_control");
    f.finish()?;
    let grammar = structured::request_grammar(
        &state.grammars,
        API,
        prompt.call_grammar.clone(),
        format,
        &tools,
    )?;
    let tool_stop = prompt
        .tool_stop
        .clone()
        .filter(|_| grammar.is_none())
        .map(|s| {
            stop.push(s);
            stop.len() - 1
        });
    let id = format!("msg_{}", random_id(24));
    state.log(&[
        ("event", &"request"),
        ("id", &id),
        ("user", &user.unwrap_or_default()),
        ("prompt_tokens", &prompt.ids.len()),
        ("stream", &stream),
    ]);
    Ok((
        Prepared {
            spec: GenSpec {
                prompt: prompt.ids.clone(),
                params: SlotParams {
                    sampling,
                    logprobs: None,
                    grammar,
                },
                max_tokens: max_tokens as usize,
                stop,
                n: 1,
                seed: None,
                tag: id.clone(),
            },
            prompt,
            tool_stop,
            model,
            id,
        },
        stream,
    ))
}

/// Structured outputs: `output_config.format`, or the older top-level `output_format`.
fn output_format(f: &mut Fields) -> Result<Option<(GrammarSpec, &'static str)>, ApiError> {
    let cfg = output_config(f.take("output_config"))?;
    let old = f.take("output_format").filter(|v| !v.is_null());
    match (cfg, old) {
        (Some(_), Some(_)) => Err(ApiError::bad(
            API,
            "output_format",
            "give `output_config.format` or `output_format`, not both",
        )),
        (Some(v), None) => Ok(Some((
            structured::anthropic_format(API, v, "output_config.format")?,
            "output_config.format",
        ))),
        (None, Some(v)) => Ok(Some((
            structured::anthropic_format(API, v, "output_format")?,
            "output_format",
        ))),
        (None, None) => Ok(None),
    }
}

/// `output_config`: `effort` is accepted (the model has one effort level, its own: agents that
/// always send it keep working); `format` is returned.
fn output_config(cfg: Option<Json>) -> Result<Option<Json>, ApiError> {
    let Some(cfg) = cfg else { return Ok(None) };
    let Json::Object(cfg) = cfg else {
        return Err(ApiError::bad(
            API,
            "output_config",
            "`output_config` must be an object",
        ));
    };
    let mut format = None;
    for (k, v) in cfg {
        match (k.as_str(), v) {
            (_, Json::Null) | ("effort", Json::String(_)) => {}
            ("format", v) => format = Some(v),
            (k, _) => {
                return Err(ApiError::unsupported(
                    API,
                    &format!("output_config.{k}"),
                    "not implemented",
                ));
            }
        }
    }
    Ok(format)
}

fn stop_reason(f: &Option<Finish>) -> (&'static str, Json) {
    match f {
        Some(Finish::Stop(s)) => ("stop_sequence", s.clone().into()),
        Some(Finish::Length) => ("max_tokens", Json::Null),
        Some(Finish::Tools) => ("tool_use", Json::Null),
        _ => ("end_turn", Json::Null),
    }
}

fn tool_use(t: &ToolCall) -> Json {
    let id = match t.id.strip_prefix("call_") {
        Some(rest) => format!("toolu_{rest}"),
        None => t.id.clone(),
    };
    json!({"type": "tool_use", "id": id, "name": t.name, "input": t.arguments})
}

fn content_blocks(r: &Reply) -> Vec<Json> {
    let mut blocks = Vec::new();
    if !r.reasoning.is_empty() {
        blocks.push(json!({"type": "thinking", "thinking": r.reasoning, "signature": ""}));
    }
    if !r.content.trim().is_empty() || r.tools.is_empty() {
        blocks.push(json!({"type": "text", "text": r.content}));
    }
    blocks.extend(r.tools.iter().map(tool_use));
    blocks
}

async fn messages_handler(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(API, body)?;
    let st = state.clone();
    let (p, stream_it) = super::off_runtime(API, bytes.len(), move || parse(&st, &bytes)).await?;
    let mut generation = launch(&state, API, p.spec.clone())?;
    let choice = ChoiceState::new(&p.prompt.parser, &p.spec.stop, p.tool_stop);
    if stream_it {
        return Ok(event_stream(generation, choice, p));
    }
    let mut c = choice;
    while let Some((_, ev)) = generation.next().await {
        match ev {
            ChoiceEvent::Delta { text, tokens } => {
                if c.delta(&text, tokens).1 {
                    generation.stop_choice(0);
                }
            }
            ChoiceEvent::Finished { reason, stop, .. } => {
                c.end(reason, stop);
            }
            ChoiceEvent::Failed(e) => return Err(e),
        }
    }
    let (reason, seq) = stop_reason(&c.finish);
    Ok(axum::Json(json!({
        "id": p.id,
        "type": "message",
        "role": "assistant",
        "model": p.model,
        "content": content_blocks(&c.reply),
        "stop_reason": reason,
        "stop_sequence": seq,
        "usage": usage_json(generation.prompt_tokens, generation.cached_tokens, c.tokens.len()),
    }))
    .into_response())
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    messages_handler(state, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The open content block of a stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Text,
    Thinking,
}

struct Events {
    generation: Generation,
    c: ChoiceState,
    queue: VecDeque<Sse>,
    open: Open,
    /// Index of the next content block.
    next: usize,
    over: bool,
}

impl Events {
    fn send(&mut self, kind: &str, data: Json) {
        self.queue
            .push_back(Sse::default().event(kind).data(data.to_string()));
    }

    fn close_block(&mut self) {
        if self.open == Open::None {
            return;
        }
        let i = self.next - 1;
        if self.open == Open::Thinking {
            self.send(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": ""}}),
            );
        }
        self.send(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
        self.open = Open::None;
    }

    fn open_block(&mut self, kind: Open, block: Json) {
        self.close_block();
        self.send(
            "content_block_start",
            json!({"type": "content_block_start", "index": self.next, "content_block": block}),
        );
        self.next += 1;
        self.open = kind;
    }

    fn pieces(&mut self, pieces: Vec<Piece>) {
        for p in pieces {
            match p {
                Piece::Reasoning(r) => {
                    if self.open != Open::Thinking {
                        self.open_block(
                            Open::Thinking,
                            json!({"type": "thinking", "thinking": ""}),
                        );
                    }
                    let i = self.next - 1;
                    self.send(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": r}}),
                    );
                }
                Piece::Content(t) => {
                    if self.open != Open::Text {
                        self.open_block(Open::Text, json!({"type": "text", "text": ""}));
                    }
                    let i = self.next - 1;
                    self.send(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}}),
                    );
                }
                Piece::Tool(t) => {
                    let mut block = tool_use(&t);
                    block["input"] = json!({});
                    self.open_block(Open::None, block);
                    let i = self.next - 1;
                    self.send(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": t.arguments.to_string()}}),
                    );
                    self.send(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": i}),
                    );
                }
            }
        }
    }

    fn finish(&mut self) {
        if self.next == 0 {
            self.open_block(Open::Text, json!({"type": "text", "text": ""}));
        }
        self.close_block();
        let (reason, seq) = stop_reason(&self.c.finish);
        self.send(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq},
                   "usage": usage_json(self.generation.prompt_tokens, self.generation.cached_tokens,
                                       self.c.tokens.len())}),
        );
        self.send("message_stop", json!({"type": "message_stop"}));
        self.over = true;
    }

    fn on(&mut self, ev: ChoiceEvent) {
        match ev {
            ChoiceEvent::Delta { text, tokens } => {
                let (pieces, done) = self.c.delta(&text, tokens);
                self.pieces(pieces);
                if done {
                    self.generation.stop_choice(0);
                    self.finish();
                }
            }
            ChoiceEvent::Finished { reason, stop, .. } => {
                let pieces = self.c.end(reason, stop);
                self.pieces(pieces);
                self.finish();
            }
            ChoiceEvent::Failed(e) => {
                self.send("error", e.body());
                self.over = true;
            }
        }
    }
}

fn event_stream(generation: Generation, c: ChoiceState, p: Prepared) -> Response {
    let mut ev = Events {
        generation,
        c,
        queue: VecDeque::new(),
        open: Open::None,
        next: 0,
        over: false,
    };
    ev.send(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": p.id, "type": "message", "role": "assistant", "model": p.model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": p.spec.prompt.len(), "output_tokens": 0}}}),
    );
    ev.send("ping", json!({"type": "ping"}));
    let body = stream::unfold(ev, |mut ev| async move {
        loop {
            if let Some(e) = ev.queue.pop_front() {
                return Some((Ok::<_, Infallible>(e), ev));
            }
            if ev.over {
                return None;
            }
            match ev.generation.next().await {
                Some((_, e)) => ev.on(e),
                None => ev.finish(),
            }
        }
    });
    axum::response::Sse::new(body)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}

/// Anthropic's usage object: `input_tokens` are the prompt tokens computed, the ones taken from
/// a slot's cache are `cache_read_input_tokens` (caching is automatic: nothing is written on
/// request, `cache_creation_input_tokens` is 0).
fn usage_json(prompt: usize, cached: usize, output: usize) -> serde_json::Value {
    let cached = cached.min(prompt);
    json!({"input_tokens": prompt - cached, "output_tokens": output,
           "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_become_messages() {
        let m = messages(
            Some(json!([{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}])),
            json!([
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "easy", "signature": "s"},
                    {"type": "text", "text": "Let me compute."},
                    {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"e": "2+2"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "4"}]},
                    {"type": "text", "text": "Thanks"}]},
            ]),
        )
        .unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(m[2]["reasoning_content"], "easy");
        assert_eq!(
            m[2]["tool_calls"][0]["function"],
            json!({"name": "calc", "arguments": {"e": "2+2"}})
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "4"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "Thanks"}));
        for bad in [
            json!([{"role": "system", "content": "x"}]),
            json!([{"role": "user", "content": [{"type": "image", "source": {}}]}]),
            json!([{"role": "user", "content": [{"type": "text", "text": "x", "extra": 1}]}]),
            json!([{"role": "user", "content": "x", "name": "bob"}]),
        ] {
            assert!(messages(None, bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn reply_blocks_and_stop_reasons() {
        let r = Reply {
            reasoning: "r".into(),
            content: "\n".into(),
            tools: vec![ToolCall {
                id: "call_abc".into(),
                name: "f".into(),
                arguments: json!({"x": 1}),
            }],
        };
        let b = content_blocks(&r);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0]["type"], "thinking");
        assert_eq!(
            b[1],
            json!({"type": "tool_use", "id": "toolu_abc", "name": "f", "input": {"x": 1}})
        );
        assert_eq!(
            stop_reason(&Some(Finish::Stop("##".into()))),
            ("stop_sequence", json!("##"))
        );
        assert_eq!(stop_reason(&Some(Finish::Length)).0, "max_tokens");
        assert_eq!(
            content_blocks(&Reply::default()),
            vec![json!({"type": "text", "text": ""})]
        );
    }
}
