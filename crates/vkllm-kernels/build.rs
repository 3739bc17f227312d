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
