//! Opening a checkpoint by path, whatever its format, and loading it (optionally quantized at
//! load) onto a backend: the one entry point the command line needs for `--model` + `--quant`.

use std::path::{Path, PathBuf};

use vkllm_gguf::safetensors::SafetensorsModel;

use crate::backend::Backend;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::forward::Model;
use crate::gguf::GgufModel;
use crate::quantize::{QuantScheme, QuantizingSource};
use crate::weights::TensorSource;

/// A Hugging Face safetensors checkpoint: `config.json` and its weights.
pub struct SafetensorsCheckpoint {
    /// The directory holding `config.json`.
    pub dir: PathBuf,
    pub config: ModelConfig,
    pub weights: SafetensorsModel,
}

/// A checkpoint in either format.
pub enum Checkpoint {
    Gguf(GgufModel),
    Safetensors(SafetensorsCheckpoint),
}

impl Checkpoint {
    /// Opens `path`: a `.gguf` file; a directory holding `config.json` and `model.safetensors`
    /// (or a sharded `model.safetensors.index.json`); or a `.safetensors` / index file with
    /// `config.json` beside it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        if path.is_file() && !is_safetensors_path(path) {
            return Ok(Checkpoint::Gguf(GgufModel::open(path)?));
        }
        if !path.is_file() && !path.is_dir() {
            // Nothing there, or a device or pipe: not a checkpoint directory's sibling.
            let source = match path.try_exists() {
                Ok(false) => std::io::ErrorKind::NotFound.into(),
                Err(e) => e,
                Ok(true) => std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a model file (.gguf, .safetensors) or a checkpoint directory",
                ),
            };
            return Err(ModelError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
        let dir = if path.is_dir() {
            path.to_path_buf()
        } else {
            path.parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        };
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|source| ModelError::Io {
            path: cfg_path.clone(),
            source,
        })?;
        let config = ModelConfig::from_hf_json(&text)?;
        let weights = SafetensorsModel::open(path).map_err(vkllm_gguf::Error::from)?;
        Ok(Checkpoint::Safetensors(SafetensorsCheckpoint {
            dir,
            config,
            weights,
        }))
    }

    pub fn config(&self) -> &ModelConfig {
        match self {
            Checkpoint::Gguf(g) => &g.config,
            Checkpoint::Safetensors(s) => &s.config,
        }
    }

    /// The tensors under Hugging Face names.
    pub fn source(&self) -> &dyn TensorSource {
        match self {
            Checkpoint::Gguf(g) => g,
            Checkpoint::Safetensors(s) => &s.weights,
        }
    }

    /// Whether the output matrix is the token embedding (no separate output tensor).
    pub fn tied(&self) -> bool {
        match self {
            Checkpoint::Gguf(g) => g.file.tensor("output.weight").is_none(),
            Checkpoint::Safetensors(s) => !s.weights.contains("lm_head.weight"),
        }
    }

    /// Loads the model onto `b`, quantizing every weight to `quant` on the way when given (a
    /// GGUF file is then dequantized and quantized again, as `llama-quantize
    /// --allow-requantize` would).
    pub fn load<B: Backend>(
        &self,
        quant: Option<QuantScheme>,
        b: &mut B,
        chunk: usize,
    ) -> Result<Model, ModelError> {
        let cfg = self.config().clone();
        match quant {
            None => Model::load(cfg, self.source(), b, chunk),
            Some(q) => {
                let src = QuantizingSource::new(self.source(), &cfg, q).tied(self.tied());
                Model::load(cfg, &src, b, chunk)
            }
        }
    }
}

fn is_safetensors_path(p: &Path) -> bool {
    p.extension()
        .is_some_and(|e| e == "safetensors" || e == "json")
}

/// Opens `path` ([`Checkpoint::open`]) and loads it onto `b`, quantized to `quant` if given.
pub fn load_checkpoint<B: Backend>(
    path: impl AsRef<Path>,
    quant: Option<QuantScheme>,
    b: &mut B,
    chunk: usize,
) -> Result<Model, ModelError> {
    Checkpoint::open(path)?.load(quant, b, chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error(path: &str) -> String {
        match Checkpoint::open(path) {
            Err(e @ ModelError::Io { .. }) => e.to_string(),
            Err(e) => panic!("{path}: expected an i/o error, got {e}"),
            Ok(_) => panic!("{path}: opened"),
        }
    }

    #[test]
    fn paths_that_are_not_checkpoints_are_named() {
        // A device file is not a safetensors file whose directory holds config.json.
        let e = io_error("/dev/null");
        assert!(
            e.contains("/dev/null") && e.contains("not a model file"),
            "{e}"
        );
        assert!(!e.contains("config.json"), "{e}");
        let e = io_error("/nonexistent/model.safetensors");
        assert!(
            e.contains("/nonexistent/model.safetensors") && e.contains("not found"),
            "{e}"
        );
    }
}
