//! External goldens: tiny GGUF files written by llama.cpp's Python `gguf` package
//! (tests/data/make_gguf_fixtures.py; the values below are the script's literals).
//! Our reader must read them, and our writer must reproduce them byte for byte.

use vkllm_gguf::writer::GgufWriter;
use vkllm_gguf::{GgmlType, GgufFile, MetaArray, MetaValue, MetaValueRef, ValueType};

const DEFAULT: &[u8] = include_bytes!("data/gguf_py_default_align.gguf");
const ALIGN64: &[u8] = include_bytes!("data/gguf_py_align64.gguf");

fn f16_bytes(vals: impl Iterator<Item = f32>) -> Vec<u8> {
    vals.flat_map(|v| half::f16::from_f32(v).to_le_bytes())
        .collect()
}

/// The script's content, in the script's order (after `general.architecture`).
fn metadata() -> Vec<(&'static str, MetaValue)> {
    vec![
        ("general.name", "tiny".into()),
        ("llama.context_length", MetaValue::U32(2048)),
        ("llama.rope.freq_base", MetaValue::F32(10000.0)),
        ("test.u8", MetaValue::U8(200)),
        ("test.i8", MetaValue::I8(-100)),
        ("test.u16", MetaValue::U16(60000)),
        ("test.i16", MetaValue::I16(-30000)),
        ("test.i32", MetaValue::I32(-7)),
        ("test.u64", MetaValue::U64(1 << 40)),
        ("test.i64", MetaValue::I64(-(1 << 40))),
        ("test.f64", MetaValue::F64(0.125)),
        ("test.bool", MetaValue::Bool(true)),
        (
            "tokenizer.ggml.tokens",
            vec!["<s>", "</s>", "hello", "w\u{f6}rld", "\u{2581}a"].into(),
        ),
        (
            "tokenizer.ggml.scores",
            vec![0.0f32, -1.0, -2.5, -3.25, 0.5].into(),
        ),
        ("tokenizer.ggml.token_type", vec![3i32, 3, 1, 1, 1].into()),
        ("tokenizer.ggml.merges", vec!["h e", "l l"].into()),
        (
            "test.nested",
            vec![MetaArray::I32(vec![1, 2]), MetaArray::I32(vec![3])].into(),
        ),
        (
            "tokenizer.chat_template",
            "{% for m in messages %}{{ m.content }}\n{% endfor %}".into(),
        ),
    ]
}

fn tensors() -> Vec<(&'static str, GgmlType, Vec<u64>, Vec<u8>)> {
    let embd: Vec<u8> = (0..24).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let q = f16_bytes((0..64).map(|i| i as f32 / 4.0));
    let q8: Vec<u8> = (0..68u32).map(|i| (i % 251) as u8).collect();
    vec![
        ("token_embd.weight", GgmlType::F32, vec![8, 3], embd),
        ("blk.0.attn_q.weight", GgmlType::F16, vec![32, 2], q),
        ("blk.0.ffn_down.weight", GgmlType::Q8_0, vec![32, 2], q8),
    ]
}

fn check_read(bytes: &[u8], alignment: u64) {
    let f = GgufFile::from_bytes(bytes.to_vec()).unwrap();
    assert_eq!((f.version(), f.alignment()), (3, alignment));
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.get_u32("llama.context_length").unwrap(), 2048);
    assert_eq!(f.get_f32("llama.rope.freq_base").unwrap(), 10000.0);
    assert_eq!(f.get_i64("test.i64").unwrap(), -(1 << 40));
    let toks = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(toks.get(3), Some("w\u{f6}rld"));
    let types = f
        .get_typed_array::<i32>("tokenizer.ggml.token_type")
        .unwrap();
    assert_eq!(types.to_vec(), [3, 3, 1, 1, 1]);
    let nested = f.get_array("test.nested").unwrap();
    assert_eq!(nested.elem_type(), ValueType::Array);
    for (key, value) in metadata() {
        assert_eq!(f.get(key).unwrap().to_value(), value, "{key}");
    }
    if alignment != 32 {
        assert!(matches!(
            f.get("general.alignment"),
            Some(MetaValueRef::U32(64))
        ));
    }
    for (info, (name, t, dims, data)) in f.tensors().iter().zip(tensors()) {
        assert_eq!(
            (info.name(), info.ggml_type(), info.dims()),
            (name, t, dims.as_slice())
        );
        assert_eq!(f.tensor_bytes(info), data.as_slice(), "{name}");
        assert_eq!((f.data_offset() + info.offset()) % alignment, 0);
    }
}

fn rebuild(alignment: Option<u32>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    if let Some(a) = alignment {
        w.set_alignment(a).unwrap();
    }
    for (k, v) in metadata() {
        w.add_metadata(k, v).unwrap();
    }
    for (name, t, dims, data) in tensors() {
        w.add_tensor(name, t, &dims, data).unwrap();
    }
    w.to_bytes().unwrap()
}

#[test]
fn reads_gguf_py_files() {
    check_read(DEFAULT, 32);
    check_read(ALIGN64, 64);
}

#[test]
fn writer_reproduces_gguf_py_bytes() {
    assert_eq!(rebuild(None), DEFAULT);
    assert_eq!(rebuild(Some(64)), ALIGN64);
}
