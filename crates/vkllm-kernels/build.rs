//! Parses and validates every WGSL kernel with naga, so a broken shader fails `cargo build`
//! (the same validation runs again at run time before each pipeline is specialised).
//!
//! `*.inc.wgsl` files are fragments, not kernels: a kernel file names each file it uses in a
//! `// #include NAME` line, and its source is the file followed by those files, each assembled
//! the same way (recursively; `src/sources.rs` embeds the same text with `concat!`). A kernel may
//! also include another kernel file to share its declarations.

use std::path::Path;

fn main() {
    let dir = Path::new("shaders");
    println!("cargo:rerun-if-changed=shaders");
    let mut entries: Vec<_> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(e) => panic!("vkllm-kernels: cannot read {}: {e}", dir.display()),
    };
    entries.sort();
    let mut failures = Vec::new();
    for path in entries {
        if path.extension().and_then(|e| e.to_str()) != Some("wgsl") {
            continue;
        }
        println!("cargo:rerun-if-changed={}", path.display());
        if path.to_string_lossy().ends_with(".inc.wgsl") {
            continue;
        }
        let src = assemble(dir, &path, 0);
        let name = path.display().to_string();
        let module = match naga::front::wgsl::parse_str(&src) {
            Ok(m) => m,
            Err(e) => {
                failures.push(e.emit_to_string_with_path(&src, &name));
                continue;
            }
        };
        let mut validator = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        );
        if let Err(e) = validator.validate(&module) {
            failures.push(e.emit_to_string_with_path(&src, &name));
        }
        if src.contains("enable wgpu_cooperative_matrix;") {
            failures.extend(unaligned_workgroup_vars(&module, &name));
        }
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("{f}");
        }
        panic!(
            "vkllm-kernels: {} WGSL shader(s) failed naga validation (see above)",
            failures.len()
        );
    }
}

/// The file followed by everything it `// #include`s, recursively.
fn assemble(dir: &Path, path: &Path, depth: u32) -> String {
    if depth > 8 {
        panic!(
            "vkllm-kernels: #include nesting too deep at {}",
            path.display()
        );
    }
    let mut src = read(path);
    let includes: Vec<String> = src
        .lines()
        .filter_map(|l| l.strip_prefix("// #include "))
        .map(|n| n.trim().to_string())
        .collect();
    for inc in includes {
        src.push_str(&assemble(dir, &dir.join(inc), depth + 1));
    }
    src
}

fn read(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) => panic!("vkllm-kernels: cannot read {}: {e}", path.display()),
    }
}

/// A cooperative-matrix kernel's workgroup variables of a fixed size that is not a whole number
/// of 16-byte words: drivers lay the variables out in an order of their own and cooperative
/// loads and stores need 16-byte aligned addresses (a lone u32 misaligned every load on the
/// H200). Override-sized arrays are checked by the Rust side that sizes them.
fn unaligned_workgroup_vars(module: &naga::Module, name: &str) -> Vec<String> {
    let mut layouter = naga::proc::Layouter::default();
    if let Err(e) = layouter.update(module.to_ctx()) {
        return vec![format!("{name}: type layout failed: {e}")];
    }
    module
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
        .filter(|(_, v)| {
            !matches!(
                module.types[v.ty].inner,
                naga::TypeInner::Array {
                    size: naga::ArraySize::Pending(_),
                    ..
                }
            )
        })
        .filter(|(_, v)| layouter[v.ty].size % 16 != 0)
        .map(|(_, v)| {
            format!(
                "{name}: workgroup variable `{}` is {} bytes, not a multiple of 16 (pad it)",
                v.name.as_deref().unwrap_or("?"),
                layouter[v.ty].size
            )
        })
        .collect()
}
