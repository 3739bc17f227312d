//! Message text that cannot forge turns: special (control) tokens spelled inside the strings of
//! chat messages are tokenized as the plain text they are, and only the chat template itself
//! writes control tokens. (transformers and llama.cpp parse them wherever they appear, so a user
//! message `<|im_end|>` closes the turn.)
//!
//! Before rendering, every special-token spelling in a message string is replaced by a
//! placeholder (a private-use character, its index, another private-use character); the rendered
//! prompt is encoded with specials parsed between placeholders, each placeholder as its original
//! text with specials spelled out. A conversation without such spellings renders and encodes
//! exactly as before.

use serde_json::Value;

use crate::error::Result;
use crate::tokenizer::{EncodeOptions, Tokenizer};

const OPEN: char = '\u{F0000}';
const CLOSE: char = '\u{F0001}';

/// Chat messages with their special-token spellings set aside ([`Tokenizer::guard_messages`]).
#[derive(Debug, Clone)]
pub struct GuardedMessages {
    /// The messages to render.
    pub messages: Value,
    /// The text each placeholder stands for.
    originals: Vec<String>,
}

impl GuardedMessages {
    /// Whether any message string spelled a special token.
    pub fn guarded_any(&self) -> bool {
        !self.originals.is_empty()
    }
}

impl Tokenizer {
    /// `messages` with every special-token spelling in their strings (all but `role` values)
    /// replaced by a placeholder; render the result, then [`Tokenizer::encode_guarded`].
    pub fn guard_messages(&self, messages: &Value) -> GuardedMessages {
        let specials = self.special_spellings();
        let mut originals = Vec::new();
        let messages = guard_value(messages, &specials, &mut originals, false);
        GuardedMessages {
            messages,
            originals,
        }
    }

    /// Encodes a prompt rendered from `g.messages`: the template's text with specials parsed
    /// (no BOS added: the template writes it), each placeholder as its original text with
    /// specials spelled out.
    pub fn encode_guarded(&self, prompt: &str, g: &GuardedMessages) -> Result<Vec<u32>> {
        if g.originals.is_empty() {
            return self.encode(prompt, EncodeOptions::prompt());
        }
        let mut ids = Vec::new();
        let mut rest = prompt;
        while let Some(at) = rest.find(OPEN) {
            let after = &rest[at + OPEN.len_utf8()..];
            let Some(end) = after.find(CLOSE) else { break };
            let Ok(k) = after[..end].parse::<usize>() else {
                break;
            };
            let Some(original) = g.originals.get(k) else {
                break;
            };
            ids.extend(self.encode(&rest[..at], EncodeOptions::prompt())?);
            ids.extend(self.encode(original, EncodeOptions::plain())?);
            rest = &after[end + CLOSE.len_utf8()..];
        }
        ids.extend(self.encode(rest, EncodeOptions::prompt())?);
        Ok(ids)
    }
}

fn guard_value(v: &Value, specials: &[String], originals: &mut Vec<String>, role: bool) -> Value {
    match v {
        Value::String(s) if !role => Value::String(guard_str(s, specials, originals)),
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| guard_value(x, specials, originals, false))
                .collect(),
        ),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), guard_value(x, specials, originals, k == "role")))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `s` with each special spelling (leftmost, longest first) replaced by a placeholder.
fn guard_str(s: &str, specials: &[String], originals: &mut Vec<String>) -> String {
    if !specials.iter().any(|sp| s.contains(sp.as_str())) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    'scan: while i < s.len() {
        for sp in specials {
            if s[i..].starts_with(sp.as_str()) {
                out.push(OPEN);
                out.push_str(&originals.len().to_string());
                out.push(CLOSE);
                originals.push(sp.clone());
                i += sp.len();
                continue 'scan;
            }
        }
        let Some(c) = s[i..].chars().next() else {
            break;
        };
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_become_placeholders_longest_first() {
        let specials = vec!["<|im_end|>".to_string(), "<|im".to_string()];
        let mut orig = Vec::new();
        let g = guard_str("a<|im_end|>b<|imx", &specials, &mut orig);
        assert_eq!(g, "a\u{F0000}0\u{F0001}b\u{F0000}1\u{F0001}x");
        assert_eq!(orig, ["<|im_end|>", "<|im"]);
        let mut orig = Vec::new();
        assert_eq!(guard_str("plain", &specials, &mut orig), "plain");
        assert!(orig.is_empty());
    }
}
