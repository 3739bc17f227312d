//! Encode speed of one tokenizer on one text file: the fast path against the reference
//! (`Tokenizer::set_fast_encode`: byte-level BPE against `tokenizers`, tiktoken ranks' split on
//! the `regex` crate against `fancy-regex`):
//! `cargo run --release -p vkllm-tokenizer --example encode_speed -- MODEL TEXT`.

use std::time::Instant;

use vkllm_tokenizer::{EncodeOptions, Tokenizer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, text] = args.as_slice() else {
        return Err("usage: encode_speed MODEL TEXT_FILE".into());
    };
    let mut tok = Tokenizer::from_path(model)?;
    let text = std::fs::read_to_string(text)?;
    for fast in [false, true] {
        tok.set_fast_encode(fast);
        let mut best = f64::MAX;
        let mut n = 0;
        for _ in 0..10 {
            let t0 = Instant::now();
            n = tok.encode(&text, EncodeOptions::text())?.len();
            best = best.min(t0.elapsed().as_secs_f64());
        }
        let path = if tok.fast_encode() {
            "fast path"
        } else {
            "reference"
        };
        println!(
            "{path}: {n} tokens in {:.3} ms ({:.1} MB/s, best of 10)",
            best * 1e3,
            text.len() as f64 / best / 1e6
        );
    }
    Ok(())
}
