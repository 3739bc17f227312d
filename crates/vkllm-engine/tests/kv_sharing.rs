//! KV blocks shared in place (`KvSharing::InPlace`, paged KV tensors): requests given another
//! slot's prefix read its whole blocks where they are, a slot that writes where its blocks are
//! shared gets its own copies first, and every request gets the reference tokens (the
//! SimpleGenerator's, and the copying SlotGenerator's). Needs a Vulkan device with sparse,
//! aliased buffers (lavapipe in CI).

use vkllm_cpu::sampler::SamplingParams;
mod common;

use vkllm_engine::{Generator, SimpleGenerator, SlotGenerator, SlotParams};
use vkllm_models::fixtures::Fixture;
use vkllm_models::{
    Backend, CpuBackend, DEFAULT_CHUNK, KvLayer, KvSharing, KvType, Model, VulkanBackend,
};
use vkllm_vk::Device;

fn device() -> Device {
    Device::from_env().unwrap_or_else(|e| panic!("this test needs a Vulkan device: {e}"))
}

/// [`common::drive`]'s tokens as ids.
fn drive(g: &mut dyn Generator, reqs: &[Req]) -> Vec<Vec<u32>> {
    common::drive(g, reqs)
        .iter()
        .map(|v| v.iter().map(|t| t.id).collect())
        .collect()
}

fn slot_generator(
    dev: &Device,
    fx: &Fixture,
    (slots, ctx): (usize, usize),
    kv: KvType,
    sharing: KvSharing,
) -> SlotGenerator {
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    SlotGenerator::new_sharing(b, model, slots, ctx, kv, 1, sharing).expect("slot generator")
}

fn simple_generator(
    dev: &Device,
    fx: &Fixture,
    slots: usize,
    ctx: usize,
) -> SimpleGenerator<VulkanBackend> {
    let mut b = VulkanBackend::new(dev.clone());
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    SimpleGenerator::new(b, model, slots, ctx).expect("simple generator")
}

/// Rows per shared block for rows of `row_bytes` on `dev`'s pages (lavapipe: 4 KiB pages, 32
/// rows of a 64-value f16 row): the fewest rows whose bytes are whole pages.
fn block_rows(dev: &Device, row_bytes: u64) -> usize {
    let page = dev
        .page_bytes()
        .expect("the test devices (lavapipe, the H200) offer sparse aliased buffers");
    let mut rows = 1;
    while !(rows * row_bytes).is_multiple_of(page) {
        rows += 1;
    }
    rows as usize
}

/// Whole blocks the joining requests of the in-place tests share: 3 for the full prefix and 2
/// for the one leaving it mid-block, unless a sliding-window ring has wrapped past that one's
/// rows by then (gemma3 with the H200's 64 KiB pages: blocks of 512 rows, rings of 528), when
/// only the full prefix is shared.
fn shared_blocks(fx: &Fixture, ctx: usize, block: usize) -> usize {
    let wraps = fx.config.layers.iter().any(|l| {
        l.window
            .is_some_and(|w| KvLayer::ring_for(Some(w), ctx, DEFAULT_CHUNK) < 3 * block + 8)
    });
    if wraps { 3 } else { 5 }
}

/// `fx`'s f16 cache on `dev`: rows per block, bytes per page, and pages per block of all its
/// layers' keys and values.
fn f16_blocks(dev: &Device, fx: &Fixture) -> (usize, u64, usize) {
    let row = KvType::F16.bytes(fx.config.kv_dim() as u64);
    let bl = block_rows(dev, row);
    let page = dev.page_bytes().expect("pages");
    let per_block = 2 * fx.config.layers.len() * (bl as u64 * row / page) as usize;
    (bl, page, per_block)
}

/// A request for [`common::drive`]: prompt, parameters, most tokens, the step it joins at.
type Req = (Vec<u32>, SlotParams, usize, usize);

/// The in-place tests' requests for blocks of `block` rows, and the context they need: behind
/// one prefix of three blocks and 4 rows, one greedy request of 3 tokens; joining at step one,
/// one extending the prefix (2 x block tokens) and one leaving it mid-block (sampled, 16);
/// joining at step four, in the first request's slot once it is free, one keeping a block and 8
/// rows whose answer (block + 8 tokens) runs into the block after its prompt's, still shared
/// with the second request.
fn joining_requests(fx: &Fixture, block: usize) -> (usize, Vec<Req>) {
    let vocab = fx.config.vocab_size as u32;
    let prefix: Vec<u32> = (0..3 * block as u32 + 4)
        .map(|i| (13 + 7 * i) % vocab)
        .collect();
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
    let mut diverge = prefix[..block + 8].to_vec();
    diverge.extend([1, 2, 3, 4, 5]);
    let mut mid = prefix[..2 * block + 6].to_vec();
    mid.extend([9, 8, 7]);
    let reqs = vec![
        (with(&[]), greedy.clone(), 3, 0),
        (with(&[3, 5, 7]), greedy.clone(), 2 * block, 1),
        (mid, sampled, 16, 1),
        (diverge, greedy, block + 8, 4),
    ];
    (5 * block + 64, reqs)
}

/// Requests behind one prefix of three blocks and 4 rows join while another decodes (sharing
/// its whole blocks and copying the rest; one leaves the prefix mid-block), and a later request
/// in the first slot keeps a block and 8 rows while the others still read them: its block
/// holding that row is copied on write, and so is the next one, still shared with the second
/// request, when its answer reaches it. Every request gets the copying decoder's tokens (the
/// same kernels), and their first 16 the reference generator's. On a model with only
/// full-attention layers and on one with sliding-window rings (copied) beside them; f16 and f32
/// caches.
#[test]
fn shared_blocks_give_the_reference_tokens() {
    let dev = device();
    for (family, kv) in [
        ("qwen3", KvType::F16),
        ("qwen3", KvType::F32),
        ("gemma3", KvType::F16),
    ] {
        let fx = Fixture::load(family).expect("fixture");
        let block = block_rows(&dev, kv.bytes(fx.config.kv_dim() as u64));
        let (ctx, reqs) = joining_requests(&fx, block);
        let case = format!("{family} {kv:?} (blocks of {block} rows)");
        let mut g = slot_generator(&dev, &fx, (3, ctx), kv, KvSharing::InPlace);
        assert_eq!(g.kv_sharing(), KvSharing::InPlace, "{case}: paged");
        let got = drive(&mut g, &reqs);
        let blocks = shared_blocks(&fx, ctx, block);
        assert!(
            g.kv_rows_shared() >= (blocks * block) as u64,
            "{case}: rows shared in place: {}",
            g.kv_rows_shared()
        );
        assert!(
            g.kv_pages_copied() > 0,
            "{case}: the diverging request copied a shared block on write"
        );
        let mut copying = slot_generator(&dev, &fx, (3, ctx), kv, KvSharing::Copy);
        assert_eq!(copying.kv_sharing(), KvSharing::Copy);
        let copied = drive(&mut copying, &reqs);
        assert_eq!(copying.kv_rows_shared(), 0);
        let want = drive(&mut simple_generator(&dev, &fx, 3, ctx), &reqs);
        for i in 0..reqs.len() {
            assert_eq!(got[i], copied[i], "{case}: request {i} in place");
            let n = want[i].len().min(16);
            assert_eq!(copied[i][..n], want[i][..n], "{case}: request {i} copied");
        }
    }
}

fn simple_sharing<B: Backend>(
    mut b: B,
    fx: &Fixture,
    (slots, ctx): (usize, usize),
    sharing: KvSharing,
) -> SimpleGenerator<B> {
    let model = Model::load(fx.config.clone(), &fx.weights, &mut b, DEFAULT_CHUNK).expect("load");
    SimpleGenerator::new_sharing(b, model, slots, ctx, sharing).expect("simple generator")
}

/// The reference generator's slots share whole blocks in place too, on the CPU backend (its
/// own pages) and on the GPU: requests joining behind a busy slot's prefix of three blocks and 4
/// rows (one leaving it mid-block) read its blocks where they are, the first slot copies a
/// block on write when its next request keeps a block and 8 rows, and every request gets the
/// copying generator's tokens. A model with sliding-window rings (copied) beside its
/// full-attention layers too.
#[test]
fn simple_generator_slots_share_blocks_in_place() {
    let dev = device();
    for family in ["qwen3", "gemma3"] {
        let fx = Fixture::load(family).expect("fixture");
        let cpu = || CpuBackend::new();
        let gpu = || VulkanBackend::new(dev.clone());
        let row = KvType::F32.bytes(fx.config.kv_dim() as u64);
        let cpu_page = cpu().kv_page_bytes().expect("the CPU backend pages KV");
        let gpu_page = dev.page_bytes().expect("lavapipe and the H200 page KV");
        for (backend, page) in [("cpu", cpu_page), ("gpu", gpu_page)] {
            let block = (1..).find(|r| (r * row).is_multiple_of(page)).unwrap() as usize;
            let (ctx, reqs) = joining_requests(&fx, block);
            let case = format!("{family} on the {backend} (blocks of {block} rows)");
            let (got, shared, copied, want) = if backend == "cpu" {
                let mut g = simple_sharing(cpu(), &fx, (3, ctx), KvSharing::InPlace);
                assert_eq!(g.kv_sharing(), KvSharing::InPlace, "{case}");
                let full = g.backend().kv_paged_values();
                let got = drive(&mut g, &reqs);
                // Every slot holds its cache, the shared blocks once.
                let held = g.backend().kv_paged_values();
                assert!(
                    held < full,
                    "{case}: {held} values held, {full} unshared; {} rows shared, {} pages copied",
                    g.kv_rows_shared(),
                    g.kv_pages_copied()
                );
                let mut c = simple_sharing(cpu(), &fx, (3, ctx), KvSharing::Copy);
                assert_eq!(c.kv_sharing(), KvSharing::Copy);
                let want = drive(&mut c, &reqs);
                assert_eq!(c.kv_rows_shared(), 0);
                (got, g.kv_rows_shared(), g.kv_pages_copied(), want)
            } else {
                let mut g = simple_sharing(gpu(), &fx, (3, ctx), KvSharing::InPlace);
                assert_eq!(g.kv_sharing(), KvSharing::InPlace, "{case}");
                let got = drive(&mut g, &reqs);
                let want = drive(
                    &mut simple_sharing(gpu(), &fx, (3, ctx), KvSharing::Copy),
                    &reqs,
                );
                (got, g.kv_rows_shared(), g.kv_pages_copied(), want)
            };
            let blocks = shared_blocks(&fx, ctx, block);
            assert!(
                shared >= (blocks * block) as u64,
                "{case}: rows shared in place: {shared}"
            );
            assert!(
                copied > 0,
                "{case}: the diverging request copied a shared block on write"
            );
            for i in 0..reqs.len() {
                assert_eq!(got[i], want[i], "{case}: request {i}");
            }
        }
    }
}

/// With one slot and the prefix store, a conversation goes into the store and back in place
/// (its whole blocks shared, the rest copied) around another that takes the slot, and gives the
/// reference tokens; so does the copying store.
#[test]
fn stored_conversations_return_into_paged_blocks() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let block = block_rows(&dev, KvType::F16.bytes(fx.config.kv_dim() as u64));
    // The store's blocks are PREFIX_BLOCK rows: paged alike only when ours divide them.
    let store_paged = vkllm_engine::PREFIX_BLOCK.is_multiple_of(block);
    let len = 2 * block as u32 + 26;
    let ctx = 2 * block + 64;
    let vocab = fx.config.vocab_size as u32;
    let conv = |seed: u32| -> Vec<u32> { (0..len).map(|i| (seed + 7 * i) % vocab).collect() };
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
    let (want, _) = session(&mut simple_generator(&dev, &fx, 1, ctx));
    for sharing in [KvSharing::InPlace, KvSharing::Copy] {
        let g = slot_generator(&dev, &fx, (1, ctx), KvType::F16, sharing);
        let per = g.prefix_entry_bytes();
        let mut g = g.with_prefix_store(2 * per).expect("store");
        let (got, reused) = session(&mut g);
        assert_eq!(reused, a.len() + 5, "{sharing:?}: from the store");
        assert_eq!(got, want, "{sharing:?}");
        if sharing == KvSharing::InPlace && store_paged {
            // Two whole blocks of a in and out, two of b in.
            assert!(
                g.kv_rows_shared() >= 6 * block as u64,
                "{}",
                g.kv_rows_shared()
            );
        } else {
            assert_eq!(g.kv_rows_shared(), 0);
        }
    }
}

/// KV memory on demand (`KvSharing::OnDemand`) with a page budget: three requests, two of them
/// long; a short one's slot holds memory once idle, and when the long ones grow past the budget
/// its memory is given back (its conversation forgotten): every request gets the reference
/// tokens. With a budget too small for both long ones, requests end early (as at a full
/// context) with a prefix of the reference tokens, and nothing fails.
#[test]
fn on_demand_memory_reclaims_idle_slots_within_a_budget() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let kv = KvType::F16;
    let (bl, page, per_block) = f16_blocks(&dev, &fx);
    let ctx = 8 * bl;
    let vocab = fx.config.vocab_size as u32;
    let prompt = |seed: u32| -> Vec<u32> {
        (0..2 * bl as u32 - 4)
            .map(|i| (seed + 11 * i) % vocab)
            .collect()
    };
    let long = 4 * bl + 22;
    let greedy = SlotParams::default();
    let reqs = vec![
        (prompt(3), greedy.clone(), 5, 0),
        (prompt(50), greedy.clone(), long, 0),
        (prompt(97), greedy.clone(), long, 2),
    ];
    // The reference: the same decoder and f16 cache, resident (the simple generator's f32
    // cache parts from f16 within the H200's 2,070-token answers: blocks of 512 rows there).
    let want = drive(
        &mut slot_generator(&dev, &fx, (3, ctx), kv, KvSharing::Copy),
        &reqs,
    );
    let on_demand = |pages: usize| {
        slot_generator(&dev, &fx, (3, ctx), kv, KvSharing::OnDemand)
            .with_kv_memory(Some((pages as u64) * page), bl)
    };
    // Room for both long requests (7 blocks each) but not the short one's blocks besides.
    let mut g = on_demand(14 * per_block + per_block / 2);
    assert_eq!(g.kv_sharing(), KvSharing::OnDemand);
    let got = drive(&mut g, &reqs);
    assert_eq!(got, want, "within the budget");
    assert!(
        g.kv_slots_reclaimed() >= 1,
        "the idle slot gave its memory back"
    );
    // Room for ten blocks: the long requests cannot both finish.
    let mut g = on_demand(10 * per_block);
    let got = drive(&mut g, &reqs);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            w.starts_with(g),
            "request {i}: {g:?} is not a prefix of {w:?}"
        );
    }
    assert!(
        got.iter().zip(&want).any(|(g, w)| g.len() < w.len()),
        "some request ended early"
    );
    dev.set_page_limit(None);
}

/// Through the runner: a prompt that finds no KV memory while another request holds it waits at
/// the head of the queue and runs once that request ends (its slot's memory then goes to it),
/// instead of failing.
#[test]
fn a_prompt_without_kv_memory_waits_for_running_requests() {
    use std::sync::{Arc, mpsc};
    use vkllm_engine::{Event, InferenceRunner, Prompt, Request, RunnerConfig};

    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    let kv = KvType::F16;
    let (bl, page, per_block) = f16_blocks(&dev, &fx);
    let vocab = fx.config.vocab_size as u32;
    let ids = |n: usize, seed: u32| -> Vec<u32> {
        (0..n as u32)
            .map(|i| 1 + (seed + 7 * i) % (vocab - 1))
            .collect()
    };
    // The first request holds 2 blocks at its start, up to 6 as it decodes; the second's
    // prompt needs 6 at its start: 2 + 6 > 7.5 blocks, 6 alone fit.
    let g = slot_generator(&dev, &fx, (2, 8 * bl), kv, KvSharing::OnDemand)
        .with_kv_memory(Some((7 * per_block + per_block / 2) as u64 * page), bl);
    let tok = Arc::new(common::char_tokenizer_eos(0));
    let r = InferenceRunner::threaded(Box::new(g), tok, RunnerConfig::default());
    let (tx, rx) = mpsc::channel();
    for (i, (prompt, max)) in [(ids(2 * bl - 4, 3), 4 * bl), (ids(6 * bl - 8, 50), 4)]
        .into_iter()
        .enumerate()
    {
        let tx = tx.clone();
        r.handle()
            .submit(
                Request::new(Prompt::Tokens(prompt), max),
                Box::new(move |e| {
                    match e {
                        Event::Finished { usage, .. } => {
                            tx.send((i, Ok(usage.generated_tokens))).expect("send")
                        }
                        Event::Error(e) => tx.send((i, Err(e.to_string()))).expect("send"),
                        _ => {}
                    }
                    true
                }),
            )
            .expect("submit");
    }
    let mut done: Vec<(usize, Result<usize, String>)> = (0..2)
        .map(|_| {
            rx.recv_timeout(std::time::Duration::from_secs(300))
                .expect("ended")
        })
        .collect();
    done.sort_by_key(|d| d.0);
    for (i, d) in &done {
        assert!(d.as_ref().is_ok_and(|&n| n > 0), "request {i}: {d:?}");
    }
    r.shutdown();
    dev.set_page_limit(None);
}

/// A request joining behind a busy slot's prefix of three blocks takes them in one page op for
/// all layers (each op waits for the GPU to be idle: one per layer was what a join cost before),
/// and the pages it writes were never shared, so nothing more is re-mapped.
#[test]
fn a_join_remaps_pages_in_one_op() {
    let dev = device();
    let fx = Fixture::load("qwen3").expect("fixture");
    assert!(
        fx.config.layers.len() > 1,
        "one op per layer would be more than one"
    );
    let kv = KvType::F16;
    let block = block_rows(&dev, kv.bytes(fx.config.kv_dim() as u64));
    let vocab = fx.config.vocab_size as u32;
    let prefix: Vec<u32> = (0..3 * block as u32 + 4)
        .map(|i| (13 + 7 * i) % vocab)
        .collect();
    let joining = [prefix.as_slice(), &[3, 5, 7]].concat();
    let reqs = vec![
        (prefix, SlotParams::default(), 8, 0),
        (joining, SlotParams::default(), 4, 1),
    ];
    let mut g = slot_generator(&dev, &fx, (2, 3 * block + 64), kv, KvSharing::InPlace);
    drive(&mut g, &reqs);
    assert_eq!(g.kv_rows_shared(), 3 * block as u64);
    assert_eq!(g.kv_page_ops(), 1, "one share for every layer's blocks");
}
