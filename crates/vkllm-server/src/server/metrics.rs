//! Counters and histograms for `GET /metrics`, in the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use vkllm_engine::{FinishReason, RunnerStats, Usage};

/// A histogram with fixed upper bounds (seconds).
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, x: f64) {
        for (b, c) in self.bounds.iter().zip(&mut self.counts) {
            if x <= *b {
                *c += 1;
            }
        }
        self.sum += x;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

const TTFT_BOUNDS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
const TPOT_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0,
];
const E2E_BOUNDS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// Everything `/metrics` reports besides the runner's own numbers.
pub struct Metrics {
    /// (endpoint, status) -> count.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// finish reason -> count.
    finished: Mutex<BTreeMap<&'static str, u64>>,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    ttft: Mutex<Histogram>,
    tpot: Mutex<Histogram>,
    e2e: Mutex<Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::default(),
            finished: Mutex::default(),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            ttft: Mutex::new(Histogram::new(TTFT_BOUNDS)),
            tpot: Mutex::new(Histogram::new(TPOT_BOUNDS)),
            e2e: Mutex::new(Histogram::new(E2E_BOUNDS)),
        }
    }
}

fn reason_label(r: FinishReason) -> &'static str {
    match r {
        FinishReason::EndOfGeneration => "eog",
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Timeout => "timeout",
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics {
    /// One HTTP response (for streams: when the headers went out).
    pub fn request(&self, endpoint: &str, status: u16) {
        *lock(&self.requests)
            .entry((endpoint.to_string(), status))
            .or_default() += 1;
    }

    /// The gap between two tokens of one sequence, `tokens` times.
    pub fn token_gap(&self, seconds: f64, tokens: usize) {
        let mut h = lock(&self.tpot);
        for _ in 0..tokens {
            h.observe(seconds);
        }
    }

    /// A generation ended.
    pub fn finished(&self, usage: &Usage, reason: FinishReason, seconds: f64) {
        *lock(&self.finished)
            .entry(reason_label(reason))
            .or_default() += 1;
        self.prompt_tokens
            .fetch_add(usage.prompt_tokens as u64, Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(usage.reused_tokens as u64, Ordering::Relaxed);
        self.generated_tokens
            .fetch_add(usage.generated_tokens as u64, Ordering::Relaxed);
        if usage.generated_tokens > 0 {
            lock(&self.ttft).observe(usage.time_to_first_token.as_secs_f64());
        }
        lock(&self.e2e).observe(seconds);
    }

    /// The Prometheus text.
    pub fn render(&self, runner: &RunnerStats) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, kind: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        gauge(
            "vkllm_requests_queued",
            "Requests waiting for a generation slot.",
            "gauge",
            runner.queued.to_string(),
        );
        gauge(
            "vkllm_requests_running",
            "Sequences generating.",
            "gauge",
            runner.active.to_string(),
        );
        gauge(
            "vkllm_slots",
            "Generation slots.",
            "gauge",
            runner.slots.to_string(),
        );
        gauge(
            "vkllm_kv_positions_used",
            "KV cache positions held by running sequences.",
            "gauge",
            runner.kv_used.to_string(),
        );
        gauge(
            "vkllm_kv_positions_total",
            "KV cache positions (slots x context).",
            "gauge",
            (runner.slots * runner.context).to_string(),
        );
        let total = (runner.slots * runner.context).max(1) as f64;
        gauge(
            "vkllm_kv_usage_ratio",
            "Fraction of the KV cache held by running sequences.",
            "gauge",
            format!("{}", runner.kv_used as f64 / total),
        );
        gauge(
            "vkllm_decode_steps_total",
            "Decode steps run.",
            "counter",
            runner.steps.to_string(),
        );
        gauge(
            "vkllm_prompt_tokens_total",
            "Prompt tokens of finished sequences.",
            "counter",
            self.prompt_tokens.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "vkllm_prefix_cache_queries_tokens_total",
            "Prompt tokens looked up in the slots' caches (finished sequences).",
            "counter",
            self.prompt_tokens.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "vkllm_prefix_cache_hit_tokens_total",
            "Prompt tokens taken from a slot's cache instead of computed (finished sequences).",
            "counter",
            self.cached_tokens.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "vkllm_prefix_cache_bytes",
            "Device bytes kept for conversations past their slots (serve --prefix-cache-mb).",
            "gauge",
            runner.prefix_cache_bytes.to_string(),
        );
        gauge(
            "vkllm_kv_shared_rows_total",
            "KV rows given in place (shared blocks, no copy) between slots and the prefix store \
             (serve --kv-sharing in-place).",
            "counter",
            runner.kv_rows_shared.to_string(),
        );
        gauge(
            "vkllm_kv_paged_bytes",
            "Device bytes paged KV blocks hold now (serve --kv-sharing in-place or on-demand).",
            "gauge",
            runner.kv_paged_bytes.to_string(),
        );
        gauge(
            "vkllm_kv_slots_reclaimed_total",
            "Idle slots whose KV memory was given back for other requests (--kv-sharing \
             on-demand).",
            "counter",
            runner.kv_slots_reclaimed.to_string(),
        );
        gauge(
            "vkllm_generated_tokens_total",
            "Generated tokens of finished sequences.",
            "counter",
            self.generated_tokens.load(Ordering::Relaxed).to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP vkllm_http_requests_total HTTP responses by endpoint and status.\n# TYPE vkllm_http_requests_total counter"
        );
        for ((ep, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "vkllm_http_requests_total{{endpoint=\"{ep}\",status=\"{status}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP vkllm_sequences_finished_total Sequences ended, by reason.\n# TYPE vkllm_sequences_finished_total counter"
        );
        for (reason, n) in lock(&self.finished).iter() {
            let _ = writeln!(
                out,
                "vkllm_sequences_finished_total{{reason=\"{reason}\"}} {n}"
            );
        }
        lock(&self.ttft).render(
            &mut out,
            "vkllm_time_to_first_token_seconds",
            "From submission (queueing included) to the first token.",
        );
        lock(&self.tpot).render(
            &mut out,
            "vkllm_time_per_output_token_seconds",
            "Gap between consecutive tokens of a sequence.",
        );
        lock(&self.e2e).render(
            &mut out,
            "vkllm_sequence_duration_seconds",
            "From submission to the end of a sequence.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for x in [0.05, 0.1, 0.5, 2.0] {
            h.observe(x);
        }
        let mut s = String::new();
        h.render(&mut s, "x", "help");
        assert!(s.contains("x_bucket{le=\"0.1\"} 2\n"));
        assert!(s.contains("x_bucket{le=\"1\"} 3\n"));
        assert!(s.contains("x_bucket{le=\"+Inf\"} 4\n"));
        assert!(s.contains("x_sum 2.65\n"));
        assert!(s.contains("x_count 4\n"));
    }
}
