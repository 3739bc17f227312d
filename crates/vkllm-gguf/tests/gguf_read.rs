//! Reader tests on hand-assembled files (layout offsets computed by hand in comments).

mod common;

use common::Bytes;
use vkllm_gguf::{GgmlType, GgufErrorKind, GgufFile, MetaValueRef, ValueType};

/// v3, 2 keys, tensors "a" (f32 [4]) and "bb" (q8_0 [32, 2]); default alignment 32.
fn small_file(version: u32) -> Vec<u8> {
    let mut b = Bytes::new();
    b.header(version, 2, 2); // 24 bytes
    b.kv_str("general.architecture", "llama"); // 8+20+4+8+5 = 45 -> 69
    b.kv_u32("llama.block_count", 2); // 8+17+4+4 = 33 -> 102
    b.tensor_info("a", &[4], 0, 0); // 8+1+4+8+4+8 = 33 -> 135
    b.tensor_info("bb", &[32, 2], 8, 32); // 8+2+4+16+4+8 = 42 -> 177
    assert_eq!(b.len(), 177);
    b.pad_to(32); // data at 192
    for v in [1.0f32, -2.0, 0.5, 3.0] {
        b.f32(v);
    }
    b.raw(&[0; 16]); // pad "a" (16 bytes) to 32
    b.raw(&(0..68).map(|i| i as u8).collect::<Vec<_>>());
    b.build()
}

#[test]
fn reads_hand_built_v3_layout() {
    let bytes = small_file(3);
    assert_eq!(bytes.len(), 192 + 32 + 68);
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset(), 192);
    assert_eq!(f.path(), None);
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 2);
    let keys: Vec<&str> = f.metadata().map(|(k, _)| k).collect();
    assert_eq!(keys, ["general.architecture", "llama.block_count"]);

    assert_eq!(f.tensors().len(), 2);
    let a = f.tensor("a").unwrap();
    assert_eq!(
        (a.dims(), a.ggml_type(), a.offset()),
        (&[4u64][..], GgmlType::F32, 0)
    );
    assert_eq!((a.n_elements(), a.n_bytes()), (4, 16));
    let vals: Vec<f32> = f
        .tensor_bytes(a)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals, [1.0, -2.0, 0.5, 3.0]);

    let bb = f.tensor("bb").unwrap();
    assert_eq!(bb.dims(), &[32, 2]);
    assert_eq!(bb.ggml_type(), GgmlType::Q8_0);
    assert_eq!(
        (bb.n_elements(), bb.n_bytes(), bb.row_len(), bb.n_rows()),
        (64, 68, 32, 2)
    );
    let data = f.tensor_data("bb").unwrap();
    assert_eq!(data.len(), 68);
    assert_eq!((data[0], data[67]), (0, 67));
    assert!(f.tensor("c").is_none());
    let e = f.require_tensor("c").unwrap_err();
    assert!(matches!(&e.kind, GgufErrorKind::MissingTensor { tensor } if tensor == "c"));
}

#[test]
fn reads_v2() {
    let f = GgufFile::from_bytes(small_file(2)).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.tensor("bb").unwrap().n_bytes(), 68);
}

#[test]
fn honours_general_alignment_of_any_integer_width() {
    // general.alignment = 64 stored as u64 (type 10): 24 + (8+17+4+8) = 61 header+kv,
    // tensor "t" f32 [16] at 0: 33 -> 94, data at 128.
    let mut b = Bytes::new();
    b.header(3, 1, 1).str("general.alignment").u32(10).u64(64);
    b.tensor_info("t", &[16], 0, 0);
    assert_eq!(b.len(), 94);
    b.pad_to(64).raw(&[7; 64]);
    let f = GgufFile::from_bytes(b.build()).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset(), 128);
    assert_eq!(f.tensor_data("t").unwrap(), &[7; 64]);
}

/// One key of each scalar type plus arrays; returns the file.
fn value_file() -> GgufFile {
    let mut b = Bytes::new();
    b.header(3, 0, 14);
    b.str("u8").u32(0).u8(250);
    b.str("i8").u32(1).u8(0x80); // -128
    b.str("u16").u32(2).raw(&60000u16.to_le_bytes());
    b.str("i16").u32(3).raw(&(-2i16).to_le_bytes());
    b.str("i32").u32(5).i32(-5);
    b.str("u64").u32(10).u64(1 << 33);
    b.str("i64").u32(11).raw(&(-9i64).to_le_bytes());
    b.str("f32").u32(6).f32(1.5);
    b.str("f64").u32(12).raw(&0.25f64.to_le_bytes());
    b.str("bool").u32(7).u8(1);
    b.str("tokens")
        .u32(9)
        .u32(8)
        .u64(3)
        .str("a")
        .str("")
        .str("\u{2581}é");
    b.str("scores")
        .u32(9)
        .u32(6)
        .u64(3)
        .f32(0.5)
        .f32(-1.0)
        .f32(2.0);
    // [[1, 2], [], ["x"]]: arrays of i32, u8 (empty) and string.
    b.str("nested").u32(9).u32(9).u64(3);
    b.u32(5).u64(2).i32(1).i32(2);
    b.u32(0).u64(0);
    b.u32(8).u64(1).str("x");
    b.str("flags").u32(9).u32(7).u64(2).u8(0).u8(1);
    GgufFile::from_bytes(b.build()).unwrap()
}

#[test]
fn scalar_values_and_integer_widening() {
    let f = value_file();
    assert_eq!(f.metadata_len(), 14);
    assert!(matches!(f.get("u8"), Some(MetaValueRef::U8(250))));
    assert!(matches!(f.get("i8"), Some(MetaValueRef::I8(-128))));
    assert_eq!(f.get_u32("u16").unwrap(), 60000);
    assert_eq!(f.get_i32("i16").unwrap(), -2);
    assert_eq!(f.get_i64("i32").unwrap(), -5);
    assert_eq!(f.get_u64("u64").unwrap(), 1 << 33);
    assert_eq!(f.get_usize("u8").unwrap(), 250);
    assert_eq!(f.get_i64("i64").unwrap(), -9);
    assert_eq!(f.get_f32("f32").unwrap(), 1.5);
    assert_eq!(f.get_f64("f32").unwrap(), 1.5);
    assert_eq!(f.get_f32("f64").unwrap(), 0.25);
    assert!(f.get_bool("bool").unwrap());
    assert_eq!(f.get_opt::<u32>("absent").unwrap(), None);
    assert_eq!(f.get_opt::<u32>("u16").unwrap(), Some(60000));
}

#[test]
fn getter_errors_name_the_key() {
    let f = value_file();
    let e = f.get_u32("absent").unwrap_err();
    assert!(matches!(&e.kind, GgufErrorKind::MissingKey { key } if key == "absent"));
    assert!(e.to_string().contains("absent"));

    let e = f.get_u32("i32").unwrap_err(); // -5 does not fit u32
    assert!(
        matches!(&e.kind, GgufErrorKind::ValueOutOfRange { key, value, .. } if key == "i32" && value == "-5")
    );
    let e = f.get_u32("u64").unwrap_err(); // 2^33
    assert!(matches!(&e.kind, GgufErrorKind::ValueOutOfRange { key, .. } if key == "u64"));

    let e = f.get_str("u16").unwrap_err();
    match &e.kind {
        GgufErrorKind::WrongType {
            key,
            expected,
            found,
        } => {
            assert_eq!(
                (key.as_str(), *expected, found.as_str()),
                ("u16", "string", "u16")
            );
        }
        k => panic!("unexpected {k:?}"),
    }
    let e = f.get_f32("i32").unwrap_err();
    assert!(matches!(&e.kind, GgufErrorKind::WrongType { key, .. } if key == "i32"));
    let e = f.get_typed_array::<f32>("tokens").unwrap_err();
    match &e.kind {
        GgufErrorKind::WrongType {
            expected, found, ..
        } => {
            assert_eq!((*expected, found.as_str()), ("array<f32>", "array<string>"));
        }
        k => panic!("unexpected {k:?}"),
    }
    assert!(matches!(
        f.get_str_array("scores").unwrap_err().kind,
        GgufErrorKind::WrongType { .. }
    ));
    assert!(matches!(
        f.get_bool("u8").unwrap_err().kind,
        GgufErrorKind::WrongType { .. }
    ));
}

#[test]
fn string_numeric_and_nested_arrays() {
    let f = value_file();
    let toks = f.get_str_array("tokens").unwrap();
    assert_eq!(toks.len(), 3);
    assert_eq!(toks.get(0), Some("a"));
    assert_eq!(toks.get(1), Some(""));
    assert_eq!(toks.get(2), Some("\u{2581}é"));
    assert_eq!(toks.get(3), None);
    assert_eq!(toks.iter().collect::<Vec<_>>(), ["a", "", "\u{2581}é"]);

    let scores = f.get_typed_array::<f32>("scores").unwrap();
    assert_eq!(scores.to_vec(), [0.5, -1.0, 2.0]);
    assert_eq!(scores.get(1), Some(-1.0));
    assert_eq!(scores.get(3), None);
    assert_eq!(scores.raw_bytes().len(), 12);

    let arr = f.get_array("scores").unwrap();
    assert_eq!(arr.elem_type(), ValueType::F32);
    assert!(matches!(arr.get(2), Some(MetaValueRef::F32(v)) if v == 2.0));
    assert!(arr.as_strs().is_none());
    assert!(arr.as_typed::<i32>().is_none());

    let flags = f.get_typed_array::<bool>("flags").unwrap();
    assert_eq!(flags.to_vec(), [false, true]);

    let nested = f.get_array("nested").unwrap();
    assert_eq!((nested.elem_type(), nested.len()), (ValueType::Array, 3));
    let inner: Vec<_> = nested.as_nested().unwrap().collect();
    assert_eq!(inner[0].as_typed::<i32>().unwrap().to_vec(), [1, 2]);
    assert_eq!((inner[1].elem_type(), inner[1].len()), (ValueType::U8, 0));
    assert_eq!(inner[2].as_strs().unwrap().get(0), Some("x"));
    let MetaValueRef::Array(second) = nested.get(2).unwrap() else {
        panic!("not an array")
    };
    assert_eq!(second.get(0).unwrap().as_str(), Some("x"));
    assert_eq!(nested.iter().count(), 3);
}

#[test]
fn open_from_path_puts_the_path_in_errors() {
    let dir = common::temp_dir("read");
    let path = dir.join("small.gguf");
    std::fs::write(&path, small_file(3)).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.path(), Some(path.as_path()));
    assert_eq!(f.tensor_data("a").unwrap().len(), 16);
    let e = f.get_u32("missing.key").unwrap_err();
    assert_eq!(e.file.as_deref(), Some(path.as_path()));
    assert!(e.to_string().contains("small.gguf") && e.to_string().contains("missing.key"));

    let mut bad = small_file(3);
    bad[0] = b'X';
    let bad_path = dir.join("bad.gguf");
    std::fs::write(&bad_path, bad).unwrap();
    let e = GgufFile::open(&bad_path).unwrap_err();
    assert_eq!(e.file.as_deref(), Some(bad_path.as_path()));
    assert!(matches!(e.kind, GgufErrorKind::BadMagic { .. }));

    let e = GgufFile::open(dir.join("nope.gguf")).unwrap_err();
    assert!(matches!(e.kind, GgufErrorKind::Io { .. }));
    assert!(e.to_string().contains("nope.gguf"));

    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = GgufFile::open(&empty).unwrap_err();
    assert!(matches!(e.kind, GgufErrorKind::Truncated { .. }), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}
