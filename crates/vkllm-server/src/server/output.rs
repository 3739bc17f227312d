//! From generated text to what the APIs return: reasoning (`<think>` blocks), answer text and
//! tool calls, streamed. Tool calls are recognised in the format of the model's family:
//!
//! - `Hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen 2.5/3, Hermes,
//!   and the format the server teaches models whose template has no tool support);
//! - `QwenXml`: `<tool_call><function=NAME><parameter=ARG>VALUE</parameter></function></tool_call>`
//!   (Qwen3.5/3.6, Qwen3-Coder; see `tool_xml.rs`);
//! - `JsonList`: a reply that is a JSON list of `{"name", "arguments"}` (Mistral; its
//!   `[TOOL_CALLS]` marker is a control token and does not reach the text);
//! - `JsonObject`: a reply that is one JSON object `{"name", "parameters"}` (Llama 3.x; its
//!   `<|python_tag|>` is likewise a control token).

use serde_json::{Map, Value as Json};
use vkllm_tokenizer::{Segment, ThinkingSplitter};

use super::tool_xml;

/// A parsed tool call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object.
    pub arguments: Json,
}

/// A piece of a reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
    Tool(ToolCall),
}

/// How a family writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    QwenXml,
    JsonList,
    JsonObject,
}

const OPEN: &str = "<tool_call>";
pub const CLOSE: &str = "</tool_call>";

impl ToolFormat {
    /// The format a chat template's source uses (Hermes when it names none).
    pub fn detect(template: &str) -> ToolFormat {
        if template.contains("<function=") {
            ToolFormat::QwenXml
        } else if template.contains(OPEN) {
            ToolFormat::Hermes
        } else if template.contains("[TOOL_CALLS]") {
            ToolFormat::JsonList
        } else if template.contains("<|python_tag|>") || template.contains("ipython") {
            ToolFormat::JsonObject
        } else {
            ToolFormat::Hermes
        }
    }

    /// Text that starts the reply with a call (to `name`, when given), for `tool_choice`
    /// `required` or a named function.
    pub fn prefill(self, name: Option<&str>) -> String {
        let name_json = |n: &str| Json::String(n.to_string()).to_string();
        match (self, name) {
            (ToolFormat::Hermes, None) => format!("{OPEN}\n{{\"name\": \""),
            (ToolFormat::Hermes, Some(n)) => {
                format!("{OPEN}\n{{\"name\": {}, \"arguments\": ", name_json(n))
            }
            (ToolFormat::QwenXml, None) => format!("{OPEN}\n<function="),
            (ToolFormat::QwenXml, Some(n)) => format!("{OPEN}\n<function={n}>\n"),
            (ToolFormat::JsonList, None) => "[{\"name\": \"".to_string(),
            (ToolFormat::JsonList, Some(n)) => {
                format!("[{{\"name\": {}, \"arguments\": ", name_json(n))
            }
            (ToolFormat::JsonObject, None) => "{\"name\": \"".to_string(),
            (ToolFormat::JsonObject, Some(n)) => {
                format!("{{\"name\": {}, \"parameters\": ", name_json(n))
            }
        }
    }

    /// A stop string that ends a single forced call, if the format has a closing tag.
    pub fn close_tag(self) -> Option<&'static str> {
        match self {
            ToolFormat::Hermes | ToolFormat::QwenXml => Some(CLOSE),
            _ => None,
        }
    }
}

/// A fresh id for a tool call (`call_...` / `toolu_...`).
pub fn tool_id(prefix: &str) -> String {
    format!("{prefix}{}", super::random_id(24))
}

/// A call from a parsed JSON object: `name` (one of `names`, when given) plus `arguments` (an
/// object, or a string holding one) or `parameters`.
fn call_from(v: &Json, names: &[String]) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    if !names.is_empty() && !names.contains(&name) {
        return None;
    }
    let args = v.get("arguments").or_else(|| v.get("parameters"));
    let arguments = match args {
        None | Some(Json::Null) => Json::Object(Map::new()),
        Some(Json::String(s)) => serde_json::from_str(s).ok()?,
        Some(a @ Json::Object(_)) => a.clone(),
        Some(_) => return None,
    };
    arguments.is_object().then(|| ToolCall {
        id: tool_id("call_"),
        name,
        arguments,
    })
}

/// The first JSON value in `text` and the bytes it took, if `text` starts (after whitespace)
/// with a complete one.
fn first_json(text: &str) -> Option<(Json, usize)> {
    let mut it = serde_json::Deserializer::from_str(text).into_iter::<Json>();
    match it.next() {
        Some(Ok(v)) => Some((v, it.byte_offset())),
        _ => None,
    }
}

#[derive(Debug)]
enum State {
    /// Answer text; `held` may be the start of an opening tag.
    Text,
    /// Inside a Hermes call: the text since `<tool_call>`.
    InCall(String),
    /// JSON formats: the reply started with JSON, buffered whole.
    Json(String),
    /// JSON formats: the reply is plain text.
    Plain,
}

/// Finds tool calls in a stream of answer text.
#[derive(Debug)]
pub struct ToolParser {
    format: ToolFormat,
    state: State,
    held: String,
    /// Stop after the first call (a forced single call).
    single: bool,
    calls: usize,
    /// The functions the request offers (calls to others are text).
    names: Vec<String>,
    /// Their parameters schemas, by name (the XML form keeps string parameters as text).
    schemas: Vec<(String, Json)>,
}

impl ToolParser {
    pub fn new(format: ToolFormat, single: bool, names: Vec<String>) -> Self {
        ToolParser {
            format,
            state: State::Text,
            held: String::new(),
            single,
            calls: 0,
            names,
            schemas: Vec::new(),
        }
    }

    /// The offered functions' parameters schemas, by name.
    pub fn with_schemas(mut self, schemas: Vec<(String, Json)>) -> Self {
        self.schemas = schemas;
        self
    }

    /// The call in the text of a tagged call (after `<tool_call>`, before its closing tag).
    fn tagged_call(&self, inner: &str) -> Option<ToolCall> {
        match self.format {
            ToolFormat::QwenXml => tool_xml::parse_call(inner, &self.names, &self.schemas),
            _ => first_json(inner).and_then(|(v, _)| call_from(&v, &self.names)),
        }
    }

    /// Whether a single forced call is complete (the rest of the reply can be dropped).
    pub fn done(&self) -> bool {
        self.single && self.calls > 0
    }

    pub fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        if self.done() {
            return;
        }
        match self.format {
            ToolFormat::Hermes | ToolFormat::QwenXml => self.push_hermes(text, out),
            ToolFormat::JsonList | ToolFormat::JsonObject => self.push_json(text, out),
        }
    }

    fn emit_call(&mut self, call: ToolCall, out: &mut Vec<Piece>) {
        if !self.done() {
            self.calls += 1;
            out.push(Piece::Tool(call));
        }
    }

    fn push_hermes(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.held.push_str(text);
        loop {
            match &mut self.state {
                State::InCall(body) => {
                    body.push_str(&std::mem::take(&mut self.held));
                    // The call ends at the first closing tag after its JSON (or its XML function
                    // block) is complete: an argument may hold the tag itself.
                    let end = if self.format == ToolFormat::QwenXml {
                        match tool_xml::call_end(body, CLOSE) {
                            Some(e) => e,
                            None => return,
                        }
                    } else {
                        let mut from = 0;
                        loop {
                            let Some(i) = body[from..].find(CLOSE) else {
                                return;
                            };
                            let end = from + i;
                            let mut it = serde_json::Deserializer::from_str(&body[..end])
                                .into_iter::<Json>();
                            match it.next() {
                                Some(Err(e)) if e.is_eof() => from = end + CLOSE.len(),
                                _ => break end,
                            }
                        }
                    };
                    let inner = body[..end].to_string();
                    let rest = body[end + CLOSE.len()..].to_string();
                    self.state = State::Text;
                    match self.tagged_call(&inner) {
                        Some(c) => self.emit_call(c, out),
                        None => out.push(Piece::Content(format!("{OPEN}{inner}{CLOSE}"))),
                    }
                    if self.done() {
                        return;
                    }
                    self.held = rest;
                }
                _ => {
                    if let Some(pos) = self.held.find(OPEN) {
                        let before = self.held[..pos].to_string();
                        let after = self.held[pos + OPEN.len()..].to_string();
                        if !before.is_empty() {
                            out.push(Piece::Content(before));
                        }
                        self.state = State::InCall(String::new());
                        self.held = after;
                        continue;
                    }
                    let keep = held_prefix_len(&self.held, OPEN);
                    let cut = self.held.len() - keep;
                    if cut > 0 {
                        out.push(Piece::Content(self.held[..cut].to_string()));
                        self.held.drain(..cut);
                    }
                    return;
                }
            }
        }
    }

    fn push_json(&mut self, text: &str, out: &mut Vec<Piece>) {
        match &mut self.state {
            State::Plain => out.push(Piece::Content(text.to_string())),
            State::Json(buf) => {
                buf.push_str(text);
                if self.single {
                    self.try_json(out, false);
                }
            }
            _ => {
                self.held.push_str(text);
                let trimmed = self.held.trim_start();
                let want = if self.format == ToolFormat::JsonList {
                    '['
                } else {
                    '{'
                };
                match trimmed.chars().next() {
                    None => {}
                    Some(c) if c == want => {
                        self.state = State::Json(std::mem::take(&mut self.held));
                        if self.single {
                            self.try_json(out, false);
                        }
                    }
                    Some(_) => {
                        self.state = State::Plain;
                        out.push(Piece::Content(std::mem::take(&mut self.held)));
                    }
                }
            }
        }
    }

    /// Parses the buffered JSON reply; at the end (`last`) an unparsable one is text.
    fn try_json(&mut self, out: &mut Vec<Piece>, last: bool) {
        let State::Json(buf) = &self.state else {
            return;
        };
        let calls = match first_json(buf) {
            Some((Json::Array(items), _)) => items
                .iter()
                .map(|v| call_from(v, &self.names))
                .collect::<Option<Vec<_>>>(),
            Some((v @ Json::Object(_), _)) => call_from(&v, &self.names).map(|c| vec![c]),
            _ => None,
        };
        match calls {
            Some(calls) if !calls.is_empty() => {
                self.state = State::Plain;
                for c in calls {
                    self.emit_call(c, out);
                }
            }
            _ if last => {
                let text = buf.clone();
                self.state = State::Plain;
                out.push(Piece::Content(text));
            }
            _ => {}
        }
    }

    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        if self.done() {
            return;
        }
        match std::mem::replace(&mut self.state, State::Text) {
            State::InCall(mut body) => {
                body.push_str(&std::mem::take(&mut self.held));
                // An unclosed call (the model ended right after the JSON) still counts.
                match self.tagged_call(&body) {
                    Some(c) => self.emit_call(c, out),
                    None => out.push(Piece::Content(format!("{OPEN}{body}"))),
                }
            }
            s @ State::Json(_) => {
                self.state = s;
                self.try_json(out, true);
            }
            _ => {
                if !self.held.is_empty() {
                    out.push(Piece::Content(std::mem::take(&mut self.held)));
                }
            }
        }
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn held_prefix_len(text: &str, tag: &str) -> usize {
    let max = (tag.len() - 1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && tag.starts_with(&text[start..])
        })
        .unwrap_or(0)
}

/// Generated text to pieces: reasoning split off first, then tool calls found in the answer.
pub struct OutputParser {
    think: Option<ThinkingSplitter>,
    tools: Option<ToolParser>,
}

/// What an [`OutputParser`] is made from (one parser per choice).
#[derive(Clone, Debug, Default)]
pub struct ParserSpec {
    /// `Some(starts_in_reasoning)` for reasoning models.
    pub think: Option<bool>,
    /// The tool format, and whether a single forced call is expected.
    pub tools: Option<(ToolFormat, bool)>,
    /// The function names calls may use (empty: any).
    pub names: Vec<String>,
    /// Their parameters schemas, by name.
    pub schemas: Vec<(String, Json)>,
    /// Text the reply was prefilled with (a forced call's start), parsed before the output.
    pub prefill: String,
}

impl ParserSpec {
    pub fn make(&self) -> OutputParser {
        let mut p = OutputParser {
            think: self
                .think
                .map(|inside| ThinkingSplitter::new("<think>", "</think>", inside)),
            tools: self.tools.map(|(f, single)| {
                ToolParser::new(f, single, self.names.clone()).with_schemas(self.schemas.clone())
            }),
        };
        if !self.prefill.is_empty() {
            let pieces = p.push(&self.prefill);
            debug_assert!(pieces.is_empty(), "a prefill is held inside the call");
        }
        p
    }
}

impl OutputParser {
    /// Whether a single forced tool call is complete.
    pub fn done(&self) -> bool {
        self.tools.as_ref().is_some_and(ToolParser::done)
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        match &mut self.think {
            Some(t) => {
                for seg in t.push(text) {
                    self.answer(seg, &mut out);
                }
            }
            None => self.answer(Segment::Answer(text.to_string()), &mut out),
        }
        out
    }

    fn answer(&mut self, seg: Segment, out: &mut Vec<Piece>) {
        match (seg, &mut self.tools) {
            (Segment::Reasoning(r), _) => out.push(Piece::Reasoning(r)),
            (Segment::Answer(a), Some(tp)) => tp.push(&a, out),
            (Segment::Answer(a), None) => {
                if !a.is_empty() {
                    out.push(Piece::Content(a))
                }
            }
        }
    }

    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        if let Some(t) = &mut self.think {
            for seg in t.finish() {
                self.answer(seg, &mut out);
            }
        }
        if let Some(tp) = &mut self.tools {
            tp.finish(&mut out);
        }
        out
    }
}

/// A whole reply gathered from pieces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    pub reasoning: String,
    pub content: String,
    pub tools: Vec<ToolCall>,
}

impl Reply {
    pub fn add(&mut self, pieces: Vec<Piece>) {
        for p in pieces {
            match p {
                Piece::Reasoning(r) => self.reasoning.push_str(&r),
                Piece::Content(c) => self.content.push_str(&c),
                Piece::Tool(t) => self.tools.push(t),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds `text` one character at a time (the hardest split), returns the reply.
    fn run(spec: &ParserSpec, text: &str) -> Reply {
        let mut p = spec.make();
        let mut r = Reply::default();
        for c in text.chars() {
            r.add(p.push(&c.to_string()));
        }
        r.add(p.finish());
        r
    }

    fn hermes(single: bool) -> ParserSpec {
        ParserSpec {
            tools: Some((ToolFormat::Hermes, single)),
            ..ParserSpec::default()
        }
    }

    #[test]
    fn hermes_calls_between_text() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"t\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>";
        let r = run(&hermes(false), text);
        assert_eq!(r.content, "Let me check.\n\n");
        assert_eq!(r.tools.len(), 2);
        assert_eq!(r.tools[0].name, "get_weather");
        assert_eq!(r.tools[0].arguments, json!({"city": "Paris"}));
        assert_eq!(r.tools[1].arguments, json!({"a": 1}));
        assert!(r.tools[0].id.starts_with("call_") && r.tools[0].id != r.tools[1].id);
        // The closing tag inside a string argument belongs to the argument.
        let text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"x</tool_call>y\"}}\n</tool_call>z";
        let r = run(&hermes(false), text);
        assert_eq!(r.tools.len(), 1, "{r:?}");
        assert_eq!(r.tools[0].arguments, json!({"s": "x</tool_call>y"}));
        assert_eq!(r.content, "z");
    }

    #[test]
    fn hermes_broken_and_unclosed_calls() {
        // Not JSON: given back as text. Almost a tag: text too.
        let r = run(&hermes(false), "a <tool_c b <tool_call>oops</tool_call> c");
        assert_eq!(r.content, "a <tool_c b <tool_call>oops</tool_call> c");
        assert!(r.tools.is_empty());
        // Unclosed at the end of the reply but complete JSON: a call.
        let r = run(&hermes(false), "<tool_call>{\"name\": \"f\"}");
        assert_eq!((r.content.as_str(), r.tools.len()), ("", 1));
        assert_eq!(r.tools[0].arguments, json!({}));
        // Unclosed and incomplete: text.
        let r = run(&hermes(false), "<tool_call>{\"name\": ");
        assert_eq!(r.content, "<tool_call>{\"name\": ");
        // A function the request does not offer: text.
        let mut spec = hermes(false);
        spec.names = vec!["f".into()];
        let r = run(&spec, "<tool_call>{\"name\": \"g\"}</tool_call>");
        assert_eq!(
            (r.content.as_str(), r.tools.len()),
            ("<tool_call>{\"name\": \"g\"}</tool_call>", 0)
        );
    }

    #[test]
    fn forced_single_call_from_a_prefill() {
        let mut spec = hermes(true);
        spec.prefill = ToolFormat::Hermes.prefill(Some("get_weather"));
        let r = run(
            &spec,
            "{\"city\": \"Oslo\"}}\n</tool_call> and more <tool_call>",
        );
        assert_eq!(r.tools.len(), 1);
        assert_eq!(r.tools[0].name, "get_weather");
        assert_eq!(r.tools[0].arguments, json!({"city": "Oslo"}));
        assert_eq!(r.content, "");
        // A name that needs escaping stays valid JSON.
        let p = ToolFormat::JsonObject.prefill(Some("a\"b"));
        assert_eq!(p, "{\"name\": \"a\\\"b\", \"parameters\": ");
    }

    #[test]
    fn json_formats() {
        let list = ParserSpec {
            tools: Some((ToolFormat::JsonList, false)),
            ..ParserSpec::default()
        };
        let r = run(
            &list,
            " [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
        );
        assert_eq!(
            r.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(run(&list, "Hello [1]").content, "Hello [1]");
        assert_eq!(run(&list, "[1, 2]").content, "[1, 2]");
        let obj = ParserSpec {
            tools: Some((ToolFormat::JsonObject, true)),
            ..ParserSpec::default()
        };
        let r = run(
            &obj,
            "{\"name\": \"f\", \"parameters\": {\"q\": \"x\"}} trailing",
        );
        assert_eq!(r.tools[0].arguments, json!({"q": "x"}));
        assert_eq!(r.content, "");
        assert_eq!(
            ToolFormat::detect("{{ '<tool_call>' }}"),
            ToolFormat::Hermes
        );
        assert_eq!(ToolFormat::detect("[TOOL_CALLS]"), ToolFormat::JsonList);
        assert_eq!(ToolFormat::detect("<|python_tag|>"), ToolFormat::JsonObject);
    }

    #[test]
    fn qwen_xml_calls_streamed() {
        let spec = ParserSpec {
            think: Some(false),
            tools: Some((ToolFormat::QwenXml, false)),
            names: vec!["get_weather".into(), "now".into()],
            schemas: vec![(
                "get_weather".into(),
                json!({"type": "object", "properties": {"city": {"type": "string"},
                    "days": {"type": "integer"}}}),
            )],
            prefill: String::new(),
        };
        let text = "<think>\nWeather needed.\n</think>\n\nLet me check.\n<tool_call>\n\
                    <function=get_weather>\n<parameter=city>\n123 Main\n</parameter>\n\
                    <parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n\
                    <tool_call>\n<function=now>\n</function>\n</tool_call>";
        let r = run(&spec, text);
        assert_eq!(r.reasoning, "Weather needed.");
        assert_eq!(r.content, "Let me check.\n\n");
        assert_eq!(
            r.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["get_weather", "now"]
        );
        assert_eq!(r.tools[0].arguments, json!({"city": "123 Main", "days": 2}));
        assert_eq!(r.tools[1].arguments, json!({}));
        // A function not offered stays text; an unclosed call at the end still counts.
        let r = run(
            &spec,
            "<tool_call>\n<function=rm>\n</function>\n</tool_call>",
        );
        assert!(
            r.tools.is_empty() && r.content.contains("<function=rm>"),
            "{r:?}"
        );
        let r = run(&spec, "<tool_call>\n<function=now>\n</function>");
        assert_eq!(r.tools.len(), 1);
        // A forced call: the prefill opens it, the parser finishes after it.
        let forced = ParserSpec {
            tools: Some((ToolFormat::QwenXml, true)),
            prefill: ToolFormat::QwenXml.prefill(Some("get_weather")),
            ..spec.clone()
        };
        let r = run(
            &forced,
            "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call> extra",
        );
        assert_eq!(r.tools[0].arguments, json!({"city": "Oslo"}));
        assert_eq!(r.content, "");
        let qwen35 = vkllm_tokenizer::chat::builtin_template("qwen3_5").map(|t| t.1);
        assert_eq!(
            ToolFormat::detect(qwen35.unwrap_or_default()),
            ToolFormat::QwenXml
        );
    }

    #[test]
    fn reasoning_then_answer_with_a_call() {
        let spec = ParserSpec {
            think: Some(false),
            tools: Some((ToolFormat::Hermes, false)),
            ..ParserSpec::default()
        };
        let r = run(
            &spec,
            "<think>\nI should call f.\n</think>\n\nOK <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
        );
        assert_eq!(r.reasoning, "I should call f.");
        assert_eq!(r.content, "OK ");
        assert_eq!(r.tools.len(), 1);
        // A template that opens the block itself: the reply starts inside it.
        let spec = ParserSpec {
            think: Some(true),
            ..ParserSpec::default()
        };
        let r = run(&spec, "hmm</think>yes");
        assert_eq!((r.reasoning.as_str(), r.content.as_str()), ("hmm", "yes"));
    }
}
