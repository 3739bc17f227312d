//! The transformers fixtures (`fixtures/<family>/`): a tiny random-weight checkpoint and its
//! goldens. See fixtures/README.md for how they are made and what the tensors mean.

use std::path::PathBuf;

use vkllm_gguf::safetensors::{Dtype, SafetensorsModel};

use crate::config::ModelConfig;
use crate::error::ModelError;

/// Where the fixtures live: `$VKLLM_FIXTURES` when set (a checkout elsewhere, the GPU machine),
/// else this workspace's `fixtures/`.
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("VKLLM_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures")),
    }
}

/// Goldens for one prompt.
#[derive(Clone, Debug)]
pub struct PromptGolden {
    pub ids: Vec<u32>,
    /// `[ids.len(), vocab]`: logits at every prompt position.
    pub logits: Vec<f32>,
    /// The greedy continuation of the whole prompt.
    pub greedy: Vec<u32>,
    /// Top-1 minus top-2 logit at each greedy step (all above 1e-2 by construction).
    pub margins: Vec<f32>,
}

/// One family's fixture.
pub struct Fixture {
    pub dir: PathBuf,
    pub config: ModelConfig,
    pub weights: SafetensorsModel,
    goldens: SafetensorsModel,
}

impl Fixture {
    /// Loads `fixtures/<name>/` (config.json, model.safetensors, goldens.safetensors).
    pub fn load(name: &str) -> Result<Self, ModelError> {
        let dir = fixtures_dir().join(name);
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|source| ModelError::Io {
            path: cfg_path.clone(),
            source,
        })?;
        let config = ModelConfig::from_hf_json(&text)?;
        let weights = SafetensorsModel::open(dir.join("model.safetensors"))
            .map_err(vkllm_gguf::Error::from)?;
        let goldens = SafetensorsModel::open(dir.join("goldens.safetensors"))
            .map_err(vkllm_gguf::Error::from)?;
        Ok(Fixture {
            dir,
            config,
            weights,
            goldens,
        })
    }

    /// The goldens of prompt `name` ("short" or "long").
    pub fn prompt(&self, name: &str) -> Result<PromptGolden, ModelError> {
        Ok(PromptGolden {
            ids: self.ints(&format!("{name}.ids"))?,
            logits: self.floats(&format!("{name}.logits"))?,
            greedy: self.ints(&format!("{name}.greedy"))?,
            margins: self.floats(&format!("{name}.margins"))?,
        })
    }

    fn floats(&self, name: &str) -> Result<Vec<f32>, ModelError> {
        let view = self.goldens.tensor(name).map_err(vkllm_gguf::Error::from)?;
        Ok(view.to_f32_vec().map_err(vkllm_gguf::Error::from)?)
    }

    fn ints(&self, name: &str) -> Result<Vec<u32>, ModelError> {
        let view = self.goldens.tensor(name).map_err(vkllm_gguf::Error::from)?;
        if view.dtype() != Dtype::I32 {
            return Err(ModelError::TensorShape {
                name: format!("{name} (dtype {:?}, expected I32)", view.dtype()),
                expected: vec![],
                found: view.shape().to_vec(),
            });
        }
        Ok(view
            .bytes()
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
            .collect())
    }
}

pub use vkllm_gguf::cache_dir;
