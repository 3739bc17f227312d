//! Reading [`GgufVocab`] out of a GGUF file.

use std::path::Path;

use super::GgufVocab;
use crate::error::{Result, TokenizerError};

impl GgufVocab {
    /// Reads the `tokenizer.*` metadata of the GGUF file at `path`.
    pub fn from_file(path: &Path) -> Result<Self> {
        Err(TokenizerError::Gguf {
            path: path.to_path_buf(),
            message: "reading GGUF files needs the vkllm-gguf crate (interim)".into(),
        })
    }
}
