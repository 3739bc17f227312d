//! The batched GPU generator gives every request the tokens (and logprobs, within the
//! batched-vs-single logits difference) of the reference SimpleGenerator, with requests
//! starting at different steps and one released early. Needs a Vulkan device (lavapipe in CI).

mod common;

use common::drive;
use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::generator::pick;
use vkllm_engine::{Generator, SimpleGenerator, SlotGenerator, SlotParams, TokenOut};
use vkllm_models::fixtures::Fixture;
use vkllm_models::hybrid::HybridModel;
use vkllm_models::{DEFAULT_CHUNK, KvType, Logits, Model, VulkanBackend};
use vkllm_vk::Device;

fn device() -> Device {
    Device::from_env().unwrap_or_else(|e| panic!("this test needs a Vulkan device: {e}"))
}

#[test]
fn slot_generator_matches_simple_generator() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let prompt = fx.prompt("short").expect("prompt").ids;
    let other: Vec<u32> = prompt.iter().rev().copied().collect();
    let sampled = SlotParams {
        sampling: SamplingParams {
            temperature: 0.8,
            top_k: 20,
            top_p: 0.9,
            repetition_penalty: 1.2,
            seed: 9,
            ..Default::default()
        },
        logprobs: None,
        grammar: None,
    };
    let greedy_lp = SlotParams {
        sampling: SamplingParams::default(),
        logprobs: Some(3),
        grammar: None,
    };
    let reqs = vec![
        (prompt.clone(), greedy_lp.clone(), 12, 0),
        (other.clone(), sampled.clone(), 12, 1),
        (prompt.clone(), sampled.clone(), 5, 0),
        (other, greedy_lp, 9, 3),
    ];
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let mut slots = SlotGenerator::new(b, model, 4, 64, KvType::F32, 4).expect("slot generator");
    let got = drive(&mut slots, &reqs);
    let mut b = VulkanBackend::new(dev);
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let mut simple = SimpleGenerator::new(b, model, 4, 64).expect("simple generator");
    let want = drive(&mut simple, &reqs);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let gi: Vec<u32> = g.iter().map(|t| t.id).collect();
        let wi: Vec<u32> = w.iter().map(|t| t.id).collect();
        assert_eq!(gi, wi, "request {i}: tokens");
        for (a, b) in g.iter().zip(w) {
            if let (Some(x), Some(y)) = (a.logprob, b.logprob) {
                assert!((x - y).abs() < 1e-3, "request {i}: logprob {x} vs {y}");
                let ta: Vec<u32> = a.top.iter().map(|t| t.0).collect();
                let tb: Vec<u32> = b.top.iter().map(|t| t.0).collect();
                assert_eq!(ta, tb, "request {i}: top ids");
            }
        }
    }
}

/// The per-dispatch reference of one request on a hybrid model: alone in a fresh state, one
/// forward per token, sampled on the host by the generators' own `pick`.
fn hybrid_reference(
    b: &mut VulkanBackend,
    m: &HybridModel,
    prompt: &[u32],
    p: &SlotParams,
    n: usize,
) -> Vec<u32> {
    hybrid_reference_kv(b, m, prompt, p, n, KvType::F32)
}

/// [`hybrid_reference`] with the attention layers' KV stored as `kv`.
fn hybrid_reference_kv(
    b: &mut VulkanBackend,
    m: &HybridModel,
    prompt: &[u32],
    p: &SlotParams,
    n: usize,
    kv: KvType,
) -> Vec<u32> {
    let st = m
        .new_state_kv(b, (prompt.len() + n + 1).max(64), 1, kv)
        .expect("state");
    let mut counts = vec![0u32; m.cfg.vocab_size];
    let mut logits = m.forward(b, &st, prompt, 0, Logits::Last).expect("prefill");
    let mut toks = Vec::new();
    loop {
        let t = pick(&logits, p, &counts, toks.len() as u64, None).id;
        toks.push(t);
        counts[t as usize] += 1;
        if toks.len() == n {
            return toks;
        }
        let pos = prompt.len() + toks.len() - 1;
        logits = m.forward(b, &st, &[t], pos, Logits::Last).expect("decode");
    }
}

/// A hybrid (Gated DeltaNet) model through the batched generator: requests joining at
/// different rounds, slots reused (state reset), and one request whose prompt extends a
/// finished request's whole history (its recurrent state continued, not recomputed) all give
/// the reference tokens.
#[test]
fn hybrid_slot_generator_matches_reference() {
    let dev = device();
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let prompt = fx.prompt("short").expect("prompt").ids;
    let other: Vec<u32> = prompt.iter().rev().copied().collect();
    let greedy = SlotParams::default();
    let sampled = SlotParams {
        sampling: SamplingParams {
            temperature: 0.8,
            top_k: 20,
            repetition_penalty: 1.2,
            seed: 9,
            ..Default::default()
        },
        logprobs: None,
        grammar: None,
    };
    let mut b = VulkanBackend::new(dev.clone());
    let model =
        HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    // One step per submit: a slot's history is then exactly its prompt and the tokens fed.
    let mut g = SlotGenerator::new_hybrid(b, model, 3, 64, KvType::F32, 1).expect("slot generator");
    let first = vec![
        (prompt.clone(), greedy.clone(), 7, 0),
        (other.clone(), sampled.clone(), 9, 1),
        (other.clone(), greedy.clone(), 6, 8),
    ];
    let got = drive(&mut g, &first);
    // Request 2 joined after request 0 ended, in a used slot (its state reset): that slot now
    // holds `other` + request 2's first 5 tokens, and a prompt extending all of that continues
    // the slot's recurrent state.
    let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
    let mut longer = other.clone();
    longer.extend(ids(&got[2]));
    longer.push(3);
    assert!(
        (0..3).any(|s| {
            let h = g.history(s);
            h.len() == other.len() + 5 && longer.starts_with(h)
        }),
        "no slot holds request 2's history"
    );
    let second = vec![(longer.clone(), greedy.clone(), 8, 0)];
    let got2 = drive(&mut g, &second);

    let mut b = VulkanBackend::new(dev);
    let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    for (i, r) in first.iter().enumerate() {
        let want = hybrid_reference(&mut b, &m, &r.0, &r.1, r.2);
        assert_eq!(ids(&got[i]), want, "request {i}");
    }
    let want = hybrid_reference(&mut b, &m, &longer, &greedy, 8);
    assert_eq!(
        ids(&got2[0]),
        want,
        "the request continuing a slot's history"
    );
}

/// Dense models copy the longest cached prefix from any slot, a busy one too: a request that
/// shares a running request's prompt starts from its rows (reported as reused) and gives the
/// tokens the reference generator computes from scratch.
#[test]
fn prefixes_are_copied_from_other_slots() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let prompt = fx.prompt("short").expect("prompt").ids;
    let greedy = SlotParams::default();
    let mut longer = prompt.clone();
    longer.extend([7, 9, 11]);
    // Request 1 joins while request 0 decodes in the other slot.
    let reqs = vec![
        (prompt.clone(), greedy.clone(), 10, 0),
        (longer.clone(), greedy.clone(), 6, 2),
    ];
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let mut g = SlotGenerator::new(b, model, 2, 64, KvType::F16, 1).expect("slot generator");
    let got = drive(&mut g, &reqs);
    let reused: Vec<usize> = (0..2).map(|s| g.reused(s)).collect();
    assert!(
        reused.contains(&prompt.len()),
        "request 1 took request 0's prompt rows: {reused:?}"
    );
    let mut b = VulkanBackend::new(dev);
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let mut simple = SimpleGenerator::new(b, model, 2, 64).expect("simple generator");
    let want = drive(&mut simple, &reqs);
    let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
    for i in 0..2 {
        assert_eq!(ids(&got[i]), ids(&want[i]), "request {i}");
    }
}

/// Conversations outlive their slot in the prefix store: with one slot, a conversation resumed
/// after another request took the slot starts from its stored rows (reference tokens; without
/// the store it is computed again), and with room for one conversation the least recently used
/// one makes way.
#[test]
fn stored_conversations_outlive_their_slot() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let vocab = fx.config.vocab_size as u32;
    let conv = |seed: u32| -> Vec<u32> { (0..20).map(|i| (seed + 7 * i) % vocab).collect() };
    let (a, b, c) = (conv(3), conv(101), conv(211));
    let greedy = SlotParams::default();
    let one = |p: &[u32], n: usize| vec![(p.to_vec(), greedy.clone(), n, 0)];
    let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
    // Runs a, then b (taking a's slot), then a resumed with its answer and a new turn; returns
    // the resumed turn's tokens and what it took from a cache.
    let session = |g: &mut dyn Generator, third: Option<&[u32]>| {
        let got_a = drive(g, &one(&a, 6));
        drive(g, &one(&b, 6));
        if let Some(t) = third {
            drive(g, &one(t, 6));
        }
        let mut resumed = a.clone();
        resumed.extend(ids(&got_a[0]));
        resumed.extend([5, 9]);
        let got = drive(g, &one(&resumed, 6));
        (ids(&got[0]), g.reused(0), resumed.len())
    };
    let dense = |dev: &Device| {
        let mut b = VulkanBackend::new(dev.clone());
        let model =
            Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        SlotGenerator::new(b, model, 1, 64, KvType::F16, 1).expect("slot generator")
    };
    let mut simple = {
        let mut b = VulkanBackend::new(dev.clone());
        let model =
            Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        SimpleGenerator::new(b, model, 1, 64).expect("simple generator")
    };
    let (want, simple_reused, _) = session(&mut simple, None);
    assert_eq!(simple_reused, 0, "one slot: b overwrote a");

    // Room for two conversations: a's rows come back from the store.
    let per = dense(&dev).prefix_entry_bytes();
    assert!(per > 0);
    let mut g = dense(&dev).with_prefix_store(2 * per).expect("store");
    assert_eq!(g.prefix_store_entries(), 2);
    assert_eq!(g.prefix_cache_bytes(), 2 * per);
    let (got, reused, len) = session(&mut g, None);
    assert_eq!(got, want, "tokens with the store");
    // a's prompt and its answer but the last token (drawn, never fed) came from the store.
    assert_eq!(reused, a.len() + 5, "resumed turn of {len} tokens");

    // Room for one: c's turn stores b in a's place, so a is computed again.
    let mut g = dense(&dev).with_prefix_store(per).expect("store");
    assert_eq!(g.prefix_store_entries(), 1);
    let (got, reused, _) = session(&mut g, Some(c.as_slice()));
    assert_eq!(got, want, "tokens after an eviction");
    assert_eq!(reused, 0, "a was evicted");

    // Less than one conversation's bytes: no store.
    let g = dense(&dev).with_prefix_store(per - 1).expect("no store");
    assert_eq!(g.prefix_store_entries(), 0);
}

/// A conversation that goes on in its own slot stays out of the prefix store even where its next
/// prompt re-renders the end of the last answer (its rows stay in the slot; a copy would be
/// stale at once), is stored when another prompt takes the slot, and comes back from there with
/// the reference tokens.
#[test]
fn a_continuing_conversation_is_stored_when_its_slot_is_taken() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let vocab = fx.config.vocab_size as u32;
    let conv = |seed: u32| -> Vec<u32> { (0..20).map(|i| (seed + 7 * i) % vocab).collect() };
    let (a, b) = (conv(3), conv(101));
    let greedy = SlotParams::default();
    let one = |p: &[u32]| vec![(p.to_vec(), greedy.clone(), 6, 0)];
    let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
    let load = || {
        let mut b = VulkanBackend::new(dev.clone());
        let model =
            Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        (b, model)
    };
    let (bk, model) = load();
    let g = SlotGenerator::new(bk, model, 1, 64, KvType::F16, 1).expect("slot generator");
    let per = g.prefix_entry_bytes();
    let mut g = g.with_prefix_store(2 * per).expect("store");
    let (bk, model) = load();
    let mut reference = SimpleGenerator::new(bk, model, 1, 64).expect("simple generator");

    let answer = ids(&drive(&mut g, &one(&a))[0]);
    // The next turn keeps three of the answer's tokens (the rest re-rendered).
    let mut a2 = a.clone();
    a2.extend(&answer[..3]);
    a2.extend([5, 9]);
    let answer2 = ids(&drive(&mut g, &one(&a2))[0]);
    assert_eq!(g.reused(0), a.len() + 3);
    assert_eq!(g.prefix_store_conversations(), 0, "a went on in its slot");
    drive(&mut g, &one(&b));
    assert_eq!(
        g.prefix_store_conversations(),
        1,
        "b took the slot: a stored"
    );
    let mut a3 = a2.clone();
    a3.extend(&answer2);
    a3.extend([7]);
    let got = ids(&drive(&mut g, &one(&a3))[0]);
    assert_eq!(
        g.reused(0),
        a2.len() + 5,
        "a's rows came back from the store"
    );
    for p in [&a, &a2, &b] {
        drive(&mut reference, &one(p));
    }
    let want = ids(&drive(&mut reference, &one(&a3))[0]);
    assert_eq!(got, want);
}

/// A dense store keeps rows in blocks: four blocks (on qwen3 the bytes of one whole-context
/// conversation) hold three shorter ones (one of two blocks), each resumed from the store after
/// the others took the one slot, with the reference tokens; on a model with sliding-window
/// rings too.
#[test]
fn a_block_store_keeps_several_short_conversations() {
    let dev = device();
    for family in ["qwen3", "gemma3"] {
        let fx = Fixture::load(family).expect("fixture");
        let vocab = fx.config.vocab_size as u32;
        let conv =
            |seed: u32, n: u32| -> Vec<u32> { (0..n).map(|i| (seed + 7 * i) % vocab).collect() };
        let convs = [conv(3, 150), conv(101, 20), conv(211, 20)];
        let greedy = SlotParams::default();
        let one = |p: &[u32], n: usize| vec![(p.to_vec(), greedy.clone(), n, 0)];
        let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
        let load = |dev: &Device| {
            let mut b = VulkanBackend::new(dev.clone());
            let model =
                Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
            (b, model)
        };
        let (b, model) = load(&dev);
        let g = SlotGenerator::new(b, model, 1, 512, KvType::F16, 1).expect("slot generator");
        let block = g.prefix_block_bytes();
        assert!(block > 0, "{family}");
        if family == "qwen3" {
            // No rings: four blocks are the bytes of one whole-context conversation.
            assert_eq!(g.prefix_entry_bytes(), 4 * block);
        }
        let mut g = g.with_prefix_store(4 * block).expect("store");
        assert_eq!(
            g.prefix_store_rows(),
            4 * vkllm_engine::PREFIX_BLOCK,
            "{family}"
        );
        // Each conversation's first turn, one after another in the one slot.
        let answers: Vec<Vec<u32>> = convs
            .iter()
            .map(|c| ids(&drive(&mut g, &one(c, 6))[0]))
            .collect();
        // Then each resumed with its answer and a new turn: from the store (the slot held the
        // last one only), reused as far as the answer's last fed token.
        let (b, model) = load(&dev);
        let mut reference = SimpleGenerator::new(b, model, 1, 512).expect("simple generator");
        for (i, c) in convs.iter().enumerate() {
            let mut resumed = c.clone();
            resumed.extend(&answers[i]);
            resumed.extend([5, 9]);
            let got = ids(&drive(&mut g, &one(&resumed, 6))[0]);
            let want = ids(&drive(&mut reference, &one(&resumed, 6))[0]);
            assert_eq!(got, want, "{family}: conversation {i} resumed");
            assert_eq!(
                g.reused(0),
                c.len() + 5,
                "{family}: conversation {i} reused"
            );
        }
    }
}

/// A hybrid conversation is stored as its last prompt's mark (KV rows and recurrent states):
/// with one slot, a chat resent with its answer re-rendered after another request took the slot
/// starts from the stored mark (reference tokens); without the store it starts over.
#[test]
fn stored_hybrid_marks_outlive_their_slot() {
    let dev = device();
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let vocab = fx.config.vocab_size as u32;
    let conv = |seed: u32| -> Vec<u32> { (0..20).map(|i| (seed + 7 * i) % vocab).collect() };
    let (a, b) = (conv(3), conv(101));
    let greedy = SlotParams::default();
    let one = |p: &[u32], n: usize| vec![(p.to_vec(), greedy.clone(), n, 0)];
    let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
    let hybrid = |dev: &Device| {
        let mut b = VulkanBackend::new(dev.clone());
        let m =
            HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        SlotGenerator::new_hybrid(b, m, 1, 64, KvType::F32, 1).expect("slot generator")
    };
    let per = hybrid(&dev).prefix_entry_bytes();
    assert!(per > 0);
    let mut resent = Vec::new();
    for entries in [2u64, 0] {
        let mut g = hybrid(&dev)
            .with_prefix_store(entries * per)
            .expect("store");
        assert_eq!(g.prefix_store_entries(), entries as usize);
        let got_a = drive(&mut g, &one(&a, 4));
        drive(&mut g, &one(&b, 4));
        // Not the answer's first token: only the mark at the end of a's prompt is reusable.
        resent = a.clone();
        resent.extend([(got_a[0][0].id + 1) % vocab, 5, 7]);
        let got = drive(&mut g, &one(&resent, 5));
        let want_reused = if entries > 0 { a.len() } else { 0 };
        assert_eq!(g.reused(0), want_reused, "store of {entries}");
        let mut rb = VulkanBackend::new(dev.clone());
        let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut rb, DEFAULT_CHUNK)
            .expect("load");
        assert_eq!(
            ids(&got[0]),
            hybrid_reference(&mut rb, &m, &resent, &greedy, 5),
            "store of {entries}"
        );
    }
    assert!(!resent.is_empty());
}

/// A hybrid prompt is also marked `with_tail_mark` tokens (default 16) before its end: a next
/// prompt that changes the last token (text resent and re-tokenized differently at the
/// boundary) starts there instead of from 0, with the reference tokens; 0 turns it off.
#[test]
fn hybrid_prompts_are_marked_before_their_end() {
    let dev = device();
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let vocab = fx.config.vocab_size as u32;
    let prompt: Vec<u32> = (0..100).map(|i| (3 + 7 * i) % vocab).collect();
    let mut resent = prompt[..99].to_vec();
    resent.extend([(prompt[99] + 1) % vocab, 5, 7]);
    let greedy = SlotParams::default();
    let mut rb = VulkanBackend::new(dev.clone());
    let m =
        HybridModel::load(fx.config.clone(), &fx.weights, &mut rb, DEFAULT_CHUNK).expect("load");
    let want = hybrid_reference(&mut rb, &m, &resent, &greedy, 5);
    assert_eq!(vkllm_engine::TAIL_MARK, 16);
    for (tail, reused) in [(None, 100 - 16), (Some(64), 100 - 64), (Some(0), 0)] {
        let mut b = VulkanBackend::new(dev.clone());
        let model =
            HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        let mut g =
            SlotGenerator::new_hybrid(b, model, 1, 256, KvType::F32, 4).expect("slot generator");
        if let Some(t) = tail {
            g = g.with_tail_mark(t);
        }
        drive(&mut g, &[(prompt.clone(), greedy.clone(), 4, 0)]);
        let got = drive(&mut g, &[(resent.clone(), greedy.clone(), 5, 0)]);
        assert_eq!(g.reused(0), reused, "tail mark {tail:?}");
        let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
        assert_eq!(ids(&got[0]), want, "tail mark {tail:?}");
    }
}

/// A hybrid slot marks its recurrent state at the end of each prompt: a prompt that repeats a
/// finished request's prompt and goes on differently from its answer (a chat resent with its
/// reply re-rendered) prefills only the new tokens, and still gives the reference tokens.
#[test]
fn hybrid_prompt_marks_are_reused() {
    let dev = device();
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let prompt = fx.prompt("short").expect("prompt").ids;
    let greedy = SlotParams::default();
    let mut b = VulkanBackend::new(dev.clone());
    let model =
        HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let vocab = model.cfg.vocab_size as u32;
    let mut g = SlotGenerator::new_hybrid(b, model, 2, 64, KvType::F32, 4).expect("slot generator");
    let got = drive(&mut g, &[(prompt.clone(), greedy.clone(), 6, 0)]);
    // Not the answer's first token: the slot's history does not extend to this prompt.
    let t = (got[0][0].id + 1) % vocab;
    let mut resent = prompt.clone();
    resent.extend([t, 5, 7]);
    let got2 = drive(&mut g, &[(resent.clone(), greedy.clone(), 6, 0)]);
    let reused = (0..2).map(|s| g.reused(s)).max().unwrap_or(0);
    assert_eq!(reused, prompt.len(), "the prompt's mark was restored");
    // Another slot's mark: a request that repeats a running request's prompt and goes on
    // starts in the free slot from a copy of it (KV rows and recurrent states).
    let first: Vec<u32> = prompt.iter().rev().copied().collect();
    let mut other = first.clone();
    other.extend([(got2[0][0].id + 3) % vocab, 2]);
    let reqs = vec![
        (first.clone(), greedy.clone(), 24, 0),
        (other.clone(), greedy.clone(), 5, 2),
    ];
    let got4 = drive(&mut g, &reqs);
    let reused: Vec<usize> = (0..2).map(|s| g.reused(s)).collect();
    assert!(
        reused.contains(&first.len()),
        "the second request started from the first one's mark: {reused:?}"
    );
    // A prompt sharing less than the marked prompt starts from scratch.
    let short = prompt[..prompt.len() - 1].to_vec();
    let got3 = drive(&mut g, &[(short.clone(), greedy.clone(), 4, 0)]);

    let mut b = VulkanBackend::new(dev);
    let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
    assert_eq!(
        ids(&got[0]),
        hybrid_reference(&mut b, &m, &prompt, &greedy, 6)
    );
    assert_eq!(
        ids(&got2[0]),
        hybrid_reference(&mut b, &m, &resent, &greedy, 6),
        "restored"
    );
    assert_eq!(
        ids(&got3[0]),
        hybrid_reference(&mut b, &m, &short, &greedy, 4),
        "from scratch"
    );
    assert_eq!(
        ids(&got4[0]),
        hybrid_reference(&mut b, &m, &first, &greedy, 24),
        "running"
    );
    assert_eq!(
        ids(&got4[1]),
        hybrid_reference(&mut b, &m, &other, &greedy, 5),
        "copied mark"
    );
}

/// A hybrid model's slots with an f16 KV cache in the attention layers give the per-token
/// reference's tokens over the same f16 cache (greedy and sampled, two slots at once).
#[test]
fn hybrid_f16_kv_matches_reference() {
    let dev = device();
    let fx = Fixture::load("qwen3_5_moe").expect("fixture");
    let prompt = fx.prompt("short").expect("prompt").ids;
    let other: Vec<u32> = prompt.iter().rev().copied().collect();
    let sampled = SlotParams {
        sampling: SamplingParams {
            temperature: 0.8,
            top_k: 20,
            seed: 3,
            ..Default::default()
        },
        logprobs: None,
        grammar: None,
    };
    let reqs = vec![
        (prompt.clone(), SlotParams::default(), 7, 0),
        (other.clone(), sampled.clone(), 7, 1),
    ];
    let mut b = VulkanBackend::new(dev.clone());
    let model =
        HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let mut g = SlotGenerator::new_hybrid(b, model, 2, 64, KvType::F16, 4).expect("slot generator");
    let got = drive(&mut g, &reqs);
    let mut b = VulkanBackend::new(dev);
    let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    for (i, r) in reqs.iter().enumerate() {
        let want = hybrid_reference_kv(&mut b, &m, &r.0, &r.1, r.2, KvType::F16);
        let ids: Vec<u32> = got[i].iter().map(|t| t.id).collect();
        assert_eq!(ids, want, "request {i}");
    }
}

/// Chunked prefill (`begin`, then `prefill_some` some tokens at a time, with another slot
/// decoding in between) gives a request the tokens of a whole-prompt `start`, on a dense and a
/// hybrid model; a request abandoned mid-prefill frees its slot.
#[test]
fn chunked_prefill_matches_whole_prompts() {
    let dev = device();
    for family in ["qwen3", "qwen3_5"] {
        let fx = Fixture::load(family).expect("fixture");
        let prompt = fx.prompt("long").expect("prompt").ids;
        let other: Vec<u32> = prompt.iter().rev().take(5).copied().collect();
        let p = SlotParams {
            sampling: SamplingParams {
                temperature: 0.7,
                top_k: 10,
                seed: 4,
                ..Default::default()
            },
            logprobs: None,
            grammar: None,
        };
        let make = || {
            let mut b = VulkanBackend::new(dev.clone());
            let g: Box<dyn Generator> = if family == "qwen3_5" {
                let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK)
                    .expect("load");
                Box::new(
                    SlotGenerator::new_hybrid(b, m, 2, 400, KvType::F32, 2).expect("generator"),
                )
            } else {
                let m = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK)
                    .expect("load");
                Box::new(SlotGenerator::new(b, m, 2, 400, KvType::F32, 2).expect("generator"))
            };
            g
        };
        // Whole prompt, alone.
        let mut g = make();
        let (s, first) = g.start(&prompt, &p).expect("start");
        let mut want = vec![first.id];
        while want.len() < 8 {
            for (_, toks) in g.step().expect("step").into_iter().filter(|(x, _)| *x == s) {
                want.extend(toks.iter().map(|t| t.id));
            }
        }
        want.truncate(8);
        // In pieces of 37 tokens (across the model's own prefill chunks) while another
        // request decodes.
        let mut g = make();
        let (busy, _) = g.start(&other, &p).expect("start other");
        let s = g.begin(&prompt, &p).expect("begin").expect("chunked");
        assert_ne!(s, busy);
        let first = loop {
            if let Some(t) = g.prefill_some(s, 37).expect("piece") {
                break t;
            }
            let out = g.step().expect("step");
            assert!(
                out.iter().all(|(x, _)| *x == busy),
                "only the running slot decodes"
            );
        };
        let mut got = vec![first.id];
        while got.len() < 8 {
            for (_, toks) in g.step().expect("step").into_iter().filter(|(x, _)| *x == s) {
                got.extend(toks.iter().map(|t| t.id));
            }
        }
        got.truncate(8);
        assert_eq!(got, want, "{family}");
        // Abandoned mid-prefill: released, and the slot takes a new request.
        g.release(s);
        g.release(busy);
        let reversed: Vec<u32> = prompt.iter().rev().copied().collect();
        let s2 = g.begin(&reversed, &p).expect("begin").expect("chunked");
        assert!(g.prefill_some(s2, 2).expect("piece").is_none());
        g.release(s2);
        assert!(matches!(
            g.prefill_some(s2, 2),
            Err(vkllm_engine::EngineError::NotPrefilling { .. })
        ));
        let (_, again) = g.start(&prompt, &p).expect("start after release");
        assert_eq!(again.id, want[0], "{family}");
    }
}

/// Hybrid prompts behind one shared prefix (a system prompt): the second marks its recurrent
/// state where it leaves the prefix the first one holds, so the third starts there (from the
/// same slot's marks, or from another slot's while both run) and every request gives the
/// reference tokens; without marks each one starts over.
#[test]
fn hybrid_prompts_start_where_they_leave_a_shared_prefix() {
    let dev = device();
    let fx = Fixture::load("qwen3_5").expect("fixture");
    let vocab = fx.config.vocab_size as u32;
    let system: Vec<u32> = (0..24).map(|i| (11 + 13 * i) % vocab).collect();
    let turn = |seed: u32| -> Vec<u32> {
        let mut p = system.clone();
        p.extend((0..6).map(|i| (seed + 5 * i) % vocab));
        p
    };
    let (a, b, c) = (turn(1), turn(2), turn(3));
    let greedy = SlotParams::default();
    let ids = |v: &[TokenOut]| v.iter().map(|t| t.id).collect::<Vec<u32>>();
    let hybrid = |slots: usize, marks: usize| {
        let mut bk = VulkanBackend::new(dev.clone());
        let m = HybridModel::load(fx.config.clone(), &fx.weights, &mut bk, DEFAULT_CHUNK)
            .expect("load");
        SlotGenerator::new_hybrid_marks(bk, m, slots, 64, KvType::F32, 1, marks)
            .expect("slot generator")
    };
    let mut rb = VulkanBackend::new(dev.clone());
    let m =
        HybridModel::load(fx.config.clone(), &fx.weights, &mut rb, DEFAULT_CHUNK).expect("load");
    let want: Vec<Vec<u32>> = [&a, &b, &c]
        .iter()
        .map(|p| hybrid_reference(&mut rb, &m, p, &greedy, 5))
        .collect();

    // One slot, one request after another: a's end mark does not cover b, so b starts over
    // and marks position 24 on the way; c starts from that mark.
    for marks in [4usize, 0] {
        let mut g = hybrid(1, marks);
        let mut reused = Vec::new();
        for (i, p) in [&a, &b, &c].into_iter().enumerate() {
            let got = drive(&mut g, &[(p.clone(), greedy.clone(), 5, 0)]);
            reused.push(g.reused(0));
            assert_eq!(ids(&got[0]), want[i], "request {i}, {marks} marks");
        }
        let expect = if marks > 0 {
            [0, 0, system.len()]
        } else {
            [0; 3]
        };
        assert_eq!(reused, expect, "{marks} marks");
        // a again: its own end mark went with b's prefill; the branch mark gives the prefix.
        let got = drive(&mut g, &[(a.clone(), greedy.clone(), 5, 0)]);
        assert_eq!(ids(&got[0]), want[0], "a again, {marks} marks");
        assert_eq!(g.reused(0), if marks > 0 { system.len() } else { 0 });
    }

    // Three slots, all running: b joins while a runs (and marks where it leaves a's prefix in
    // its own slot), c joins while both run and starts from b's slot's mark.
    let mut g = hybrid(3, 4);
    let reqs = vec![
        (a.clone(), greedy.clone(), 5, 0),
        (b.clone(), greedy.clone(), 5, 1),
        (c.clone(), greedy.clone(), 5, 2),
    ];
    let got = drive(&mut g, &reqs);
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&ids(&got[i]), w, "concurrent request {i}");
    }
    let reused: Vec<usize> = (0..3).map(|s| g.reused(s)).collect();
    assert_eq!(
        reused.iter().filter(|&&r| r == system.len()).count(),
        1,
        "only c starts from the shared prefix: {reused:?}"
    );
}

/// A MoE model with block-format experts (Q8_0 at load) on the int8 kernels, its batched decode
/// steps on the grouped int8 expert launches (tuning `moe_q8g_min=2`: every routed expert's
/// blocks read once per step for all slots), gives each of four requests (greedy and sampled,
/// joining at different rounds) the tokens of the per-token reference, whose one-token steps
/// take the per-token int8 launches (prompts take the grouped ones in both). The qwen3_moe
/// fixture: its experts' rows are whole Q8_0 blocks.
#[test]
fn moe_grouped_int8_decode_matches_reference() {
    use vkllm_models::{QuantScheme, QuantizingSource};
    let mut opts = vkllm_vk::DeviceOptions {
        choice: vkllm_vk::DeviceChoice::from_env(),
        ..Default::default()
    };
    opts.tuning.matvec = Some(vkllm_vk::kernels::matvec_fused::MatvecImpl::Int8);
    opts.tuning.moe_grouped_min = 0;
    opts.tuning.moe_q8g_min = 2;
    let dev = Device::new(&opts).unwrap_or_else(|e| panic!("this test needs a Vulkan device: {e}"));
    let fx = Fixture::load("qwen3_moe").expect("fixture");
    let src = QuantizingSource::new(&fx.weights, &fx.config, QuantScheme::Q8_0);
    let prompt = fx.prompt("short").expect("prompt").ids;
    let other: Vec<u32> = prompt.iter().rev().copied().collect();
    let mut third = prompt.clone();
    third.rotate_left(3);
    let sampled = |seed| SlotParams {
        sampling: SamplingParams {
            temperature: 0.8,
            top_k: 20,
            seed,
            ..Default::default()
        },
        logprobs: None,
        grammar: None,
    };
    let reqs = vec![
        (prompt.clone(), SlotParams::default(), 8, 0),
        (other.clone(), sampled(5), 8, 0),
        (third, SlotParams::default(), 7, 1),
        (other, sampled(11), 6, 2),
    ];
    let mut b = VulkanBackend::new(dev.clone());
    let model = HybridModel::load(fx.config.clone(), &src, &mut b, DEFAULT_CHUNK).expect("load");
    let mut g = SlotGenerator::new_hybrid(b, model, 4, 64, KvType::F32, 1).expect("slot generator");
    let got = drive(&mut g, &reqs);
    let mut b = VulkanBackend::new(dev);
    let m = HybridModel::load(fx.config.clone(), &src, &mut b, DEFAULT_CHUNK).expect("load");
    for (i, r) in reqs.iter().enumerate() {
        let want = hybrid_reference(&mut b, &m, &r.0, &r.1, r.2);
        let ids: Vec<u32> = got[i].iter().map(|t| t.id).collect();
        assert_eq!(ids, want, "request {i}");
    }
}
