//! The shape table: real models' hyperparameters and the metadata llama.cpp's converter writes
//! for them (from each model's config.json, read through convert_hf_to_gguf.py's rules), plus
//! tiny shapes of the same architectures for tests.

use super::vocab::{SpecialBase, VocabKind};

mod large;
use large::{
    GEMMA3_12B, LLAMA_3_1_8B, MISTRAL_7B, QWEN3_6_27B, QWEN3_6_35B_A3B, QWEN3_8B, QWEN3_14B,
    QWEN3_30B_A3B, QWEN3_32B,
};

/// Llama 3.1+ RoPE scaling (written as the `rope_freqs.weight` factor tensor).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_max_position: usize,
}

/// The Gated DeltaNet side of a hybrid shape (Qwen3.5: `general.architecture` `qwen35`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HybridShape {
    /// `linear_num_key_heads` (`ssm.group_count`).
    pub k_heads: usize,
    /// `linear_num_value_heads` (`ssm.time_step_rank`).
    pub v_heads: usize,
    /// `linear_key_head_dim` (`ssm.state_size`).
    pub k_dim: usize,
    /// `linear_value_head_dim`.
    pub v_dim: usize,
    /// `linear_conv_kernel_dim` (`ssm.conv_kernel`).
    pub conv_kernel: usize,
    /// Every `interval`-th layer is full attention (`full_attention_interval`).
    pub interval: usize,
    /// Rotated dimensions of each head (`rope.dimension_count`: partial_rotary_factor *
    /// head_dim).
    pub rotary_dim: usize,
    /// `rope.dimension_sections` (interleaved M-RoPE; text positions make it plain RoPE).
    pub mrope_sections: [u32; 4],
}

impl HybridShape {
    /// Channels of the packed q/k/v projection and of the conv (`2 * k_heads * k_dim +
    /// v_heads * v_dim`).
    pub fn conv_dim(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }

    /// `ssm.inner_size`.
    pub fn v_width(&self) -> usize {
        self.v_heads * self.v_dim
    }

    /// Whether layer `i` is a full-attention layer.
    pub fn is_full(&self, i: usize) -> bool {
        (i + 1).is_multiple_of(self.interval.max(1))
    }
}

/// The mixture of experts of a MoE shape (`qwen3moe`, `qwen35moe`): every block's MLP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeShape {
    /// `num_experts` (`expert_count`).
    pub experts: usize,
    /// `num_experts_per_tok` (`expert_used_count`).
    pub used: usize,
    /// `moe_intermediate_size` (`expert_feed_forward_length`).
    pub expert_ff: usize,
    /// `shared_expert_intermediate_size` (`expert_shared_feed_forward_length`), with the
    /// shared expert's sigmoid gate.
    pub shared_ff: Option<usize>,
}

/// One model shape.
#[derive(Clone, Copy, Debug)]
pub struct SynthShape {
    /// The `--shape` name.
    pub name: &'static str,
    /// `general.architecture`: llama, qwen2, qwen3, gemma3.
    pub arch: &'static str,
    pub vocab: usize,
    pub hidden: usize,
    pub ff: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub context: u32,
    pub rope_theta: f32,
    pub rms_eps: f32,
    /// No `output.weight` (the embedding is the output matrix).
    pub tied: bool,
    /// `config.json` has `head_dim`: the converter writes `attention.key_length` /
    /// `value_length`.
    pub explicit_head_dim: bool,
    pub rope_llama3: Option<Llama3Rope>,
    /// Linear RoPE scaling (`rope_scaling` type linear: Gemma 3 12B+ on its global layers).
    pub rope_linear: Option<f32>,
    /// Gemma 3's sliding window.
    pub sliding_window: Option<u32>,
    /// Qwen3.5's Gated DeltaNet layers (the full-attention layers are gated: `attn_q` projects
    /// the query and its gate together).
    pub hybrid: Option<HybridShape>,
    /// Experts instead of the dense MLP in every block.
    pub moe: Option<MoeShape>,
    pub vocab_kind: VocabKind,
    /// `tokenizer.ggml.{bos,eos,unknown,padding}_token_id` by token text.
    pub bos: Option<&'static str>,
    pub eos: &'static str,
    pub unk: Option<&'static str>,
    pub pad: Option<&'static str>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: bool,
    /// SmolLM2's converter also wrote `add_space_prefix` (false).
    pub add_space_prefix: Option<bool>,
    pub chat_template: Option<&'static str>,
    /// `general.*` strings (name, basename, ...) as the converter writes them from the model
    /// card; arrays (`languages`, `tags`) separately.
    pub general: &'static [(&'static str, &'static str)],
    pub general_arrays: &'static [(&'static str, &'static [&'static str])],
}

impl SynthShape {
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + \
message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}\
{{ '<|im_start|>assistant\n' }}{% endif %}";

const LLAMA3_CHAT: &str = "{{ bos_token }}{% for message in messages %}\
{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] \
+ '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}\
{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const QWEN_SPECIALS: &[&str] = &[
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
];

const LLAMA3_SPECIALS: &[&str] = &[
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
];

const SMOLLM_SPECIALS: &[&str] = &[
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<repo_name>",
    "<reponame>",
    "<file_sep>",
    "<filename>",
    "<gh_stars>",
    "<issue_start>",
    "<issue_comment>",
    "<issue_closed>",
    "<jupyter_start>",
    "<jupyter_text>",
    "<jupyter_code>",
    "<jupyter_output>",
    "<jupyter_script>",
    "<empty_output>",
];

/// Gemma's leading SentencePiece tokens (a shortened layout: the real one reserves ids up to 105
/// for `<start_of_turn>`).
const GEMMA_SPM_HEAD: &[&str] = &[
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<start_of_turn>",
    "<end_of_turn>",
];

const QWEN3_0_6B: SynthShape = SynthShape {
    name: "qwen3-0.6b",
    arch: "qwen3",
    vocab: 151936,
    hidden: 1024,
    ff: 3072,
    layers: 28,
    heads: 16,
    kv_heads: 8,
    head_dim: 128,
    context: 40960,
    rope_theta: 1_000_000.0,
    rms_eps: 1e-6,
    tied: true,
    explicit_head_dim: true,
    rope_llama3: None,
    rope_linear: None,
    sliding_window: None,
    hybrid: None,
    moe: None,
    vocab_kind: VocabKind::Bpe {
        pre: "qwen2",
        specials: QWEN_SPECIALS,
        special_base: SpecialBase::End,
        n_pad: 151936 - 151643 - 14,
    },
    bos: Some("<|endoftext|>"),
    eos: "<|im_end|>",
    unk: None,
    pad: Some("<|endoftext|>"),
    add_bos: false,
    add_space_prefix: None,
    chat_template: Some(CHATML),
    general: &[
        ("general.name", "Qwen3 0.6B"),
        ("general.basename", "Qwen3"),
        ("general.size_label", "0.6B"),
        ("general.license", "apache-2.0"),
    ],
    general_arrays: &[],
};

const LLAMA_3_2_1B: SynthShape = SynthShape {
    name: "llama-3.2-1b",
    arch: "llama",
    vocab: 128256,
    hidden: 2048,
    ff: 8192,
    layers: 16,
    heads: 32,
    kv_heads: 8,
    head_dim: 64,
    context: 131072,
    rope_theta: 500_000.0,
    rms_eps: 1e-5,
    tied: true,
    explicit_head_dim: true,
    rope_llama3: Some(Llama3Rope {
        factor: 32.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position: 8192,
    }),
    rope_linear: None,
    sliding_window: None,
    hybrid: None,
    moe: None,
    vocab_kind: VocabKind::Bpe {
        pre: "llama-bpe",
        specials: LLAMA3_SPECIALS,
        special_base: SpecialBase::End,
        n_pad: 256 - 11,
    },
    bos: Some("<|begin_of_text|>"),
    eos: "<|eot_id|>",
    unk: None,
    pad: None,
    add_bos: true,
    add_space_prefix: None,
    chat_template: Some(LLAMA3_CHAT),
    general: &[
        ("general.name", "Llama 3.2 1B Instruct"),
        ("general.finetune", "Instruct"),
        ("general.basename", "Llama-3.2"),
        ("general.size_label", "1B"),
        ("general.license", "llama3.2"),
    ],
    general_arrays: &[
        (
            "general.tags",
            &[
                "facebook",
                "meta",
                "pytorch",
                "llama",
                "llama-3",
                "text-generation",
            ],
        ),
        (
            "general.languages",
            &["en", "de", "fr", "it", "pt", "hi", "es", "th"],
        ),
    ],
};

const QWEN2_5_0_5B: SynthShape = SynthShape {
    name: "qwen2.5-0.5b",
    arch: "qwen2",
    vocab: 151936,
    hidden: 896,
    ff: 4864,
    layers: 24,
    heads: 14,
    kv_heads: 2,
    head_dim: 64,
    context: 32768,
    rope_theta: 1_000_000.0,
    rms_eps: 1e-6,
    tied: true,
    explicit_head_dim: false,
    rope_llama3: None,
    rope_linear: None,
    sliding_window: None,
    hybrid: None,
    moe: None,
    vocab_kind: VocabKind::Bpe {
        pre: "qwen2",
        specials: QWEN_SPECIALS,
        special_base: SpecialBase::End,
        n_pad: 151936 - 151643 - 14,
    },
    bos: Some("<|endoftext|>"),
    eos: "<|im_end|>",
    unk: None,
    pad: Some("<|endoftext|>"),
    add_bos: false,
    add_space_prefix: None,
    chat_template: Some(CHATML),
    general: &[
        ("general.name", "Qwen2.5 0.5B Instruct"),
        ("general.finetune", "Instruct"),
        ("general.basename", "Qwen2.5"),
        ("general.size_label", "0.5B"),
    ],
    general_arrays: &[],
};

const SMOLLM2_135M: SynthShape = SynthShape {
    name: "smollm2-135m",
    arch: "llama",
    vocab: 49152,
    hidden: 576,
    ff: 1536,
    layers: 30,
    heads: 9,
    kv_heads: 3,
    head_dim: 64,
    context: 8192,
    rope_theta: 100_000.0,
    rms_eps: 1e-5,
    tied: true,
    explicit_head_dim: false,
    rope_llama3: None,
    rope_linear: None,
    sliding_window: None,
    hybrid: None,
    moe: None,
    vocab_kind: VocabKind::Bpe {
        pre: "smollm",
        specials: SMOLLM_SPECIALS,
        special_base: SpecialBase::Start,
        n_pad: 0,
    },
    bos: Some("<|im_start|>"),
    eos: "<|im_end|>",
    unk: Some("<|endoftext|>"),
    pad: Some("<|im_end|>"),
    add_bos: false,
    add_space_prefix: Some(false),
    chat_template: Some(CHATML),
    general: &[
        ("general.name", "SmolLM2 135M Instruct"),
        ("general.organization", "HuggingFaceTB"),
        ("general.finetune", "Instruct"),
        ("general.basename", "SmolLM2"),
        ("general.size_label", "135M"),
        ("general.license", "apache-2.0"),
    ],
    general_arrays: &[("general.languages", &["en"])],
};

const GEMMA3_270M: SynthShape = SynthShape {
    name: "gemma3-270m",
    arch: "gemma3",
    vocab: 262144,
    hidden: 640,
    ff: 2048,
    layers: 18,
    heads: 4,
    kv_heads: 1,
    head_dim: 256,
    context: 32768,
    rope_theta: 1_000_000.0,
    rms_eps: 1e-6,
    tied: true,
    explicit_head_dim: true,
    rope_llama3: None,
    rope_linear: None,
    sliding_window: Some(512),
    hybrid: None,
    moe: None,
    vocab_kind: VocabKind::Spm {
        head: GEMMA_SPM_HEAD,
        controls: 0,
    },
    bos: Some("<bos>"),
    eos: "<eos>",
    unk: Some("<unk>"),
    pad: Some("<pad>"),
    add_bos: true,
    add_space_prefix: Some(false),
    chat_template: None,
    general: &[
        ("general.name", "Gemma 3 270m"),
        ("general.basename", "gemma-3"),
        ("general.size_label", "270M"),
        ("general.license", "gemma"),
    ],
    general_arrays: &[("general.tags", &["text-generation"])],
};

/// Qwen3.5-0.8B's text model (config.json `text_config`): 24 layers, three Gated DeltaNet
/// layers to one gated full-attention layer, 16 key and 16 value heads of 128 in the DeltaNet,
/// 8 query / 2 KV heads of 256 with a quarter of each head rotated. The MTP head
/// (`mtp_num_hidden_layers` 1) is not written: converters without MTP support drop it, and
/// decode speed does not use it. The vocabulary is synthetic (248320 entries, the chat
/// specials after the 248044 normal tokens, as `<|endoftext|>` = 248044 in the real one).
const QWEN3_5_0_8B: SynthShape = SynthShape {
    name: "qwen3.5-0.8b",
    arch: "qwen35",
    vocab: 248320,
    hidden: 1024,
    ff: 3584,
    layers: 24,
    heads: 8,
    kv_heads: 2,
    head_dim: 256,
    context: 262144,
    rope_theta: 10_000_000.0,
    rms_eps: 1e-6,
    tied: true,
    explicit_head_dim: true,
    rope_llama3: None,
    rope_linear: None,
    sliding_window: None,
    hybrid: Some(HybridShape {
        k_heads: 16,
        v_heads: 16,
        k_dim: 128,
        v_dim: 128,
        conv_kernel: 4,
        interval: 4,
        rotary_dim: 64,
        mrope_sections: [11, 11, 10, 0],
    }),
    moe: None,
    vocab_kind: VocabKind::Bpe {
        pre: "qwen35",
        specials: QWEN_SPECIALS,
        special_base: SpecialBase::End,
        n_pad: 248320 - 248044 - 14,
    },
    bos: None,
    eos: "<|im_end|>",
    unk: None,
    pad: Some("<|endoftext|>"),
    add_bos: false,
    add_space_prefix: None,
    // None: readers fall back to the family's published template (vkllm's built-in qwen3_5).
    chat_template: None,
    general: &[
        ("general.name", "Qwen3.5 0.8B"),
        ("general.basename", "Qwen3.5"),
        ("general.size_label", "0.8B"),
        ("general.license", "apache-2.0"),
    ],
    general_arrays: &[],
};

/// Tiny versions of each architecture, for tests: same tensor names and metadata keys, sizes
/// that run in milliseconds (rows multiples of 256 so every quant type is exercised).
const fn tiny(base: SynthShape, name: &'static str, vocab: usize) -> SynthShape {
    let mut s = base;
    s.name = name;
    s.vocab = vocab;
    s.hidden = 256;
    s.ff = 512;
    s.layers = 4;
    s.heads = 4;
    s.kv_heads = 2;
    s.head_dim = 64;
    s.context = 2048;
    if let Some(w) = s.sliding_window {
        s.sliding_window = Some(if w > 64 { 64 } else { w });
    }
    if let VocabKind::Spm { head, controls } = s.vocab_kind {
        // Room for the bytes and pieces in a vocabulary of ~1k.
        s.vocab_kind = VocabKind::Spm {
            head,
            controls: if controls > 64 { 64 } else { controls },
        };
    }
    if let Some(mut m) = s.moe {
        // Eight experts of 256, two per token (rows multiples of 256).
        m.experts = 8;
        m.used = 2;
        m.expert_ff = 256;
        if m.shared_ff.is_some() {
            m.shared_ff = Some(256);
        }
        s.moe = Some(m);
    }
    if let Some(mut h) = s.hybrid {
        // Two key heads shared by four value heads (the tiled order), heads of 64.
        h.k_heads = 2;
        h.v_heads = 4;
        h.k_dim = 64;
        h.v_dim = 64;
        h.rotary_dim = 16;
        h.mrope_sections = [3, 3, 2, 0];
        s.hybrid = Some(h);
        s.heads = 4;
        s.kv_heads = 2;
    }
    s
}

/// Every shape `--shape` accepts.
pub const SHAPES: &[SynthShape] = &[
    QWEN3_0_6B,
    LLAMA_3_2_1B,
    LLAMA_3_1_8B,
    QWEN2_5_0_5B,
    SMOLLM2_135M,
    GEMMA3_270M,
    QWEN3_5_0_8B,
    tiny(QWEN3_0_6B, "tiny-qwen3", 1024),
    tiny(LLAMA_3_2_1B, "tiny-llama", 1024),
    tiny(QWEN2_5_0_5B, "tiny-qwen2", 1024),
    tiny(SMOLLM2_135M, "tiny-smollm2", 1024),
    tiny(GEMMA3_270M, "tiny-gemma3", 1024),
    QWEN3_6_35B_A3B,
    QWEN3_6_27B,
    QWEN3_30B_A3B,
    tiny(QWEN3_5_0_8B, "tiny-qwen3.5", 1024),
    tiny(QWEN3_6_35B_A3B, "tiny-qwen3.6-moe", 1024),
    tiny(QWEN3_30B_A3B, "tiny-qwen3-moe", 1024),
    QWEN3_8B,
    QWEN3_14B,
    QWEN3_32B,
    GEMMA3_12B,
    MISTRAL_7B,
    tiny(MISTRAL_7B, "tiny-mistral", 1024),
    TINY_GEMMA3_SCALED,
];

/// Gemma 3 12B's layout in six tiny blocks: five sliding-window layers, then the one global
/// layer that the linear RoPE scaling applies to.
const TINY_GEMMA3_SCALED: SynthShape = {
    let mut s = tiny(GEMMA3_12B, "tiny-gemma3-scaled", 1024);
    s.layers = 6;
    s
};
