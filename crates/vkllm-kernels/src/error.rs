//! The crate's error type.

/// What can go wrong compiling a kernel or building one of its dispatches.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kernel {kernel}: WGSL parse error in {file}:\n{message}")]
    Parse {
        kernel: &'static str,
        file: &'static str,
        message: String,
    },
    #[error("kernel {kernel}: WGSL validation error in {file}:\n{message}")]
    Validate {
        kernel: &'static str,
        file: &'static str,
        message: String,
    },
    #[error("kernel {kernel}: override constants {overrides}: {message}")]
    Override {
        kernel: &'static str,
        overrides: String,
        message: String,
    },
    #[error("kernel {kernel}: SPIR-V emission failed: {message}")]
    Spirv {
        kernel: &'static str,
        message: String,
    },
    #[error("kernel {kernel}: buffer `{binding}` holds {have} bytes, the dispatch needs {need}")]
    BufferTooSmall {
        kernel: &'static str,
        binding: &'static str,
        need: u64,
        have: u64,
    },
    #[error("kernel {kernel}: bad shape: {message}")]
    Shape {
        kernel: &'static str,
        message: String,
    },
}
