//! GGUF reader on arbitrary bytes: open, then walk every metadata value (arrays, nested
//! arrays, string arrays, typed getters) and every tensor (bytes, geometry, lookup by name,
//! dequantization of formats vkllm-cpu knows). Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkllm_gguf::{GgufFile, MetaArrayRef, MetaValueRef};

fn walk_array(a: MetaArrayRef<'_>, depth: usize) {
    let _ = (
        a.elem_type(),
        a.len(),
        a.is_empty(),
        a.get(0),
        a.get(a.len()),
    );
    if let Some(s) = a.as_strs() {
        for x in s.iter() {
            std::hint::black_box(x.len());
        }
    }
    if let Some(n) = a.as_nested() {
        for inner in n {
            walk_array(inner, depth + 1);
        }
    }
    for v in a.iter().take(4096) {
        walk_value(v, depth + 1);
    }
    std::hint::black_box(a.to_array());
}

fn walk_value(v: MetaValueRef<'_>, depth: usize) {
    assert!(depth < 64, "nesting deeper than the reader allows");
    let _ = (
        v.value_type(),
        v.as_i128(),
        v.as_f64(),
        v.as_bool(),
        v.as_str(),
    );
    std::hint::black_box(v.type_description());
    std::hint::black_box(v.to_value());
    if let Some(a) = v.as_array() {
        walk_array(a, depth);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let _ = (
        f.version(),
        f.alignment(),
        f.data_offset(),
        f.metadata_len(),
    );
    for (k, v) in f.metadata() {
        walk_value(v, 0);
        assert!(f.get(k).is_some(), "key {k:?} listed but not found");
        let _ = (
            f.get_u32(k),
            f.get_u64(k),
            f.get_i64(k),
            f.get_f32(k),
            f.get_str(k),
        );
        let _ = (
            f.get_bool(k),
            f.get_array(k),
            f.get_str_array(k),
            f.get_usize(k),
        );
    }
    let _ = f.architecture();
    for t in f.tensors() {
        let bytes = f.tensor_bytes(t);
        assert_eq!(bytes.len() as u64, t.n_bytes(), "tensor {:?}", t.name());
        assert!(f.tensor(t.name()).is_some());
        let _ = (
            t.dims(),
            t.n_dims(),
            t.offset(),
            t.n_elements(),
            t.row_len(),
            t.n_rows(),
        );
        if let Ok(ty) = vkllm_cpu::QuantType::from_ggml_id(t.ggml_type().id()) {
            let n = usize::try_from(t.n_elements()).unwrap_or(usize::MAX);
            if n <= 1 << 16 {
                let mut out = vec![0.0f32; n];
                // Every validated tensor's bytes must match its element count.
                vkllm_cpu::dequantize_row(ty, bytes, &mut out)
                    .unwrap_or_else(|e| panic!("tensor {:?}: {e}", t.name()));
            }
        }
    }
});
