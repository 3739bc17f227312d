//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong loading a tokenizer, encoding, decoding or rendering a template.
///
/// Variants carry the file, key, token or template position at fault, so a message alone tells
/// the user what to fix.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A JSON file (tokenizer.json, tokenizer_config.json, a messages file) is not valid JSON,
    /// or does not have the shape expected; `line` and `column` are 1-based.
    #[error("{what}: invalid JSON at line {line}, column {column}: {message}")]
    Json {
        what: String,
        line: usize,
        column: usize,
        message: String,
    },

    /// tokenizer.json parsed as JSON but the `tokenizers` crate rejected its contents.
    #[error("{what}: not a usable tokenizer: {message}")]
    TokenizerJson { what: String, message: String },

    /// A configuration key holds a value of the wrong kind or out of range.
    #[error("{what}: key `{key}`: {message}")]
    BadKey {
        what: String,
        key: String,
        message: String,
    },

    /// A required key is absent.
    #[error("{what}: missing key `{key}`")]
    MissingKey { what: String, key: String },

    /// A GGUF vocabulary asks for something this crate does not implement.
    #[error("{what}: unsupported {kind} `{name}`")]
    Unsupported {
        what: String,
        kind: &'static str,
        name: String,
    },

    /// A line of a tiktoken ranks file is malformed (`line` is 1-based).
    #[error("{path}: line {line}: {message}")]
    Tiktoken {
        path: PathBuf,
        line: usize,
        message: String,
    },

    /// A regular expression from a tokenizer description does not compile.
    #[error("{what}: bad regex `{pattern}`: {message}")]
    Regex {
        what: String,
        pattern: String,
        message: String,
    },

    /// A token id outside the vocabulary was given to decode.
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    UnknownId { id: u32, vocab_size: usize },

    /// The `tokenizers` crate failed while encoding or decoding.
    #[error("{op} failed: {message}")]
    Backend { op: &'static str, message: String },

    /// A chat template does not parse. `line` is 1-based; `range` is the byte range in the
    /// template source when known.
    #[error("chat template `{name}`: syntax error at line {line}: {message}")]
    TemplateSyntax {
        name: String,
        line: usize,
        range: Option<std::ops::Range<usize>>,
        message: String,
    },

    /// A chat template failed while rendering (an undefined method, a type error, ...).
    #[error("chat template `{name}`: render error at line {line}: {message}")]
    TemplateRender {
        name: String,
        line: usize,
        message: String,
    },

    /// The template itself refused the conversation through `raise_exception(...)`.
    #[error("chat template `{name}` raised: {message}")]
    TemplateRaised { name: String, message: String },

    /// A model has no chat template and its family has none in the built-in table.
    #[error("no chat template: {what} has none and family `{family}` has no built-in one")]
    NoTemplate { what: String, family: String },

    /// A messages value is not a list of objects.
    #[error("messages: {message}")]
    BadMessages { message: String },

    /// A GGUF file could not be read.
    #[error("{path}: {message}")]
    Gguf { path: PathBuf, message: String },
}

impl TokenizerError {
    /// Wraps a `serde_json` error, keeping its line and column.
    pub(crate) fn json(what: impl Into<String>, err: &serde_json::Error) -> Self {
        TokenizerError::Json {
            what: what.into(),
            line: err.line(),
            column: err.column(),
            message: strip_position(&err.to_string()),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TokenizerError::Io {
            path: path.into(),
            source,
        }
    }
}

/// serde_json appends " at line L column C" to its messages; we report those separately.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// The crate's result type.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;
