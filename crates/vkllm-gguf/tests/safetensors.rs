//! Safetensors loading: single and sharded checkpoints written with the `safetensors` crate,
//! plus hand-made broken headers.

mod common;

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::TensorView as StView;
use vkllm_gguf::safetensors::{Dtype, SafetensorsErrorKind, SafetensorsModel};

fn le<T: Copy, const N: usize>(vals: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    vals.iter().flat_map(|&v| f(v)).collect()
}

/// Writes `tensors` (name, dtype, shape, bytes) to `path` with the safetensors crate.
fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(&str, StView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, StView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn f32s() -> Vec<u8> {
    le(&[1.0f32, -2.0, 0.25, 1e-3, 3.5, -0.0], f32::to_le_bytes)
}

// f16 bit patterns by hand: 0x3800 = 0.5, 0xC000 = -2.0, 0x6400 = 1024, 0x0001 = 2^-24.
fn f16s() -> Vec<u8> {
    le(&[0x3800u16, 0xC000, 0x6400, 0x0001], u16::to_le_bytes)
}

// bf16 bit patterns: 0x3FC0 = 1.5, 0xC040 = -3.0, 0x4780 = 65536.
fn bf16s() -> Vec<u8> {
    le(&[0x3FC0u16, 0xC040, 0x4780], u16::to_le_bytes)
}

fn single_tensors() -> Vec<(&'static str, Dtype, Vec<usize>, Vec<u8>)> {
    vec![
        ("model.embed_tokens.weight", Dtype::F32, vec![2, 3], f32s()),
        ("model.norm.weight", Dtype::F16, vec![4], f16s()),
        ("lm_head.weight", Dtype::BF16, vec![3, 1], bf16s()),
        (
            "position_ids",
            Dtype::I64,
            vec![2],
            le(&[0i64, 1], i64::to_le_bytes),
        ),
    ]
}

#[test]
fn single_file_from_directory_or_file() {
    let dir = common::temp_dir("st-single");
    let file = dir.join("model.safetensors");
    write(&file, &single_tensors());
    for m in [
        SafetensorsModel::open(&dir).unwrap(),
        SafetensorsModel::open(&file).unwrap(),
    ] {
        assert_eq!(m.path(), file);
        assert_eq!(m.len(), 4);
        assert_eq!(
            m.names().collect::<Vec<_>>(),
            [
                "lm_head.weight",
                "model.embed_tokens.weight",
                "model.norm.weight",
                "position_ids"
            ]
        );
        let e = m.tensor("model.embed_tokens.weight").unwrap();
        assert_eq!(
            (e.dtype(), e.shape(), e.n_elements()),
            (Dtype::F32, &[2usize, 3][..], 6)
        );
        assert_eq!(e.bytes(), f32s().as_slice());
        assert_eq!(e.file(), file);
        assert_eq!(e.to_f32_vec().unwrap(), [1.0, -2.0, 0.25, 1e-3, 3.5, -0.0]);
        let n = m.tensor("model.norm.weight").unwrap();
        assert_eq!(n.to_f32_vec().unwrap(), [0.5, -2.0, 1024.0, 2f32.powi(-24)]);
        let h = m.tensor("lm_head.weight").unwrap();
        assert_eq!(h.to_f32_vec().unwrap(), [1.5, -3.0, 65536.0]);
        let p = m.tensor("position_ids").unwrap();
        let err = p.to_f32_vec().unwrap_err();
        assert_eq!(err.path, file);
        assert!(
            matches!(err.kind, SafetensorsErrorKind::UnsupportedDtype { ref tensor, dtype: Dtype::I64 } if tensor == "position_ids")
        );
        let err = m.tensor("model.layers.0.mlp.up_proj.weight").unwrap_err();
        match err.kind {
            SafetensorsErrorKind::TensorNotFound { tensor, files } => {
                assert_eq!(tensor, "model.layers.0.mlp.up_proj.weight");
                assert_eq!(files, std::slice::from_ref(&file));
            }
            k => panic!("unexpected {k:?}"),
        }
        assert!(m.get("nope").is_none());
        assert_eq!(m.tensors().count(), 4);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

fn write_sharded(dir: &Path) {
    let all = single_tensors();
    write(&dir.join("model-00001-of-00002.safetensors"), &all[..2]);
    write(&dir.join("model-00002-of-00002.safetensors"), &all[2..]);
    let index = r#"{
        "metadata": {"total_size": 52},
        "weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
            "position_ids": "model-00002-of-00002.safetensors"
        }
    }"#;
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
}

#[test]
fn sharded_checkpoint() {
    let dir = common::temp_dir("st-shard");
    write_sharded(&dir);
    let index = dir.join("model.safetensors.index.json");
    for m in [
        SafetensorsModel::open(&dir).unwrap(),
        SafetensorsModel::open(&index).unwrap(),
    ] {
        assert_eq!(m.path(), index);
        assert_eq!(m.len(), 4);
        assert_eq!(m.files().count(), 2);
        let e = m.tensor("model.embed_tokens.weight").unwrap();
        assert!(e.file().ends_with("model-00001-of-00002.safetensors"));
        assert_eq!(e.to_f32_vec().unwrap()[1], -2.0);
        let h = m.tensor("lm_head.weight").unwrap();
        assert!(h.file().ends_with("model-00002-of-00002.safetensors"));
        assert_eq!(h.to_f32_vec().unwrap(), [1.5, -3.0, 65536.0]);
        match m.tensor("missing").unwrap_err().kind {
            SafetensorsErrorKind::TensorNotFound { files, .. } => assert_eq!(files.len(), 2),
            k => panic!("unexpected {k:?}"),
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn sharded_errors() {
    let dir = common::temp_dir("st-shard-bad");
    write_sharded(&dir);
    let index = dir.join("model.safetensors.index.json");
    let set_index = |s: &str| std::fs::write(&index, s).unwrap();
    let open_err = || SafetensorsModel::open(&dir).unwrap_err();

    set_index("{ not json");
    let e = open_err();
    assert_eq!(e.path, index);
    assert!(matches!(e.kind, SafetensorsErrorKind::BadIndex { .. }));
    set_index(r#"{"metadata": {}}"#);
    let e = open_err();
    assert!(
        matches!(e.kind, SafetensorsErrorKind::BadIndex { ref reason } if reason.contains("weight_map")),
        "{e}"
    );

    set_index(r#"{"weight_map": {"a": "model-00003-of-00003.safetensors"}}"#);
    match open_err().kind {
        SafetensorsErrorKind::ShardMissing { shard, tensor } => {
            assert!(shard.ends_with("model-00003-of-00003.safetensors"));
            assert_eq!(tensor, "a");
        }
        k => panic!("unexpected {k:?}"),
    }
    set_index(r#"{"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}}"#);
    let e = open_err();
    assert!(e.path.ends_with("model-00001-of-00002.safetensors"));
    assert!(
        matches!(e.kind, SafetensorsErrorKind::TensorNotInShard { ref tensor, .. } if tensor == "lm_head.weight")
    );
    for bad in ["../model-00001-of-00002.safetensors", "/etc/passwd", ""] {
        set_index(&format!(r#"{{"weight_map": {{"x": "{bad}"}}}}"#));
        assert!(
            matches!(open_err().kind, SafetensorsErrorKind::BadShardName { .. }),
            "{bad}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn missing_checkpoint() {
    let dir = common::temp_dir("st-empty");
    let e = SafetensorsModel::open(&dir).unwrap_err();
    assert_eq!(e.path, dir);
    assert!(
        matches!(e.kind, SafetensorsErrorKind::NotFound { ref looked_for } if looked_for.len() == 2)
    );
    let e = SafetensorsModel::open(dir.join("model.safetensors")).unwrap_err();
    assert!(matches!(e.kind, SafetensorsErrorKind::Io { .. }));
    assert!(e.to_string().contains("model.safetensors"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A file from a hand-written header and data.
fn raw_file(dir: &Path, header: &str, data: &[u8]) -> std::path::PathBuf {
    let path = dir.join("model.safetensors");
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn corrupted_headers() {
    let dir = common::temp_dir("st-corrupt");
    let open = |header: &str, data: &[u8]| {
        let path = raw_file(&dir, header, data);
        let e = SafetensorsModel::open(&path).unwrap_err();
        assert_eq!(e.path, path);
        e.kind
    };
    // Size != shape x dtype: F32 [2, 2] is 16 bytes, offsets span 12.
    let k = open(
        r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}"#,
        &[0; 12],
    );
    match k {
        SafetensorsErrorKind::SizeMismatch {
            tensor,
            dtype,
            shape,
            expected,
            start,
            end,
        } => {
            assert_eq!(
                (tensor.as_str(), dtype, shape),
                ("w", Dtype::F32, vec![2, 2])
            );
            assert_eq!((expected, start, end), (Some(16), 0, 12));
        }
        k => panic!("unexpected {k:?}"),
    }
    // Offsets past the data: F32 [2] at 0..8 with 4 data bytes.
    let k = open(
        r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        &[0; 4],
    );
    assert!(
        matches!(k, SafetensorsErrorKind::OffsetsOutOfBounds { ref tensor, start: 0, end: 8, data_len: 4 } if tensor == "w"),
        "{k:?}"
    );
    // End before start.
    let k = open(
        r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}"#,
        &[0; 8],
    );
    assert!(
        matches!(k, SafetensorsErrorKind::SizeMismatch { .. }),
        "{k:?}"
    );
    // Overflowing shape.
    let k = open(
        r#"{"w":{"dtype":"F32","shape":[18446744073709551615,2],"data_offsets":[0,4]}}"#,
        &[0; 4],
    );
    assert!(
        matches!(k, SafetensorsErrorKind::SizeMismatch { expected: None, .. }),
        "{k:?}"
    );
    // Not JSON; not a tensor record.
    assert!(matches!(
        open("{nope", &[]),
        SafetensorsErrorKind::BadHeader { .. }
    ));
    assert!(matches!(
        open(r#"{"w": 3}"#, &[]),
        SafetensorsErrorKind::BadHeader { .. }
    ));
    // Extra bytes after the last tensor.
    let k = open(
        r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &[0; 8],
    );
    assert!(
        matches!(k, SafetensorsErrorKind::InconsistentHeader { .. }),
        "{k:?}"
    );

    // Header length past the end of the file; empty file.
    let path = dir.join("model.safetensors");
    std::fs::write(&path, 1000u64.to_le_bytes()).unwrap();
    let k = SafetensorsModel::open(&path).unwrap_err().kind;
    assert!(matches!(k, SafetensorsErrorKind::BadHeader { .. }), "{k:?}");
    std::fs::write(&path, b"").unwrap();
    let k = SafetensorsModel::open(&path).unwrap_err().kind;
    assert!(matches!(k, SafetensorsErrorKind::BadHeader { .. }), "{k:?}");

    // The crate-level error wraps it.
    let e: vkllm_gguf::Error = SafetensorsModel::open(&path).unwrap_err().into();
    assert!(e.to_string().contains("model.safetensors"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn metadata_map_is_ignored_and_header_metadata_allowed() {
    let dir = common::temp_dir("st-meta");
    let path = dir.join("model.safetensors");
    let t = StView::new(Dtype::F32, vec![1], &[0, 0, 128, 63]).unwrap();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    std::fs::write(
        &path,
        safetensors::serialize([("x", t)], Some(meta)).unwrap(),
    )
    .unwrap();
    let m = SafetensorsModel::open(&path).unwrap();
    assert_eq!(m.names().collect::<Vec<_>>(), ["x"]);
    assert_eq!(m.tensor("x").unwrap().to_f32_vec().unwrap(), [1.0]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn from_bytes_matches_open() {
    let dir = common::temp_dir("st-bytes");
    let file = dir.join("model.safetensors");
    write(&file, &single_tensors());
    let bytes = std::fs::read(&file).unwrap();
    let m = SafetensorsModel::from_bytes("mem.safetensors", bytes).unwrap();
    let f = SafetensorsModel::open(&file).unwrap();
    assert_eq!(m.path(), Path::new("mem.safetensors"));
    assert_eq!(m.names().collect::<Vec<_>>(), f.names().collect::<Vec<_>>());
    for (a, b) in m.tensors().zip(f.tensors()) {
        assert_eq!(
            (a.name(), a.dtype(), a.shape()),
            (b.name(), b.dtype(), b.shape())
        );
        assert_eq!(a.bytes(), b.bytes());
        assert_eq!(a.file(), Path::new("mem.safetensors"));
    }
    assert_eq!(
        m.tensor("lm_head.weight").unwrap().to_f32_vec().unwrap(),
        [1.5, -3.0, 65536.0]
    );
    // A lying header is diagnosed the same way, naming the label.
    let header = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut bad = (header.len() as u64).to_le_bytes().to_vec();
    bad.extend_from_slice(header.as_bytes());
    bad.extend_from_slice(&[0; 4]);
    let e = SafetensorsModel::from_bytes("mem.safetensors", bad).unwrap_err();
    assert_eq!(e.path, Path::new("mem.safetensors"));
    assert!(
        matches!(e.kind, SafetensorsErrorKind::OffsetsOutOfBounds { ref tensor, start: 0, end: 8, data_len: 4 } if tensor == "w"),
        "{:?}",
        e.kind
    );
    let e = SafetensorsModel::from_bytes("empty", Vec::new()).unwrap_err();
    assert!(matches!(e.kind, SafetensorsErrorKind::BadHeader { .. }));
    std::fs::remove_dir_all(dir).unwrap();
}
