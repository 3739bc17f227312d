//! Continue a text: `cargo run -p vkllm --example generate -- [MODEL] [PROMPT]` (MODEL: a GGUF
//! file, a checkpoint directory or a cached model name; default smollm2; `VKLLM_CPU=1`
//! runs the CPU reference backend).

use std::io::Write;

use vkllm::{Llm, Options, Params, Where};

fn main() -> Result<(), vkllm::Error> {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| "smollm2".into());
    let prompt = args
        .next()
        .unwrap_or_else(|| "The capital of France is".into());
    let opts = Options {
        device: if std::env::var_os("VKLLM_CPU").is_some() {
            Where::Cpu
        } else {
            Where::Gpu
        },
        ..Options::default()
    };
    let mut llm = Llm::open(&model, &opts)?;
    print!("{prompt}");
    let a = llm.generate(&prompt, &Params::greedy(32), |piece| {
        print!("{piece}");
        let _ = std::io::stdout().flush();
    })?;
    println!(
        "\n[{} tokens, {:.1} tok/s]",
        a.usage.generated_tokens, a.usage.decode_tokens_per_s
    );
    Ok(())
}
