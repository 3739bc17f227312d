//! Chat templates for models that ship none (Gemma 3 270M base, GGUF files converted without
//! one, Qwen3.5/3.6's tiktoken vocabulary), by family: the families' published templates,
//! verbatim (docs/chat-templates.md).

/// (families, template name, template source). The first family is the canonical name.
const TABLE: &[(&[&str], &str, &str)] = &[
    (
        &["gemma3", "gemma3_text", "gemma2", "gemma"],
        "gemma3",
        include_str!("../../templates/gemma3.jinja"),
    ),
    (
        &["qwen3_5", "qwen35", "qwen35moe"],
        "qwen3_5",
        include_str!("../../templates/qwen3_5.jinja"),
    ),
    (
        &["qwen3", "qwen3moe", "qwen3next"],
        "qwen3",
        include_str!("../../templates/qwen3.jinja"),
    ),
    (
        &["qwen2", "qwen2moe"],
        "qwen2",
        include_str!("../../templates/qwen2.jinja"),
    ),
    (
        &["chatml"],
        "chatml",
        include_str!("../../templates/chatml.jinja"),
    ),
];

/// Every family name the table knows.
pub const BUILTIN_FAMILIES: &[&str] = &[
    "gemma3",
    "gemma3_text",
    "gemma2",
    "gemma",
    "qwen3_5",
    "qwen35",
    "qwen35moe",
    "qwen3",
    "qwen3moe",
    "qwen3next",
    "qwen2",
    "qwen2moe",
    "chatml",
];

/// The built-in template for `family` (a GGUF `general.architecture` or a template name):
/// `(template name, source)`.
pub fn builtin_template(family: &str) -> Option<(&'static str, &'static str)> {
    TABLE
        .iter()
        .find(|(fams, _, _)| fams.contains(&family))
        .map(|(_, name, src)| (*name, *src))
}
