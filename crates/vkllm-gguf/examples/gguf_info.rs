//! Prints a GGUF file's header, metadata (arrays summarized) and tensor table.
//!
//! `cargo run -p vkllm-gguf --example gguf_info -- model.gguf [--tensors]`

use vkllm_gguf::{GgufFile, MetaValueRef};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: gguf_info FILE.gguf [--tensors]");
        std::process::exit(2);
    };
    let show_tensors = args.any(|a| a == "--tensors");
    let f = match GgufFile::open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "version {}  alignment {}  data offset {}  {} keys  {} tensors",
        f.version(),
        f.alignment(),
        f.data_offset(),
        f.metadata_len(),
        f.tensors().len()
    );
    for (key, value) in f.metadata() {
        let shown = match value {
            MetaValueRef::Array(a) => {
                let first: Vec<String> = a.iter().take(3).map(|v| format!("{v:?}")).collect();
                format!(
                    "array<{}>[{}] [{}, ...]",
                    a.elem_type(),
                    a.len(),
                    first.join(", ")
                )
            }
            MetaValueRef::String(s) if s.len() > 80 => format!("string ({} bytes)", s.len()),
            v => format!("{v:?}"),
        };
        println!("  {key} = {shown}");
    }
    if show_tensors {
        for t in f.tensors() {
            println!(
                "  {} {} {:?} @{}",
                t.name(),
                t.ggml_type(),
                t.dims(),
                t.offset()
            );
        }
    }
}
