//! Reading the user's messages: a line editor with history on a terminal (rustyline), plain
//! lines otherwise (so `vkllm chat` can be scripted). Both join multi-line input the same way:
//! a line ending in `\` continues on the next line, and a `"""` line opens a block that runs
//! until a line ending in `"""`.

use std::io::BufRead;
use std::path::PathBuf;

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

/// What the user did at the prompt.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// A whole message (or command).
    Message(String),
    /// Ctrl-C at the prompt: the line was dropped.
    Interrupted,
    /// Ctrl-D or the end of the input.
    Eof,
}

/// One physical line.
enum Line {
    Text(String),
    Interrupted,
    Eof,
}

/// Where lines come from.
pub enum Input {
    Editor {
        rl: Box<DefaultEditor>,
        history: Option<PathBuf>,
    },
    Plain(std::io::StdinLock<'static>),
}

const PROMPT: &str = ">>> ";
const MORE: &str = "... ";
const FENCE: &str = "\"\"\"";

impl Input {
    /// A line editor (history loaded from `history` when given), or plain lines when stdin is
    /// not a terminal or the editor cannot start.
    pub fn new(terminal: bool, history: Option<PathBuf>) -> Self {
        if terminal && let Ok(mut rl) = DefaultEditor::new() {
            if let Some(h) = &history {
                // A missing file is the first run.
                let _ = rl.load_history(h);
            }
            return Input::Editor {
                rl: Box::new(rl),
                history,
            };
        }
        Input::Plain(std::io::stdin().lock())
    }

    fn line(&mut self, prompt: &str) -> Line {
        match self {
            Input::Editor { rl, .. } => match rl.readline(prompt) {
                Ok(l) => Line::Text(l),
                Err(ReadlineError::Interrupted) => Line::Interrupted,
                Err(_) => Line::Eof,
            },
            Input::Plain(stdin) => {
                let mut s = String::new();
                match stdin.read_line(&mut s) {
                    Ok(0) | Err(_) => Line::Eof,
                    Ok(_) => {
                        if s.ends_with('\n') {
                            s.pop();
                            if s.ends_with('\r') {
                                s.pop();
                            }
                        }
                        Line::Text(s)
                    }
                }
            }
        }
    }

    /// Reads one message, joining continued lines and `"""` blocks.
    pub fn read(&mut self) -> Read {
        let first = match self.line(PROMPT) {
            Line::Text(l) => l,
            Line::Interrupted => return Read::Interrupted,
            Line::Eof => return Read::Eof,
        };
        let mut joiner = Joiner::default();
        let mut next = first;
        loop {
            if let Some(done) = joiner.push(&next) {
                self.remember(&done);
                return Read::Message(done);
            }
            next = match self.line(MORE) {
                Line::Text(l) => l,
                Line::Interrupted => return Read::Interrupted,
                // The input ended inside a block: take what there is.
                Line::Eof => {
                    let done = joiner.finish();
                    self.remember(&done);
                    return Read::Message(done);
                }
            };
        }
    }

    fn remember(&mut self, message: &str) {
        if let Input::Editor { rl, history } = self
            && !message.trim().is_empty()
        {
            let _ = rl.add_history_entry(message);
            if let Some(h) = history {
                if let Some(dir) = h.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = rl.save_history(h);
            }
        }
    }
}

/// Joins physical lines into one message.
#[derive(Debug, Default)]
pub struct Joiner {
    text: String,
    /// Inside a `"""` block.
    block: bool,
}

impl Joiner {
    /// Adds a line; returns the message when it is complete.
    pub fn push(&mut self, line: &str) -> Option<String> {
        if self.block {
            if let Some(body) = line.trim_end().strip_suffix(FENCE) {
                self.block = false;
                self.text.push_str(body);
                return Some(std::mem::take(&mut self.text));
            }
            self.text.push_str(line);
            self.text.push('\n');
            return None;
        }
        if let Some(rest) = line.trim_start().strip_prefix(FENCE) {
            // `"""text"""` on one line is a whole message.
            if let Some(body) = rest.trim_end().strip_suffix(FENCE) {
                self.text.push_str(body);
                return Some(std::mem::take(&mut self.text));
            }
            self.block = true;
            if !rest.trim().is_empty() {
                self.text.push_str(rest);
                self.text.push('\n');
            }
            return None;
        }
        if let Some(body) = line.strip_suffix('\\') {
            self.text.push_str(body);
            self.text.push('\n');
            return None;
        }
        self.text.push_str(line);
        Some(std::mem::take(&mut self.text))
    }

    /// The text so far (the input ended).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.text)
            .trim_end_matches('\n')
            .to_string()
    }
}

/// The default history file: `$XDG_STATE_HOME/vkllm/chat_history`, else
/// `~/.local/state/vkllm/chat_history`.
pub fn default_history() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let base = nonempty("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(base.join("vkllm").join("chat_history"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(lines: &[&str]) -> Vec<String> {
        let mut j = Joiner::default();
        lines.iter().filter_map(|l| j.push(l)).collect()
    }

    #[test]
    fn single_lines_pass_through() {
        assert_eq!(join(&["hello", "/stats"]), ["hello", "/stats"]);
    }

    #[test]
    fn backslash_continues() {
        assert_eq!(
            join(&["first \\", "second\\", "third", "next"]),
            ["first \nsecond\nthird", "next"]
        );
    }

    #[test]
    fn triple_quote_blocks() {
        assert_eq!(
            join(&["\"\"\"", "line 1", "  line 2\\", "", "end\"\"\"", "after"]),
            ["line 1\n  line 2\\\n\nend", "after"]
        );
        assert_eq!(join(&["\"\"\"start", "more\"\"\""]), ["start\nmore"]);
        assert_eq!(join(&["\"\"\"one line\"\"\""]), ["one line"]);
    }

    #[test]
    fn unfinished_block_at_end_of_input() {
        let mut j = Joiner::default();
        assert_eq!(j.push("\"\"\""), None);
        assert_eq!(j.push("a"), None);
        assert_eq!(j.push("b"), None);
        assert_eq!(j.finish(), "a\nb");
    }
}
