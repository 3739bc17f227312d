//! The crate's one error type: the few failures that come from user input (token ids, sampling
//! parameters, model configuration, quantized weight bytes read from a file). Wrong shapes passed by our own code are programming errors
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
    /// A ggml type id this crate has no quantized-format code for.
    #[error("ggml type id {id} is not a format vkllm-cpu knows")]
    UnknownGgmlType {
        /// The ggml `type` id as stored in a GGUF tensor info.
        id: u32,
    },
    /// A known format whose operation (`op`: "quantize", ...) is not implemented.
    #[error("{op} is not implemented for {ty}")]
    UnsupportedQuant {
        /// The format.
        ty: crate::quant::QuantType,
        /// The operation asked for.
        op: &'static str,
    },
    /// A row length that is not a whole number of the format's blocks.
    #[error("{ty}: {elements} elements is not a multiple of the block size {block}")]
    QuantRowLength {
        /// The format.
        ty: crate::quant::QuantType,
        /// Elements asked for.
        elements: usize,
        /// Elements per block of `ty`.
        block: usize,
    },
    /// Quantized bytes whose length does not match the element count.
    #[error("{ty}: {elements} elements need {expected} bytes, got {got}")]
    QuantByteLength {
        /// The format.
        ty: crate::quant::QuantType,
        /// Elements the bytes should hold.
        elements: usize,
        /// Bytes `elements` take in `ty`.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// A `[rows, cols]` shape whose size overflows `usize`.
    #[error("{ty}: shape [{rows}, {cols}] overflows usize")]
    QuantShapeOverflow {
        /// The format.
        ty: crate::quant::QuantType,
        /// Rows asked for.
        rows: usize,
        /// Columns asked for.
        cols: usize,
    },
    /// Values that are not a whole number of rows.
    #[error("{ty}: {len} values are not whole rows of {cols}")]
    QuantMatrixShape {
        /// The format.
        ty: crate::quant::QuantType,
        /// Values given.
        len: usize,
        /// Row length.
        cols: usize,
    },
}
