//! One module per subcommand; `model` resolves `--model` for all of them.

pub mod bench;
pub mod chat;
pub mod common;
pub mod hub;
pub mod info;
pub mod model;
pub mod perplexity;
pub mod run;
pub mod serve;
pub mod synth;
pub mod tokenize;
