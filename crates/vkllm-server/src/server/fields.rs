//! Reading a JSON request body field by field: every field is taken (and checked) by name, and
//! whatever is left at the end is an unsupported field, answered with a 400 — never ignored.
//! A field set to `null` counts as absent.

use serde_json::{Map, Value as Json};

use super::error::{Api, ApiError, Kind};

/// A request body being read.
pub struct Fields {
    api: Api,
    map: Map<String, Json>,
}

impl Fields {
    /// Parses `bytes` as a JSON object.
    pub fn parse(api: Api, bytes: &[u8]) -> Result<Self, ApiError> {
        let value: Json = serde_json::from_slice(bytes).map_err(|e| {
            ApiError::new(
                api,
                Kind::BadRequest,
                format!("the body is not valid JSON: {e}"),
            )
            .with_code("invalid_json")
        })?;
        match value {
            Json::Object(map) => Ok(Fields { api, map }),
            _ => Err(ApiError::new(
                api,
                Kind::BadRequest,
                "the body must be a JSON object",
            )),
        }
    }

    pub fn api(&self) -> Api {
        self.api
    }

    /// Removes `key`; `null` is `None`.
    pub fn take(&mut self, key: &str) -> Option<Json> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// A required field.
    pub fn require(&mut self, key: &str) -> Result<Json, ApiError> {
        self.take(key)
            .ok_or_else(|| ApiError::bad(self.api, key, format!("`{key}` is required")))
    }

    fn wrong(&self, key: &str, expected: &str) -> ApiError {
        ApiError::bad(self.api, key, format!("`{key}` must be {expected}"))
    }

    pub fn string(&mut self, key: &str) -> Result<Option<String>, ApiError> {
        match self.take(key) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.wrong(key, "a string")),
        }
    }

    pub fn bool(&mut self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.take(key) {
            None => Ok(None),
            Some(Json::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(self.wrong(key, "true or false")),
        }
    }

    /// A number in `[lo, hi]`.
    pub fn number(&mut self, key: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if (lo..=hi).contains(&x) => Ok(Some(x as f32)),
                _ => Err(self.wrong(key, &format!("a number in [{lo}, {hi}]"))),
            },
        }
    }

    /// An integer in `[lo, hi]`.
    pub fn integer(&mut self, key: &str, lo: u64, hi: u64) -> Result<Option<u64>, ApiError> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
                _ => Err(self.wrong(key, &format!("an integer in [{lo}, {hi}]"))),
            },
        }
    }

    /// Any integer that fits u64 (seeds: negative ones are taken as their two's complement).
    pub fn seed(&mut self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => match (v.as_u64(), v.as_i64()) {
                (Some(x), _) => Ok(Some(x)),
                (None, Some(x)) => Ok(Some(x as u64)),
                _ => Err(self.wrong(key, "an integer")),
            },
        }
    }

    /// A field accepted only when absent or equal to one of `neutral` (e.g. `store: false`).
    pub fn only(&mut self, key: &str, neutral: &[Json], why: &str) -> Result<(), ApiError> {
        match self.take(key) {
            Some(v) if !neutral.contains(&v) => Err(ApiError::unsupported(self.api, key, why)),
            _ => Ok(()),
        }
    }

    /// Stop strings: a string or a list of at most 16.
    pub fn stops(&mut self, key: &str) -> Result<Vec<String>, ApiError> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Json::String(s)) => Ok(vec![s]),
            Some(Json::Array(a)) if a.len() <= 16 => a
                .into_iter()
                .map(|v| match v {
                    Json::String(s) => Ok(s),
                    _ => Err(self.wrong(key, "a string or a list of strings")),
                })
                .collect(),
            Some(_) => Err(self.wrong(key, "a string or a list of at most 16 strings")),
        }
    }

    /// Ends reading: any field left is unsupported.
    pub fn finish(self) -> Result<(), ApiError> {
        let mut keys = self
            .map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, _)| k);
        match keys.next() {
            None => Ok(()),
            Some(k) => Err(ApiError::unsupported(
                self.api,
                k,
                "this server does not implement it (see docs/server.md)",
            )),
        }
    }
}

/// The text of OpenAI-style content: a string, or a list of `{"type": "text", "text"}` parts
/// (joined with newlines). Other part types are a 400 naming `what`.
pub fn content_text(api: Api, what: &str, content: &Json) -> Result<String, ApiError> {
    match content {
        Json::Null => Ok(String::new()),
        Json::String(s) => Ok(s.clone()),
        Json::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for p in parts {
                match (p.get("type").and_then(Json::as_str), p.get("text")) {
                    (Some("text"), Some(Json::String(t))) => texts.push(t.as_str()),
                    (Some(other), _) => {
                        return Err(ApiError::unsupported(
                            api,
                            what,
                            &format!("content parts of type `{other}` (only text)"),
                        ));
                    }
                    _ => {
                        return Err(ApiError::bad(
                            api,
                            what,
                            "a content part needs `type` and `text`",
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(ApiError::bad(
            api,
            what,
            "content must be a string or a list of parts",
        )),
    }
}
