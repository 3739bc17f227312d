//! KV blocks shared in place (`KvSharing::InPlace`, paged KV tensors): requests given another
//! slot's prefix read its whole blocks where they are, a slot that writes where its blocks are
//! shared gets its own copies first, and every request gets the reference tokens (the
//! SimpleGenerator's, and the copying SlotGenerator's). Needs a Vulkan device with sparse,
//! aliased buffers (lavapipe in CI).

use vkllm_cpu::sampler::SamplingParams;
use vkllm_engine::{Generator, SimpleGenerator, SlotGenerator, SlotParams, TokenOut};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{DEFAULT_CHUNK, KvSharing, KvType, Model, VulkanBackend};
use vkllm_vk::Device;

fn device() -> Device {
    Device::from_env().unwrap_or_else(|e| panic!("this test needs a Vulkan device: {e}"))
}

/// Runs `reqs` (prompt, params, tokens wanted, the round it joins at) on `g`.
fn drive(g: &mut dyn Generator, reqs: &[(Vec<u32>, SlotParams, usize, usize)]) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<TokenOut>> = vec![Vec::new(); reqs.len()];
    let mut slot_of: Vec<Option<usize>> = vec![None; reqs.len()];
    let mut round = 0;
    loop {
        for (i, r) in reqs.iter().enumerate() {
            if r.3 == round && slot_of[i].is_none() && out[i].is_empty() {
                let (s, first) = g.start(&r.0, &r.1).expect("start");
                slot_of[i] = Some(s);
                out[i].push(first);
            }
        }
        let pending = reqs.iter().any(|r| r.3 > round);
        if slot_of.iter().all(Option::is_none) && !pending {
            return out
                .iter()
                .map(|v| v.iter().map(|t| t.id).collect())
                .collect();
        }
        for (s, toks) in g.step().expect("step") {
            let i = slot_of
                .iter()
                .position(|x| *x == Some(s))
                .expect("owned slot");
            out[i].extend(toks);
        }
        for (i, r) in reqs.iter().enumerate() {
            if let Some(s) = slot_of[i]
                && out[i].len() >= r.2
            {
                out[i].truncate(r.2);
                g.release(s);
                slot_of[i] = None;
            }
        }
        round += 1;
    }
}

fn slot_generator(
    dev: &Device,
    fx: &Fixture,
    slots: usize,
    kv: KvType,
    sharing: KvSharing,
) -> SlotGenerator {
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    SlotGenerator::new_sharing(b, model, slots, 256, kv, 1, sharing).expect("slot generator")
}

/// Requests behind one 100-token prefix join while another decodes (sharing its whole blocks
/// and copying the rest; one leaves the prefix mid-block), and a later request in the first
/// slot keeps 40 of its rows while the others still read them: its block holding row 40 is
/// copied on write. On a model with only full-attention layers and on one with sliding-window rings
/// (copied) beside them; f16 and f32 caches.
#[test]
fn shared_blocks_give_the_reference_tokens() {
    let dev = device();
    for (family, kv) in [
        ("qwen3", KvType::F16),
        ("qwen3", KvType::F32),
        ("gemma3", KvType::F16),
    ] {
        let fx = Fixture::load(family).expect("fixture");
        let vocab = fx.config.vocab_size as u32;
        let prefix: Vec<u32> = (0..100).map(|i| (13 + 7 * i) % vocab).collect();
        let with = |tail: &[u32]| [prefix.as_slice(), tail].concat();
        let greedy = SlotParams::default();
        let sampled = SlotParams {
            sampling: SamplingParams {
                temperature: 0.9,
                top_k: 40,
                seed: 5,
                ..Default::default()
            },
            ..SlotParams::default()
        };
        let mut diverge = prefix[..40].to_vec();
        diverge.extend([1, 2, 3, 4, 5]);
        let mut mid = prefix[..70].to_vec();
        mid.extend([9, 8, 7]);
        let reqs = vec![
            (with(&[]), greedy.clone(), 3, 0),
            (with(&[3, 5, 7]), greedy.clone(), 16, 1),
            (mid, sampled.clone(), 16, 1),
            // Joins the first slot once request 0 has left it, while 1 and 2 decode on.
            (diverge, greedy.clone(), 6, 4),
        ];
        let mut g = slot_generator(&dev, &fx, 3, kv, KvSharing::InPlace);
        assert_eq!(g.kv_sharing(), KvSharing::InPlace, "{family} {kv:?}: paged");
        let got = drive(&mut g, &reqs);
        assert!(
            g.kv_rows_shared() >= 96 + 64,
            "{family} {kv:?}: rows shared in place: {}",
            g.kv_rows_shared()
        );
        assert!(
            g.kv_pages_copied() > 0,
            "{family} {kv:?}: the diverging request copied a shared block on write"
        );
        let mut copying = slot_generator(&dev, &fx, 3, kv, KvSharing::Copy);
        assert_eq!(copying.kv_sharing(), KvSharing::Copy);
        let copied = drive(&mut copying, &reqs);
        assert_eq!(copying.kv_rows_shared(), 0);
        let mut b = VulkanBackend::new(dev.clone());
        let model =
            Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
        let mut simple = SimpleGenerator::new(b, model, 3, 256).expect("simple generator");
        let want = drive(&mut simple, &reqs);
        for i in 0..reqs.len() {
            assert_eq!(got[i], want[i], "{family} {kv:?}: request {i} in place");
            assert_eq!(copied[i], want[i], "{family} {kv:?}: request {i} copied");
        }
    }
}

/// With one slot and the prefix store, a conversation resumed after another took the slot is
/// copied back into pages the slot shares with nobody, and gives the reference tokens.
#[test]
fn stored_conversations_return_into_paged_blocks() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let vocab = fx.config.vocab_size as u32;
    let conv = |seed: u32| -> Vec<u32> { (0..90).map(|i| (seed + 7 * i) % vocab).collect() };
    let (a, b) = (conv(3), conv(101));
    let one = |p: &[u32]| vec![(p.to_vec(), SlotParams::default(), 6, 0)];
    let session = |g: &mut dyn Generator| {
        let got_a = drive(g, &one(&a));
        drive(g, &one(&b));
        let mut resumed = a.clone();
        resumed.extend(&got_a[0]);
        resumed.extend([5, 9]);
        (drive(g, &one(&resumed)), g.reused(0))
    };
    let g = slot_generator(&dev, &fx, 1, KvType::F16, KvSharing::InPlace);
    let per = g.prefix_entry_bytes();
    let mut g = g.with_prefix_store(2 * per).expect("store");
    let (got, reused) = session(&mut g);
    assert_eq!(reused, a.len() + 5, "from the store");
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    let mut simple = SimpleGenerator::new(b, model, 1, 256).expect("simple generator");
    let (want, _) = session(&mut simple);
    assert_eq!(got, want);
}
