//! Time of one structured-output token mask: compiles a JSON Schema for a tokenizer's vocabulary
//! and walks a valid document token by token, timing `Constraint::mask` at every step; then
//! walks 256 tokens drawn uniformly from each mask (what a model with random weights does).
//!
//! `cargo run --release -p vkllm-engine --example mask_bench -- TOKENIZER [SCHEMA.json]`
//! (TOKENIZER: a .gguf file, a tokenizer.json directory or file, or a .tiktoken file).

use std::time::Instant;

use vkllm_engine::{GrammarSpec, Grammars};
use vkllm_tokenizer::{EncodeOptions, Tokenizer};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tok_path = args
        .next()
        .ok_or("usage: mask_bench TOKENIZER [SCHEMA.json]")?;
    let schema: serde_json::Value = match args.next() {
        Some(p) => serde_json::from_str(&std::fs::read_to_string(p)?)?,
        None => serde_json::json!({
            "type": "object",
            "properties": {"title": {"type": "string"}, "score": {"type": "integer"},
                           "body": {"type": "string"}},
            "required": ["title", "score", "body"]
        }),
    };
    let tok = Tokenizer::from_path(&tok_path)?;
    let t0 = Instant::now();
    let g = Grammars::new(&tok, tok.vocab_size())?;
    let setup = t0.elapsed();
    let t0 = Instant::now();
    let grammar = g.compile(&GrammarSpec::JsonSchema(schema))?;
    let compile = t0.elapsed();
    let doc = r#"{"title": "A lighthouse keeper", "tags": ["news", "culture"], "score": 42, "body": "The keeper climbed the stairs every evening, counting the steps as his father had, and lit the lamp while the sea below turned from grey to black. Ships passed far out, their lights small and steady, and he wrote each one down in the log."}"#;
    let ids = tok.encode(doc, EncodeOptions::plain())?;
    let mut c = grammar.start();
    let mut times = Vec::new();
    for &id in &ids {
        let t = Instant::now();
        let m = c.mask();
        times.push(t.elapsed().as_secs_f64() * 1e6);
        if m[id as usize / 32] >> (id % 32) & 1 == 0 {
            break;
        }
        c.commit(id)?;
    }
    println!(
        "vocab {} | setup {:.1} ms | compile {:.2} ms",
        g.vocab(),
        setup.as_secs_f64() * 1e3,
        compile.as_secs_f64() * 1e3
    );
    report(&format!("document ({} tokens)", ids.len()), times);
    // Random walk: a uniformly drawn allowed token at every step.
    let mut c = grammar.start();
    let mut times = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..256 {
        let t = Instant::now();
        let m = c.mask();
        times.push(t.elapsed().as_secs_f64() * 1e6);
        let allowed: Vec<u32> = (0..g.vocab() as u32)
            .filter(|&i| m[i as usize / 32] >> (i % 32) & 1 == 1)
            .collect();
        if allowed.is_empty() || c.is_done() {
            break;
        }
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let id = allowed[(seed >> 33) as usize % allowed.len()];
        c.commit(id)?;
    }
    report("random walk", times);
    Ok(())
}

fn report(what: &str, mut times: Vec<f64>) {
    let n = times.len();
    let mean = times.iter().sum::<f64>() / n as f64;
    times.sort_by(f64::total_cmp);
    println!(
        "{what}: {n} masks, us: mean {mean:.1}, p50 {:.1}, p90 {:.1}, max {:.1}",
        times[n / 2],
        times[n * 9 / 10],
        times[n - 1]
    );
}
