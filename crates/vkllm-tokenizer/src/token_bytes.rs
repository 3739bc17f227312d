//! The bytes each token id stands for: what a grammar engine (structured outputs) needs to know
//! which tokens can extend a text. Byte-level BPE spellings go back through the GPT-2 byte map,
//! SentencePiece spellings turn `▁` into a space and `<0xAB>` into its byte, tiktoken ranks are
//! bytes already; special (control) tokens are reported by their spelling.

use std::collections::HashMap;

use tokenizers::DecoderWrapper;

use crate::error::{Result, TokenizerError};
use crate::tokenizer::{Backend, Tokenizer};

/// What one id is, as bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenBytes {
    /// Text: the bytes the id decodes to (possibly part of a UTF-8 character; empty for an id
    /// with no spelling).
    Text(Vec<u8>),
    /// A special (control) token, by its spelling (`<|im_end|>`).
    Special(String),
}

/// How a `tokenizers` vocabulary spells bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spelling {
    /// GPT-2 byte-level: every byte is one printable character.
    ByteLevel,
    /// SentencePiece: `space` stands for a space, `<0xAB>` for a byte.
    Pieces { space: char },
    /// Spelled as decoded (no decoder, or one that only joins pieces).
    Plain,
}

fn spelling_of(d: &DecoderWrapper, found: &mut Option<Spelling>, space: &mut char) {
    match d {
        DecoderWrapper::ByteLevel(_) => *found = Some(Spelling::ByteLevel),
        DecoderWrapper::ByteFallback(_) | DecoderWrapper::Metaspace(_) if found.is_none() => {
            *found = Some(Spelling::Pieces { space: '▁' })
        }
        DecoderWrapper::Replace(r) => {
            // The pattern is private: read it back from the serialised form.
            if let Ok(v) = serde_json::to_value(r)
                && v["content"] == " "
                && let Some(p) = v["pattern"]["String"].as_str()
                && p.chars().count() == 1
            {
                *space = p.chars().next().unwrap_or('▁');
                if found.is_none() {
                    *found = Some(Spelling::Pieces { space: *space })
                }
            }
        }
        DecoderWrapper::Sequence(s) => {
            for d in s.get_decoders() {
                spelling_of(d, found, space);
            }
        }
        _ => {}
    }
}

/// GPT-2's byte -> character table (the byte-level pre-tokenizer's spelling of each byte).
pub(crate) fn byte_level_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        out[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{FFFD}');
            next += 1;
            c
        };
    }
    out
}

/// GPT-2's byte <-> character table, character to byte.
fn byte_level_map() -> HashMap<char, u8> {
    let chars = byte_level_chars();
    (0..=255u8).map(|b| (chars[b as usize], b)).collect()
}

/// `<0xAB>` -> 0xAB.
fn byte_piece(s: &str) -> Option<u8> {
    let hex = s.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2)
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
}

impl Tokenizer {
    /// The bytes of every id `0..vocab_size()` (see [`TokenBytes`]).
    ///
    /// # Errors
    /// [`TokenizerError::Unsupported`] for a `tokenizer.json` whose decoder is neither byte-level,
    /// SentencePiece nor plain joining (WordPiece: its tokens' bytes are not known).
    pub fn token_bytes(&self) -> Result<Vec<TokenBytes>> {
        let n = self.vocab_size();
        match &self.backend {
            Backend::Tiktoken(t) => Ok((0..n as u32)
                .map(|id| {
                    if t.is_special(id) {
                        TokenBytes::Special(self.id_to_token(id).unwrap_or_default())
                    } else {
                        TokenBytes::Text(t.id_bytes(id).map(<[u8]>::to_vec).unwrap_or_default())
                    }
                })
                .collect()),
            Backend::Hf(hf) => {
                let mut found = None;
                let mut space = '▁';
                if let Some(d) = hf.tok.get_decoder() {
                    spelling_of(d, &mut found, &mut space);
                }
                let joins_only = |d: &DecoderWrapper| match d {
                    DecoderWrapper::Fuse(_) | DecoderWrapper::Strip(_) => true,
                    DecoderWrapper::Sequence(s) => s
                        .get_decoders()
                        .iter()
                        .all(|d| matches!(d, DecoderWrapper::Fuse(_) | DecoderWrapper::Strip(_))),
                    _ => false,
                };
                let spelling = match (found, hf.tok.get_decoder()) {
                    (Some(s), _) => s,
                    (None, None) => Spelling::Plain,
                    (None, Some(d)) if joins_only(d) => Spelling::Plain,
                    (None, Some(d)) => {
                        return Err(TokenizerError::Unsupported {
                            what: "token bytes".into(),
                            kind: "decoder",
                            name: serde_json::to_value(d)
                                .ok()
                                .and_then(|v| v["type"].as_str().map(str::to_string))
                                .unwrap_or_else(|| "unknown".into()),
                        });
                    }
                };
                let added = hf.tok.get_added_tokens_decoder();
                let map = byte_level_map();
                Ok((0..n as u32)
                    .map(|id| {
                        if let Some(a) = added.get(&id) {
                            // Added text tokens are spelled as written, except that
                            // SentencePiece ones use the space symbol too (Gemma's runs of spaces).
                            return match (a.special, spelling) {
                                (true, _) => TokenBytes::Special(a.content.clone()),
                                (false, Spelling::Pieces { space }) => {
                                    TokenBytes::Text(a.content.replace(space, " ").into_bytes())
                                }
                                (false, Spelling::ByteLevel | Spelling::Plain) => {
                                    TokenBytes::Text(a.content.as_bytes().to_vec())
                                }
                            };
                        }
                        let Some(s) = hf.tok.id_to_token(id) else {
                            return TokenBytes::Text(Vec::new());
                        };
                        TokenBytes::Text(match spelling {
                            Spelling::ByteLevel => {
                                s.chars().filter_map(|c| map.get(&c).copied()).collect()
                            }
                            Spelling::Pieces { space } => match byte_piece(&s) {
                                Some(b) => vec![b],
                                None => s.replace(space, " ").into_bytes(),
                            },
                            Spelling::Plain => s.into_bytes(),
                        })
                    })
                    .collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_map_is_gpt2s() {
        let m = byte_level_map();
        assert_eq!(m.len(), 256);
        assert_eq!(m[&'Ġ'], b' ');
        assert_eq!(m[&'Ċ'], b'\n');
        assert_eq!(m[&'a'], b'a');
        assert_eq!(m[&'\u{A1}'], 0xA1);
        assert_eq!(m[&'\u{100}'], 0);
    }

    #[test]
    fn byte_pieces() {
        assert_eq!(byte_piece("<0x0A>"), Some(10));
        assert_eq!(byte_piece("<0xFF>"), Some(255));
        assert_eq!(byte_piece("<0x1>"), None);
        assert_eq!(byte_piece("<0xZZ>"), None);
        assert_eq!(byte_piece("hello"), None);
    }
}
