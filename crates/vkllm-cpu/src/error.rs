//! The crate's one error type: the few failures that come from user input (token ids, sampling
//! parameters, model configuration). Wrong shapes passed by our own code are programming errors
//! and panic instead (each function documents its `# Panics`).

/// Errors from user-controlled input to the reference ops.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CpuError {
    /// A token id is not a row of the embedding table.
    #[error("token id {id} is out of range for a vocabulary of {vocab} tokens")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// Rows in the table (valid ids are `0..vocab`).
        vocab: usize,
    },
    /// A rotary dimension that cannot be applied to heads of `head_dim`.
    #[error("rotary_dim {rotary_dim} must be even, non-zero and at most head_dim {head_dim}")]
    InvalidRotaryDim {
        /// The configured rotary dimension.
        rotary_dim: usize,
        /// The head dimension it is applied to.
        head_dim: usize,
    },
    /// A sampling parameter outside its domain.
    #[error("sampling parameter `{name}` = {value} is invalid: expected {expected}")]
    InvalidSamplingParam {
        /// Field name in [`crate::SamplingParams`].
        name: &'static str,
        /// The value given.
        value: f32,
        /// The accepted domain, in words.
        expected: &'static str,
    },
    /// A logit bias names a token outside the vocabulary.
    #[error("logit_bias names token {id}, outside the vocabulary of {vocab} tokens")]
    LogitBiasOutOfRange {
        /// The offending id.
        id: u32,
        /// Vocabulary size (valid ids are `0..vocab`).
        vocab: usize,
    },
}
