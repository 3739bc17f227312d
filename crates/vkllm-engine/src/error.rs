//! The error type of vkllm-engine.

/// What can go wrong running a session.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Model(#[from] vkllm_models::ModelError),
    #[error(transparent)]
    Tokenizer(#[from] vkllm_tokenizer::TokenizerError),
    #[error(transparent)]
    Cpu(#[from] vkllm_cpu::CpuError),
    #[error(
        "the prompt has {prompt} tokens and the request wants {max_new} more: over the {ctx}-token context"
    )]
    ContextExceeded {
        prompt: usize,
        max_new: usize,
        ctx: usize,
    },
    #[error("empty prompt: at least one token is needed")]
    EmptyPrompt,
}
