//! The shapes of the sizes people run (7-35B): Llama-3.1-8B, Qwen3 8B/14B/32B, Gemma 3 12B,
//! Mistral 7B, and the Qwen3.5/3.6 and Qwen3 MoE hybrids at size; each derived from its family's
//! small shape in `shapes.rs` where one exists.

use super::{
    GEMMA3_270M, HybridShape, LLAMA_3_2_1B, Llama3Rope, MoeShape, QWEN3_0_6B, QWEN3_5_0_8B,
    SynthShape, VocabKind,
};

/// Mistral v0.3's leading SentencePiece tokens; ids 3..771 are control tokens (`[control_<i>]`
/// after the tool-calling ones), then the 256 bytes.
const MISTRAL_SPM_HEAD: &[&str] = &[
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
];

/// Mistral's instruction format, shortened (the published template also renders tools).
const MISTRAL_CHAT: &str = "{{ bos_token }}{% for message in messages %}\
{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}\
{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% endif %}\
{% endfor %}";

/// Llama-3.1-8B: the 1B's vocabulary and tokenizer at 8B size, with an untied LM head.
pub(super) const LLAMA_3_1_8B: SynthShape = {
    let mut s = LLAMA_3_2_1B;
    s.name = "llama-3.1-8b";
    s.hidden = 4096;
    s.ff = 14336;
    s.layers = 32;
    s.head_dim = 128;
    s.tied = false;
    s.rope_llama3 = Some(Llama3Rope {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position: 8192,
    });
    s.general = &[
        ("general.name", "Llama 3.1 8B Instruct"),
        ("general.finetune", "Instruct"),
        ("general.basename", "Llama-3.1"),
        ("general.size_label", "8B"),
        ("general.license", "llama3.1"),
    ];
    s
};

/// Qwen3.6-35B-A3B (and Qwen3.5-35B-A3B, the same text model): 40 blocks, three Gated DeltaNet
/// blocks (16 key / 32 value heads of 128) to one gated full-attention block (16 query / 2 KV
/// heads of 256, a quarter rotated), every MLP 256 experts of 512 with 8 per token plus a gated
/// shared expert of 512; untied LM head; the Qwen3.5 vocabulary (synthetic). The MTP head is not
/// written (see [`QWEN3_5_0_8B`]).
pub(super) const QWEN3_6_35B_A3B: SynthShape = {
    let mut s = QWEN3_5_0_8B;
    s.name = "qwen3.6-35b-a3b";
    s.arch = "qwen35moe";
    s.hidden = 2048;
    s.ff = 512;
    s.layers = 40;
    s.heads = 16;
    s.kv_heads = 2;
    s.tied = false;
    s.hybrid = Some(HybridShape {
        k_heads: 16,
        v_heads: 32,
        k_dim: 128,
        v_dim: 128,
        conv_kernel: 4,
        interval: 4,
        rotary_dim: 64,
        mrope_sections: [11, 11, 10, 0],
    });
    s.moe = Some(MoeShape {
        experts: 256,
        used: 8,
        expert_ff: 512,
        shared_ff: Some(512),
    });
    s.general = &[
        ("general.name", "Qwen3.6 35B A3B"),
        ("general.basename", "Qwen3.6"),
        ("general.size_label", "35B-A3B"),
        ("general.license", "apache-2.0"),
    ];
    s
};

/// Qwen3.6-27B (and Qwen3.5-27B, the same text model): the dense hybrid, 64 blocks (48 Gated
/// DeltaNet with 16 key / 48 value heads of 128, 16 gated full-attention with 24 query / 4 KV
/// heads of 256), MLP 17,408 wide, hidden 5,120, untied LM head.
pub(super) const QWEN3_6_27B: SynthShape = {
    let mut s = QWEN3_5_0_8B;
    s.name = "qwen3.6-27b";
    s.hidden = 5120;
    s.ff = 17408;
    s.layers = 64;
    s.heads = 24;
    s.kv_heads = 4;
    s.tied = false;
    s.hybrid = Some(HybridShape {
        k_heads: 16,
        v_heads: 48,
        k_dim: 128,
        v_dim: 128,
        conv_kernel: 4,
        interval: 4,
        rotary_dim: 64,
        mrope_sections: [11, 11, 10, 0],
    });
    s.general = &[
        ("general.name", "Qwen3.6 27B"),
        ("general.basename", "Qwen3.6"),
        ("general.size_label", "27B"),
        ("general.license", "apache-2.0"),
    ];
    s
};

/// Qwen3-30B-A3B: Qwen3 attention (32 query / 4 KV heads of 128, q/k norms) over 48 blocks,
/// every MLP 128 experts of 768 with 8 per token, no shared expert; untied LM head.
pub(super) const QWEN3_30B_A3B: SynthShape = {
    let mut s = QWEN3_0_6B;
    s.name = "qwen3-30b-a3b";
    s.arch = "qwen3moe";
    s.hidden = 2048;
    s.ff = 6144;
    s.layers = 48;
    s.heads = 32;
    s.kv_heads = 4;
    s.head_dim = 128;
    s.context = 40960;
    s.rope_theta = 1_000_000.0;
    s.tied = false;
    s.moe = Some(MoeShape {
        experts: 128,
        used: 8,
        expert_ff: 768,
        shared_ff: None,
    });
    s.general = &[
        ("general.name", "Qwen3 30B A3B"),
        ("general.basename", "Qwen3"),
        ("general.size_label", "30B-A3B"),
        ("general.license", "apache-2.0"),
    ];
    s
};

/// Qwen3's dense sizes: Qwen3-0.6B's layout (q/k norms, heads of 128, 8 KV heads) with an
/// untied LM head at `hidden` / `ff` / `layers` / `heads`.
const fn qwen3_dense(
    name: &'static str,
    general: &'static [(&'static str, &'static str)],
    hidden: usize,
    ff: usize,
    layers: usize,
    heads: usize,
) -> SynthShape {
    let mut s = QWEN3_0_6B;
    s.name = name;
    s.general = general;
    s.hidden = hidden;
    s.ff = ff;
    s.layers = layers;
    s.heads = heads;
    s.kv_heads = 8;
    s.tied = false;
    s
}

/// Qwen3-8B: 36 blocks, 32 query / 8 KV heads, MLP 12,288.
pub(super) const QWEN3_8B: SynthShape = qwen3_dense(
    "qwen3-8b",
    &[
        ("general.name", "Qwen3 8B"),
        ("general.basename", "Qwen3"),
        ("general.size_label", "8B"),
        ("general.license", "apache-2.0"),
    ],
    4096,
    12288,
    36,
    32,
);

/// Qwen3-14B: 40 blocks, 40 query / 8 KV heads, hidden 5,120, MLP 17,408.
pub(super) const QWEN3_14B: SynthShape = qwen3_dense(
    "qwen3-14b",
    &[
        ("general.name", "Qwen3 14B"),
        ("general.basename", "Qwen3"),
        ("general.size_label", "14B"),
        ("general.license", "apache-2.0"),
    ],
    5120,
    17408,
    40,
    40,
);

/// Qwen3-32B: 64 blocks, 64 query / 8 KV heads, hidden 5,120, MLP 25,600.
pub(super) const QWEN3_32B: SynthShape = qwen3_dense(
    "qwen3-32b",
    &[
        ("general.name", "Qwen3 32B"),
        ("general.basename", "Qwen3"),
        ("general.size_label", "32B"),
        ("general.license", "apache-2.0"),
    ],
    5120,
    25600,
    64,
    64,
);

/// Gemma 3 12B's text model: 48 blocks (five sliding-window layers of 1,024 to one global),
/// 16 query / 8 KV heads of 256, hidden 3,840, MLP 15,360, the global layers' RoPE scaled
/// linearly by 8; 262,208 tokens (the tokenizer's 262,144 padded to the embedding's rows).
pub(super) const GEMMA3_12B: SynthShape = {
    let mut s = GEMMA3_270M;
    s.name = "gemma3-12b";
    s.vocab = 262208;
    s.hidden = 3840;
    s.ff = 15360;
    s.layers = 48;
    s.heads = 16;
    s.kv_heads = 8;
    s.context = 131072;
    s.sliding_window = Some(1024);
    s.rope_linear = Some(8.0);
    s.general = &[
        ("general.name", "Gemma 3 12b It"),
        ("general.finetune", "it"),
        ("general.basename", "gemma-3"),
        ("general.size_label", "12B"),
        ("general.license", "gemma"),
    ];
    s
};

/// Mistral-7B-Instruct-v0.3 (converted as `llama`): 32 blocks, 32 query / 8 KV heads of 128,
/// MLP 14,336, untied LM head, RoPE base 1e6, a SentencePiece vocabulary of 32,768 (synthetic
/// pieces after Mistral's control tokens and bytes).
pub(super) const MISTRAL_7B: SynthShape = SynthShape {
    name: "mistral-7b",
    arch: "llama",
    vocab: 32768,
    hidden: 4096,
    ff: 14336,
    layers: 32,
    heads: 32,
    kv_heads: 8,
    head_dim: 128,
    context: 32768,
    rope_theta: 1_000_000.0,
    rms_eps: 1e-5,
    tied: false,
    explicit_head_dim: false,
    rope_llama3: None,
    rope_linear: None,
    sliding_window: None,
    hybrid: None,
    moe: None,
    vocab_kind: VocabKind::Spm {
        head: MISTRAL_SPM_HEAD,
        controls: 771,
    },
    bos: Some("<s>"),
    eos: "</s>",
    unk: Some("<unk>"),
    pad: None,
    add_bos: true,
    add_space_prefix: Some(true),
    chat_template: Some(MISTRAL_CHAT),
    general: &[
        ("general.name", "Mistral 7B Instruct v0.3"),
        ("general.finetune", "Instruct-v0.3"),
        ("general.basename", "Mistral"),
        ("general.size_label", "7B"),
        ("general.license", "apache-2.0"),
    ],
    general_arrays: &[],
};
