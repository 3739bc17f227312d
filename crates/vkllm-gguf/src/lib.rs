//! # vkllm-gguf — layer 0: weight file formats (GGUF, safetensors)
//!
//! The foundation crate of vkllm: it reads the files weights come in and nothing else (no
//! math, no GPU). It provides
//!
//! - [`GgufFile`]: a zero-copy GGUF v2/v3 reader over a memory map. Opening validates the
//!   whole layout (counts, strings, types, alignment, tensor bounds and overlaps) so later
//!   accesses cannot fail; metadata strings and arrays (150k-entry vocabularies included) are
//!   borrowed from the map, never copied per element. Typed getters name the key at fault.
//! - [`GgmlType`]: ggml's tensor types with block geometry.
//! - [`writer::GgufWriter`]: writes GGUF v3 files llama.cpp reads (tests, `vkllm synth`).
//! - [`cache_dir`]: where fetched weight files (and caches derived from them) live.
//! - [`safetensors::SafetensorsModel`]: a single or sharded Hugging Face safetensors
//!   checkpoint, memory-mapped, with zero-copy tensor views and f32 conversion.
//!
//! Errors: [`GgufError`] (file + [`GgufErrorKind`]) and
//! [`safetensors::SafetensorsError`] (file + [`safetensors::SafetensorsErrorKind`]), both
//! wrapped by the crate-level [`Error`]. Bad input never panics.

mod cache;
mod error;
mod file;
mod metadata;
mod reader;
pub mod safetensors;
mod types;
mod value;
pub mod writer;

pub use cache::cache_dir;
pub use error::{GgufError, GgufErrorKind, Section};
pub use file::{GgufFile, TensorInfo};
pub use metadata::{ArrayElem, MetaArrayRef, MetaValueRef, StrArray, TypedArray, ValueType};
pub use reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ARRAY_NESTING, MAX_DIMS};
pub use types::{GgmlType, QK_K, UnknownGgmlTypeName};
pub use value::{FromMetaValue, MetaArray, MetaValue, Mismatch};

/// Any error of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a GGUF file.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// Loading a safetensors checkpoint.
    #[error(transparent)]
    Safetensors(#[from] safetensors::SafetensorsError),
}
