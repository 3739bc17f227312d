//! Tool calls in the XML form of Qwen3.5/3.6 (and Qwen3-Coder):
//! `<tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call>`.
//! A value is raw text: a parameter whose schema says `string` keeps it as is, others are read as
//! JSON when they parse (numbers, booleans, objects, arrays), else kept as text.

use serde_json::{Map, Value as Json};

use super::output::{ToolCall, tool_id};

const PARAM: &str = "<parameter=";
const PARAM_END: &str = "</parameter>";
pub const FUNCTION_END: &str = "</function>";

/// Where the call that `body` (the text after `<tool_call>`) holds ends: the first `close` after
/// `</function>` (a value may hold the closing tag itself), or the first `close` when the
/// function block never closes.
pub fn call_end(body: &str, close: &str) -> Option<usize> {
    let from = body
        .find(FUNCTION_END)
        .map_or(0, |i| i + FUNCTION_END.len());
    body[from..]
        .find(close)
        .map(|i| from + i)
        .or_else(|| body.find(close))
}

/// The call in `body`, to one of `names` (any when empty); `schemas` gives each function's
/// parameters schema (to keep string parameters as text).
pub fn parse_call(body: &str, names: &[String], schemas: &[(String, Json)]) -> Option<ToolCall> {
    let rest = body.trim_start().strip_prefix("<function=")?;
    let gt = rest.find('>')?;
    let name = rest[..gt].trim().to_string();
    if name.is_empty() || (!names.is_empty() && !names.contains(&name)) {
        return None;
    }
    let mut inner = &rest[gt + 1..];
    if let Some(end) = inner.rfind(FUNCTION_END) {
        inner = &inner[..end];
    }
    let schema = schemas.iter().find(|(n, _)| *n == name).map(|(_, s)| s);
    let mut arguments = Map::new();
    while let Some(p) = inner.find(PARAM) {
        let r = &inner[p + PARAM.len()..];
        let gt = r.find('>')?;
        let key = r[..gt].trim().to_string();
        let r = &r[gt + 1..];
        let close = r.find(PARAM_END)?;
        let raw = r[..close].strip_prefix('\n').unwrap_or(&r[..close]);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        let value = match is_string_param(schema, &key) {
            true => Json::String(raw.to_string()),
            false => serde_json::from_str(raw.trim()).unwrap_or_else(|_| Json::String(raw.into())),
        };
        arguments.insert(key, value);
        inner = &r[close + PARAM_END.len()..];
    }
    Some(ToolCall {
        id: tool_id("call_"),
        name,
        arguments: Json::Object(arguments),
    })
}

/// Whether `key`'s schema in `schema` (a parameters object schema) is a string.
fn is_string_param(schema: Option<&Json>, key: &str) -> bool {
    let Some(t) = schema.and_then(|s| s.pointer(&format!("/properties/{key}/type"))) else {
        return false;
    };
    match t {
        Json::String(s) => s == "string",
        Json::Array(a) => a.iter().all(|v| v == "string" || v == "null") && !a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_with_typed_parameters() {
        let schemas = vec![(
            "get_weather".to_string(),
            json!({"type": "object", "properties": {"city": {"type": "string"},
                "days": {"type": "integer"}, "zip": {"type": "string"}}}),
        )];
        let body = "\n<function=get_weather>\n<parameter=city>\nZürich\n</parameter>\n\
                    <parameter=days>\n3\n</parameter>\n<parameter=zip>\n8001\n</parameter>\n\
                    <parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n</function>\n";
        let c = parse_call(body, &[], &schemas).expect("call");
        assert_eq!(c.name, "get_weather");
        assert_eq!(
            c.arguments,
            json!({"city": "Zürich", "days": 3, "zip": "8001", "opts": {"a": [1, 2]}})
        );
        // Multi-line text, and a value holding the closing tag.
        let body = "<function=f>\n<parameter=text>\nline 1\nline 2 </tool_call>\n</parameter>\n\
                    </function>\n</tool_call> after";
        assert_eq!(
            call_end(body, "</tool_call>"),
            body.find("</tool_call> after")
        );
        let c = parse_call(&body[..call_end(body, "</tool_call>").unwrap()], &[], &[]).unwrap();
        assert_eq!(c.arguments, json!({"text": "line 1\nline 2 </tool_call>"}));
        assert!(parse_call("<function=nope>\n</function>", &["f".into()], &[]).is_none());
        assert!(parse_call("{\"name\": \"f\"}", &[], &[]).is_none());
    }
}
