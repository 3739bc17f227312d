//! End of generation: the set of token ids at which the engine stops.
//!
//! A model's config names one EOS, but chat models end a turn with another token
//! (`<end_of_turn>`, `<|im_end|>`, `<|eot_id|>`) and base models emit `<|endoftext|>`/`<eos>`.
//! As llama.cpp does, every special token spelled like a known end-of-turn marker counts, plus
//! the configured EOS ids.

use std::collections::BTreeSet;

use crate::tokenizer::Tokenizer;

/// Token texts that end generation in the families we know.
pub const KNOWN_EOG_TOKENS: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<eos>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "</s>",
    "<|EOT|>",
    "<EOT>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
];

/// EOS, the `extra` ids (GGUF EOT/EOM, generation_config), and every special token whose text is
/// in [`KNOWN_EOG_TOKENS`].
pub(crate) fn eog_set(tok: &Tokenizer, extra: &[u32]) -> BTreeSet<u32> {
    let mut set: BTreeSet<u32> = extra.iter().copied().collect();
    set.extend(tok.special.eos);
    for text in KNOWN_EOG_TOKENS {
        if let Some(id) = tok.token_to_id(text).filter(|&id| tok.is_special(id)) {
            set.insert(id);
        }
    }
    set
}
