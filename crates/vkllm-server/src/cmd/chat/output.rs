//! Streaming an answer to the terminal: on a terminal, `<think>` blocks are shown dimmed
//! (ANSI faint) without their tags; elsewhere the text is written exactly as generated.

use std::io::Write;

use vkllm_tokenizer::{Segment, ThinkingSplitter};

const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// Writes one answer's text as it streams.
pub struct Printer<W: Write> {
    out: W,
    /// `Some` on a terminal: reasoning is split off and dimmed.
    splitter: Option<ThinkingSplitter>,
    dimmed: bool,
    /// The last byte written was a newline (or nothing was written).
    at_line_start: bool,
}

impl<W: Write> Printer<W> {
    /// `styled`: stdout is a terminal. `starts_in_reasoning`: the prompt ends inside an open
    /// `<think>` block (templates that open it for the model).
    pub fn new(out: W, styled: bool, starts_in_reasoning: bool) -> Self {
        Printer {
            out,
            splitter: styled
                .then(|| ThinkingSplitter::new("<think>", "</think>", starts_in_reasoning)),
            dimmed: false,
            at_line_start: true,
        }
    }

    /// A piece of the answer.
    pub fn push(&mut self, text: &str) {
        match &mut self.splitter {
            None => self.write(text),
            Some(s) => {
                let segs = s.push(text);
                self.segments(segs);
            }
        }
        let _ = self.out.flush();
    }

    /// The end of the answer: held-back text, style reset, and a final newline.
    pub fn finish(&mut self) {
        if let Some(s) = &mut self.splitter {
            let segs = s.finish();
            self.segments(segs);
        }
        self.undim();
        if !self.at_line_start {
            self.write("\n");
        }
        let _ = self.out.flush();
    }

    /// A note on its own line after the answer (e.g. that it was stopped).
    pub fn note(&mut self, text: &str) {
        self.undim();
        if !self.at_line_start {
            self.write("\n");
        }
        self.write(text);
        self.write("\n");
        let _ = self.out.flush();
    }

    fn segments(&mut self, segs: Vec<Segment>) {
        for seg in segs {
            match seg {
                Segment::Reasoning(t) => {
                    if !self.dimmed {
                        let _ = self.out.write_all(DIM.as_bytes());
                        self.dimmed = true;
                    }
                    self.write(&t);
                }
                Segment::Answer(t) => {
                    if self.dimmed {
                        self.undim();
                        // The reasoning and the answer on separate lines.
                        if !self.at_line_start {
                            self.write("\n");
                        }
                    }
                    self.write(&t);
                }
            }
        }
    }

    fn undim(&mut self) {
        if self.dimmed {
            let _ = self.out.write_all(RESET.as_bytes());
            self.dimmed = false;
        }
    }

    fn write(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let _ = self.out.write_all(text.as_bytes());
        self.at_line_start = text.ends_with('\n');
    }

    #[cfg(test)]
    fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(styled: bool, starts_in: bool, pieces: &[&str]) -> String {
        let mut p = Printer::new(Vec::new(), styled, starts_in);
        for piece in pieces {
            p.push(piece);
        }
        p.finish();
        String::from_utf8(p.into_inner()).unwrap()
    }

    #[test]
    fn plain_output_is_the_text_plus_a_newline() {
        assert_eq!(
            run(false, false, &["<think>a", "</think>", "b"]),
            "<think>a</think>b\n"
        );
        assert_eq!(run(false, false, &["line\n"]), "line\n");
        assert_eq!(run(false, false, &[]), "");
    }

    #[test]
    fn terminal_output_dims_reasoning_without_tags() {
        assert_eq!(
            run(
                true,
                false,
                &["<thi", "nk>\nplan", " more\n</think>\n\n", "Answer."]
            ),
            "\x1b[2mplan more\x1b[0m\nAnswer.\n"
        );
        // Starting inside the block; a reasoning-only answer is closed and reset.
        assert_eq!(
            run(true, true, &["still thinking"]),
            "\x1b[2mstill thinking\x1b[0m\n"
        );
        assert_eq!(run(true, false, &["no tags"]), "no tags\n");
    }

    #[test]
    fn note_goes_on_its_own_line() {
        let mut p = Printer::new(Vec::new(), false, false);
        p.push("partial");
        p.note("[stopped]");
        assert_eq!(
            String::from_utf8(p.into_inner()).unwrap(),
            "partial\n[stopped]\n"
        );
    }
}
