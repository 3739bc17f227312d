//! Incremental detokenization for streaming.
//!
//! Decoding token by token is not the same as decoding each token alone: a character can be
//! split across byte-fallback or byte-level tokens, and SentencePiece decoders treat the first
//! token of a sequence differently. So the decoder keeps a short window of ids: it decodes the
//! window with and without the newest tokens and emits the difference once that difference is
//! whole text (does not end in U+FFFD, the mark of an unfinished UTF-8 sequence). The window
//! starts one token before the text not yet emitted, so leading-space rules see the same context
//! as a full decode.

use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// Turns a stream of token ids into a stream of text pieces whose concatenation is the
/// decode of all the ids; never emits part of a character.
pub struct IncrementalDecoder<'a> {
    tok: &'a Tokenizer,
    skip_special: bool,
    /// Ids from `prefix` on (older ones are dropped).
    ids: Vec<u32>,
    /// `ids[..read]` are emitted already and kept as context for the next piece.
    read: usize,
    /// How many ids were pushed in all.
    all: usize,
}

impl<'a> IncrementalDecoder<'a> {
    /// A decoder over `tok`; `skip_special` as in [`Tokenizer::decode`].
    pub fn new(tok: &'a Tokenizer, skip_special: bool) -> Self {
        IncrementalDecoder {
            tok,
            skip_special,
            ids: Vec::new(),
            read: 0,
            all: 0,
        }
    }

    /// Adds one id; returns the text it completes, if any.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        self.all += 1;
        let prefix_text = self.tok.decode(&self.ids[..self.read], self.skip_special)?;
        let new_text = self.tok.decode(&self.ids, self.skip_special)?;
        if new_text.len() > prefix_text.len()
            && new_text.starts_with(&prefix_text)
            && !new_text.ends_with('\u{FFFD}')
        {
            let delta = new_text[prefix_text.len()..].to_string();
            // The ids just emitted stay as context; older ones go.
            self.ids.drain(..self.read);
            self.read = self.ids.len();
            return Ok(Some(delta));
        }
        Ok(None)
    }

    /// Adds several ids; returns the text they complete (possibly empty).
    pub fn push_all(&mut self, ids: &[u32]) -> Result<String> {
        let mut out = String::new();
        for &id in ids {
            if let Some(s) = self.push(id)? {
                out.push_str(&s);
            }
        }
        Ok(out)
    }

    /// The text still held back (an unfinished character comes out as U+FFFD); call at the
    /// end of the stream.
    pub fn flush(&mut self) -> Result<String> {
        let prefix_text = self.tok.decode(&self.ids[..self.read], self.skip_special)?;
        let new_text = self.tok.decode(&self.ids, self.skip_special)?;
        let delta = match new_text.strip_prefix(&prefix_text) {
            Some(d) => d.to_string(),
            None => new_text,
        };
        self.ids.clear();
        self.read = 0;
        Ok(delta)
    }

    /// How many ids were pushed in all.
    pub fn len(&self) -> usize {
        self.all
    }

    /// Whether no id was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.all == 0
    }
}
