//! `vkllm tokenize`: text (or a rendered chat) to token ids, printed as a JSON array.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value as Json};
use vkllm_tokenizer::{ChatTemplate, EncodeOptions, RenderOptions, TemplateOrigin, Tokenizer};

use super::model;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: a .gguf file, a tokenizer directory or tokenizer.json, a .tiktoken file, a model
    /// name (smollm2-135m (default), gemma3-270m, qwen2.5-coder-0.5b: fetched on first use), or a
    /// tokenizer from scripts/fetch-models.sh (gemma3-tok, qwen3-tok, qwen3.6-tok).
    #[arg(long, short, env = "VKLLM_MODEL")]
    model: Option<String>,

    /// The text to tokenize.
    #[arg(conflicts_with = "chat", required_unless_present = "chat")]
    text: Option<String>,

    /// Render this chat with the model's template first: a JSON list of messages, or an object
    /// with `messages` and optionally `tools`, `documents` and other template variables.
    #[arg(long, value_name = "FILE")]
    chat: Option<PathBuf>,

    /// With --chat: do not end with the header of a new assistant turn.
    #[arg(long, requires = "chat")]
    no_generation_prompt: bool,

    /// With --chat: leave the last message open for the model to continue (a prefilled
    /// assistant turn); implies --no-generation-prompt.
    #[arg(long, requires = "chat")]
    continue_final_message: bool,

    /// With --chat: a template variable, KEY=JSON (e.g. enable_thinking=false); repeatable.
    #[arg(long = "set", value_name = "KEY=JSON", requires = "chat")]
    set: Vec<String>,

    /// With --chat: use this Jinja template instead of the model's.
    #[arg(long, value_name = "FILE", requires = "chat")]
    template: Option<PathBuf>,

    /// Print the rendered chat prompt to stderr.
    #[arg(long, requires = "chat")]
    show_prompt: bool,

    /// Do not add BOS/EOS around the text.
    #[arg(long)]
    no_special: bool,

    /// Spell special tokens written in the text as plain text instead of matching them.
    #[arg(long)]
    plain: bool,

    /// Print [id, "token"] pairs instead of bare ids.
    #[arg(long)]
    tokens: bool,
}

pub fn run(args: Args) -> Result<()> {
    let path = model::resolve(args.model.as_deref())?;
    let mut tok = Tokenizer::from_path(&path)
        .with_context(|| format!("loading the tokenizer of {}", path.display()))?;
    let ids = match &args.chat {
        Some(file) => {
            if let Some(t) = &args.template {
                let src = std::fs::read_to_string(t)
                    .with_context(|| format!("reading {}", t.display()))?;
                let specials = tok
                    .chat_template()
                    .map(|c| c.special_tokens().to_vec())
                    .unwrap_or_default();
                tok.set_chat_template(ChatTemplate::new(
                    "user",
                    &src,
                    TemplateOrigin::User(t.display().to_string()),
                    specials,
                )?);
            }
            let (messages, opts) = read_chat(file, &args)?;
            let template = tok.chat_template_for(&opts)?;
            if let TemplateOrigin::Builtin { family } = template.origin() {
                eprintln!(
                    "note: {} has no chat template; using the built-in {family} template",
                    tok.describe()
                );
            }
            let prompt = template.render(&messages, &opts)?;
            if args.show_prompt {
                eprintln!("{prompt}");
            }
            let enc = EncodeOptions {
                add_special_tokens: false,
                parse_special: true,
            };
            tok.encode(&prompt, enc)?
        }
        None => {
            let text = args.text.as_deref().unwrap_or_default();
            let enc = EncodeOptions {
                add_special_tokens: !args.no_special,
                parse_special: !args.plain,
            };
            tok.encode(text, enc)?
        }
    };
    let out = if args.tokens {
        let pairs: Vec<Json> = ids
            .iter()
            .map(|&id| serde_json::json!([id, tok.id_to_token(id)]))
            .collect();
        serde_json::to_string(&pairs)?
    } else {
        serde_json::to_string(&ids)?
    };
    println!("{out}");
    Ok(())
}

/// The messages and render options of a --chat file.
fn read_chat(file: &PathBuf, args: &Args) -> Result<(Json, RenderOptions)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let value: Json = serde_json::from_str(&text)
        .with_context(|| format!("{}: not valid JSON", file.display()))?;
    let no_prompt = args.no_generation_prompt || args.continue_final_message;
    let mut opts = RenderOptions {
        add_generation_prompt: !no_prompt,
        continue_final_message: args.continue_final_message,
        ..RenderOptions::default()
    };
    let messages = match value {
        Json::Array(_) => value,
        Json::Object(mut obj) => {
            let Some(messages) = obj.remove("messages") else {
                bail!("{}: an object needs a `messages` list", file.display());
            };
            opts.tools = obj.remove("tools").filter(|t| !t.is_null());
            opts.documents = obj.remove("documents").filter(|t| !t.is_null());
            if let Some(g) = obj.remove("add_generation_prompt") {
                opts.add_generation_prompt =
                    g.as_bool().unwrap_or(true) && !args.no_generation_prompt;
            }
            opts.kwargs = obj;
            messages
        }
        _ => bail!(
            "{}: expected a list of messages or an object",
            file.display()
        ),
    };
    let mut kwargs = Map::new();
    for kv in &args.set {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--set {kv}: expected KEY=JSON");
        };
        let v: Json = serde_json::from_str(v).unwrap_or_else(|_| Json::String(v.to_string()));
        kwargs.insert(k.to_string(), v);
    }
    opts.kwargs.extend(kwargs);
    Ok((messages, opts))
}
