//! The model families vkllm runs, and the few facts that differ between them.

/// A model family (architecture).
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
    /// Qwen3 MoE (Qwen3 attention, routed experts, no shared expert).
    Qwen3Moe,
    /// Qwen3-Next (Gated DeltaNet + gated attention, packed qkvz projections, MoE with a shared
    /// expert).
    Qwen3Next,
    /// Qwen3.5 / Qwen3.6 dense (Gated DeltaNet + gated attention).
    Qwen35,
    /// Qwen3.5 / Qwen3.6 MoE (Gated DeltaNet + gated attention, MoE with a shared expert).
    Qwen35Moe,
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

    /// The hybrid (Gated DeltaNet) and Mixture-of-Experts families, run by
    /// [`crate::hybrid::HybridModel`].
    pub const HYBRID_MOE: [Family; 4] = [
        Family::Qwen35,
        Family::Qwen35Moe,
        Family::Qwen3Next,
        Family::Qwen3Moe,
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
            "qwen3_moe" => Family::Qwen3Moe,
            "qwen3_next" => Family::Qwen3Next,
            "qwen3_5" | "qwen3_5_text" => Family::Qwen35,
            "qwen3_5_moe" | "qwen3_5_moe_text" => Family::Qwen35Moe,
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
            Family::Qwen3Moe => "qwen3_moe",
            Family::Qwen3Next => "qwen3_next",
            Family::Qwen35 => "qwen3_5",
            Family::Qwen35Moe => "qwen3_5_moe",
        }
    }

    /// Families with Gated DeltaNet layers (and gated full attention, `(1 + w)` RMSNorms).
    pub fn is_hybrid(self) -> bool {
        matches!(self, Family::Qwen3Next | Family::Qwen35 | Family::Qwen35Moe)
    }

    /// Families whose MLPs are (or may be) Mixture-of-Experts blocks.
    pub fn is_moe(self) -> bool {
        matches!(
            self,
            Family::Qwen3Moe | Family::Qwen3Next | Family::Qwen35Moe
        )
    }

    /// Families run by [`crate::hybrid::HybridModel`] rather than the dense [`crate::Model`].
    pub fn is_hybrid_or_moe(self) -> bool {
        self.is_hybrid() || self.is_moe()
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
