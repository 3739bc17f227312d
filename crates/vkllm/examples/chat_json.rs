//! A chat answer constrained to a JSON Schema: `cargo run -p vkllm --example chat_json --
//! [MODEL]`.

use vkllm::{GrammarSpec, Llm, Message, Options, Params};

fn main() -> Result<(), vkllm::Error> {
    let model = std::env::args().nth(1).unwrap_or_else(|| "smollm2".into());
    let mut llm = Llm::open(&model, &Options::default())?;
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "country": {"type": "string", "maxLength": 40}
        },
        "required": ["city", "country"],
        "additionalProperties": false
    });
    let p = Params {
        format: Some(GrammarSpec::JsonSchema(schema)),
        ..Params::default()
    };
    let a = llm.chat(
        &[
            Message::system("Answer in JSON."),
            Message::user("Which city is the capital of France?"),
        ],
        &p,
        |_| {},
    )?;
    println!("{}", a.text);
    Ok(())
}
