//! One module per subcommand; `model` resolves `--model` for all of them.

pub mod info;
pub mod model;
pub mod run;
pub mod serve;
pub mod tokenize;
