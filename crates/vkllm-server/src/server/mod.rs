//! `vkllm serve`: a thin HTTP adapter over the engine's `InferenceRunner`, speaking the OpenAI
//! (`/v1/chat/completions`, `/v1/completions`, `/v1/models`) and Anthropic (`/v1/messages`,
//! `/v1/messages/count_tokens`) APIs, plus `/health` and `/metrics`. No inference logic lives
//! here: requests are parsed and checked, rendered with the chat template, submitted to the
//! runner, and its events are shaped into each API's responses and event streams.

mod anthropic;
mod chat;
mod error;
mod error_io;
mod fields;
mod generate;
mod metrics;
mod models;
mod openai;
mod openai_stream;
mod output;
pub mod structured;
mod tool_xml;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use vkllm_engine::RunnerHandle;
use vkllm_tokenizer::Tokenizer;

pub use error::{Api, ApiError, Kind};
pub use metrics::Metrics;

/// Everything the handlers share.
pub struct AppState {
    pub runner: RunnerHandle,
    pub tokenizer: Arc<Tokenizer>,
    /// Structured outputs: the grammar compiler for the model's vocabulary.
    pub grammars: structured::GrammarCompiler,
    /// The model ids this server answers to; the first is the one it reports.
    pub names: Vec<String>,
    /// Answer to any model id (for clients that insist on their own names).
    pub any_model: bool,
    /// `system_fingerprint`: the version and the backend.
    pub fingerprint: String,
    /// When the server started (Unix seconds): the model's `created`.
    pub created: u64,
    pub metrics: Metrics,
    /// Required in `Authorization: Bearer` or `x-api-key` when set.
    pub api_key: Option<String>,
    /// /metrics answers without the API key.
    pub metrics_public: bool,
    /// Host names answered besides IP addresses and `localhost` when no API key is set (the
    /// defence against DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// Origins CORS answers (`*`: any, without credentials); `None`: no CORS headers.
    pub cors: Option<Vec<String>>,
    /// Print a log line per request and per finished sequence.
    pub log: bool,
}

impl AppState {
    /// The state of a server for `runner`'s model answering to `name`, with the defaults of
    /// `vkllm serve`: no API key (then only IP-address and `localhost` Host headers are
    /// answered), no CORS, no log lines. Set the public fields to change them.
    pub fn new(runner: RunnerHandle, tokenizer: Arc<Tokenizer>, name: impl Into<String>) -> Self {
        let grammars = vkllm_engine::Grammars::new(&tokenizer, runner.vocab())
            .map(Arc::new)
            .map_err(|e| e.to_string());
        AppState {
            runner,
            tokenizer,
            grammars,
            names: vec![name.into()],
            any_model: false,
            fingerprint: format!("fp_vkllm_{}", env!("CARGO_PKG_VERSION")),
            created: unix_secs(),
            metrics: Metrics::default(),
            api_key: None,
            metrics_public: false,
            allowed_hosts: Vec::new(),
            cors: None,
            log: false,
        }
    }

    /// The model id to report.
    pub fn model_id(&self) -> &str {
        self.names.first().map_or("default", String::as_str)
    }

    /// A 404 unless `model` is served here.
    pub fn check_model(&self, api: Api, model: &str) -> Result<(), ApiError> {
        if self.any_model || self.names.iter().any(|n| n == model) {
            return Ok(());
        }
        Err(ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..ApiError::new(
                api,
                Kind::NotFound,
                format!(
                    "the model `{model}` does not exist; this server has `{}`",
                    self.names.join("`, `")
                ),
            )
        })
    }

    /// A structured log line (`key=value` pairs) on stderr.
    pub fn log(&self, fields: &[(&str, &dyn std::fmt::Display)]) {
        if !self.log {
            return;
        }
        let mut line = format!("ts={:.3}", unix_secs_f64());
        for (k, v) in fields {
            let v = v.to_string();
            if v.contains([' ', '"', '=']) || v.is_empty() {
                line.push_str(&format!(" {k}={v:?}"));
            } else {
                line.push_str(&format!(" {k}={v}"));
            }
        }
        eprintln!("{line}");
    }
}

/// Seconds since the Unix epoch.
pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unix_secs_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `n` random letters and digits (ids).
pub fn random_id(n: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..n)
        .map(|_| CHARS[rand::random_range(0..CHARS.len())] as char)
        .collect()
}

/// Runs `f` (request parsing, template rendering, tokenization: CPU work that grows with the
/// input) on the runtime's bounded blocking pool, so the async workers keep answering other
/// requests (`/health` included) while a large prompt is prepared.
pub async fn off_runtime<T: Send + 'static>(
    api: Api,
    input_bytes: usize,
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let work = move || {
        let r = f();
        if input_bytes >= TRIM_AFTER_BYTES {
            give_back_memory();
        }
        r
    };
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(ApiError::new(
            api,
            Kind::Internal,
            format!("request worker: {e}"),
        ))
    })
}

/// Request bodies from this size on are followed by [`give_back_memory`]: preparing a
/// multi-megabyte prompt allocates hundreds of megabytes (parse, render, tokenize) that the
/// allocator would otherwise keep (3 prompts of 3.6 MB: 29 MB -> 1.3 GB resident, for good).
const TRIM_AFTER_BYTES: usize = 1 << 20;

/// Returns the allocator's free memory to the system (glibc keeps freed heap, per thread arena).
fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases glibc's own free lists; it takes no pointer of
    // ours and is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The body of a request, or the error for a body over the limit (413) or unreadable (400).
pub fn body_bytes(api: Api, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                api,
                Kind::TooLarge,
                "the request body is over the size limit",
            )
        } else {
            ApiError::new(api, Kind::BadRequest, format!("reading the body: {r}"))
        }
    })
}

/// The routes; request bodies of at most `body_limit` bytes, read within `body_timeout`.
pub fn router(state: Arc<AppState>, body_limit: usize, body_timeout: Duration) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .route("/v1/models", get(models::list))
        .route("/v1/models/{id}", get(models::one))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/messages", post(anthropic::create))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            body_deadline(body_limit, body_timeout, req, next)
        }))
        .layer(middleware::from_fn_with_state(state.clone(), gate))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// Connection limits of [`serve`].
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Time a client has to send a request's headers; also how long an idle keep-alive
    /// connection stays open.
    pub header_timeout: Duration,
    /// Time a client has to send a request's body.
    pub body_timeout: Duration,
    /// Open connections at most; more are answered 503 and closed.
    pub max_connections: usize,
}

/// Binds `addr` and serves until Ctrl-C or SIGTERM, with `limits` on every connection.
pub async fn serve(
    state: Arc<AppState>,
    addr: SocketAddr,
    body_limit: usize,
    limits: ConnLimits,
) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    eprintln!("vkllm: listening on http://{local}");
    let app = router(state.clone(), body_limit, limits.body_timeout);
    let open = Arc::new(AtomicUsize::new(0));
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: the connection is lost, not the server.
                Err(_) => continue,
            },
        };
        if open.load(Ordering::Relaxed) >= limits.max_connections {
            state.metrics.request("connections", 503);
            tokio::spawn(refuse(stream));
            continue;
        }
        open.fetch_add(1, Ordering::Relaxed);
        let open = open.clone();
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(error_io::JsonErrors::new(stream));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(io, svc)
                .with_upgrades();
            let _ = conn.await;
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    Ok(())
}

/// Answers a connection over the cap with a 503 and closes it.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = r#"{"error":{"message":"too many open connections","type":"server_error"}}"#;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(body.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Reads a POST body of at most `max` bytes within `limit` (a client that stalls gets 408, a
/// longer body 413), then passes the request on with the body in memory.
async fn body_deadline(max: usize, limit: Duration, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let api = Api::of_path(req.uri().path());
    let too_large = || {
        ApiError::new(
            api,
            Kind::TooLarge,
            "the request body is over the size limit",
        )
    };
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(limit, axum::body::to_bytes(body, max)).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
        Ok(Err(e)) if e.to_string().contains("length limit") => too_large().into_response(),
        Ok(Err(e)) => {
            ApiError::new(api, Kind::BadRequest, format!("reading the body: {e}")).into_response()
        }
        Err(_) => ApiError::new(
            api,
            Kind::RequestTimeout,
            format!(
                "the request body did not arrive within {} s",
                limit.as_secs()
            ),
        )
        .into_response(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    eprintln!("vkllm: shutting down");
}

/// The key a request carries, from `Authorization: Bearer` (the scheme in any case) or
/// `x-api-key`.
fn presented_key(h: &HeaderMap) -> Option<&str> {
    let bearer = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, k)| k.trim());
    bearer.or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()))
}

/// Whether a request's Host (a name or an IP address, with an optional port) is one a page of
/// another site cannot point at us by DNS rebinding: an IP address, `localhost`, or a name in
/// `allowed`.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match host.rsplit_once(':') {
            Some((n, port)) if port.chars().all(|c| c.is_ascii_digit()) => n,
            _ => host,
        }
    };
    !name.is_empty()
        && (name.parse::<std::net::IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || allowed.iter().any(|a| a.eq_ignore_ascii_case(name)))
}

/// Whether a Content-Type header value is JSON (`application/json`, any parameters).
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Compares without stopping at the first difference.
fn same_key(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Every request passes here: CORS, the API key, metrics and the log line.
async fn gate(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let t0 = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let api = Api::of_path(&path);
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", |m| m.as_str())
        .to_string();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().host())
        .unwrap_or("")
        .to_string();
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut resp = if state.api_key.is_none() && !host_allowed(&host, &state.allowed_hosts) {
        ApiError::new(
            api,
            Kind::Forbidden,
            format!(
                "Host `{host}` is not served here without an API key (serve with \
                 --allowed-host NAME, or --api-key)"
            ),
        )
        .with_code("host_not_allowed")
        .into_response()
    } else if state.cors.is_some() && method == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else if let Some(key) = &state.api_key
        && path != "/health"
        && !(path == "/metrics" && state.metrics_public)
        && !presented_key(req.headers()).is_some_and(|k| same_key(k, key))
    {
        ApiError::new(
            api,
            Kind::Unauthorized,
            "a valid API key is required (Authorization: Bearer KEY or x-api-key: KEY)",
        )
        .with_code("invalid_api_key")
        .into_response()
    } else if method == Method::POST && !is_json(req.headers().get(header::CONTENT_TYPE)) {
        ApiError::new(
            api,
            Kind::UnsupportedMediaType,
            "the request body must be JSON (Content-Type: application/json)",
        )
        .into_response()
    } else {
        next.run(req).await
    };
    // CORS: `*` for any origin (no credentials), else the request's origin when listed.
    let allow = state.cors.as_ref().and_then(|list| {
        if list.iter().any(|o| o == "*") {
            Some("*".to_string())
        } else {
            origin.filter(|o| list.iter().any(|l| l == o))
        }
    });
    if let Some(allow) = allow
        && let Ok(v) = HeaderValue::from_str(&allow)
    {
        let h = resp.headers_mut();
        if allow != "*" {
            h.insert(header::VARY, HeaderValue::from_static("origin"));
        }
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "authorization, content-type, x-api-key, anthropic-version, anthropic-beta",
            ),
        );
    }
    let status = resp.status().as_u16();
    state.metrics.request(&endpoint, status);
    state.log(&[
        ("event", &"http"),
        ("method", &method),
        ("path", &path),
        ("status", &status),
        ("ms", &format!("{:.1}", t0.elapsed().as_secs_f64() * 1e3)),
    ]);
    resp
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    let s = state.runner.stats();
    axum::Json(serde_json::json!({
        "status": "ok",
        "model": state.model_id(),
        "slots": s.slots,
        "running": s.active,
        "queued": s.queued,
    }))
    .into_response()
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    let body = state.metrics.render(&state.runner.stats());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

async fn not_found(req: Request) -> Response {
    let path = req.uri().path().to_string();
    ApiError::new(
        Api::of_path(&path),
        Kind::NotFound,
        format!("no route for {} {path}", req.method()),
    )
    .into_response()
}

async fn method_not_allowed(req: Request) -> Response {
    let path = req.uri().path().to_string();
    let mut e = ApiError::new(
        Api::of_path(&path),
        Kind::BadRequest,
        format!("{} is not allowed on {path}", req.method()),
    );
    e.code = Some("method_not_allowed");
    let mut r = e.into_response();
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r
}
