//! GgmlType ids and block geometry against the `block_*` struct layouts of ggml-common.h,
//! written out field by field here (h = ggml_half = 2 bytes, K = QK_K = 256).

use vkllm_gguf::GgmlType;

const H: u64 = 2;
const K: u64 = 256;

/// (id, name, elements per block, bytes per block as the sum of the struct's fields).
fn expected() -> Vec<(u32, &'static str, u64, u64)> {
    vec![
        (0, "f32", 1, 4),
        (1, "f16", 1, 2),
        (2, "q4_0", 32, H + 32 / 2),                 // d, qs[16]
        (3, "q4_1", 32, 2 * H + 32 / 2),             // d, m, qs[16]
        (6, "q5_0", 32, H + 4 + 32 / 2),             // d, qh[4], qs[16]
        (7, "q5_1", 32, 2 * H + 4 + 32 / 2),         // d, m, qh[4], qs[16]
        (8, "q8_0", 32, H + 32),                     // d, qs[32]
        (9, "q8_1", 32, 2 * H + 32),                 // d, s, qs[32]
        (10, "q2_K", K, K / 16 + K / 4 + 2 * H),     // scales, qs, d, dmin
        (11, "q3_K", K, K / 8 + K / 4 + 12 + H),     // hmask, qs, scales[12], d
        (12, "q4_K", K, 2 * H + 12 + K / 2),         // d, dmin, scales[12], qs
        (13, "q5_K", K, 2 * H + 12 + K / 8 + K / 2), // d, dmin, scales, qh, qs
        (14, "q6_K", K, K / 2 + K / 4 + K / 16 + H), // ql, qh, scales, d
        (15, "q8_K", K, 4 + K + 2 * (K / 16)),       // f32 d, qs, i16 bsums
        (16, "iq2_xxs", K, H + 2 * (K / 8)),         // d, u16 qs[K/8]
        (17, "iq2_xs", K, H + 2 * (K / 8) + K / 32), // d, u16 qs, scales
        (18, "iq3_xxs", K, H + 3 * K / 8),           // d, qs[3K/8]
        (19, "iq1_s", K, H + K / 8 + 2 * (K / 32)),  // d, qs, u16 qh
        (20, "iq4_nl", 32, H + 32 / 2),              // d, qs
        (21, "iq3_s", K, H + K / 4 + K / 32 + K / 8 + K / 64), // d, qs, qh, signs, scales
        (22, "iq2_s", K, H + K / 4 + K / 32 + K / 32), // d, qs, qh, scales
        (23, "iq4_xs", K, H + 2 + K / 64 + K / 2),   // d, scales_h, scales_l, qs
        (24, "i8", 1, 1),
        (25, "i16", 1, 2),
        (26, "i32", 1, 4),
        (27, "i64", 1, 8),
        (28, "f64", 1, 8),
        (29, "iq1_m", K, K / 8 + K / 16 + K / 32), // qs, qh, scales
        (30, "bf16", 1, 2),
        (34, "tq1_0", K, (K - 4 * K / 64) / 5 + K / 64 + H), // qs, qh, d
        (35, "tq2_0", K, K / 4 + H),                         // qs, d
        (39, "mxfp4", 32, 1 + 32 / 2),                       // e8m0 e, qs
    ]
}

#[test]
fn ids_names_and_block_geometry_match_ggml() {
    let exp = expected();
    assert_eq!(exp.len(), GgmlType::ALL.len());
    for (id, name, block, size) in exp {
        let t = GgmlType::from_id(id).unwrap_or_else(|| panic!("id {id} unknown"));
        assert_eq!(t.id(), id);
        assert_eq!(t.name(), name, "id {id}");
        assert_eq!(t.block_size(), block, "{name} block size");
        assert_eq!(t.type_size(), size, "{name} type size");
        assert_eq!(name.parse::<GgmlType>().ok(), Some(t));
        assert_eq!(name.to_uppercase().parse::<GgmlType>().ok(), Some(t));
        assert_eq!(t.to_string(), name);
    }
}

#[test]
fn removed_and_unknown_ids_are_none() {
    for id in [4, 5, 31, 32, 33, 36, 37, 38, 40, 41, 1000, u32::MAX] {
        assert_eq!(GgmlType::from_id(id), None, "id {id}");
    }
    assert!("q4_2".parse::<GgmlType>().is_err());
}

#[test]
fn row_size_needs_whole_blocks() {
    assert_eq!(GgmlType::Q4_0.row_size(64), Some(36)); // 2 blocks of 18
    assert_eq!(GgmlType::Q4_K.row_size(512), Some(288));
    assert_eq!(GgmlType::F16.row_size(3), Some(6));
    assert_eq!(GgmlType::Q4_0.row_size(33), None);
    assert_eq!(GgmlType::Q6_K.row_size(128), None);
    assert_eq!(GgmlType::F32.row_size(u64::MAX), None); // overflow
    assert!(GgmlType::Q8_0.is_quantized());
    assert!(!GgmlType::BF16.is_quantized());
}
