//! The model families vkllm runs, and the few facts that differ between them.

/// A model family (architecture). Hybrid and MoE families join this list in later work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Llama 2/3/3.2, TinyLlama, SmolLM.
    Llama,
    /// Mistral (sliding window on every layer).
    Mistral,
    /// Qwen2 / Qwen2.5 (QKV bias).
    Qwen2,
    /// Qwen3 dense (per-head q/k RMSNorm).
    Qwen3,
    /// Gemma 1 (GeGLU, (1+w) norms, scaled embeddings).
    Gemma,
    /// Gemma 2 (soft-caps, sandwich norms, alternating sliding window).
    Gemma2,
    /// Gemma 3 text (q/k norm, local/global layers with two RoPE bases).
    Gemma3,
}

/// The gated MLP's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: silu(gate) * up.
    Silu,
    /// GeGLU with the tanh approximation: gelu_tanh(gate) * up.
    GeluTanh,
}

impl Activation {
    /// Maps a transformers activation name.
    pub fn from_hf_name(name: &str) -> Option<Self> {
        match name {
            "silu" | "swish" => Some(Activation::Silu),
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new" | "gelu_fast" => {
                Some(Activation::GeluTanh)
            }
            _ => None,
        }
    }
}

impl Family {
    /// All dense families, in the order reports list them.
    pub const ALL: [Family; 7] = [
        Family::Llama,
        Family::Mistral,
        Family::Qwen2,
        Family::Qwen3,
        Family::Gemma,
        Family::Gemma2,
        Family::Gemma3,
    ];

    /// The family of a transformers `model_type`.
    pub fn from_hf_model_type(model_type: &str) -> Option<Self> {
        Some(match model_type {
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "gemma" => Family::Gemma,
            "gemma2" => Family::Gemma2,
            "gemma3" | "gemma3_text" => Family::Gemma3,
            _ => return None,
        })
    }

    /// Short lowercase name (also the fixture directory name).
    pub fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma => "gemma",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
        }
    }

    pub fn is_gemma(self) -> bool {
        matches!(self, Family::Gemma | Family::Gemma2 | Family::Gemma3)
    }

    pub(crate) fn default_activation_name(self) -> &'static str {
        if self.is_gemma() {
            "gelu_pytorch_tanh"
        } else {
            "silu"
        }
    }

    pub(crate) fn default_tied(self) -> bool {
        self.is_gemma()
    }
}
