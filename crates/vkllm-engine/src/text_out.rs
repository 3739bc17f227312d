//! Sampled tokens to streamed text, shared by [`crate::Session`] and [`crate::SlotSession`]:
//! incremental detokenizing, stop strings, the end-of-generation and token-limit rules.

use vkllm_tokenizer::{IncrementalDecoder, StopMatcher, Tokenizer};

use crate::error::EngineError;
use crate::session::FinishReason;

pub(crate) struct TextOut<'a, F: FnMut(&str)> {
    tokenizer: &'a Tokenizer,
    decoder: IncrementalDecoder<'a>,
    stops: StopMatcher,
    max_tokens: usize,
    /// Tokens taken (emitted or held back), end-of-generation tokens excluded.
    pub generated: usize,
    on_text: F,
}

impl<'a, F: FnMut(&str)> TextOut<'a, F> {
    pub fn new(tokenizer: &'a Tokenizer, stop: &[String], max_tokens: usize, on_text: F) -> Self {
        TextOut {
            tokenizer,
            decoder: tokenizer.incremental_decoder(true),
            stops: StopMatcher::new(stop.iter().map(String::as_str)),
            max_tokens,
            generated: 0,
            on_text,
        }
    }

    /// Takes the next sampled token: `Some(reason)` when generation ends with it (an
    /// end-of-generation token, which is not counted; a stop string; the token limit).
    pub fn push(&mut self, id: u32) -> Result<Option<FinishReason>, EngineError> {
        // A limit of 0 takes nothing (the limit ends the others right after their last token).
        if self.generated >= self.max_tokens {
            return Ok(Some(FinishReason::Length));
        }
        if self.tokenizer.is_eog(id) {
            return Ok(Some(FinishReason::EndOfGeneration));
        }
        self.generated += 1;
        if let Some(piece) = self.decoder.push(id)? {
            let step = self.stops.push(&piece);
            (self.on_text)(&step.text);
            if step.stopped.is_some() {
                return Ok(Some(FinishReason::Stop));
            }
        }
        if self.generated >= self.max_tokens {
            return Ok(Some(FinishReason::Length));
        }
        Ok(None)
    }

    /// Ends the generation: unless a stop string ended it, the decoder's tail and the text held
    /// back for a possible stop string are emitted.
    pub fn finish(mut self, finish: FinishReason) -> Result<usize, EngineError> {
        if finish != FinishReason::Stop {
            let tail = self.decoder.flush()?;
            let step = self.stops.push(&tail);
            (self.on_text)(&step.text);
            if step.stopped.is_none() {
                (self.on_text)(&self.stops.finish());
            }
        }
        Ok(self.generated)
    }
}
