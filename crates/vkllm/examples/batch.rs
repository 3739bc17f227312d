//! A batch of prompts generated together: every prompt is a request to the engine's runner,
//! which decodes them side by side in its generation slots (on a GPU the batched slot decoder:
//! one submit advances all of them). `cargo run -p vkllm --example batch -- [MODEL]` (default
//! smollm2; `VKLLM_CPU=1` runs the CPU reference backend).

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use vkllm::engine::{
    Event, InferenceRunner, Prompt, Request, RunnerConfig, SimpleGenerator, SlotGenerator,
    SlotParams,
};
use vkllm::models::{AnyModel, Backend, Checkpoint, CpuBackend, KvType, VulkanBackend};
use vkllm::tokenizer::Tokenizer;

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Water boils at",
    "The largest planet in the solar system is",
    "The three primary colors are",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "smollm2".into());
    let path = vkllm::resolve(&name, "python3".as_ref())?;
    let ck = Checkpoint::open(&path)?;
    let tokenizer = Arc::new(Tokenizer::from_path(&path)?);
    let (slots, ctx) = (PROMPTS.len(), 256);
    // One generation slot per prompt: the batched decoder on a GPU, the reference elsewhere.
    let generator: Box<dyn vkllm::engine::Generator> = if std::env::var_os("VKLLM_CPU").is_some() {
        let mut b = CpuBackend::new();
        let chunk = b.prefill_chunk();
        let model = AnyModel::load_checkpoint(&ck, None, &mut b, chunk, &mut |_| {})?;
        Box::new(SimpleGenerator::new(b, model, slots, ctx)?)
    } else {
        let mut b = VulkanBackend::new(vkllm::vk::Device::from_env()?);
        let chunk = b.prefill_chunk();
        match AnyModel::load_checkpoint(&ck, None, &mut b, chunk, &mut |_| {})? {
            AnyModel::Dense(m) => Box::new(SlotGenerator::new(b, m, slots, ctx, KvType::F16, 8)?),
            AnyModel::Hybrid(m) => {
                Box::new(SlotGenerator::new_hybrid(b, m, slots, ctx, KvType::F16, 8)?)
            }
        }
    };
    let runner = InferenceRunner::threaded(generator, tokenizer, RunnerConfig::default());

    // Submit every prompt; each request's events arrive on the channel with its index.
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    for (i, p) in PROMPTS.iter().enumerate() {
        let tx = tx.clone();
        let req = Request {
            prompt: Prompt::Text(p.to_string()),
            params: SlotParams::default(),
            max_tokens: 24,
            stop: vec!["\n".into()],
            timeout: None,
        };
        runner.submit(req, Box::new(move |e| tx.send((i, e)).is_ok()))?;
    }
    drop(tx);
    let mut texts = vec![String::new(); PROMPTS.len()];
    let (mut tokens, mut done) = (0, 0);
    while done < PROMPTS.len() {
        let (i, e) = rx.recv()?;
        match e {
            Event::Delta { text, .. } => texts[i].push_str(&text),
            Event::Finished { usage, .. } => {
                tokens += usage.generated_tokens;
                done += 1;
            }
            Event::Error(e) => return Err(e.into()),
            Event::Accepted { .. } => {}
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    for (p, t) in PROMPTS.iter().zip(&texts) {
        println!("{p}{t}");
    }
    println!(
        "[{} prompts, {tokens} tokens in {secs:.2} s]",
        PROMPTS.len()
    );
    runner.shutdown();
    Ok(())
}
