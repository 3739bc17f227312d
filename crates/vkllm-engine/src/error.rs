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
    #[error("the prompt has {prompt} tokens: it does not fit the {ctx}-token context")]
    PromptTooLong { prompt: usize, ctx: usize },
    #[error("all {slots} generation slots are busy")]
    NoFreeSlot { slots: usize },
    #[error("the request queue is full ({capacity} requests waiting)")]
    QueueFull { capacity: usize },
    #[error("the inference runner has shut down")]
    Shutdown,
    #[error("`{what}` is {value}: expected {expected}")]
    InvalidRequest {
        what: &'static str,
        value: String,
        expected: &'static str,
    },
    /// A decode step failed for a batch; every request in it gets this (the cause as text,
    /// since one error value cannot be shared).
    #[error("decode step failed: {message}")]
    StepFailed { message: String },
    #[error("slot {slot} has no prompt being prefilled")]
    NotPrefilling { slot: usize },
    /// A structured-output grammar, JSON Schema or regex that cannot be used.
    #[error("invalid grammar: {reason}")]
    Grammar { reason: String },
    /// The start-up warm-up requests (`runner::warm_up`) did not end in time.
    #[error("the warm-up requests did not finish within {seconds} s")]
    WarmUpTimeout { seconds: u64 },
}
