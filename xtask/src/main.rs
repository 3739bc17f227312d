//! `cargo xtask <command>`: project automation (parity report, benchmarks, fixtures).

fn main() -> anyhow::Result<()> {
    let cmd = std::env::args().nth(1).unwrap_or_default();
    match cmd.as_str() {
        _ => anyhow::bail!("usage: cargo xtask parity [--json]"),
    }
}
