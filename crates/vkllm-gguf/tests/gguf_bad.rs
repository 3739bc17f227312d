//! Crafted bad GGUF files: each must fail with its specific error, never panic.

mod common;

use common::Bytes;
use vkllm_gguf::writer::GgufWriter;
use vkllm_gguf::{GgmlType, GgufErrorKind, GgufFile, MetaArray, MetaValue, Section};

fn kind(bytes: Vec<u8>) -> GgufErrorKind {
    match GgufFile::from_bytes(bytes) {
        Ok(_) => panic!("file was accepted"),
        Err(e) => {
            assert!(e.file.is_none());
            e.kind
        }
    }
}

/// Header with one tensor info and no keys, then padding and `data_len` bytes of data.
fn one_tensor(name: &str, dims: &[u64], type_id: u32, offset: u64, data_len: usize) -> Vec<u8> {
    let mut b = Bytes::new();
    b.header(3, 1, 0)
        .tensor_info(name, dims, type_id, offset)
        .pad_to(32);
    b.raw(&vec![0; data_len]);
    b.build()
}

#[test]
fn wrong_magic() {
    let k = kind(b"GGMLxxxxxxxxxxxxxxxxxxxxxxxx".to_vec());
    assert!(matches!(k, GgufErrorKind::BadMagic { found } if found == b"GGML"));
    assert!(matches!(kind(b"PK".to_vec()), GgufErrorKind::BadMagic { found } if found == b"PK"));
    // A prefix of the magic is a truncated file.
    assert!(matches!(
        kind(b"GG".to_vec()),
        GgufErrorKind::Truncated {
            section: Section::Header,
            ..
        }
    ));
    assert!(matches!(
        kind(Vec::new()),
        GgufErrorKind::Truncated {
            section: Section::Header,
            ..
        }
    ));
}

#[test]
fn unsupported_versions() {
    for v in [0u32, 1, 4, 0x0300_0000 /* big-endian 3 */] {
        let mut b = Bytes::new();
        b.header(v, 0, 0);
        assert!(
            matches!(kind(b.build()), GgufErrorKind::UnsupportedVersion { version } if version == v)
        );
    }
}

#[test]
fn truncated_in_each_section() {
    // Header: cut inside the tensor count.
    let mut b = Bytes::new();
    b.raw(b"GGUF").u32(3).u32(0);
    let k = kind(b.build());
    assert!(
        matches!(k, GgufErrorKind::Truncated { section: Section::Header, ref item, .. } if item == "tensor count"),
        "{k:?}"
    );

    // Metadata: cut inside a u32 value, so the key is known.
    let mut b = Bytes::new();
    b.header(3, 0, 1)
        .str("llama.block_count")
        .u32(4)
        .raw(&[1, 0]);
    let k = kind(b.build());
    match k {
        GgufErrorKind::Truncated {
            section,
            item,
            offset,
            needed,
            available,
        } => {
            assert_eq!(
                (section, item.as_str()),
                (Section::Metadata, "llama.block_count")
            );
            assert_eq!((offset, needed, available), (24 + 8 + 17 + 4, 4, 2));
        }
        k => panic!("unexpected {k:?}"),
    }

    // Tensor info: cut inside the second dim of "blk.0.attn_q.weight" (39 bytes are there,
    // enough for the minimal 24-byte record the count check asks for).
    let mut b = Bytes::new();
    b.header(3, 1, 0).str("blk.0.attn_q.weight").u32(2).u64(8);
    let k = kind(b.build());
    assert!(
        matches!(k, GgufErrorKind::Truncated { section: Section::TensorInfo, ref item, .. } if item == "blk.0.attn_q.weight"),
        "{k:?}"
    );
    // Fewer bytes than even one minimal tensor info: the count itself is rejected.
    let mut b = Bytes::new();
    b.header(3, 1, 0).str("w").u32(2).u64(8);
    let k = kind(b.build());
    assert!(
        matches!(
            k,
            GgufErrorKind::CountTooLarge {
                what: "tensors",
                count: 1,
                max: 0,
                available: 21,
                ..
            }
        ),
        "{k:?}"
    );

    // Data: 16 bytes needed, 8 present.
    let k = kind(one_tensor("w", &[4], 0, 0, 8));
    match k {
        GgufErrorKind::TensorOutOfBounds {
            tensor,
            offset,
            size,
            data_start,
            file_len,
        } => {
            assert_eq!(tensor, "w");
            // 24 header + 8+1+4+8+4+8 info = 57 -> data at 64.
            assert_eq!((offset, size, data_start, file_len), (0, 16, 64, 72));
        }
        k => panic!("unexpected {k:?}"),
    }
}

#[test]
fn string_length_past_eof() {
    let mut b = Bytes::new();
    b.header(3, 0, 1).u64(1 << 40).raw(b"general");
    let k = kind(b.build());
    match k {
        GgufErrorKind::StringPastEof {
            section,
            item,
            len,
            available,
            offset,
        } => {
            assert_eq!(
                (section, item.as_str()),
                (Section::Metadata, "metadata entry #0")
            );
            assert_eq!((len, available, offset), (1 << 40, 7, 32));
        }
        k => panic!("unexpected {k:?}"),
    }
    // A string value: the item is the key.
    let mut b = Bytes::new();
    b.header(3, 0, 1)
        .str("general.name")
        .u32(8)
        .u64(100)
        .raw(b"short");
    let k = kind(b.build());
    assert!(
        matches!(k, GgufErrorKind::StringPastEof { ref item, len: 100, .. } if item == "general.name"),
        "{k:?}"
    );
    // A tensor name.
    let mut b = Bytes::new();
    b.header(3, 1, 0).u64(u64::MAX).raw(&[0; 32]);
    assert!(matches!(
        kind(b.build()),
        GgufErrorKind::StringPastEof {
            section: Section::TensorInfo,
            ..
        }
    ));
}

#[test]
fn absurd_counts_rejected_before_allocating() {
    let mut b = Bytes::new();
    b.header(3, 1 << 60, 0);
    let k = kind(b.build());
    assert!(
        matches!(k, GgufErrorKind::CountTooLarge { what: "tensors", count, max: 0, .. } if count == 1 << 60),
        "{k:?}"
    );

    let mut b = Bytes::new();
    b.header(3, 0, 1 << 60);
    assert!(matches!(
        kind(b.build()),
        GgufErrorKind::CountTooLarge {
            what: "metadata entries",
            ..
        }
    ));

    for elem_type in [0u32, 10, 8, 9] {
        // u8, u64, string, array elements: 2^60 of them in a few bytes.
        let mut b = Bytes::new();
        b.header(3, 0, 1)
            .str("tokenizer.ggml.tokens")
            .u32(9)
            .u32(elem_type)
            .u64(1 << 60)
            .raw(&[0; 16]);
        let k = kind(b.build());
        assert!(
            matches!(k, GgufErrorKind::CountTooLarge { what: "array elements", ref item, count, .. }
                if item == "tokenizer.ggml.tokens" && count == 1 << 60),
            "{elem_type}: {k:?}"
        );
    }
    // u64::MAX elements of u64 must not overflow the size computation.
    let mut b = Bytes::new();
    b.header(3, 0, 1).str("k").u32(9).u32(10).u64(u64::MAX);
    assert!(matches!(
        kind(b.build()),
        GgufErrorKind::CountTooLarge { .. }
    ));
}

#[test]
fn tensor_offset_past_end_and_overflowing() {
    let k = kind(one_tensor("w", &[4], 0, 1024, 16));
    assert!(
        matches!(k, GgufErrorKind::TensorOutOfBounds { ref tensor, offset: 1024, .. } if tensor == "w"),
        "{k:?}"
    );
    // offset + data start overflows u64.
    let k = kind(one_tensor("w", &[4], 0, u64::MAX - 31, 16));
    assert!(
        matches!(k, GgufErrorKind::TensorOutOfBounds { .. }),
        "{k:?}"
    );
}

#[test]
fn misaligned_offset() {
    let k = kind(one_tensor("w", &[4], 0, 8, 64));
    assert!(
        matches!(k, GgufErrorKind::MisalignedOffset { ref tensor, offset: 8, alignment: 32 } if tensor == "w"),
        "{k:?}"
    );
}

#[test]
fn overflowing_dims() {
    for dims in [
        vec![1u64 << 32, 1 << 32],
        vec![u64::MAX],
        vec![1 << 62, 2],
        vec![2, 2, 1 << 61],
    ] {
        let k = kind(one_tensor("big", &dims, 0, 0, 0));
        assert!(
            matches!(k, GgufErrorKind::DimsOverflow { ref tensor, dims: ref d } if tensor == "big" && *d == dims),
            "{k:?}"
        );
    }
    // Fits i64 elements, but f32 bytes overflow u64: 2^62 * 4.
    let k = kind(one_tensor("big", &[1 << 62], 0, 0, 0));
    assert!(matches!(k, GgufErrorKind::DimsOverflow { .. }), "{k:?}");
    let k = kind(one_tensor("w", &[1, 1, 1, 1, 1], 0, 0, 0));
    assert!(
        matches!(k, GgufErrorKind::TooManyDims { n_dims: 5, .. }),
        "{k:?}"
    );
}

#[test]
fn unknown_type_and_partial_blocks() {
    for id in [4u32, 31, 40, 1000] {
        let k = kind(one_tensor("blk.0.attn_k.weight", &[32], id, 0, 64));
        assert!(
            matches!(k, GgufErrorKind::UnknownType { ref tensor, type_id } if tensor == "blk.0.attn_k.weight" && type_id == id),
            "{k:?}"
        );
    }
    let k = kind(one_tensor("w", &[33, 2], GgmlType::Q4_0.id(), 0, 1024));
    assert!(matches!(
        k,
        GgufErrorKind::RowNotBlockMultiple {
            ggml_type: GgmlType::Q4_0,
            ne0: 33,
            block_size: 32,
            ..
        }
    ));
}

#[test]
fn wrong_or_bad_values() {
    // general.alignment as a string.
    let mut b = Bytes::new();
    b.header(3, 0, 1).kv_str("general.alignment", "32");
    let k = kind(b.build());
    assert!(
        matches!(k, GgufErrorKind::WrongType { ref key, ref found, .. } if key == "general.alignment" && found == "string"),
        "{k:?}"
    );
    for bad in [0u32, 3, 48] {
        let mut b = Bytes::new();
        b.header(3, 0, 1).kv_u32("general.alignment", bad);
        assert!(
            matches!(kind(b.build()), GgufErrorKind::BadAlignment { value } if value == u64::from(bad))
        );
    }
    let mut b = Bytes::new();
    b.header(3, 0, 1)
        .str("general.alignment")
        .u32(10)
        .u64(1 << 33);
    assert!(matches!(kind(b.build()), GgufErrorKind::BadAlignment { value } if value == 1 << 33));

    let mut b = Bytes::new();
    b.header(3, 0, 1).str("x").u32(13).u32(0);
    assert!(
        matches!(kind(b.build()), GgufErrorKind::InvalidValueType { ref key, type_id: 13 } if key == "x")
    );
    let mut b = Bytes::new();
    b.header(3, 0, 1).str("x").u32(9).u32(77).u64(0);
    assert!(matches!(
        kind(b.build()),
        GgufErrorKind::InvalidValueType { type_id: 77, .. }
    ));
    let mut b = Bytes::new();
    b.header(3, 0, 1).str("flag").u32(7).u8(2);
    assert!(
        matches!(kind(b.build()), GgufErrorKind::InvalidBool { ref key, value: 2 } if key == "flag")
    );
    let mut b = Bytes::new();
    b.header(3, 0, 1)
        .str("flags")
        .u32(9)
        .u32(7)
        .u64(3)
        .u8(1)
        .u8(0)
        .u8(9);
    assert!(matches!(
        kind(b.build()),
        GgufErrorKind::InvalidBool { value: 9, .. }
    ));
    let mut b = Bytes::new();
    b.header(3, 0, 1).u64(2).raw(&[0xff, 0xfe]).u32(4).u32(0);
    assert!(matches!(
        kind(b.build()),
        GgufErrorKind::InvalidUtf8 {
            section: Section::Metadata,
            ..
        }
    ));
}

#[test]
fn duplicates_overlaps_and_nesting() {
    let mut b = Bytes::new();
    b.header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
    assert!(matches!(kind(b.build()), GgufErrorKind::DuplicateKey { key } if key == "a.b"));

    let mut b = Bytes::new();
    b.header(3, 2, 0)
        .tensor_info("w", &[4], 0, 0)
        .tensor_info("w", &[4], 0, 32)
        .pad_to(32)
        .raw(&[0; 64]);
    assert!(matches!(kind(b.build()), GgufErrorKind::DuplicateTensor { tensor } if tensor == "w"));

    let mut b = Bytes::new();
    b.header(3, 2, 0)
        .tensor_info("x", &[16], 0, 0)
        .tensor_info("y", &[4], 0, 32)
        .pad_to(32)
        .raw(&[0; 64]);
    let k = kind(b.build());
    assert!(
        matches!(k, GgufErrorKind::TensorOverlap { ref tensor, ref other } if tensor == "y" && other == "x"),
        "{k:?}"
    );

    // Nine levels of arrays of arrays.
    let mut b = Bytes::new();
    b.header(3, 0, 1).str("deep").u32(9);
    for _ in 0..9 {
        b.u32(9).u64(1);
    }
    b.u32(0).u64(0);
    assert!(
        matches!(kind(b.build()), GgufErrorKind::NestingTooDeep { ref key, max: 8 } if key == "deep")
    );
}

/// A file with every section, whose last tensor ends exactly at the end of the file.
fn rich_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("llama.context_length", 4096u32).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["<s>", "a", "bc"])
        .unwrap();
    w.add_metadata("tokenizer.ggml.scores", vec![0.0f32, -1.0, -2.0])
        .unwrap();
    w.add_metadata(
        "nested",
        vec![
            MetaArray::U8(vec![1, 2]),
            MetaArray::String(vec!["z".into()]),
        ],
    )
    .unwrap();
    w.add_metadata("flag", MetaValue::Bool(true)).unwrap();
    w.add_tensor("q", GgmlType::Q8_0, &[32, 2], vec![3u8; 68])
        .unwrap();
    w.add_tensor("w", GgmlType::F32, &[8], vec![1u8; 32])
        .unwrap();
    let bytes = w.to_bytes().unwrap();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let last = f.tensor("w").unwrap();
    assert_eq!(
        f.data_offset() + last.offset() + last.n_bytes(),
        bytes.len() as u64
    );
    bytes
}

#[test]
fn every_truncation_is_an_error() {
    let full = rich_file();
    for len in 0..full.len() {
        match GgufFile::from_bytes(full[..len].to_vec()) {
            Ok(_) => panic!("truncated to {len} of {} bytes but accepted", full.len()),
            Err(e) => assert!(
                matches!(
                    e.kind,
                    GgufErrorKind::Truncated { .. }
                        | GgufErrorKind::StringPastEof { .. }
                        | GgufErrorKind::CountTooLarge { .. }
                        | GgufErrorKind::TensorOutOfBounds { .. }
                ),
                "len {len}: {e}"
            ),
        }
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    let full = rich_file();
    let mut accepted = 0;
    for pos in 0..full.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bytes = full.clone();
            bytes[pos] ^= flip;
            if GgufFile::from_bytes(bytes).is_ok() {
                accepted += 1;
            }
        }
    }
    // Flips inside tensor data and padding still give valid files; header flips must not.
    assert!(accepted < 3 * full.len());
}
