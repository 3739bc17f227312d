//! Writer -> reader round trips, exact writer bytes, and writer errors.

mod common;

use common::Bytes;
use vkllm_gguf::writer::GgufWriter;
use vkllm_gguf::{GgmlType, GgufErrorKind, GgufFile, MetaArray, MetaValue};

/// Deterministic pseudo-random bytes (xorshift).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

fn all_kinds_of_metadata() -> Vec<(&'static str, MetaValue)> {
    vec![
        ("general.architecture", "qwen2".into()),
        ("u8", MetaValue::U8(255)),
        ("i8", MetaValue::I8(-1)),
        ("u16", MetaValue::U16(65535)),
        ("i16", MetaValue::I16(i16::MIN)),
        ("u32", MetaValue::U32(u32::MAX)),
        ("i32", MetaValue::I32(i32::MIN)),
        ("u64", MetaValue::U64(u64::MAX)),
        ("i64", MetaValue::I64(i64::MIN)),
        ("f32", MetaValue::F32(-0.1)),
        ("f64", MetaValue::F64(1e300)),
        ("bool", MetaValue::Bool(false)),
        ("empty.string", "".into()),
        (
            "tokenizer.chat_template",
            "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}".into(),
        ),
        ("a.u8", vec![1u8, 2, 3].into()),
        ("a.i8", vec![-1i8, 2].into()),
        ("a.u16", vec![7u16].into()),
        ("a.i16", vec![-7i16, 7].into()),
        ("a.u32", vec![1u32 << 31].into()),
        ("a.i32", vec![3i32, -3].into()),
        ("a.u64", vec![u64::MAX, 0].into()),
        ("a.i64", vec![i64::MAX].into()),
        ("a.f32", vec![0.5f32, f32::INFINITY].into()),
        ("a.f64", vec![-2.5f64].into()),
        ("a.bool", vec![true, false, true].into()),
        ("a.string", vec!["Ġthe", "", "日本"].into()),
        ("a.empty", MetaValue::Array(MetaArray::F32(vec![])),),
        (
            "a.nested",
            vec![
                MetaArray::I32(vec![1, 2]),
                MetaArray::String(vec!["x".into()]),
                MetaArray::Array(vec![MetaArray::Bool(vec![true])]),
                MetaArray::U64(vec![]),
            ]
            .into(),
        ),
    ]
}

#[test]
fn metadata_round_trip_every_type() {
    let meta = all_kinds_of_metadata();
    let mut w = GgufWriter::new();
    for (k, v) in &meta {
        w.add_metadata(*k, v.clone()).unwrap();
    }
    assert_eq!(w.metadata_len(), meta.len());
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.metadata_len(), meta.len());
    assert!(
        !f.contains_key("general.alignment"),
        "default alignment is not written"
    );
    for ((k, v), (rk, rv)) in meta.iter().zip(f.metadata()) {
        assert_eq!(*k, rk);
        assert_eq!(*v, rv.to_value(), "{k}");
        assert_eq!(f.get(k).unwrap().to_value(), *v);
    }
    assert!(f.tensors().is_empty());
}

#[test]
fn tensors_round_trip_with_alignment() {
    let specs: Vec<(&str, GgmlType, Vec<u64>)> = vec![
        ("token_embd.weight", GgmlType::F16, vec![64, 10]),
        ("blk.0.attn_q.weight", GgmlType::Q4_0, vec![64, 3]),
        ("blk.0.attn_k.weight", GgmlType::Q8_0, vec![32, 5]),
        ("blk.0.ffn_up.weight", GgmlType::Q4_K, vec![256, 2]),
        ("blk.0.ffn_down.weight", GgmlType::Q6_K, vec![512, 1, 1]),
        ("blk.0.attn_norm.weight", GgmlType::F32, vec![7]),
        ("bf", GgmlType::BF16, vec![3, 1, 1, 2]),
        ("ids", GgmlType::I32, vec![5]),
    ];
    // Bytes per tensor, by hand: rows * (ne0 / block) * block bytes.
    let sizes = [
        64 * 10 * 2,
        3 * 2 * 18,
        5 * 34,
        2 * 144,
        2 * 210,
        7 * 4,
        6 * 2,
        5 * 4,
    ];
    for align in [32u32, 64, 256] {
        let datas: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| noise(n, i as u64 + 7))
            .collect();
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "llama").unwrap();
        if align != 32 {
            w.set_alignment(align).unwrap();
        }
        for ((name, t, dims), data) in specs.iter().zip(&datas) {
            w.add_tensor(*name, *t, dims, data.as_slice()).unwrap();
        }
        assert_eq!(w.tensor_count(), specs.len());
        let bytes = w.to_bytes().unwrap();
        let f = GgufFile::from_bytes(bytes.clone()).unwrap();
        let align = u64::from(align);
        assert_eq!(f.alignment(), align);
        if align != 32 {
            assert_eq!(f.get_u32("general.alignment").unwrap() as u64, align);
        }
        assert_eq!(f.data_offset() % align, 0);
        let mut expected_offset = 0u64;
        for (((name, t, dims), data), info) in specs.iter().zip(&datas).zip(f.tensors()) {
            assert_eq!(info.name(), *name);
            assert_eq!(info.ggml_type(), *t);
            assert_eq!(info.dims(), dims.as_slice());
            assert_eq!(info.offset(), expected_offset);
            assert_eq!(f.tensor_bytes(info), data.as_slice());
            expected_offset += (data.len() as u64).div_ceil(align) * align;
        }
        // Every tensor padded, the last one too.
        assert_eq!(bytes.len() as u64, f.data_offset() + expected_offset);
    }
}

#[test]
fn large_vocabulary_round_trip() {
    const N: usize = 150_000;
    let tokens: Vec<String> = (0..N).map(|i| format!("tok{i}")).collect();
    let scores: Vec<f32> = (0..N).map(|i| -(i as f32)).collect();
    let types: Vec<i32> = (0..N).map(|i| (i % 6) as i32).collect();
    let merges: Vec<String> = (0..1000).map(|i| format!("a{i} b{i}")).collect();
    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.tokens", tokens.clone())
        .unwrap();
    w.add_metadata("tokenizer.ggml.scores", scores).unwrap();
    w.add_metadata("tokenizer.ggml.token_type", types).unwrap();
    w.add_metadata("tokenizer.ggml.merges", merges).unwrap();
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let toks = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(toks.len(), N);
    assert_eq!(toks.get(0), Some("tok0"));
    assert_eq!(toks.get(N - 1), Some("tok149999"));
    assert!(toks.iter().zip(&tokens).all(|(a, b)| a == b));
    let scores = f.get_typed_array::<f32>("tokenizer.ggml.scores").unwrap();
    assert_eq!((scores.len(), scores.get(12345)), (N, Some(-12345.0)));
    let types = f
        .get_typed_array::<i32>("tokenizer.ggml.token_type")
        .unwrap();
    assert_eq!(types.iter().filter(|&t| t == 5).count(), N / 6);
    assert_eq!(
        f.get_str_array("tokenizer.ggml.merges").unwrap().get(999),
        Some("a999 b999")
    );
}

#[test]
fn writer_bytes_match_hand_assembly() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_tensor("w", GgmlType::F32, &[2, 2], vec![9u8; 16])
        .unwrap();
    let got = w.to_bytes().unwrap();

    let mut b = Bytes::new();
    b.header(3, 1, 1).kv_str("general.architecture", "llama");
    b.tensor_info("w", &[2, 2], 0, 0); // 24 + 45 + 41 = 110
    b.pad_to(32).raw(&[9; 16]).pad_to(32); // data at 128, padded to 160
    assert_eq!(b.len(), 160);
    assert_eq!(got, b.build());
}

#[test]
fn fill_callbacks_stream_tensor_data() {
    let mut w = GgufWriter::new();
    w.add_tensor_fill(
        "a",
        GgmlType::F32,
        &[4],
        Box::new(|out| out.write_all(&[5u8; 16])),
    )
    .unwrap();
    w.add_tensor("b", GgmlType::I8, &[3], vec![1u8, 2, 3])
        .unwrap();
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.tensor_data("a").unwrap(), &[5; 16]);
    assert_eq!(f.tensor_data("b").unwrap(), &[1, 2, 3]);

    let mut w = GgufWriter::new();
    w.add_tensor_fill(
        "short",
        GgmlType::F32,
        &[4],
        Box::new(|out| out.write_all(&[5u8; 12])),
    )
    .unwrap();
    let e = w.to_bytes().unwrap_err();
    assert!(
        matches!(e.kind, GgufErrorKind::TensorSizeMismatch { ref tensor, expected: 16, actual: 12 } if tensor == "short")
    );
}

#[test]
fn writer_rejects_what_llama_cpp_rejects() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", 1u32).unwrap();
    assert!(
        matches!(w.add_metadata("k", 2u32).unwrap_err().kind, GgufErrorKind::DuplicateKey { key } if key == "k")
    );
    w.add_tensor("t", GgmlType::F32, &[1], vec![0u8; 4])
        .unwrap();
    let e = w
        .add_tensor("t", GgmlType::F32, &[1], vec![0u8; 4])
        .unwrap_err();
    assert!(matches!(e.kind, GgufErrorKind::DuplicateTensor { tensor } if tensor == "t"));

    let ok_name = "n".repeat(63);
    w.add_tensor(ok_name, GgmlType::F32, &[1], vec![0u8; 4])
        .unwrap();
    let e = w
        .add_tensor("n".repeat(64), GgmlType::F32, &[1], vec![0u8; 4])
        .unwrap_err();
    assert!(matches!(
        e.kind,
        GgufErrorKind::TensorNameTooLong { len: 64, .. }
    ));

    let e = w
        .add_tensor("nodims", GgmlType::F32, &[], vec![])
        .unwrap_err();
    assert!(matches!(e.kind, GgufErrorKind::NoDims { .. }));
    let e = w
        .add_tensor("five", GgmlType::F32, &[1; 5], vec![0u8; 4])
        .unwrap_err();
    assert!(matches!(
        e.kind,
        GgufErrorKind::TooManyDims { n_dims: 5, .. }
    ));
    let e = w
        .add_tensor("q", GgmlType::Q4_K, &[128], vec![0u8; 72])
        .unwrap_err();
    assert!(matches!(
        e.kind,
        GgufErrorKind::RowNotBlockMultiple {
            ne0: 128,
            block_size: 256,
            ..
        }
    ));
    let e = w
        .add_tensor("s", GgmlType::Q8_0, &[32, 2], vec![0u8; 34])
        .unwrap_err();
    assert!(matches!(
        e.kind,
        GgufErrorKind::TensorSizeMismatch {
            expected: 68,
            actual: 34,
            ..
        }
    ));
    let e = w
        .add_tensor("o", GgmlType::F32, &[u64::MAX, 2], vec![])
        .unwrap_err();
    assert!(matches!(e.kind, GgufErrorKind::DimsOverflow { .. }));

    assert!(matches!(
        w.set_alignment(0).unwrap_err().kind,
        GgufErrorKind::BadAlignment { value: 0 }
    ));
    assert!(matches!(
        w.set_alignment(24).unwrap_err().kind,
        GgufErrorKind::BadAlignment { value: 24 }
    ));
    let e = w.add_metadata("general.alignment", "64").unwrap_err();
    assert!(
        matches!(e.kind, GgufErrorKind::WrongType { ref key, .. } if key == "general.alignment")
    );
    // An integer of another width sets the alignment and is written as u32.
    w.add_metadata("general.alignment", 64u64).unwrap();
    assert_eq!(w.alignment(), 64);
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.alignment(), 64);
    assert!(matches!(
        f.get("general.alignment"),
        Some(vkllm_gguf::MetaValueRef::U32(64))
    ));
}

#[test]
fn write_file_then_open() {
    let dir = common::temp_dir("rt");
    let path = dir.join("m.gguf");
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "gemma3").unwrap();
    w.add_tensor("x", GgmlType::F16, &[8], noise(16, 1))
        .unwrap();
    let n = w.write_file(&path).unwrap();
    assert_eq!(n, std::fs::metadata(&path).unwrap().len());
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.architecture().unwrap(), "gemma3");
    assert_eq!(f.tensor_data("x").unwrap(), noise(16, 1).as_slice());

    let e = w.write_file(dir.join("no/such/dir/m.gguf")).unwrap_err();
    assert!(matches!(e.kind, GgufErrorKind::Io { .. }));
    assert!(e.file.unwrap().ends_with("no/such/dir/m.gguf"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn loaded_files_can_be_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<GgufFile>();
    send_sync::<vkllm_gguf::safetensors::SafetensorsModel>();
    send_sync::<vkllm_gguf::Error>();
}
