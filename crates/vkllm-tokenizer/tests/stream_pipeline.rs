//! The streaming pieces together on real vocabularies, fed one token at a time as an engine
//! feeds them: IncrementalDecoder -> StopMatcher -> ThinkingSplitter.

mod common;

use common::tokenizer;
use vkllm_tokenizer::{EncodeOptions, Segment, StopMatcher, ThinkingSplitter, Tokenizer};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn tokenizer_can_be_shared_across_threads() {
    assert_send_sync::<Tokenizer>();
}

/// Streams `text`'s tokens through the decoder and a stop matcher; returns the shown text, the
/// stop index, and how many tokens were fed before the stop.
fn stream_with_stops(
    tok: &Tokenizer,
    text: &str,
    stops: &[&str],
) -> (String, Option<usize>, usize) {
    let ids = tok.encode(text, EncodeOptions::plain()).unwrap();
    let mut dec = tok.incremental_decoder(false);
    let mut stop = StopMatcher::new(stops.iter().copied());
    let mut shown = String::new();
    for (n, &id) in ids.iter().enumerate() {
        if let Some(piece) = dec.push(id).unwrap() {
            let step = stop.push(&piece);
            shown += &step.text;
            if step.stopped.is_some() {
                return (shown, step.stopped, n + 1);
            }
        }
    }
    let step = stop.push(&dec.flush().unwrap());
    shown += &step.text;
    if step.stopped.is_none() {
        shown += &stop.finish();
    }
    (shown, step.stopped, ids.len())
}

#[test]
fn stop_strings_spanning_tokens_are_found_and_not_shown() {
    for name in [
        "qwen3-json",
        "gemma3-json",
        "smollm2-gguf",
        "qwen36-tiktoken",
    ] {
        let tok = tokenizer(name);
        let text = "The answer is 42.</answer> and then more text that must not show";
        let (shown, stopped, fed) = stream_with_stops(tok, text, &["</answer>", "STOP"]);
        assert_eq!(shown, "The answer is 42.", "{name}");
        assert_eq!(stopped, Some(0), "{name}");
        // "</answer>" is several tokens in each vocabulary: generation stops inside the text.
        let all = tok.encode(text, EncodeOptions::plain()).unwrap().len();
        assert!(fed < all, "{name}: fed {fed} of {all}");
        // A multi-byte stop string split across byte-level tokens.
        let (shown, stopped, _) = stream_with_stops(tok, "前面的文字。结束标记后面", &["结束标记"]);
        assert_eq!(
            (shown.as_str(), stopped),
            ("前面的文字。", Some(0)),
            "{name}"
        );
        // No stop string: everything comes out.
        let (shown, stopped, _) = stream_with_stops(tok, "emoji 👨‍👩‍👧 end", &["</answer>"]);
        assert_eq!((shown.as_str(), stopped), ("emoji 👨‍👩‍👧 end", None), "{name}");
    }
}

#[test]
fn thinking_is_split_from_the_answer_token_by_token() {
    for name in ["qwen3-json", "qwen36-tiktoken"] {
        let tok = tokenizer(name);
        let text = "<think>\nThe user greets; 17 is prime.\n</think>\n\nHello! 17 is prime.";
        let ids = tok.encode(text, EncodeOptions::default()).unwrap();
        // <think> and </think> are single tokens in these vocabularies.
        assert!(ids.contains(&tok.token_to_id("<think>").unwrap()), "{name}");
        let mut dec = tok.incremental_decoder(false);
        let mut split = ThinkingSplitter::think_tags();
        let mut segments = Vec::new();
        for &id in &ids {
            if let Some(piece) = dec.push(id).unwrap() {
                segments.extend(split.push(&piece));
            }
        }
        segments.extend(split.push(&dec.flush().unwrap()));
        segments.extend(split.finish());
        // Pieces stream out as they come; joined by kind they are the two sections.
        let mut joined: Vec<Segment> = Vec::new();
        for seg in segments {
            match (joined.last_mut(), seg) {
                (Some(Segment::Reasoning(a)), Segment::Reasoning(b))
                | (Some(Segment::Answer(a)), Segment::Answer(b)) => a.push_str(&b),
                (_, seg) => joined.push(seg),
            }
        }
        assert_eq!(
            joined,
            [
                Segment::Reasoning("The user greets; 17 is prime.".into()),
                Segment::Answer("Hello! 17 is prime.".into()),
            ],
            "{name}"
        );
    }
}
