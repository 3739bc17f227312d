//! The three real GGUF models (fetched by scripts/fetch-models.sh into the cache) against
//! transformers loading the same files (fixtures/real/*.json, made by make_real_goldens.py):
//! greedy tokens identical up to the first step where transformers' top-2 margin is below 0.05.
//! On the CPU reference backend and on the Vulkan device (lavapipe in CI, quantized weights
//! run by the GPU's quantized kernels). A missing model file or device fails the test with the
//! command to run or the reason; it never passes silently.

mod common;

use vkllm_models::fixtures::{cache_dir, fixtures_dir};
use vkllm_models::gguf::GgufModel;
use vkllm_models::parity::argmax;
use vkllm_models::{Backend, CpuBackend, Logits, Model, VulkanBackend};

const MIN_MARGIN: f64 = 0.05;

fn check(name: &str) {
    check_on(name, &mut CpuBackend::new());
}

fn check_gpu(name: &str) {
    let dev = common::device();
    check_on(name, &mut VulkanBackend::new(dev.clone()));
}

fn check_on<B: Backend>(name: &str, b: &mut B) {
    let golden_path = fixtures_dir().join("real").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&golden_path)
        .unwrap_or_else(|e| panic!("{}: {e}", golden_path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("golden JSON");
    let file = doc["file"].as_str().expect("file");
    let path = cache_dir().join("models").join(file);
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-models.sh (it fetches the real models into the cache)",
        path.display()
    );
    let gguf = GgufModel::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let model = Model::load(gguf.config.clone(), &gguf, b, 64).expect("load");
    for case in doc["cases"].as_array().expect("cases") {
        let ids: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let want: Vec<u32> = case["greedy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let margins: Vec<f64> = case["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        // Steps up to and including the first low-margin one must match; after it, ties may flip.
        let checked = margins
            .iter()
            .position(|&m| m < MIN_MARGIN)
            .map_or(want.len(), |i| i + 1);
        let kv = model.new_kv(b, ids.len() + checked).expect("kv");
        let mut next = argmax(
            &model
                .forward(b, &kv, &ids, 0, Logits::Last)
                .expect("prefill"),
        );
        let mut got = vec![next];
        for step in 1..checked {
            next = argmax(
                &model
                    .forward(b, &kv, &[next], ids.len() + step - 1, Logits::Last)
                    .expect("decode"),
            );
            got.push(next);
        }
        let prompt = case["prompt"].as_str().unwrap_or("");
        eprintln!(
            "{name} on {} {prompt:?}: {checked}/{} steps checked",
            b.name(),
            want.len()
        );
        if checked > 0 && margins[checked - 1] < MIN_MARGIN {
            // The low-margin step itself may legitimately differ.
            assert_eq!(got[..checked - 1], want[..checked - 1], "{name} {prompt:?}");
        } else {
            assert_eq!(got[..], want[..checked], "{name} {prompt:?}");
        }
    }
}

#[test]
fn smollm2_135m() {
    check("smollm2-135m");
}

#[test]
fn gemma3_270m() {
    check("gemma3-270m");
}

#[test]
fn qwen2_5_coder_0_5b() {
    check("qwen2.5-coder-0.5b");
}

#[test]
fn smollm2_135m_gpu() {
    check_gpu("smollm2-135m");
}

#[test]
fn gemma3_270m_gpu() {
    check_gpu("gemma3-270m");
}

#[test]
fn qwen2_5_coder_0_5b_gpu() {
    check_gpu("qwen2.5-coder-0.5b");
}
