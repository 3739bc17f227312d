//! Structured outputs in the APIs: OpenAI `response_format` (`json_object`, `json_schema`),
//! Anthropic `output_config.format` (`json_schema`), vkllm's `grammar` extension (Lark or regex),
//! and the grammar of a forced tool call (`tool_choice` required or named: the arguments must
//! match the tool's schema). Grammars compile against the model's vocabulary
//! ([`vkllm_engine::Grammars`], cached by schema).

use std::sync::Arc;

use serde_json::{Value as Json, json};
use vkllm_engine::{Grammar, GrammarSpec, Grammars, bound_whitespace};

use super::error::{Api, ApiError};
use super::output::ToolFormat;

/// The grammar compiler of a server, or why there is none.
pub type GrammarCompiler = Result<Arc<Grammars>, String>;

/// Compiles `spec` for a request.
pub fn compile(
    g: &GrammarCompiler,
    api: Api,
    param: &str,
    spec: &GrammarSpec,
) -> Result<Arc<Grammar>, ApiError> {
    let g = g.as_ref().map_err(|why| {
        ApiError::unsupported(
            api,
            param,
            &format!("no structured outputs for this model: {why}"),
        )
    })?;
    g.compile(spec)
        .map_err(|e| ApiError::bad(api, param, e.to_string()))
}

/// What a request constrains: a forced call's grammar (from the chat prompt), else the
/// format it asked for (`(spec, field)`), compiled; and every tool's schema checked (a tool
/// whose parameters are not a schema is a 400 even when no call is forced). A constrained
/// forced call ends with its grammar: the caller drops the closing-tag stop string (a string
/// argument may contain the tag).
pub fn request_grammar(
    g: &GrammarCompiler,
    api: Api,
    call: Option<GrammarSpec>,
    format: Option<(GrammarSpec, &str)>,
    tools: &[Json],
) -> Result<Option<Arc<Grammar>>, ApiError> {
    if g.is_ok() {
        for t in tools {
            let name = tool_name(t).unwrap_or("?");
            compile(g, api, "tools", &GrammarSpec::JsonSchema(tool_schema(t))).map_err(|e| {
                ApiError::bad(
                    api,
                    "tools",
                    format!(
                        "tool `{name}`: its parameters are not a usable JSON Schema: {}",
                        e.message
                    ),
                )
            })?;
        }
    }
    match (call, format) {
        // Without a compiler a forced call still works, unconstrained (as before grammars).
        (Some(_), _) if g.is_err() => Ok(None),
        (Some(c), _) => compile(g, api, "tool_choice", &c).map(Some),
        (None, Some((f, param))) => compile(g, api, param, &f).map(Some),
        (None, None) => Ok(None),
    }
}

/// OpenAI `response_format`.
pub fn openai_format(api: Api, v: Option<Json>) -> Result<Option<GrammarSpec>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    match v.get("type").and_then(Json::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(GrammarSpec::JsonObject)),
        Some("json_schema") => {
            let schema = v.pointer("/json_schema/schema").cloned().ok_or_else(|| {
                ApiError::bad(
                    api,
                    "response_format",
                    "`json_schema` needs `json_schema.schema`",
                )
            })?;
            schema_spec(api, "response_format.json_schema.schema", schema).map(Some)
        }
        _ => Err(ApiError::bad(
            api,
            "response_format",
            "`type` must be text, json_object or json_schema",
        )),
    }
}

/// Anthropic `output_config.format` (and the older top-level `output_format`).
pub fn anthropic_format(api: Api, v: Json, param: &str) -> Result<GrammarSpec, ApiError> {
    match v.get("type").and_then(Json::as_str) {
        Some("json_schema") => {
            let schema = v
                .get("schema")
                .cloned()
                .ok_or_else(|| ApiError::bad(api, param, "`json_schema` format needs `schema`"))?;
            schema_spec(api, &format!("{param}.schema"), schema)
        }
        _ => Err(ApiError::bad(api, param, "`type` must be json_schema")),
    }
}

fn schema_spec(api: Api, param: &str, schema: Json) -> Result<GrammarSpec, ApiError> {
    match schema {
        Json::Object(_) | Json::Bool(true) => Ok(GrammarSpec::JsonSchema(schema)),
        _ => Err(ApiError::bad(api, param, "a JSON Schema must be an object")),
    }
}

/// vkllm's extension field `grammar`: `{"type": "lark" | "regex", "value": "..."}` (a bare
/// string is Lark).
pub fn extension(api: Api, v: Option<Json>) -> Result<Option<GrammarSpec>, ApiError> {
    let bad = |m: &str| ApiError::bad(api, "grammar", m.to_string());
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(g)) => Ok(Some(GrammarSpec::Lark(g))),
        Some(Json::Object(o)) => {
            let value = o
                .get("value")
                .and_then(Json::as_str)
                .ok_or_else(|| bad("`grammar.value` must be a string"))?
                .to_string();
            match o.get("type").and_then(Json::as_str) {
                Some("lark") => Ok(Some(GrammarSpec::Lark(value))),
                Some("regex") => Ok(Some(GrammarSpec::Regex(value))),
                _ => Err(bad("`grammar.type` must be lark or regex")),
            }
        }
        Some(_) => Err(bad(
            "`grammar` must be a string or {\"type\": \"lark\" | \"regex\", \"value\"}",
        )),
    }
}

/// A tool's argument schema: OpenAI `function.parameters`, Anthropic `input_schema` (an
/// object with no schema: any object).
pub fn tool_schema(tool: &Json) -> Json {
    tool.pointer("/function/parameters")
        .or_else(|| tool.get("input_schema"))
        .or_else(|| tool.get("parameters"))
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}))
}

pub fn tool_name(tool: &Json) -> Option<&str> {
    tool.pointer("/function/name")
        .or_else(|| tool.get("name"))
        .and_then(Json::as_str)
}

/// A Lark string literal.
fn lit(s: &str) -> String {
    Json::String(s.to_string()).to_string()
}

/// The grammar of what follows `ToolFormat::prefill` for a forced call: to `name` (its
/// arguments), or to any of `tools` (the rest of the name, then its arguments), closed as the
/// format closes a single call.
pub fn forced_call(format: ToolFormat, name: Option<&str>, tools: &[Json]) -> GrammarSpec {
    if format == ToolFormat::QwenXml {
        return forced_xml_call(name, tools);
    }
    let (key, close) = match format {
        ToolFormat::Hermes | ToolFormat::QwenXml => ("arguments", "}\n</tool_call>"),
        ToolFormat::JsonList => ("arguments", "}]"),
        ToolFormat::JsonObject => ("parameters", "}"),
    };
    let mut rules = Vec::new();
    let mut alts = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let Some(n) = tool_name(t) else { continue };
        if name.is_some_and(|want| want != n) {
            continue;
        }
        let head = match name {
            Some(_) => String::new(),
            None => lit(&format!("{n}\", \"{key}\": ")),
        };
        alts.push(format!("call{i}"));
        rules.push(format!("call{i}: {head} args{i} {}", lit(close)));
        rules.push(format!(
            "args{i}: %json {}",
            bound_whitespace(tool_schema(t))
        ));
    }
    GrammarSpec::Lark(format!(
        "start: {}\n{}\n",
        alts.join(" | "),
        rules.join("\n")
    ))
}

/// A string parameter's value as raw text: one of its `enum` values, else text without `<`
/// within its `minLength` / `maxLength`.
fn xml_string(prop: &Json) -> String {
    if let Some(vals) = prop.get("enum").and_then(Json::as_array) {
        let alts: Vec<String> = vals.iter().filter_map(Json::as_str).map(lit).collect();
        if !alts.is_empty() {
            return format!("({})", alts.join(" | "));
        }
    }
    let bound = |k: &str| prop.get(k).and_then(Json::as_u64);
    match (bound("minLength"), bound("maxLength")) {
        (None, None) => "/[^<]*/".into(),
        (min, max) => format!(
            "/[^<]{{{},{}}}/",
            min.unwrap_or(0),
            max.map_or(String::new(), |m| m.to_string())
        ),
    }
}

/// [`forced_call`] in the XML form: each parameter of the schema as a
/// `<parameter=NAME>` block in schema order (required ones always, others optional), string
/// values as raw text ([`xml_string`]), others as JSON of their own schema.
fn forced_xml_call(name: Option<&str>, tools: &[Json]) -> GrammarSpec {
    let mut rules = Vec::new();
    let mut alts = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let Some(n) = tool_name(t) else { continue };
        if name.is_some_and(|want| want != n) {
            continue;
        }
        let schema = tool_schema(t);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Json::as_array)
            .map(|r| r.iter().filter_map(Json::as_str).collect())
            .unwrap_or_default();
        let mut params = Vec::new();
        if let Some(props) = schema.get("properties").and_then(Json::as_object) {
            for (j, (key, prop)) in props.iter().enumerate() {
                let value = if prop.get("type").and_then(Json::as_str) == Some("string") {
                    format!("v{i}_{j}: {}", xml_string(prop))
                } else {
                    format!("v{i}_{j}: %json {}", bound_whitespace(prop.clone()))
                };
                rules.push(value);
                let block = format!(
                    "{} v{i}_{j} {}",
                    lit(&format!("<parameter={key}>\n")),
                    lit("\n</parameter>\n")
                );
                params.push(if required.contains(&key.as_str()) {
                    format!("({block})")
                } else {
                    format!("({block})?")
                });
            }
        }
        let head = match name {
            Some(_) => String::new(),
            None => lit(&format!("{n}>\n")),
        };
        alts.push(format!("call{i}"));
        rules.push(format!(
            "call{i}: {head} {} {}",
            params.join(" "),
            lit("</function>\n</tool_call>")
        ));
    }
    GrammarSpec::Lark(format!(
        "start: {}\n{}\n",
        alts.join(" | "),
        rules.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_call_grammars() {
        let tools = vec![
            json!({"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}),
            json!({"type": "function", "function": {"name": "now"}}),
        ];
        let GrammarSpec::Lark(g) = forced_call(ToolFormat::Hermes, Some("now"), &tools) else {
            panic!("lark")
        };
        // The arguments' schema carries the whitespace bound (a sampled model that keeps
        // writing newlines inside a forced call would otherwise never close it).
        assert_eq!(
            g,
            format!(
                "start: call1\ncall1:  args1 \"}}\\n</tool_call>\"\nargs1: %json {}\n",
                bound_whitespace(json!({"type": "object"}))
            )
        );
        assert!(g.contains("whitespace_pattern"), "{g}");
        let GrammarSpec::Lark(g) = forced_call(ToolFormat::JsonObject, None, &tools) else {
            panic!("lark")
        };
        assert!(g.starts_with("start: call0 | call1\n"), "{g}");
        assert!(
            g.contains("call0: \"get_weather\\\", \\\"parameters\\\": \" args0 \"}\""),
            "{g}"
        );
    }

    #[test]
    fn formats() {
        let api = Api::OpenAi;
        assert_eq!(openai_format(api, None).unwrap(), None);
        assert_eq!(
            openai_format(api, Some(json!({"type": "text"}))).unwrap(),
            None
        );
        assert_eq!(
            openai_format(api, Some(json!({"type": "json_object"}))).unwrap(),
            Some(GrammarSpec::JsonObject)
        );
        let s = json!({"type": "object"});
        assert_eq!(
            openai_format(
                api,
                Some(json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s}}))
            )
            .unwrap(),
            Some(GrammarSpec::JsonSchema(s.clone()))
        );
        assert!(openai_format(api, Some(json!({"type": "json_schema"}))).is_err());
        assert!(openai_format(api, Some(json!({"type": "yaml"}))).is_err());
        assert!(
            openai_format(
                api,
                Some(json!({"type": "json_schema", "json_schema": {"schema": 5}}))
            )
            .is_err()
        );
        assert_eq!(
            extension(api, Some(json!({"type": "regex", "value": "[0-9]+"}))).unwrap(),
            Some(GrammarSpec::Regex("[0-9]+".into()))
        );
        assert!(extension(api, Some(json!({"type": "gbnf", "value": "x"}))).is_err());
    }
}
