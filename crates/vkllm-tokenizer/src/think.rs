//! Splitting reasoning (`<think>...</think>`) from the answer, for whole texts and for streams.
//!
//! The split follows what Qwen3's chat template does with a stored assistant turn:
//! reasoning = `text.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')`,
//! answer = `text.split('</think>')[-1].lstrip('\n')`.

/// A piece of streamed output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Text inside the reasoning block.
    Reasoning(String),
    /// Text of the answer.
    Answer(String),
}

/// Splits a finished text into (reasoning, answer); `None` when there is no closing tag.
pub fn split_reasoning(text: &str, open: &str, close: &str) -> (Option<String>, String) {
    match text.find(close) {
        None => (None, text.to_string()),
        Some(_) => {
            let before = text.split(close).next().unwrap_or_default();
            let after = text.rsplit(close).next().unwrap_or_default();
            let reasoning = before.trim_end_matches('\n');
            let reasoning = reasoning.rsplit(open).next().unwrap_or_default();
            (
                Some(reasoning.trim_start_matches('\n').to_string()),
                after.trim_start_matches('\n').to_string(),
            )
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Before any tag: text is answer unless an open tag comes.
    Start,
    Reasoning,
    Answer,
}

/// Streams text into [`Segment`]s. Tags split across pieces are recognized; newlines around the
/// reasoning and at the start of the answer are trimmed as [`split_reasoning`] trims them.
#[derive(Debug, Clone)]
pub struct ThinkingSplitter {
    open: String,
    close: String,
    mode: Mode,
    /// Text not yet classified: a possible tag start, or newlines that may be trimmed.
    pending: String,
    /// At the start of a section, leading newlines are dropped.
    section_start: bool,
}

impl ThinkingSplitter {
    /// A splitter for `open`/`close` tags. With `starts_in_reasoning` (templates whose
    /// generation prompt already ends in the open tag) the stream begins inside the reasoning.
    pub fn new(open: &str, close: &str, starts_in_reasoning: bool) -> Self {
        ThinkingSplitter {
            open: open.to_string(),
            close: close.to_string(),
            mode: if starts_in_reasoning {
                Mode::Reasoning
            } else {
                Mode::Start
            },
            pending: String::new(),
            section_start: starts_in_reasoning,
        }
    }

    /// `<think>` / `</think>`, starting outside.
    pub fn think_tags() -> Self {
        Self::new("<think>", "</think>", false)
    }

    /// Feeds a piece of text; returns the segments it completes.
    pub fn push(&mut self, piece: &str) -> Vec<Segment> {
        self.pending.push_str(piece);
        let mut out = Vec::new();
        loop {
            let tag = match self.mode {
                Mode::Start => self.open.clone(),
                Mode::Reasoning => self.close.clone(),
                Mode::Answer => {
                    let text = std::mem::take(&mut self.pending);
                    self.emit(&mut out, text);
                    return out;
                }
            };
            if let Some(pos) = self.pending.find(&tag) {
                let before = self.pending[..pos].to_string();
                let rest = self.pending[pos + tag.len()..].to_string();
                if self.mode == Mode::Reasoning {
                    self.emit(&mut out, before.trim_end_matches('\n').to_string());
                    self.mode = Mode::Answer;
                } else {
                    self.emit(&mut out, before);
                    self.mode = Mode::Reasoning;
                }
                self.section_start = true;
                self.pending = rest;
                continue;
            }
            // Hold back a possible tag start, and in reasoning any trailing newlines.
            let mut keep = held_len(&self.pending, &tag);
            if self.mode == Mode::Reasoning {
                let body = &self.pending[..self.pending.len() - keep];
                keep += body.len() - body.trim_end_matches('\n').len();
            }
            let cut = self.pending.len() - keep;
            let text = self.pending[..cut].to_string();
            self.pending.drain(..cut);
            self.emit(&mut out, text);
            return out;
        }
    }

    /// The end of the stream: whatever was held back.
    pub fn finish(&mut self) -> Vec<Segment> {
        let mut out = Vec::new();
        // In an unclosed reasoning block the held-back tail stays reasoning.
        let text = std::mem::take(&mut self.pending);
        self.emit(&mut out, text);
        out
    }

    fn emit(&mut self, out: &mut Vec<Segment>, mut text: String) {
        if self.section_start && self.mode != Mode::Start {
            let trimmed = text.trim_start_matches('\n');
            if trimmed.is_empty() {
                return;
            }
            text = trimmed.to_string();
        }
        if text.is_empty() {
            return;
        }
        self.section_start = false;
        let seg = match self.mode {
            Mode::Reasoning => Segment::Reasoning(text),
            _ => Segment::Answer(text),
        };
        match (out.last_mut(), seg) {
            (Some(Segment::Reasoning(a)), Segment::Reasoning(b))
            | (Some(Segment::Answer(a)), Segment::Answer(b)) => a.push_str(&b),
            (_, seg) => out.push(seg),
        }
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
fn held_len(s: &str, tag: &str) -> usize {
    let max = tag.len().saturating_sub(1).min(s.len());
    (1..=max)
        .rev()
        .find(|&len| {
            let start = s.len() - len;
            s.is_char_boundary(start) && tag.starts_with(&s[start..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(segments: &[Segment]) -> (String, String) {
        let mut r = String::new();
        let mut a = String::new();
        for s in segments {
            match s {
                Segment::Reasoning(t) => r += t,
                Segment::Answer(t) => a += t,
            }
        }
        (r, a)
    }

    fn stream(text: &str, chunk: usize, starts_in: bool) -> (String, String) {
        let mut sp = ThinkingSplitter::new("<think>", "</think>", starts_in);
        let mut segs = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for c in chars.chunks(chunk) {
            segs.extend(sp.push(&c.iter().collect::<String>()));
        }
        segs.extend(sp.finish());
        collect(&segs)
    }

    #[test]
    fn whole_text_split_matches_the_qwen3_template_rule() {
        // Values worked out by hand from the template's expressions.
        assert_eq!(
            split_reasoning(
                "<think>\nstep 1\nstep 2\n\n</think>\n\nThe answer.",
                "<think>",
                "</think>"
            ),
            (Some("step 1\nstep 2".into()), "The answer.".into())
        );
        assert_eq!(
            split_reasoning("no tags here", "<think>", "</think>"),
            (None, "no tags here".into())
        );
        assert_eq!(
            split_reasoning("implicit open\n</think>answer", "<think>", "</think>"),
            (Some("implicit open".into()), "answer".into())
        );
    }

    #[test]
    fn streaming_agrees_with_whole_text_split_for_every_chunking() {
        let texts = [
            "<think>\nstep 1\nstep 2\n\n</think>\n\nThe answer.",
            "<think></think>answer only",
            "<think>\n\n</think>\n\n42",
            "<think>a < b and c </thin k> still thinking</think>done\n",
            "<think>\u{4f60}\u{597d}\n</think>\n\u{4e16}\u{754c}",
        ];
        for text in texts {
            let (r, a) = split_reasoning(text, "<think>", "</think>");
            for chunk in 1..=text.chars().count() {
                assert_eq!(
                    stream(text, chunk, false),
                    (r.clone().unwrap_or_default(), a.clone()),
                    "{text:?} in chunks of {chunk}"
                );
            }
        }
    }

    #[test]
    fn stream_starting_inside_reasoning() {
        // The generation prompt ended with "<think>\n"; the model continues inside it.
        for chunk in 1..8 {
            assert_eq!(
                stream("plan\n</think>\n\nresult", chunk, true),
                ("plan".to_string(), "result".to_string())
            );
        }
    }

    #[test]
    fn no_tags_is_all_answer() {
        assert_eq!(
            stream("plain <b>answer</b>", 3, false),
            (String::new(), "plain <b>answer</b>".into())
        );
    }
}
