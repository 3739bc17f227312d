//! HTTP errors in the shape of the API that was called: OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` or Anthropic's
//! `{"type": "error", "error": {"type", "message"}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};
use vkllm_engine::EngineError;

/// Which API's conventions a response follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    OpenAi,
    Anthropic,
}

impl Api {
    /// The API a path belongs to (Anthropic's are under `/v1/messages`).
    pub fn of_path(path: &str) -> Api {
        if path.starts_with("/v1/messages") {
            Api::Anthropic
        } else {
            Api::OpenAi
        }
    }
}

/// What went wrong, which decides the status and the error type names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// 400: the request is malformed or asks for something unsupported.
    BadRequest,
    /// 401: missing or wrong API key.
    Unauthorized,
    /// 403: a Host this server does not answer to (no API key set).
    Forbidden,
    /// 404: no such model or route.
    NotFound,
    /// 408: the body did not arrive in time.
    RequestTimeout,
    /// 413: the body is over the limit.
    TooLarge,
    /// 415: a JSON endpoint got another content type.
    UnsupportedMediaType,
    /// 429: the queue is full.
    QueueFull,
    /// 503: the runner is shutting down.
    Unavailable,
    /// 504: the request's time limit passed.
    Timeout,
    /// 500: a failure inside the server.
    Internal,
}

impl Kind {
    pub fn status(self) -> StatusCode {
        match self {
            Kind::BadRequest => StatusCode::BAD_REQUEST,
            Kind::Unauthorized => StatusCode::UNAUTHORIZED,
            Kind::Forbidden => StatusCode::FORBIDDEN,
            Kind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Kind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Kind::QueueFull => StatusCode::TOO_MANY_REQUESTS,
            Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Kind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn openai_type(self) -> &'static str {
        match self {
            Kind::BadRequest
            | Kind::NotFound
            | Kind::TooLarge
            | Kind::UnsupportedMediaType
            | Kind::RequestTimeout => "invalid_request_error",
            Kind::Unauthorized => "authentication_error",
            Kind::Forbidden => "permission_error",
            Kind::QueueFull => "rate_limit_error",
            Kind::Unavailable | Kind::Internal => "server_error",
            Kind::Timeout => "timeout_error",
        }
    }

    fn anthropic_type(self) -> &'static str {
        match self {
            Kind::BadRequest | Kind::UnsupportedMediaType | Kind::RequestTimeout => {
                "invalid_request_error"
            }
            Kind::Unauthorized => "authentication_error",
            Kind::Forbidden => "permission_error",
            Kind::NotFound => "not_found_error",
            Kind::TooLarge => "request_too_large",
            Kind::QueueFull => "rate_limit_error",
            Kind::Unavailable => "overloaded_error",
            Kind::Timeout => "timeout_error",
            Kind::Internal => "api_error",
        }
    }
}

/// An error response.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub api: Api,
    pub kind: Kind,
    pub message: String,
    /// The request field at fault (OpenAI's `param`).
    pub param: Option<String>,
    /// A machine-readable code (OpenAI's `code`), e.g. `model_not_found`.
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn new(api: Api, kind: Kind, message: impl Into<String>) -> Self {
        ApiError {
            api,
            kind,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// A 400 about field `param`.
    pub fn bad(api: Api, param: &str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::new(api, Kind::BadRequest, message)
        }
    }

    /// A 400 for a field this server does not support.
    pub fn unsupported(api: Api, param: &str, why: &str) -> Self {
        ApiError {
            code: Some("unsupported_parameter"),
            ..ApiError::bad(api, param, format!("`{param}` is not supported: {why}"))
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The error for a failed submission or generation.
    pub fn engine(api: Api, e: &EngineError) -> Self {
        let (kind, code) = match e {
            EngineError::PromptTooLong { .. } | EngineError::ContextExceeded { .. } => {
                (Kind::BadRequest, Some("context_length_exceeded"))
            }
            EngineError::EmptyPrompt
            | EngineError::InvalidRequest { .. }
            | EngineError::Grammar { .. }
            | EngineError::Cpu(_)
            | EngineError::Tokenizer(_) => (Kind::BadRequest, None),
            EngineError::QueueFull { .. } | EngineError::NoFreeSlot { .. } => {
                (Kind::QueueFull, Some("queue_full"))
            }
            EngineError::Shutdown => (Kind::Unavailable, None),
            // On-demand KV memory spent by the running requests: try again later.
            EngineError::Model(vkllm_models::ModelError::KvPagesFull { .. }) => {
                (Kind::Unavailable, Some("kv_memory_full"))
            }
            _ => (Kind::Internal, None),
        };
        ApiError {
            code,
            ..ApiError::new(api, kind, e.to_string())
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Json {
        match self.api {
            Api::OpenAi => json!({
                "error": {
                    "message": self.message,
                    "type": self.kind.openai_type(),
                    "param": self.param,
                    "code": self.code,
                }
            }),
            Api::Anthropic => json!({
                "type": "error",
                "error": {"type": self.kind.anthropic_type(), "message": self.message},
            }),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.kind.status(), axum::Json(self.body())).into_response();
        if self.kind == Kind::QueueFull {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?})", self.message, self.kind)
    }
}
