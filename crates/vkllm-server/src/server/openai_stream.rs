//! OpenAI server-sent event streams: `chat.completion.chunk` and `text_completion` chunks,
//! `data: [DONE]` at the end, a usage chunk first when `stream_options.include_usage`.
//! The stream owns the generation: when the client goes away the body is dropped, and with it
//! the generation, which cancels the requests (keep-alive comments find a silent client gone).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value as Json, json};
use vkllm_tokenizer::Tokenizer;

use super::AppState;
use super::error::{Api, ApiError};
use super::generate::{ChoiceEvent, ChoiceState, Generation, launch};
use super::openai::{Prepared, finish_reason, legacy_logprobs, logprob_entry, tool_json};
use super::output::Piece;

struct Chunks {
    generation: Generation,
    choices: Vec<ChoiceState>,
    p: Prepared,
    chat: bool,
    tok: Arc<Tokenizer>,
    /// Tool calls sent per choice (their stream index).
    tool_count: Vec<usize>,
    /// Completions: text offset per choice (for logprobs).
    offsets: Vec<usize>,
    queue: VecDeque<Sse>,
    over: bool,
}

impl Chunks {
    fn chunk(&mut self, choice: Json) {
        let m = &self.p.meta;
        let mut c = json!({
            "id": m.id,
            "object": if self.chat { "chat.completion.chunk" } else { "text_completion" },
            "created": m.created,
            "model": m.model,
            "system_fingerprint": m.fingerprint,
            "choices": [choice],
        });
        if self.p.include_usage {
            c["usage"] = Json::Null;
        }
        self.queue.push_back(Sse::default().data(c.to_string()));
    }

    fn chat_delta(&mut self, i: usize, delta: Json, logprobs: Json, finish: Json) {
        self.chunk(
            json!({"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish}),
        );
    }

    fn start(&mut self) {
        for i in 0..self.choices.len() {
            if self.chat {
                self.chat_delta(
                    i,
                    json!({"role": "assistant", "content": ""}),
                    Json::Null,
                    Json::Null,
                );
            } else if !self.p.echo.is_empty() {
                let echo = self.p.echo.clone();
                self.offsets[i] = echo.len();
                self.chunk(
                    json!({"index": i, "text": echo, "logprobs": null, "finish_reason": null}),
                );
            }
        }
    }

    /// Sends `pieces` of choice `i`, with the logprobs of `tokens`.
    fn send(&mut self, i: usize, pieces: Vec<Piece>, tokens: &[vkllm_engine::TokenOut]) {
        let logprobs = if !self.p.logprobs || tokens.is_empty() {
            Json::Null
        } else if self.chat {
            json!({"content": tokens.iter().map(|t| logprob_entry(&self.tok, t)).collect::<Vec<_>>(), "refusal": null})
        } else {
            legacy_logprobs(&self.tok, tokens, self.offsets[i])
        };
        if !self.chat {
            let text: String = pieces
                .into_iter()
                .filter_map(|p| match p {
                    Piece::Content(c) => Some(c),
                    _ => None,
                })
                .collect();
            if text.is_empty() && logprobs.is_null() {
                return;
            }
            self.offsets[i] += text.len();
            self.chunk(
                json!({"index": i, "text": text, "logprobs": logprobs, "finish_reason": null}),
            );
            return;
        }
        let mut logprobs = Some(logprobs).filter(|l| !l.is_null());
        if pieces.is_empty() {
            if let Some(lp) = logprobs.take() {
                self.chat_delta(i, json!({"content": ""}), lp, Json::Null);
            }
            return;
        }
        for p in pieces {
            let delta = match p {
                Piece::Content(c) => json!({"content": c}),
                Piece::Reasoning(r) => json!({"reasoning_content": r}),
                Piece::Tool(t) => {
                    let k = self.tool_count[i];
                    self.tool_count[i] += 1;
                    json!({"tool_calls": [tool_json(&t, Some(k))]})
                }
            };
            self.chat_delta(i, delta, logprobs.take().unwrap_or(Json::Null), Json::Null);
        }
    }

    fn end_choice(&mut self, i: usize) {
        let reason = finish_reason(&self.choices[i].finish);
        if self.chat {
            self.chat_delta(i, json!({}), Json::Null, reason.into());
        } else {
            self.chunk(json!({"index": i, "text": "", "logprobs": null, "finish_reason": reason}));
        }
    }

    fn on(&mut self, i: usize, ev: ChoiceEvent) {
        match ev {
            ChoiceEvent::Delta { text, tokens } => {
                let (pieces, done) = self.choices[i].delta(&text, tokens.clone());
                self.send(i, pieces, &tokens);
                if done {
                    self.generation.stop_choice(i);
                    self.end_choice(i);
                }
            }
            ChoiceEvent::Finished { reason, stop, .. } => {
                let pieces = self.choices[i].end(reason, stop);
                self.send(i, pieces, &[]);
                self.end_choice(i);
            }
            ChoiceEvent::Failed(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: ApiError) {
        self.queue
            .push_back(Sse::default().data(e.body().to_string()));
        self.over = true;
    }

    fn close(&mut self) {
        if self.p.include_usage {
            let completion: usize = self.choices.iter().map(|c| c.tokens.len()).sum();
            let prompt = self.generation.prompt_tokens;
            let m = &self.p.meta;
            let c = json!({
                "id": m.id,
                "object": if self.chat { "chat.completion.chunk" } else { "text_completion" },
                "created": m.created,
                "model": m.model,
                "system_fingerprint": m.fingerprint,
                "choices": [],
                "usage": super::openai::usage_json(prompt, self.generation.cached_tokens, completion),
            });
            self.queue.push_back(Sse::default().data(c.to_string()));
        }
        self.queue.push_back(Sse::default().data("[DONE]"));
        self.over = true;
    }
}

fn sse_response(state: &Arc<AppState>, p: Prepared, chat: bool) -> Result<Response, ApiError> {
    let generation = launch(state, Api::OpenAi, p.spec.clone())?;
    let n = p.spec.n;
    let mut c = Chunks {
        generation,
        choices: (0..n)
            .map(|_| ChoiceState::new(&p.parser, &p.spec.stop, p.tool_stop))
            .collect(),
        p,
        chat,
        tok: state.tokenizer.clone(),
        tool_count: vec![0; n],
        offsets: vec![0; n],
        queue: VecDeque::new(),
        over: false,
    };
    c.start();
    let body = stream::unfold(c, |mut c| async move {
        loop {
            if let Some(ev) = c.queue.pop_front() {
                return Some((Ok::<_, Infallible>(ev), c));
            }
            if c.over {
                return None;
            }
            match c.generation.next().await {
                Some((i, ev)) => c.on(i, ev),
                None => c.close(),
            }
        }
    });
    Ok(axum::response::Sse::new(body)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response())
}

/// `stream: true` on `/v1/chat/completions`.
pub fn chat_stream(state: &Arc<AppState>, p: Prepared) -> Result<Response, ApiError> {
    sse_response(state, p, true)
}

/// `stream: true` on `/v1/completions`.
pub fn completion_stream(state: &Arc<AppState>, p: Prepared) -> Result<Response, ApiError> {
    sse_response(state, p, false)
}
