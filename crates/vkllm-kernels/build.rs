//! Parses and validates every WGSL kernel with naga, so a broken shader fails `cargo build`
//! (the same validation runs again at run time before each pipeline is specialised).

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
        let src = match std::fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) => panic!("vkllm-kernels: cannot read {}: {e}", path.display()),
        };
        // A first line `// include: FILE` prepends a shared snippet (`.wgsli`), as sources.rs
        // does for the embedded source.
        let src = match src
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("// include: "))
        {
            Some(inc) => {
                let inc_path = dir.join(inc.trim());
                println!("cargo:rerun-if-changed={}", inc_path.display());
                match std::fs::read_to_string(&inc_path) {
                    Ok(s) => s + &src,
                    Err(e) => panic!("vkllm-kernels: cannot read {}: {e}", inc_path.display()),
                }
            }
            None => src,
        };
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
