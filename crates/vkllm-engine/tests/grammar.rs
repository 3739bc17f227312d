//! Structured outputs through the generators: the GPU sampler's mask (SlotGenerator,
//! SlotSession) picks the same tokens as the CPU sampler's (SimpleGenerator, Session) for
//! constrained and free requests in one batch, greedy and sampled, and every constrained output
//! matches its grammar. The 256-character test vocabulary over the qwen3 fixture; needs a
//! Vulkan device (lavapipe in CI).

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use common::{char_tokenizer, lcg_ids as ids};
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{
    EngineError, FinishReason, GenerateParams, Generator, Grammar, GrammarSpec, Grammars, Session,
    SimpleGenerator, SlotGenerator, SlotParams, SlotSession, bound_whitespace,
};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{CpuBackend, DEFAULT_CHUNK, KvType, Model, VulkanBackend};
use vkllm_vk::Device;

const EOS: u32 = common::EOS;
const REGEX: &str = "[a-f]{2,5}-[0-9]{1,3}";

fn device() -> Device {
    Device::from_env().unwrap_or_else(|e| panic!("this test needs a Vulkan device: {e}"))
}

/// Compact JSON (`x-guidance` passes llguidance's own options through): a character-level
/// vocabulary spends a token per whitespace character.
fn schema() -> serde_json::Value {
    let mut s = loose_schema();
    s["x-guidance"] = serde_json::json!({"whitespace_flexible": false});
    s
}

/// With the server's default whitespace bounds.
fn loose_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "k": {"enum": ["ab", "cd"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 99},
            "s": {"type": "string", "maxLength": 6}
        },
        "required": ["k", "n", "s"],
        "additionalProperties": false
    })
}

fn grammars() -> Grammars {
    Grammars::new(&char_tokenizer(), 256).expect("grammars")
}

fn compile(g: &Grammars, spec: GrammarSpec) -> Arc<Grammar> {
    g.compile(&spec).expect("compile")
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 1.3,
        top_k: 50,
        top_p: 0.95,
        seed,
        ..SamplingParams::default()
    }
}

/// The text of `toks` up to the first EOS.
fn text(toks: &[u32]) -> String {
    let tok = char_tokenizer();
    let end = toks.iter().position(|&t| t == EOS).unwrap_or(toks.len());
    tok.decode(&toks[..end], false).expect("decode")
}

fn matches_regex(s: &str) -> bool {
    let Some((a, b)) = s.split_once('-') else {
        return false;
    };
    (2..=5).contains(&a.len())
        && a.chars().all(|c| ('a'..='f').contains(&c))
        && (1..=3).contains(&b.len())
        && b.chars().all(|c| c.is_ascii_digit())
}

fn valid_json(s: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(s) else {
        return false;
    };
    let o = v.as_object().expect("an object");
    o.len() == 3
        && ["ab", "cd"].contains(&o["k"].as_str().unwrap_or(""))
        && o["n"].as_u64().is_some_and(|n| n <= 99)
        && o["s"].as_str().is_some_and(|s| s.chars().count() <= 6)
}

/// Runs `reqs` (prompt, params, tokens) together on `g` ([`common::drive`], every request
/// joining at once); the ids.
fn drive(g: &mut dyn Generator, reqs: &[(Vec<u32>, SlotParams, usize)]) -> Vec<Vec<u32>> {
    let reqs: Vec<_> = reqs
        .iter()
        .map(|(p, s, n)| (p.clone(), s.clone(), *n, 0))
        .collect();
    common::drive(g, &reqs)
        .iter()
        .map(|v| v.iter().map(|t| t.id).collect())
        .collect()
}

#[test]
fn gpu_masks_pick_the_cpu_samplers_tokens() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let g = grammars();
    let rx = compile(&g, GrammarSpec::Regex(REGEX.into()));
    let js = compile(&g, GrammarSpec::JsonSchema(schema()));
    let req = |seed: Option<u64>, grammar: Option<&Arc<Grammar>>| SlotParams {
        sampling: seed.map_or_else(SamplingParams::default, sampled),
        logprobs: Some(2),
        grammar: grammar.cloned(),
    };
    let reqs = vec![
        (ids(9, 1), req(None, Some(&rx)), 14),
        (ids(7, 2), req(Some(3), Some(&js)), 60),
        (ids(11, 3), req(Some(4), None), 20),
        (ids(5, 4), req(Some(5), Some(&rx)), 14),
        (ids(6, 5), req(Some(6), Some(&js)), 60),
    ];
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let mut slots = SlotGenerator::new(b, model, 8, 96, KvType::F32, 4).expect("slots");
    let got = drive(&mut slots, &reqs);
    let mut b = VulkanBackend::new(dev);
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let mut simple = SimpleGenerator::new(b, model, 8, 96).expect("simple");
    let want = drive(&mut simple, &reqs);
    for (i, (gt, wt)) in got.iter().zip(&want).enumerate() {
        assert_eq!(gt, wt, "request {i}");
    }
    for i in [0, 3] {
        let t = text(&got[i]);
        assert!(matches_regex(&t), "request {i}: {t:?}");
        assert!(
            got[i].contains(&EOS),
            "request {i} did not end: {:?}",
            got[i]
        );
    }
    for i in [1, 4] {
        let t = text(&got[i]);
        assert!(valid_json(&t), "request {i}: {t:?}");
        assert!(got[i].contains(&EOS), "request {i} did not end: {t:?}");
    }
    // The free request in the same batch is not held to any grammar: it writes other text.
    assert!(!matches_regex(&text(&got[2])) && !valid_json(&text(&got[2])));
}

fn params(p: &SamplingParams, grammar: &Arc<Grammar>) -> GenerateParams {
    GenerateParams {
        sampling: p.clone(),
        max_tokens: 240,
        stop: Vec::new(),
        grammar: Some(grammar.clone()),
    }
}

#[test]
fn sessions_follow_the_grammar_on_the_cpu_and_the_gpu() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let g = grammars();
    let js = compile(&g, GrammarSpec::JsonSchema(loose_schema()));
    for seed in [1u64, 2, 3] {
        let p = params(&sampled(seed), &js);
        let prompt = ids(8, seed);
        let mut cpu = {
            let mut b = CpuBackend::new();
            let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("m");
            Session::new(b, m, char_tokenizer(), 256).expect("session")
        };
        let mut text_cpu = String::new();
        let u = cpu
            .generate(&prompt, &p, |t| text_cpu.push_str(t))
            .expect("cpu generate");
        assert_eq!(u.finish, FinishReason::EndOfGeneration, "{text_cpu:?}");
        assert!(valid_json(&text_cpu), "seed {seed}: {text_cpu:?}");
        let mut b = VulkanBackend::new(dev.clone());
        let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("m");
        let mut per_token = Session::new(b, m, char_tokenizer(), 256).expect("session");
        let mut want = String::new();
        per_token
            .generate(&prompt, &p, |t| want.push_str(t))
            .expect("vulkan session");
        let mut b = VulkanBackend::new(dev.clone());
        let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("m");
        let mut slots =
            SlotSession::new(b, m.into(), char_tokenizer(), 256, KvType::F32).expect("slots");
        let mut got = String::new();
        slots
            .generate_with(&prompt, &p, &AtomicBool::new(false), |t| got.push_str(t))
            .expect("slot session");
        assert_eq!(got, want, "seed {seed}");
        assert!(valid_json(&got), "seed {seed}: {got:?}");
    }
}

#[test]
fn grammar_errors_and_the_compile_cache() {
    let g = grammars();
    for bad in [
        GrammarSpec::JsonSchema(serde_json::json!({"type": "nope"})),
        GrammarSpec::Lark("start: missing".into()),
        GrammarSpec::Regex("(".into()),
    ] {
        match g.compile(&bad) {
            Err(EngineError::Grammar { reason }) => assert!(!reason.is_empty()),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let a = compile(&g, GrammarSpec::JsonSchema(schema()));
    let b = compile(&g, GrammarSpec::JsonSchema(schema()));
    assert!(
        Arc::ptr_eq(&a, &b),
        "a second compile of one schema is the cached grammar"
    );
    // A fresh constraint allows `{` and whitespace first, never a letter; EOS only at the end.
    let mut c = a.start();
    let m = c.mask();
    let allowed = |m: &[u32], ch: char| {
        let id = common::ids(&ch.to_string())[0] as usize;
        m[id / 32] >> (id % 32) & 1 == 1
    };
    assert!(allowed(&m, '{'));
    assert!(!allowed(&m, 'a'));
    assert_eq!(m[EOS as usize / 32] >> (EOS % 32) & 1, 0);
    for t in common::ids("{\"k\":\"ab\",\"n\":7,\"s\":\"x\"}") {
        c.commit(t).expect("a valid token");
    }
    let m = c.mask();
    assert_eq!(
        m[EOS as usize / 32] >> (EOS % 32) & 1,
        1,
        "the end is allowed"
    );
    // A token the grammar rejects is an error.
    let mut c = a.start();
    assert!(matches!(
        c.commit(common::ids("a")[0]),
        Err(EngineError::Grammar { .. })
    ));
}

/// A `%json` schema inside a Lark grammar (the server's forced tool calls) takes the whitespace
/// bound too: after one space between JSON tokens a second is refused, where llguidance's own
/// default would take any run.
#[test]
fn embedded_json_whitespace_is_bounded() {
    let g = grammars();
    let lark = |schema: serde_json::Value| {
        GrammarSpec::Lark(format!("start: \"<\" args \">\"\nargs: %json {schema}\n"))
    };
    let space_after = |spec: GrammarSpec, prefix: &str| {
        let mut c = compile(&g, spec).start();
        for t in common::ids(prefix) {
            c.commit(t).expect("a valid token");
        }
        let id = common::ids(" ")[0] as usize;
        c.mask()[id / 32] >> (id % 32) & 1 == 1
    };
    let bounded = lark(bound_whitespace(loose_schema()));
    assert!(space_after(bounded.clone(), "<{\"k\":\"ab\","));
    assert!(!space_after(bounded, "<{\"k\":\"ab\", "));
    assert!(
        space_after(lark(loose_schema()), "<{\"k\":\"ab\", "),
        "without the bound llguidance takes a second space"
    );
}
