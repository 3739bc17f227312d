//! Stop strings over streamed text: a stop string may span any number of pieces; text that
//! could still turn out to be the start of a stop string is held back, and the stop string
//! itself (and anything after it) is never emitted.

/// The result of feeding one piece of text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopStep {
    /// Text that is safe to show now.
    pub text: String,
    /// Index (into the stop list) of the stop string that matched; nothing follows it.
    pub stopped: Option<usize>,
}

/// Finds stop strings in a stream of text pieces.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
    stopped: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new<I, S>(stops: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        StopMatcher {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            pending: String::new(),
            stopped: None,
        }
    }

    /// Whether a stop string was found.
    pub fn is_stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// Feeds `piece`; returns what may be shown and whether the stream stopped. After a stop,
    /// every further piece is swallowed.
    pub fn push(&mut self, piece: &str) -> StopStep {
        if self.stopped.is_some() {
            return StopStep {
                text: String::new(),
                stopped: self.stopped,
            };
        }
        self.pending.push_str(piece);
        // The earliest match wins; at the same position, the first listed.
        let hit = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.pending.find(s.as_str()).map(|pos| (pos, i)))
            .min();
        if let Some((pos, i)) = hit {
            let text = self.pending[..pos].to_string();
            self.pending.clear();
            self.stopped = Some(i);
            return StopStep {
                text,
                stopped: Some(i),
            };
        }
        let hold = self.held_suffix_len();
        let cut = self.pending.len() - hold;
        let text = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        StopStep {
            text,
            stopped: None,
        }
    }

    /// The end of the stream: releases text held back as a possible stop-string start.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Length of the longest suffix of `pending` that is a proper prefix of a stop string.
    fn held_suffix_len(&self) -> usize {
        let p = &self.pending;
        let mut best = 0;
        for s in &self.stops {
            let max = (s.len() - 1).min(p.len());
            for len in (best + 1..=max).rev() {
                let start = p.len() - len;
                if p.is_char_boundary(start) && s.starts_with(&p[start..]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces`, returns (all emitted text, stop index).
    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<usize>) {
        let mut m = StopMatcher::new(stops.iter().copied());
        let mut out = String::new();
        let mut stopped = None;
        for p in pieces {
            let step = m.push(p);
            out += &step.text;
            stopped = stopped.or(step.stopped);
        }
        if stopped.is_none() {
            out += &m.finish();
        }
        (out, stopped)
    }

    #[test]
    fn stop_spanning_pieces_is_not_emitted() {
        assert_eq!(
            run(
                &["</answer>"],
                &["The answer is 4", "2.</an", "swer> trailing"]
            ),
            ("The answer is 42.".to_string(), Some(0))
        );
    }

    #[test]
    fn partial_prefix_is_released_when_it_does_not_complete() {
        // "</a" is held back, then turns out to be plain text.
        let mut m = StopMatcher::new(["</answer>"]);
        assert_eq!(m.push("x </a").text, "x ");
        assert_eq!(m.push("b>").text, "</ab>");
        assert_eq!(m.finish(), "");
        // At the end of the stream the held-back start comes out.
        assert_eq!(run(&["STOP"], &["abc ST"]), ("abc ST".to_string(), None));
    }

    #[test]
    fn earliest_stop_wins_and_multibyte_is_safe() {
        assert_eq!(
            run(&["world", "lo w"], &["hello world"]),
            ("hel".to_string(), Some(1))
        );
        assert_eq!(
            run(
                &["\u{4e16}\u{754c}"],
                &["\u{4f60}\u{597d}\u{4e16}", "\u{754c}!"]
            ),
            ("\u{4f60}\u{597d}".to_string(), Some(0))
        );
        // Nothing after a stop comes out.
        let mut m = StopMatcher::new(["x"]);
        assert_eq!(m.push("axb").text, "a");
        assert_eq!(m.push("more").text, "");
        assert!(m.is_stopped());
    }

    #[test]
    fn stop_split_into_single_characters() {
        let text = "alpha <|im_end|> beta";
        let pieces: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        assert_eq!(run(&["<|im_end|>"], &refs), ("alpha ".to_string(), Some(0)));
    }
}
