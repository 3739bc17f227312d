//! vkllm's OpenAI- and Anthropic-compatible server inside your own axum app: its routes nested
//! under `/llm` beside the app's own. Without arguments it sends one chat request through the
//! app (no socket) and prints the answer; with `--serve PORT` it listens on 127.0.0.1:PORT.
//!
//! `cargo run -p vkllm-server --example embed_axum -- [MODEL] [--serve PORT]` (MODEL: a GGUF file,
//! a checkpoint directory or a fetched model's name; default smollm2, on the CPU backend).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::get;
use tower::ServiceExt;
use vkllm_engine::{InferenceRunner, RunnerConfig, SimpleGenerator};
use vkllm_models::{AnyModel, Backend, Checkpoint, CpuBackend};
use vkllm_server::{AppState, router};
use vkllm_tokenizer::Tokenizer;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let serve_port = args
        .iter()
        .position(|a| a == "--serve")
        .and_then(|i| args.get(i + 1))
        .map(|p| p.parse::<u16>())
        .transpose()
        .context("--serve PORT")?;
    let name = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .map_or("smollm2", String::as_str);

    // The model, its tokenizer and a runner with two generation slots on the CPU backend.
    let path = vkllm::resolve(name, "python3".as_ref())?;
    let ck = Checkpoint::open(&path)?;
    let tokenizer = Arc::new(Tokenizer::from_path(&path)?);
    let mut b = CpuBackend::new();
    let chunk = b.prefill_chunk();
    let model = AnyModel::load_checkpoint(&ck, None, &mut b, chunk, &mut |_| {})?;
    let generator = SimpleGenerator::new(b, model, 2, 1024)?;
    let runner = InferenceRunner::threaded(
        Box::new(generator),
        tokenizer.clone(),
        RunnerConfig::default(),
    );
    let state = Arc::new(AppState::new(runner.handle(), tokenizer, "local"));

    // The host app: its own route, and vkllm's under /llm (1 MiB bodies read within 30 s).
    let app = Router::new()
        .route("/", get(|| async { "the host app\n" }))
        .nest("/llm", router(state, 1 << 20, Duration::from_secs(30)));

    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        if let Some(port) = serve_port {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
            eprintln!(
                "POST http://{}/llm/v1/chat/completions",
                listener.local_addr()?
            );
            return Ok(axum::serve(listener, app).await?);
        }
        let body = serde_json::json!({
            "model": "local",
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16,
            "temperature": 0,
        });
        let req = Request::post("/llm/v1/chat/completions")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))?;
        let resp = app.oneshot(req).await?;
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await?;
        let v: serde_json::Value = serde_json::from_slice(&bytes)?;
        anyhow::ensure!(status.is_success(), "{status}: {v}");
        println!(
            "{}",
            v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_default()
        );
        Ok::<(), anyhow::Error>(())
    })?;
    runner.shutdown();
    Ok(())
}
