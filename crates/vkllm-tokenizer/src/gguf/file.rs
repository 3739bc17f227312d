//! Reading [`GgufVocab`] out of a GGUF file through `vkllm-gguf`.

use std::path::Path;

use vkllm_gguf::{GgufError, GgufFile};

use super::GgufVocab;
use crate::error::{Result, TokenizerError};

fn gguf_err(path: &Path, e: GgufError) -> TokenizerError {
    TokenizerError::Gguf {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl GgufVocab {
    /// Reads the `tokenizer.*` metadata (and `general.architecture`) of the GGUF file at
    /// `path`. Only the metadata is touched; tensors stay in the memory map.
    pub fn from_file(path: &Path) -> Result<Self> {
        let f = GgufFile::open(path).map_err(|e| gguf_err(path, e))?;
        Self::from_gguf(&f, path)
    }

    /// Reads the vocabulary of an opened GGUF file; `path` names it in errors.
    pub fn from_gguf(f: &GgufFile, path: &Path) -> Result<Self> {
        let e = |err: GgufError| gguf_err(path, err);
        let string = |key: &str| -> Result<Option<String>> {
            Ok(f.get_opt::<&str>(key).map_err(e)?.map(str::to_string))
        };
        let id = |key: &str| -> Result<Option<u32>> { f.get_opt::<u32>(key).map_err(e) };
        let flag = |key: &str| -> Result<Option<bool>> { f.get_opt::<bool>(key).map_err(e) };
        let model = string("tokenizer.ggml.model")?.ok_or_else(|| TokenizerError::MissingKey {
            what: path.display().to_string(),
            key: "tokenizer.ggml.model".into(),
        })?;
        let tokens: Vec<String> = f
            .get_str_array("tokenizer.ggml.tokens")
            .map_err(e)?
            .iter()
            .map(str::to_string)
            .collect();
        let scores = match f.contains_key("tokenizer.ggml.scores") {
            true => Some(
                f.get_typed_array::<f32>("tokenizer.ggml.scores")
                    .map_err(e)?
                    .to_vec(),
            ),
            false => None,
        };
        let token_types = match f.contains_key("tokenizer.ggml.token_type") {
            true => Some(
                f.get_typed_array::<i32>("tokenizer.ggml.token_type")
                    .map_err(e)?
                    .to_vec(),
            ),
            false => None,
        };
        let merges = match f.contains_key("tokenizer.ggml.merges") {
            true => Some(
                f.get_str_array("tokenizer.ggml.merges")
                    .map_err(e)?
                    .iter()
                    .map(str::to_string)
                    .collect(),
            ),
            false => None,
        };
        Ok(GgufVocab {
            architecture: string("general.architecture")?.unwrap_or_default(),
            model,
            pre: string("tokenizer.ggml.pre")?,
            tokens,
            scores,
            token_types,
            merges,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            eot: id("tokenizer.ggml.eot_token_id")?,
            eom: id("tokenizer.ggml.eom_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
            chat_template: string("tokenizer.chat_template")?,
            path: path.display().to_string(),
        })
    }
}
