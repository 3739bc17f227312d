//! Safetensors header path on arbitrary bytes: open from memory, then read every tensor
//! (view, lookup by name, f32 conversion). Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkllm_gguf::safetensors::SafetensorsModel;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = SafetensorsModel::from_bytes("fuzz.safetensors", data.to_vec()) else {
        return;
    };
    let _ = (m.len(), m.is_empty(), m.files().count());
    let names: Vec<String> = m.names().map(str::to_owned).collect();
    for name in &names {
        let t = m.tensor(name).expect("listed tensor is present");
        let n = t.n_elements();
        let _ = (t.dtype(), t.shape(), t.file());
        if let Ok(v) = t.to_f32_vec() {
            assert_eq!(v.len(), n, "tensor {name:?}");
        }
    }
    assert_eq!(m.tensors().count(), names.len());
});
