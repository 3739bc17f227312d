//! Weights from a Hugging Face safetensors checkpoint (single file or sharded).

use vkllm_gguf::safetensors::SafetensorsModel;

use crate::error::ModelError;
use crate::weights::{HostTensor, TensorSource};

impl TensorSource for SafetensorsModel {
    fn tensor_f32(&self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        let Some(view) = self.get(name) else {
            return Ok(None);
        };
        let data = view.to_f32_vec().map_err(vkllm_gguf::Error::from)?;
        Ok(Some(HostTensor {
            shape: view.shape().to_vec(),
            data,
        }))
    }
}
