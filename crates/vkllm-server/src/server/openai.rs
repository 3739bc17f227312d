//! The OpenAI API: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`.
//! Requests are read field by field (anything unknown or unsupported is a 400); streams are in
//! `openai_stream.rs`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value as Json, json};
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{GrammarSpec, SlotParams, TokenOut};
use vkllm_tokenizer::{EncodeOptions, Tokenizer};

use super::chat::{self, ChatInput, ToolChoice};
use super::error::{Api, ApiError};
use super::fields::{Fields, content_text};
use super::generate::{ChoiceEvent, ChoiceState, Finish, GenSpec, launch};
use super::output::{ParserSpec, ToolCall};
use super::structured;
use super::{AppState, body_bytes, random_id, unix_secs};

const API: Api = Api::OpenAi;

/// Fields shared by chat and text completions.
pub struct Common {
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub n: usize,
    pub seed: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    pub user: Option<String>,
}

/// Reads the sampling, stop, `n`, seed, stream and user fields.
pub fn common(f: &mut Fields, vocab: usize) -> Result<Common, ApiError> {
    let api = f.api();
    let top_k = match f.take("top_k") {
        None => 0,
        Some(v) => match v.as_i64() {
            Some(-1) => 0,
            Some(k) if k >= 0 => k as usize,
            _ => {
                return Err(ApiError::bad(
                    api,
                    "top_k",
                    "`top_k` must be an integer >= -1",
                ));
            }
        },
    };
    let sampling = SamplingParams {
        temperature: f.number("temperature", 0.0, 2.0)?.unwrap_or(1.0),
        top_p: f.number("top_p", 0.0, 1.0)?.unwrap_or(1.0),
        top_k,
        min_p: f.number("min_p", 0.0, 1.0)?.unwrap_or(0.0),
        repetition_penalty: f.number("repetition_penalty", 0.01, 10.0)?.unwrap_or(1.0),
        presence_penalty: f.number("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        frequency_penalty: f.number("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        logit_bias: logit_bias(f, vocab)?,
        seed: 0,
    };
    let seed = f.seed("seed")?;
    let n = f.integer("n", 1, 16)?.unwrap_or(1) as usize;
    let stop = f.stops("stop")?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.take("stream_options") {
        None => false,
        Some(Json::Object(mut o)) => {
            let inc = match o.remove("include_usage") {
                None | Some(Json::Null) => false,
                Some(Json::Bool(b)) => b,
                Some(_) => {
                    return Err(ApiError::bad(
                        api,
                        "stream_options.include_usage",
                        "`include_usage` must be true or false",
                    ));
                }
            };
            if let Some(k) = o.keys().next() {
                return Err(ApiError::unsupported(
                    api,
                    &format!("stream_options.{k}"),
                    "only include_usage is",
                ));
            }
            inc
        }
        Some(_) => {
            return Err(ApiError::bad(
                api,
                "stream_options",
                "`stream_options` must be an object",
            ));
        }
    };
    let user = f.string("user")?;
    Ok(Common {
        sampling,
        stop,
        n,
        seed,
        stream,
        include_usage,
        user,
    })
}

/// `logit_bias`: `{"token id": bias in [-100, 100]}`; -100 bans the token.
fn logit_bias(f: &mut Fields, vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let api = f.api();
    let Some(v) = f.take("logit_bias") else {
        return Ok(Vec::new());
    };
    let Json::Object(map) = v else {
        return Err(ApiError::bad(
            api,
            "logit_bias",
            "`logit_bias` must be an object",
        ));
    };
    let mut out = Vec::with_capacity(map.len());
    for (k, b) in map {
        let id: u32 = k
            .parse()
            .ok()
            .filter(|&id: &u32| (id as usize) < vocab)
            .ok_or_else(|| {
                ApiError::bad(
                    api,
                    "logit_bias",
                    format!("`logit_bias` key `{k}` is not a token id below {vocab}"),
                )
            })?;
        let b = b
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| {
                ApiError::bad(api, "logit_bias", "biases must be numbers in [-100, 100]")
            })?;
        out.push((
            id,
            if b <= -100.0 {
                f32::NEG_INFINITY
            } else {
                b as f32
            },
        ));
    }
    Ok(out)
}

/// OpenAI messages to the Hugging Face shape templates read.
fn messages(api: Api, v: Json) -> Result<Vec<Json>, ApiError> {
    let Json::Array(list) = v else {
        return Err(ApiError::bad(api, "messages", "`messages` must be a list"));
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.into_iter().enumerate() {
        let at = |k: &str| format!("messages[{i}].{k}");
        let Json::Object(mut m) = m else {
            return Err(ApiError::bad(
                api,
                &format!("messages[{i}]"),
                "a message must be an object",
            ));
        };
        let role_value = m.remove("role");
        let role = match role_value.as_ref().and_then(Json::as_str) {
            Some("developer") | Some("system") => "system",
            Some(r @ ("user" | "assistant" | "tool")) => r,
            Some(r) => {
                return Err(ApiError::unsupported(
                    api,
                    &at("role"),
                    &format!("role `{r}`"),
                ));
            }
            None => return Err(ApiError::bad(api, &at("role"), "`role` is required")),
        };
        let content = content_text(
            api,
            &at("content"),
            &m.remove("content").unwrap_or(Json::Null),
        )?;
        let mut hf = Map::new();
        hf.insert("role".into(), role.into());
        hf.insert("content".into(), content.into());
        for (k, v) in m {
            match (k.as_str(), v) {
                (_, Json::Null) => {}
                ("name", v @ Json::String(_)) => {
                    hf.insert(k, v);
                }
                ("tool_call_id", v @ Json::String(_)) if role == "tool" => {
                    hf.insert(k, v);
                }
                ("reasoning_content", v @ Json::String(_)) if role == "assistant" => {
                    hf.insert(k, v);
                }
                ("tool_calls", Json::Array(calls)) if role == "assistant" => {
                    for (j, c) in calls.iter().enumerate() {
                        let ok = c.pointer("/function/name").is_some_and(Json::is_string)
                            && c.get("type").is_none_or(|t| t == "function");
                        if !ok {
                            return Err(ApiError::bad(
                                api,
                                &format!("messages[{i}].tool_calls[{j}]"),
                                "a tool call needs `type: function` and `function.name`",
                            ));
                        }
                    }
                    hf.insert(k, Json::Array(calls));
                }
                ("annotations", Json::Array(a)) if a.is_empty() => {}
                (k, _) => {
                    return Err(ApiError::unsupported(
                        api,
                        &at(k),
                        "this message field is not",
                    ));
                }
            }
        }
        out.push(Json::Object(hf));
    }
    Ok(out)
}

/// `tools` (functions only) and `tool_choice`.
fn tools(f: &mut Fields) -> Result<(Vec<Json>, ToolChoice), ApiError> {
    let api = f.api();
    let tools = match f.take("tools") {
        None => Vec::new(),
        Some(Json::Array(list)) => {
            for (i, t) in list.iter().enumerate() {
                let ok = t.get("type") == Some(&json!("function"))
                    && t.pointer("/function/name").is_some_and(Json::is_string);
                if !ok {
                    return Err(ApiError::bad(
                        api,
                        &format!("tools[{i}]"),
                        "a tool must be {\"type\": \"function\", \"function\": {\"name\", ...}}",
                    ));
                }
            }
            list
        }
        Some(_) => return Err(ApiError::bad(api, "tools", "`tools` must be a list")),
    };
    let choice = match f.take("tool_choice") {
        None => ToolChoice::Auto,
        Some(Json::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => {
                return Err(ApiError::bad(
                    api,
                    "tool_choice",
                    format!("unknown tool_choice `{s}`"),
                ));
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(Json::as_str) {
            Some(n) if v.get("type") == Some(&json!("function")) => {
                ToolChoice::Named(n.to_string())
            }
            _ => {
                return Err(ApiError::bad(
                    api,
                    "tool_choice",
                    "`tool_choice` must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\"}}",
                ));
            }
        },
    };
    Ok((tools, choice))
}

/// Structured outputs: `response_format`, or vkllm's `grammar` extension (not both).
fn output_format(f: &mut Fields) -> Result<Option<(GrammarSpec, &'static str)>, ApiError> {
    let api = f.api();
    let format = structured::openai_format(api, f.take("response_format"))?;
    let ext = structured::extension(api, f.take("grammar"))?;
    match (format, ext) {
        (Some(_), Some(_)) => Err(ApiError::bad(
            api,
            "grammar",
            "give `response_format` or `grammar`, not both",
        )),
        (Some(s), None) => Ok(Some((s, "response_format"))),
        (None, Some(s)) => Ok(Some((s, "grammar"))),
        (None, None) => Ok(None),
    }
}

/// The API's name for a finish.
pub fn finish_reason(f: &Option<Finish>) -> &'static str {
    match f {
        Some(Finish::Length) => "length",
        Some(Finish::Tools) => "tool_calls",
        _ => "stop",
    }
}

/// A token's text and UTF-8 bytes for logprobs.
pub fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id], false).unwrap_or_default()
}

/// A chat logprobs entry.
pub fn logprob_entry(tok: &Tokenizer, t: &TokenOut) -> Json {
    let one = |id: u32, lp: f32| {
        let s = token_text(tok, id);
        json!({"token": s, "logprob": lp, "bytes": s.as_bytes()})
    };
    let mut e = one(t.id, t.logprob.unwrap_or(f32::NAN));
    e["top_logprobs"] = t.top.iter().map(|&(id, lp)| one(id, lp)).collect();
    e
}

/// A tool call as OpenAI returns it (`index` for stream deltas).
pub fn tool_json(t: &ToolCall, index: Option<usize>) -> Json {
    let mut j = json!({
        "id": t.id,
        "type": "function",
        "function": {"name": t.name, "arguments": t.arguments.to_string()},
    });
    if let Some(i) = index {
        j["index"] = i.into();
    }
    j
}

/// What every response of one request shares.
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub fingerprint: String,
}

/// OpenAI's usage object; `cached` of the prompt tokens came from a slot's cache.
pub(super) fn usage_json(prompt: usize, cached: usize, completion: usize) -> Json {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
           "prompt_tokens_details": {"cached_tokens": cached}})
}

/// A parsed chat or completion request, ready to run.
pub struct Prepared {
    pub spec: GenSpec,
    pub parser: ParserSpec,
    pub tool_stop: Option<usize>,
    pub include_usage: bool,
    pub logprobs: bool,
    pub meta: Meta,
    /// Completions: text put before every choice (`echo`).
    pub echo: String,
}

pub async fn chat(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let bytes = body_bytes(API, body)?;
        let st = state.clone();
        let (p, stream) =
            super::off_runtime(API, bytes.len(), move || parse_chat(&st, &bytes)).await?;
        if stream {
            super::openai_stream::chat_stream(&state, p)
        } else {
            collect(&state, p, true).await
        }
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

fn parse_chat(state: &Arc<AppState>, bytes: &[u8]) -> Result<(Prepared, bool), ApiError> {
    let mut f = Fields::parse(API, bytes)?;
    let model = f
        .string("model")?
        .ok_or_else(|| ApiError::bad(API, "model", "`model` is required"))?;
    state.check_model(API, &model)?;
    let msgs = messages(API, f.require("messages")?)?;
    let max_new = f.integer("max_completion_tokens", 1, u32::MAX as u64)?;
    let max_old = f.integer("max_tokens", 1, u32::MAX as u64)?;
    let c = common(&mut f, state.runner.vocab())?;
    let logprobs = f.bool("logprobs")?.unwrap_or(false);
    let top = f.integer("top_logprobs", 0, 20)?;
    if top.is_some() && !logprobs {
        return Err(ApiError::bad(
            API,
            "top_logprobs",
            "`top_logprobs` needs `logprobs: true`",
        ));
    }
    let (tools, choice) = tools(&mut f)?;
    let parallel = f.bool("parallel_tool_calls")?.unwrap_or(true);
    let format = output_format(&mut f)?;
    let mut kwargs = match f.take("chat_template_kwargs") {
        None => Map::new(),
        Some(Json::Object(o)) => o,
        Some(_) => {
            return Err(ApiError::bad(
                API,
                "chat_template_kwargs",
                "must be an object",
            ));
        }
    };
    f.only("store", &[json!(false)], "responses are not stored")?;
    f.only(
        "service_tier",
        &[json!("auto"), json!("default")],
        "there is one tier",
    )?;
    f.finish()?;
    // Structured output starts at the first token: no thinking block before it.
    if format.is_some() {
        kwargs.entry("enable_thinking").or_insert(Json::Bool(false));
    }
    let tools_given = tools.clone();
    let prompt = chat::build(
        &state.tokenizer,
        API,
        ChatInput {
            messages: msgs,
            tools,
            choice,
            parallel,
            kwargs,
        },
    )?;
    let grammar = structured::request_grammar(
        &state.grammars,
        API,
        prompt.call_grammar.clone(),
        format,
        &tools_given,
    )?;
    let mut stop = c.stop;
    let tool_stop = prompt.tool_stop.filter(|_| grammar.is_none()).map(|s| {
        stop.push(s);
        stop.len() - 1
    });
    let p = Prepared {
        spec: GenSpec {
            prompt: prompt.ids,
            params: SlotParams {
                sampling: c.sampling,
                logprobs: logprobs.then(|| top.unwrap_or(0) as usize),
                grammar,
            },
            max_tokens: max_new.or(max_old).map_or(usize::MAX, |m| m as usize),
            stop,
            n: c.n,
            seed: c.seed,
            tag: String::new(),
        },
        parser: prompt.parser,
        tool_stop,
        include_usage: c.include_usage,
        logprobs,
        meta: Meta {
            id: format!("chatcmpl-{}", random_id(24)),
            created: unix_secs(),
            model,
            fingerprint: state.fingerprint.clone(),
        },
        echo: String::new(),
    };
    let mut p = p;
    p.spec.tag = p.meta.id.clone();
    state.log(&[
        ("event", &"request"),
        ("id", &p.meta.id),
        ("user", &c.user.unwrap_or_default()),
        ("prompt_tokens", &p.spec.prompt.len()),
        ("n", &p.spec.n),
        ("stream", &c.stream),
    ]);
    Ok((p, c.stream))
}

/// Runs a request to the end and answers with one JSON object (`chat`: a chat completion, else
/// a text completion).
async fn collect(state: &Arc<AppState>, p: Prepared, chat: bool) -> Result<Response, ApiError> {
    let mut generation = launch(state, API, p.spec.clone())?;
    let mut choices: Vec<ChoiceState> = (0..p.spec.n)
        .map(|_| ChoiceState::new(&p.parser, &p.spec.stop, p.tool_stop))
        .collect();
    while let Some((i, ev)) = generation.next().await {
        match ev {
            ChoiceEvent::Delta { text, tokens } => {
                if choices[i].delta(&text, tokens).1 {
                    generation.stop_choice(i);
                }
            }
            ChoiceEvent::Finished { reason, stop, .. } => {
                choices[i].end(reason, stop);
            }
            ChoiceEvent::Failed(e) => return Err(e),
        }
    }
    let tok = &state.tokenizer;
    let completion: usize = choices.iter().map(|c| c.tokens.len()).sum();
    let out: Vec<Json> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if chat {
                chat_choice(tok, i, c, p.logprobs)
            } else {
                text_choice(tok, i, c, p.logprobs, &p.echo)
            }
        })
        .collect();
    let m = &p.meta;
    Ok(axum::Json(json!({
        "id": m.id,
        "object": if chat { "chat.completion" } else { "text_completion" },
        "created": m.created,
        "model": m.model,
        "system_fingerprint": m.fingerprint,
        "choices": out,
        "usage": usage_json(generation.prompt_tokens, generation.cached_tokens, completion),
    }))
    .into_response())
}

fn chat_choice(tok: &Tokenizer, i: usize, c: &ChoiceState, logprobs: bool) -> Json {
    let r = &c.reply;
    let content = if !r.tools.is_empty() && r.content.trim().is_empty() {
        Json::Null
    } else {
        r.content.clone().into()
    };
    let mut msg = json!({"role": "assistant", "content": content, "refusal": null});
    if !r.tools.is_empty() {
        msg["tool_calls"] = r.tools.iter().map(|t| tool_json(t, None)).collect();
    }
    if !r.reasoning.is_empty() {
        msg["reasoning_content"] = r.reasoning.clone().into();
    }
    let lp = if logprobs {
        json!({"content": c.tokens.iter().map(|t| logprob_entry(tok, t)).collect::<Vec<_>>(), "refusal": null})
    } else {
        Json::Null
    };
    json!({"index": i, "message": msg, "logprobs": lp, "finish_reason": finish_reason(&c.finish)})
}

/// Legacy completions logprobs: tokens, their logprobs, the top alternatives, text offsets.
pub fn legacy_logprobs(tok: &Tokenizer, tokens: &[TokenOut], offset0: usize) -> Json {
    let mut offset = offset0;
    let (mut texts, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for t in tokens {
        let s = token_text(tok, t.id);
        offsets.push(offset);
        offset += s.len();
        texts.push(s);
        lps.push(t.logprob);
        let top: Map<String, Json> = t
            .top
            .iter()
            .map(|&(id, lp)| (token_text(tok, id), json!(lp)))
            .collect();
        tops.push(Json::Object(top));
    }
    json!({"tokens": texts, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

fn text_choice(tok: &Tokenizer, i: usize, c: &ChoiceState, logprobs: bool, echo: &str) -> Json {
    let lp = if logprobs {
        legacy_logprobs(tok, &c.tokens, echo.len())
    } else {
        Json::Null
    };
    json!({
        "index": i,
        "text": format!("{echo}{}", c.reply.content),
        "logprobs": lp,
        "finish_reason": finish_reason(&c.finish),
    })
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let bytes = body_bytes(API, body)?;
        let st = state.clone();
        let (p, stream) =
            super::off_runtime(API, bytes.len(), move || parse_completion(&st, &bytes)).await?;
        if stream {
            super::openai_stream::completion_stream(&state, p)
        } else {
            collect(&state, p, false).await
        }
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

fn parse_completion(state: &Arc<AppState>, bytes: &[u8]) -> Result<(Prepared, bool), ApiError> {
    let mut f = Fields::parse(API, bytes)?;
    let model = f
        .string("model")?
        .ok_or_else(|| ApiError::bad(API, "model", "`model` is required"))?;
    state.check_model(API, &model)?;
    let tok = &state.tokenizer;
    let one = "one prompt per request (a string or a list of token ids)";
    let (ids, text) = match f.require("prompt")? {
        Json::String(s) => {
            let ids = tok
                .encode(&s, EncodeOptions::text())
                .map_err(|e| ApiError::bad(API, "prompt", e.to_string()))?;
            (ids, s)
        }
        Json::Array(a) => {
            let ids = match a.as_slice() {
                [Json::String(s)] => tok
                    .encode(s, EncodeOptions::text())
                    .map_err(|e| ApiError::bad(API, "prompt", e.to_string()))?,
                [Json::Array(inner)] => token_ids(inner)?,
                list if list.iter().all(Json::is_u64) => token_ids(list)?,
                _ => return Err(ApiError::unsupported(API, "prompt", one)),
            };
            let text = tok.decode(&ids, false).unwrap_or_default();
            (ids, text)
        }
        _ => return Err(ApiError::bad(API, "prompt", one)),
    };
    let max_tokens = f.integer("max_tokens", 1, u32::MAX as u64)?.unwrap_or(16) as usize;
    let c = common(&mut f, state.runner.vocab())?;
    let logprobs = f.integer("logprobs", 0, 20)?;
    let echo = f.bool("echo")?.unwrap_or(false);
    if echo && logprobs.is_some() {
        return Err(ApiError::unsupported(
            API,
            "echo",
            "together with logprobs (prompt logprobs)",
        ));
    }
    f.only(
        "suffix",
        &[json!("")],
        "insertion (suffix) is not implemented",
    )?;
    f.only(
        "best_of",
        &[json!(1), json!(c.n)],
        "best_of other than n needs scoring of choices",
    )?;
    let format = output_format(&mut f)?;
    f.finish()?;
    let grammar = structured::request_grammar(&state.grammars, API, None, format, &[])?;
    let p = Prepared {
        spec: GenSpec {
            prompt: ids,
            params: SlotParams {
                sampling: c.sampling,
                logprobs: logprobs.map(|n| n as usize),
                grammar,
            },
            max_tokens,
            stop: c.stop,
            n: c.n,
            seed: c.seed,
            tag: String::new(),
        },
        parser: ParserSpec::default(),
        tool_stop: None,
        include_usage: c.include_usage,
        logprobs: logprobs.is_some(),
        meta: Meta {
            id: format!("cmpl-{}", random_id(24)),
            created: unix_secs(),
            model,
            fingerprint: state.fingerprint.clone(),
        },
        echo: if echo { text } else { String::new() },
    };
    let mut p = p;
    p.spec.tag = p.meta.id.clone();
    state.log(&[
        ("event", &"request"),
        ("id", &p.meta.id),
        ("user", &c.user.unwrap_or_default()),
        ("prompt_tokens", &p.spec.prompt.len()),
        ("n", &p.spec.n),
        ("stream", &c.stream),
    ]);
    Ok((p, c.stream))
}

fn token_ids(list: &[Json]) -> Result<Vec<u32>, ApiError> {
    list.iter()
        .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(|| ApiError::bad(API, "prompt", "token ids must be integers"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_fields_and_rejections() {
        let mut f = Fields::parse(
            API,
            br#"{"temperature": 0.5, "top_k": -1, "logit_bias": {"7": -100, "3": 2.5}, "stop": "x", "n": 2, "seed": -1, "stream_options": {"include_usage": true}}"#,
        )
        .unwrap();
        let c = common(&mut f, 10).unwrap();
        assert_eq!(c.sampling.temperature, 0.5);
        assert_eq!(c.sampling.top_k, 0);
        assert_eq!(
            c.sampling.logit_bias,
            vec![(7, f32::NEG_INFINITY), (3, 2.5)]
        );
        assert_eq!(
            (c.stop, c.n, c.seed),
            (vec!["x".to_string()], 2, Some(u64::MAX))
        );
        assert!(c.include_usage);
        f.finish().unwrap();
        for bad in [
            r#"{"temperature": 3}"#,
            r#"{"logit_bias": {"10": 1}}"#,
            r#"{"logit_bias": {"1": 101}}"#,
            r#"{"n": 0}"#,
            r#"{"stop": [1]}"#,
            r#"{"stream_options": {"foo": 1}}"#,
        ] {
            let mut f = Fields::parse(API, bad.as_bytes()).unwrap();
            assert!(common(&mut f, 10).is_err(), "{bad}");
        }
        let mut f = Fields::parse(API, br#"{"frobnicate": 1, "ok": null}"#).unwrap();
        let e = common(&mut f, 10).and_then(|_| f.finish()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("frobnicate"));
    }

    #[test]
    fn messages_are_converted_and_checked() {
        let m = messages(
            API,
            json!([
                {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "1"},
            ]),
        )
        .unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "a\nb"}));
        assert_eq!(m[1]["content"], "");
        assert_eq!(m[2]["tool_call_id"], "c");
        for bad in [
            json!([{"role": "function", "content": "x"}]),
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
            json!([{"role": "user", "content": "x", "audio": {"id": "a"}}]),
            json!([{"content": "x"}]),
        ] {
            assert!(messages(API, bad.clone()).is_err(), "{bad}");
        }
    }
}
