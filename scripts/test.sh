#!/usr/bin/env bash
# The project's full test suite: formatting, lints, every test. README.md points here.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
cargo xtask parity
