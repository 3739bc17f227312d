//! `vkllm`: the command line. Each subcommand lives in `cmd/<name>.rs` with its own `Args`
//! and `run`; this file only parses and dispatches.

mod cmd;

use clap::{Parser, Subcommand};

/// LLM inference on any Vulkan GPU.
#[derive(Debug, Parser)]
#[command(name = "vkllm", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Prefill and decode speed on a Vulkan device (pp/tg tests, batches, --profile).
    Bench(cmd::bench::Args),
    /// Vulkan devices and their capabilities; with --model, the model's shape and memory needs.
    Info(cmd::info::Args),
    /// Answer a prompt with a model (chat template applied unless --raw), streamed to stdout.
    Run(cmd::run::Args),
    /// Talk with a model: a multi-turn conversation with line editing and history.
    Chat(cmd::chat::Args),
    /// Print the token ids of a text (or of a chat rendered with the model's template).
    Tokenize(cmd::tokenize::Args),
    /// Write a random-weight GGUF of a real model's shape (for benchmarks).
    Synth(cmd::synth::Args),
    /// Perplexity of a model over a text (llama.cpp's method).
    Perplexity(cmd::perplexity::Args),
    /// Serve a model over HTTP: OpenAI and Anthropic APIs, streaming, concurrent requests.
    Serve(cmd::serve::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => cmd::bench::run(args),
        Command::Info(args) => cmd::info::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Chat(args) => cmd::chat::run(args),
        Command::Tokenize(args) => cmd::tokenize::run(args),
        Command::Synth(args) => cmd::synth::run(args),
        Command::Perplexity(args) => cmd::perplexity::run(args),
        Command::Serve(args) => cmd::serve::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each once: a cause whose text an outer message already carries
/// (a library error that prints its source) is not repeated.
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if out.contains(&msg) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_text;

    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("No such device (os error 19)")
        }
    }
    impl std::error::Error for Inner {}

    /// Prints its source in its own message, as the GGUF and tokenizer errors do.
    #[derive(Debug)]
    struct Outer(Inner);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "fixtures/llama: I/O error: {}", self.0)
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_is_printed_once() {
        let e = anyhow::Error::new(Outer(Inner)).context("reading fixtures/llama");
        assert_eq!(
            format!("{e:#}"),
            "reading fixtures/llama: fixtures/llama: I/O error: No such device (os error 19): \
             No such device (os error 19)"
        );
        assert_eq!(
            error_text(&e),
            "reading fixtures/llama: fixtures/llama: I/O error: No such device (os error 19)"
        );
        let plain = anyhow::anyhow!("bad").context("loading x");
        assert_eq!(error_text(&plain), "loading x: bad");
    }
}
