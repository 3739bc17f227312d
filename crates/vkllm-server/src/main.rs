//! `vkllm`: the command line. Each subcommand lives in `cmd/<name>.rs` with its own `Args`
//! and `run`; this file only parses and dispatches.

mod cmd;
mod fetch;
mod server;

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
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
