//! `rope_freqs.weight`: llama.cpp's converter turns Llama 3.1+'s `rope_scaling` (type llama3)
//! into one factor per frequency and drops the parameters. The released Llama 3.x models use
//! low/high frequency factors 1 and 4 on an original context of 8192 with a factor of 8
//! (3.1, 3.3) or 32 (3.2); the tensor is matched against those (and a few more factors), and
//! the config gets back the `rope_scaling` it came from. Anything else is an error: per-frequency
//! factors of arbitrary values are not supported.

use serde_json::{Value, json};
use vkllm_gguf::{GgmlType, GgufFile};

use crate::error::ModelError;
use crate::synth::{Llama3Rope, llama3_rope_factors};

/// The llama3 `rope_scaling` object whose factors `rope_freqs.weight` holds.
pub(super) fn recognise(f: &GgufFile, theta: f32, rot: usize) -> Result<Value, ModelError> {
    let err = |msg: String| ModelError::Config {
        field: "rope_freqs.weight".into(),
        msg,
    };
    let info = f
        .require_tensor("rope_freqs.weight")
        .map_err(vkllm_gguf::Error::from)?;
    if info.ggml_type() != GgmlType::F32 || info.n_elements() as usize != rot / 2 {
        return Err(err(format!(
            "expected {} f32 factors, found {:?} of type {}",
            rot / 2,
            info.dims(),
            info.ggml_type().name()
        )));
    }
    let got: Vec<f32> = f
        .tensor_bytes(info)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    for factor in [8.0f32, 16.0, 32.0, 4.0, 2.0] {
        let r = Llama3Rope {
            factor,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192,
        };
        let want = llama3_rope_factors(&r, theta, rot);
        if want
            .iter()
            .zip(&got)
            .all(|(a, b)| (a - b).abs() <= 1e-4 * a.abs().max(1.0))
        {
            return Ok(json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            }));
        }
    }
    Err(err(format!(
        "per-frequency RoPE factors {got:?} are not a Llama 3.x llama3 scaling (factor 2..32, \\
         low 1, high 4, original context 8192); other factors are not supported"
    )))
}
