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

/// What the loaders, errors and per-family tests know of a family: one row per [`Family`] in
/// [`FAMILIES`], in the enum's order (checked when the crate compiles).
#[derive(Debug)]
pub struct FamilySpec {
    pub family: Family,
    /// Short lowercase name (reports, the fixture directory name).
    pub name: &'static str,
    /// transformers `model_type`s (config.json).
    pub hf_model_types: &'static [&'static str],
    /// GGUF `general.architecture`.
    pub gguf_arch: &'static str,
    /// Gated DeltaNet layers (and gated full attention, `(1 + w)` RMSNorms).
    pub hybrid: bool,
    /// Mixture-of-Experts MLPs (on some or all layers).
    pub moe: bool,
    /// Gemma conventions: GeGLU, `(1 + w)` norms, scaled embeddings, tied embeddings.
    pub gemma: bool,
}

const fn row(
    family: Family,
    name: &'static str,
    hf_model_types: &'static [&'static str],
    gguf_arch: &'static str,
    (hybrid, moe, gemma): (bool, bool, bool),
) -> FamilySpec {
    FamilySpec {
        family,
        name,
        hf_model_types,
        gguf_arch,
        hybrid,
        moe,
        gemma,
    }
}

const DENSE: (bool, bool, bool) = (false, false, false);

/// Every family vkllm runs.
pub const FAMILIES: [FamilySpec; 11] = [
    row(Family::Llama, "llama", &["llama"], "llama", DENSE),
    row(Family::Mistral, "mistral", &["mistral"], "mistral", DENSE),
    row(Family::Qwen2, "qwen2", &["qwen2"], "qwen2", DENSE),
    row(Family::Qwen3, "qwen3", &["qwen3"], "qwen3", DENSE),
    row(
        Family::Gemma,
        "gemma",
        &["gemma"],
        "gemma",
        (false, false, true),
    ),
    row(
        Family::Gemma2,
        "gemma2",
        &["gemma2"],
        "gemma2",
        (false, false, true),
    ),
    row(
        Family::Gemma3,
        "gemma3",
        &["gemma3", "gemma3_text"],
        "gemma3",
        (false, false, true),
    ),
    row(
        Family::Qwen3Moe,
        "qwen3_moe",
        &["qwen3_moe"],
        "qwen3moe",
        (false, true, false),
    ),
    row(
        Family::Qwen3Next,
        "qwen3_next",
        &["qwen3_next"],
        "qwen3next",
        (true, true, false),
    ),
    row(
        Family::Qwen35,
        "qwen3_5",
        &["qwen3_5", "qwen3_5_text"],
        "qwen35",
        (true, false, false),
    ),
    row(
        Family::Qwen35Moe,
        "qwen3_5_moe",
        &["qwen3_5_moe", "qwen3_5_moe_text"],
        "qwen35moe",
        (true, true, false),
    ),
];

// FAMILIES holds every family once, in the enum's order (`Family::index` names every variant).
const _: () = {
    let mut i = 0;
    while i < FAMILIES.len() {
        assert!(FAMILIES[i].family.index() == i);
        i += 1;
    }
};

/// The supported families for error messages: `name` (and the GGUF architecture when it differs).
pub(crate) fn supported_list() -> String {
    FAMILIES
        .iter()
        .map(|f| {
            if f.gguf_arch == f.name {
                f.name.to_string()
            } else {
                format!("{} (GGUF {})", f.name, f.gguf_arch)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
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

    /// The family's row of [`FAMILIES`] (a new variant needs one, and a row there).
    const fn index(self) -> usize {
        match self {
            Family::Llama => 0,
            Family::Mistral => 1,
            Family::Qwen2 => 2,
            Family::Qwen3 => 3,
            Family::Gemma => 4,
            Family::Gemma2 => 5,
            Family::Gemma3 => 6,
            Family::Qwen3Moe => 7,
            Family::Qwen3Next => 8,
            Family::Qwen35 => 9,
            Family::Qwen35Moe => 10,
        }
    }

    /// The family's facts.
    pub fn spec(self) -> &'static FamilySpec {
        &FAMILIES[self.index()]
    }

    /// The family of a transformers `model_type`.
    pub fn from_hf_model_type(model_type: &str) -> Option<Self> {
        FAMILIES
            .iter()
            .find(|f| f.hf_model_types.contains(&model_type))
            .map(|f| f.family)
    }

    /// The family of a GGUF `general.architecture`.
    pub fn from_gguf_arch(arch: &str) -> Option<Self> {
        FAMILIES
            .iter()
            .find(|f| f.gguf_arch == arch)
            .map(|f| f.family)
    }

    /// Short lowercase name (also the fixture directory name).
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Families with Gated DeltaNet layers (and gated full attention, `(1 + w)` RMSNorms).
    pub fn is_hybrid(self) -> bool {
        self.spec().hybrid
    }

    /// Families whose MLPs are (or may be) Mixture-of-Experts blocks.
    pub fn is_moe(self) -> bool {
        self.spec().moe
    }

    /// Families run by [`crate::hybrid::HybridModel`] rather than the dense [`crate::Model`].
    pub fn is_hybrid_or_moe(self) -> bool {
        self.is_hybrid() || self.is_moe()
    }

    pub fn is_gemma(self) -> bool {
        self.spec().gemma
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

#[cfg(test)]
mod tests {
    use super::*;

    /// ALL and HYBRID_MOE partition the table: dense rows in ALL (table order), the others in
    /// HYBRID_MOE; names, model types and GGUF architectures map back to their row.
    #[test]
    fn family_lists_cover_the_table() {
        let dense: Vec<Family> = FAMILIES
            .iter()
            .filter(|f| !f.hybrid && !f.moe)
            .map(|f| f.family)
            .collect();
        assert_eq!(dense, Family::ALL);
        let mut others: Vec<Family> = FAMILIES
            .iter()
            .filter(|f| f.hybrid || f.moe)
            .map(|f| f.family)
            .collect();
        let mut listed = Family::HYBRID_MOE.to_vec();
        others.sort_by_key(|f| f.index());
        listed.sort_by_key(|f| f.index());
        assert_eq!(others, listed);
        for f in &FAMILIES {
            assert_eq!(f.family.name(), f.name);
            assert_eq!(Family::from_gguf_arch(f.gguf_arch), Some(f.family));
            for t in f.hf_model_types {
                assert_eq!(Family::from_hf_model_type(t), Some(f.family), "{t}");
            }
        }
        assert_eq!(Family::from_gguf_arch("gpt2"), None);
        assert_eq!(Family::from_hf_model_type("qwen3moe"), None);
    }
}
