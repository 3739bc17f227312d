//! `vkllm chat`: a multi-turn conversation in the terminal. Each turn renders the whole
//! conversation with the chat template and hands it to the session, which reuses the cached
//! keys and values of everything before the new turn, so only the new turn is computed.
//!
//! Ctrl-C during an answer stops that answer (a SIGINT handler sets a flag the session checks
//! after every token); at the prompt it drops the line; Ctrl-D or `/quit` leaves. When stdin is
//! not a terminal, messages are read as plain lines, so a chat can be scripted.

mod conversation;
mod input;
mod output;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use vkllm_engine::{FinishReason, Usage};
use vkllm_tokenizer::RenderOptions;

use self::conversation::Conversation;
use self::input::{Input, Read};
use self::output::Printer;
use super::common::{self, Engine, ModelArgs, SamplingArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,

    #[command(flatten)]
    sampling: SamplingArgs,

    /// System message.
    #[arg(long)]
    system: Option<String>,

    /// Start from a conversation saved with /save (a JSON list of messages).
    #[arg(long, value_name = "FILE")]
    load: Option<PathBuf>,

    /// Line-editor history file (default: $XDG_STATE_HOME/vkllm/chat_history, else
    /// ~/.local/state/vkllm/chat_history).
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,

    /// Keep no history file.
    #[arg(long, conflicts_with = "history")]
    no_history: bool,

    /// Device memory (MiB) for conversations kept past the cache (the batched GPU decoder): a
    /// conversation /loaded again is copied back instead of computed. 0: off.
    #[arg(long, default_value_t = 0, value_name = "MB")]
    prefix_cache_mb: u64,
}

const HELP: &str = "\
Type a message and press Enter. End a line with \\ to continue it, or wrap several lines in
\"\"\" ... \"\"\". Ctrl-C stops an answer; Ctrl-D or /quit leaves.
  /reset          forget the conversation (the system message stays)
  /system [TEXT]  set the system message (`/system -` removes it; no TEXT shows it)
  /save FILE      write the conversation as JSON messages
  /load FILE      read a conversation written by /save
  /stats          context use, tokens reused and computed, speed of the last answer
  /help           this text
  /quit           leave";

/// Ctrl-C handling: `cancel` is set by every SIGINT; the program exits on SIGINT while `idle`.
struct Signals {
    cancel: Arc<AtomicBool>,
    idle: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Self> {
        let cancel = Arc::new(AtomicBool::new(false));
        let idle = Arc::new(AtomicBool::new(true));
        // The shutdown action comes first: it exits (status 130, as a shell reports SIGINT)
        // only while no answer is being generated.
        signal_hook::flag::register_conditional_shutdown(
            signal_hook::consts::SIGINT,
            130,
            Arc::clone(&idle),
        )
        .context("installing the Ctrl-C handler")?;
        signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&cancel))
            .context("installing the Ctrl-C handler")?;
        Ok(Signals { cancel, idle })
    }
}

/// State the commands report on.
struct Chat {
    engine: Box<dyn Engine>,
    conv: Conversation,
    sampling: SamplingArgs,
    /// `--json-schema` / `--grammar`, compiled once for every answer.
    grammar: Option<std::sync::Arc<vkllm_engine::Grammar>>,
    last: Option<Usage>,
    answers: usize,
    generated: usize,
    load_secs: f64,
    styled: bool,
}

pub fn run(args: Args) -> Result<()> {
    let terminal = std::io::stdin().is_terminal();
    let styled = std::io::stdout().is_terminal();
    let loaded = common::load_with_store(&args.model, args.prefix_cache_mb)?;
    let mut conv = Conversation::new(args.system.clone());
    if let Some(f) = &args.load {
        conv = Conversation::load(f)?;
        if args.system.is_some() {
            conv.system = args.system.clone();
        }
    }
    let grammar = args.sampling.grammar(loaded.engine.as_ref())?;
    let mut chat = Chat {
        engine: loaded.engine,
        conv,
        sampling: args.sampling.clone(),
        grammar,
        last: None,
        answers: 0,
        generated: 0,
        load_secs: loaded.load_time.as_secs_f64(),
        styled,
    };
    let signals = Signals::install()?;
    let history = if args.no_history {
        None
    } else {
        args.history.clone().or_else(input::default_history)
    };
    let mut input = Input::new(terminal, history);
    if terminal {
        eprintln!(
            "vkllm chat: {} tokens of context. /help for commands, Ctrl-C stops an answer, Ctrl-D leaves.",
            chat.engine.context()
        );
    }
    loop {
        let text = match input.read() {
            Read::Eof => break,
            Read::Interrupted => {
                eprintln!("(Ctrl-D or /quit to leave)");
                continue;
            }
            Read::Message(t) => t,
        };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(cmd) = trimmed.strip_prefix('/')
            && !cmd.starts_with('/')
        {
            match chat.command(cmd) {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    continue;
                }
            }
        }
        // `//text` sends `/text`.
        let message = if trimmed.starts_with("//") {
            &trimmed[1..]
        } else {
            text.as_str()
        };
        if let Err(e) = chat.turn(message, &signals) {
            eprintln!("error: {e:#}");
        }
    }
    Ok(())
}

impl Chat {
    /// Runs a slash command; `Ok(false)` means leave.
    fn command(&mut self, cmd: &str) -> Result<bool> {
        let (name, arg) = match cmd.split_once(char::is_whitespace) {
            Some((n, a)) => (n, a.trim()),
            None => (cmd, ""),
        };
        match name {
            "quit" | "exit" | "q" => return Ok(false),
            "help" | "?" => println!("{HELP}"),
            "reset" => {
                self.conv.turns.clear();
                self.engine.reset();
                self.last = None;
                println!("(conversation reset)");
            }
            "system" => match arg {
                "" => println!(
                    "system: {}",
                    self.conv.system.as_deref().unwrap_or("(none)")
                ),
                "-" => {
                    self.conv.system = None;
                    println!("(system message removed)");
                }
                text => {
                    self.conv.system = Some(text.to_string());
                    println!("(system message set)");
                }
            },
            "save" => {
                let path = need_path(arg)?;
                self.conv.save(path)?;
                println!(
                    "(saved {} messages to {})",
                    self.conv.messages().as_array().map_or(0, Vec::len),
                    path.display()
                );
            }
            "load" => {
                let path = need_path(arg)?;
                self.conv = Conversation::load(path)?;
                println!(
                    "(loaded {} messages from {})",
                    self.conv.messages().as_array().map_or(0, Vec::len),
                    path.display()
                );
            }
            "stats" => self.stats(),
            other => println!("unknown command /{other}; /help lists them"),
        }
        Ok(true)
    }

    fn stats(&self) {
        println!(
            "context: {} of {} tokens cached | conversation: {} exchanges | {} answers, {} tokens generated | model loaded in {:.2} s",
            self.engine.cached(),
            self.engine.context(),
            self.conv.exchanges(),
            self.answers,
            self.generated,
            self.load_secs
        );
        match &self.last {
            None => println!("last answer: none yet"),
            Some(u) => println!(
                "last answer: prompt {} tokens ({} reused, {} computed), {} tokens generated, \
                 finish {} | time to first token {:.3} s, prefill {:.1} tok/s, decode {:.1} tok/s",
                u.prompt_tokens,
                u.reused_tokens,
                u.prompt_tokens - u.reused_tokens,
                u.generated_tokens,
                finish_name(u.finish),
                u.time_to_first_token.as_secs_f64(),
                u.prefill_tokens_per_s,
                u.decode_tokens_per_s
            ),
        }
    }

    /// One exchange: the user's message, the streamed answer.
    fn turn(&mut self, message: &str, signals: &Signals) -> Result<()> {
        self.conv.push("user", message);
        let (prompt, ids) = match self.render() {
            Ok(x) => x,
            Err(e) => {
                self.conv.turns.pop();
                return Err(e);
            }
        };
        let ctx = self.engine.context();
        let mut params = self
            .sampling
            .params(self.sampling.max_tokens.min(ctx - ids.len()));
        params.grammar = self.grammar.clone();
        let starts_in_reasoning = prompt.trim_end().ends_with("<think>");
        let mut printer = Printer::new(std::io::stdout().lock(), self.styled, starts_in_reasoning);
        let mut answer = String::new();
        signals.cancel.store(false, Ordering::SeqCst);
        signals.idle.store(false, Ordering::SeqCst);
        let result = self
            .engine
            .generate(&ids, &params, &signals.cancel, &mut |t| {
                answer.push_str(t);
                printer.push(t);
            });
        signals.idle.store(true, Ordering::SeqCst);
        printer.finish();
        let usage = match result {
            Ok(u) => u,
            Err(e) => {
                self.conv.turns.pop();
                return Err(e.into());
            }
        };
        match usage.finish {
            FinishReason::Cancelled => printer.note("[stopped]"),
            FinishReason::Length => printer.note("[token limit reached: --max-tokens]"),
            _ => {}
        }
        self.conv.push("assistant", &answer);
        self.answers += 1;
        self.generated += usage.generated_tokens;
        self.last = Some(usage);
        Ok(())
    }

    /// The prompt and its tokens; the oldest exchanges are dropped (with a note) until the
    /// prompt leaves room for an answer.
    fn render(&mut self) -> Result<(String, Vec<u32>)> {
        let ctx = self.engine.context();
        let mut dropped = 0;
        loop {
            let tok = self.engine.tokenizer();
            // Special tokens typed in a message stay text (only the template writes turns).
            let guarded = tok.guard_messages(&self.conv.messages());
            let prompt =
                tok.apply_chat_template(&guarded.messages, &RenderOptions::generation(true))?;
            let ids = tok.encode_guarded(&prompt, &guarded)?;
            if ids.len() < ctx {
                if dropped > 0 {
                    eprintln!(
                        "(dropped the {dropped} oldest exchange{} to fit the {ctx}-token context)",
                        if dropped == 1 { "" } else { "s" }
                    );
                }
                return Ok((prompt, ids));
            }
            if !self.conv.drop_oldest() {
                bail!(
                    "the message needs {} tokens with the template; the context is {ctx} (raise --ctx)",
                    ids.len()
                );
            }
            dropped += 1;
        }
    }
}

fn need_path(arg: &str) -> Result<&Path> {
    if arg.is_empty() {
        bail!("a file name is needed");
    }
    Ok(Path::new(arg))
}

fn finish_name(f: FinishReason) -> &'static str {
    match f {
        FinishReason::EndOfGeneration => "end",
        FinishReason::Stop => "stop string",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Timeout => "timeout",
    }
}
