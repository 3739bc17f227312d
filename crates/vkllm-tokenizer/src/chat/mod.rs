//! Chat templates, rendered with minijinja the way transformers' `apply_chat_template` renders
//! them with Jinja2: `trim_blocks` and `lstrip_blocks` on, Python string methods (pycompat),
//! a `tojson` that writes what Python's `json.dumps(ensure_ascii=False)` writes, values printed
//! as Python prints them (`None`, `True`), `raise_exception`, `strftime_now`, and the
//! `{% generation %}` block (rendered as its body).

mod builtin;
mod python;

pub use builtin::{BUILTIN_FAMILIES, builtin_template};
pub(crate) use python::py_isspace as python_isspace;
pub use python::{JsonStyle, float_repr, json_dumps};

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State, Value};
use serde_json::{Map, Value as Json};

use crate::error::{Result, TokenizerError};

/// Where a chat template came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// Shipped with the model (`tokenizer_config.json`, `chat_template.jinja`, GGUF
    /// `tokenizer.chat_template`); the string says which.
    Model(String),
    /// The model has none; this is its family's template from the built-in table.
    Builtin { family: String },
    /// Given by the user.
    User(String),
}

impl std::fmt::Display for TemplateOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateOrigin::Model(w) => write!(f, "the model's template ({w})"),
            TemplateOrigin::Builtin { family } => {
                write!(f, "the built-in {family} template (the model has none)")
            }
            TemplateOrigin::User(w) => write!(f, "a user template ({w})"),
        }
    }
}

/// What a render gets besides the messages (transformers' `apply_chat_template` arguments).
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// End with the header of a new assistant turn.
    pub add_generation_prompt: bool,
    /// Tool JSON schemas (a list), or `None`.
    pub tools: Option<Json>,
    /// RAG documents (a list of objects), or `None`.
    pub documents: Option<Json>,
    /// Any other template variable: `enable_thinking`, `reasoning_effort`, ...
    pub kwargs: Map<String, Json>,
    /// Leave the last message open so the model continues it (a prefilled assistant turn), as
    /// transformers' `continue_final_message=True`. Not together with `add_generation_prompt`.
    pub continue_final_message: bool,
}

impl RenderOptions {
    /// Options with just `add_generation_prompt`.
    pub fn generation(add_generation_prompt: bool) -> Self {
        RenderOptions {
            add_generation_prompt,
            ..RenderOptions::default()
        }
    }
}

/// A template value from anything serde can serialize.
pub(crate) fn to_value<T: serde::Serialize>(x: T) -> Value {
    Value::from(minijinja::value::Serde(x))
}

/// transformers' marker for `continue_final_message`.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

const RAISE_MARKER: &str = "\u{0}raise_exception\u{0}";

/// A compiled chat template plus the special-token variables it sees (`bos_token`, ...).
pub struct ChatTemplate {
    name: String,
    source: String,
    origin: TemplateOrigin,
    special_tokens: Vec<(String, String)>,
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("name", &self.name)
            .field("origin", &self.origin)
            .field("special_tokens", &self.special_tokens)
            .finish_non_exhaustive()
    }
}

impl Clone for ChatTemplate {
    fn clone(&self) -> Self {
        // The source compiled once already, so compiling it again cannot fail.
        ChatTemplate::new(
            &self.name,
            &self.source,
            self.origin.clone(),
            self.special_tokens.clone(),
        )
        .expect("a chat template that compiled once compiles again")
    }
}

impl ChatTemplate {
    /// Compiles `source`. `special_tokens` are the template variables transformers passes from
    /// `tokenizer.special_tokens_map` (`("bos_token", "<bos>")`, ...). A syntax error comes
    /// back as [`TokenizerError::TemplateSyntax`] with its line.
    pub fn new(
        name: &str,
        source: &str,
        origin: TemplateOrigin,
        special_tokens: Vec<(String, String)>,
    ) -> Result<Self> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| render_error(name, &e))?,
        );
        env.set_unknown_method_callback(py_methods);
        env.set_formatter(|out, _state, value| {
            let mut s = String::new();
            python::py_format(value, false, &mut s);
            out.write_str(&s).map_err(Error::from)
        });
        env.add_filter("tojson", tojson);
        env.add_filter("trim", trim);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        let prepared = rewrite_generation_tags(source);
        env.add_template_owned(name.to_string(), prepared)
            .map_err(|e| syntax_error(name, &e))?;
        Ok(ChatTemplate {
            name: name.to_string(),
            source: source.to_string(),
            origin,
            special_tokens,
            env,
        })
    }

    /// The template's name (e.g. `default`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The template text as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Where the template came from.
    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// The special-token variables the template sees.
    pub fn special_tokens(&self) -> &[(String, String)] {
        &self.special_tokens
    }

    /// Renders `messages` (a JSON list of message objects) as transformers'
    /// `apply_chat_template(messages, tokenize=False, ...)` does: keys whose value is null are
    /// dropped, `reasoning_content` / `thinking` / `reasoning` are aliased to each other.
    pub fn render(&self, messages: &Json, opts: &RenderOptions) -> Result<String> {
        let mut messages = normalize_messages(messages)?;
        let final_message = match opts.continue_final_message {
            true => Some(mark_final_message(&mut messages, opts)?),
            false => None,
        };
        let mut ctx = Map::new();
        for (k, v) in &self.special_tokens {
            ctx.insert(k.clone(), Json::String(v.clone()));
        }
        for (k, v) in &opts.kwargs {
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), messages);
        ctx.insert("tools".into(), opts.tools.clone().unwrap_or(Json::Null));
        ctx.insert(
            "documents".into(),
            opts.documents.clone().unwrap_or(Json::Null),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Json::Bool(opts.add_generation_prompt),
        );
        let template = self
            .env
            .get_template(&self.name)
            .map_err(|e| syntax_error(&self.name, &e))?;
        let rendered = template
            .render(crate::chat::to_value(&ctx))
            .map_err(|e| render_error(&self.name, &e))?;
        match final_message {
            None => Ok(rendered),
            Some(text) => cut_at_tag(rendered, &text),
        }
    }
}

/// Appends the continue tag to the last message's content (the last text block of a list);
/// returns the content as it was.
fn mark_final_message(messages: &mut Json, opts: &RenderOptions) -> Result<String> {
    let bad = |message: &str| TokenizerError::BadMessages {
        message: message.to_string(),
    };
    if opts.add_generation_prompt {
        return Err(bad(
            "continue_final_message and add_generation_prompt cannot be used together",
        ));
    }
    let last = messages
        .as_array_mut()
        .and_then(|l| l.last_mut())
        .and_then(Json::as_object_mut)
        .ok_or_else(|| bad("continue_final_message: no final message"))?;
    match last.get_mut("content") {
        Some(Json::String(s)) => {
            let text = s.clone();
            s.push_str(CONTINUE_TAG);
            Ok(text)
        }
        Some(Json::Array(blocks)) => {
            let block = blocks
                .iter_mut()
                .rev()
                .find_map(|b| match b.get_mut("text") {
                    Some(Json::String(t)) => Some(t),
                    _ => None,
                })
                .ok_or_else(|| {
                    bad("continue_final_message: no text to continue in the final message")
                })?;
            let text = block.clone();
            block.push_str(CONTINUE_TAG);
            Ok(text)
        }
        _ => Err(bad(
            "continue_final_message: the final message has no content",
        )),
    }
}

/// Cuts the render where the continued message ends (transformers' logic: exactly at the tag
/// when the template kept it whole, else before it with trailing whitespace stripped).
fn cut_at_tag(rendered: String, final_text: &str) -> Result<String> {
    let tag = CONTINUE_TAG.trim();
    let text = python::py_strip(final_text, None, true, true);
    let Some(loc) = rendered.rfind(tag).filter(|_| rendered.contains(text)) else {
        return Err(TokenizerError::BadMessages {
            message: "continue_final_message: the template does not show the final message".into(),
        });
    };
    if rendered[loc..].starts_with(CONTINUE_TAG) {
        Ok(rendered[..loc].to_string())
    } else {
        Ok(python::py_strip(&rendered[..loc], None, false, true).to_string())
    }
}

/// transformers' `_normalize_chat_messages` + `_alias_reasoning_fields`.
fn normalize_messages(messages: &Json) -> Result<Json> {
    let Json::Array(list) = messages else {
        return Err(TokenizerError::BadMessages {
            message: "expected a JSON list of message objects".into(),
        });
    };
    if list.is_empty() {
        return Err(TokenizerError::BadMessages {
            message: "the conversation is empty".into(),
        });
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let Json::Object(obj) = m else {
            return Err(TokenizerError::BadMessages {
                message: format!("message {i} is not an object"),
            });
        };
        let mut obj: Map<String, Json> = obj
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let reasoning = ["reasoning_content", "thinking", "reasoning"]
            .iter()
            .find_map(|k| obj.get(*k).cloned());
        if let Some(r) = reasoning {
            // {"thinking": r, **message, "reasoning_content": r}
            let mut aliased = Map::new();
            aliased.insert("thinking".into(), r.clone());
            for (k, v) in obj {
                aliased.insert(k, v);
            }
            aliased.insert("reasoning_content".into(), r);
            obj = aliased;
        }
        out.push(Json::Object(obj));
    }
    Ok(Json::Array(out))
}

/// `{% generation %}...{% endgeneration %}` (transformers' assistant-mask extension) renders
/// its body unchanged; rewrite it to `{% if true %}...{% endif %}`, keeping `-` markers so
/// whitespace control is the same.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(pos) = rest.find("{%") {
        out.push_str(&rest[..pos]);
        let tag = &rest[pos..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => out.push_str(&format!("{{%{lead} {r} {trail}%}}")),
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

fn syntax_error(name: &str, e: &Error) -> TokenizerError {
    TokenizerError::TemplateSyntax {
        name: name.to_string(),
        line: e.line().unwrap_or(0),
        range: e.range(),
        message: e.detail().unwrap_or(&e.kind().to_string()).to_string(),
    }
}

fn render_error(name: &str, e: &Error) -> TokenizerError {
    // A raise_exception() may arrive wrapped in another error (a macro call, an include).
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(msg) = err
            .downcast_ref::<Error>()
            .and_then(|mj| mj.detail())
            .and_then(|d| d.strip_prefix(RAISE_MARKER))
        {
            return TokenizerError::TemplateRaised {
                name: name.to_string(),
                message: msg.to_string(),
            };
        }
        cur = err.source();
    }
    if e.kind() == ErrorKind::SyntaxError {
        return syntax_error(name, e);
    }
    TokenizerError::TemplateRender {
        name: name.to_string(),
        line: e.line().unwrap_or(0),
        message: match e.detail() {
            Some(d) => format!("{}: {d}", e.kind()),
            None => e.kind().to_string(),
        },
    }
}

fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISE_MARKER}{message}"),
    ))
}

fn strftime_now(format: String) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    python::strftime_utc(&format, now)
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(
    value: &Value,
    ensure_ascii: Option<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, Error> {
    let ensure_ascii = match kwargs.get::<Option<Value>>("ensure_ascii")? {
        Some(v) => v.is_true(),
        None => ensure_ascii.is_some_and(|v| v.is_true()),
    };
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.kind() {
            ValueKind::Number => Some(" ".repeat(v.as_usize().unwrap_or(0))),
            ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an int or a str",
                ));
            }
        },
    };
    let separators = match kwargs.get::<Option<Value>>("separators")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] => Some((
                    a.as_str().unwrap_or_default().to_string(),
                    b.as_str().unwrap_or_default().to_string(),
                )),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings",
                    ));
                }
            }
        }
    };
    let sort_keys = kwargs
        .get::<Option<Value>>("sort_keys")?
        .is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let style = JsonStyle {
        ensure_ascii,
        indent,
        separators,
        sort_keys,
    };
    Ok(Value::from(json_dumps(value, &style)?))
}

/// Jinja2's `trim` filter: Python's `str.strip(chars)`.
fn trim(value: &Value, chars: Option<String>) -> std::result::Result<Value, Error> {
    let s = value.as_str().map(str::to_string).unwrap_or_else(|| {
        let mut s = String::new();
        python::py_format(value, false, &mut s);
        s
    });
    Ok(Value::from(python::py_strip(
        &s,
        chars.as_deref(),
        true,
        true,
    )))
}

/// Python methods on template values: `strip`/`lstrip`/`rstrip` with Python's whitespace,
/// everything else from minijinja-contrib's pycompat.
fn py_methods(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> std::result::Result<Value, Error> {
    if let (Some(s), "strip" | "lstrip" | "rstrip") = (value.as_str(), method) {
        let chars = match args {
            [] => None,
            [c] if c.is_none() => None,
            [c] => Some(c.as_str().ok_or_else(|| {
                Error::new(ErrorKind::InvalidOperation, "strip arg must be None or str")
            })?),
            _ => return Err(Error::from(ErrorKind::TooManyArguments)),
        };
        let (l, r) = match method {
            "strip" => (true, true),
            "lstrip" => (true, false),
            _ => (false, true),
        };
        return Ok(Value::from(python::py_strip(s, chars, l, r)));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

#[cfg(test)]
mod tests;
