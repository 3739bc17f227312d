//! Errors of the GGUF reader and writer.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::types::GgmlType;

/// The part of a GGUF file where a problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Magic, version, tensor count, metadata count.
    Header,
    /// The metadata key/value pairs.
    Metadata,
    /// The tensor-info records.
    TensorInfo,
    /// The tensor data section.
    TensorData,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Section::Header => "header",
            Section::Metadata => "metadata",
            Section::TensorInfo => "tensor info",
            Section::TensorData => "tensor data",
        })
    }
}

/// What went wrong, with the key, tensor and offsets at fault. Wrapped in [`GgufError`], which
/// adds the file.
///
/// `item` fields name the metadata key or tensor being read; before its name is known it is
/// `"metadata entry #i"` or `"tensor #i"`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufErrorKind {
    /// Opening, mapping or writing the file failed.
    #[error("I/O error: {source}")]
    Io {
        /// The underlying error.
        #[from]
        source: std::io::Error,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first (up to four) bytes of the file.
        found: Vec<u8>,
    },
    /// Only versions 2 and 3 (little-endian) are read.
    #[error(
        "unsupported GGUF version {version} (supported: 2, 3; big-endian files are not supported)"
    )]
    UnsupportedVersion {
        /// The version field as read (little-endian).
        version: u32,
    },
    /// The file ends inside a record.
    #[error(
        "file truncated in {section} at {item}: needs {needed} bytes at offset {offset}, {available} left"
    )]
    Truncated {
        /// Section being read.
        section: Section,
        /// Key or tensor being read.
        item: String,
        /// Byte offset of the read.
        offset: u64,
        /// Bytes the read needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// A string's length prefix runs past the end of the file.
    #[error(
        "string of {len} bytes at offset {offset} in {section} ({item}) runs past the end of the file ({available} bytes left)"
    )]
    StringPastEof {
        /// Section being read.
        section: Section,
        /// Key or tensor being read.
        item: String,
        /// Offset of the string's bytes.
        offset: u64,
        /// The declared length.
        len: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// A count (tensors, metadata entries, array elements) that the rest of the file cannot
    /// possibly hold; rejected before allocating anything.
    #[error(
        "{section} ({item}): {count} {what} cannot fit in the {available} bytes left (at most {max})"
    )]
    CountTooLarge {
        /// Section being read.
        section: Section,
        /// Key or tensor being read (`"header"` for the header counts).
        item: String,
        /// What is counted: `"tensors"`, `"metadata entries"`, `"array elements"`.
        what: &'static str,
        /// The declared count.
        count: u64,
        /// Most entries the remaining bytes could hold.
        max: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A string that is not UTF-8 (keys, string values, tensor names).
    #[error("{section} ({item}): string at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Section being read.
        section: Section,
        /// Key or tensor being read.
        item: String,
        /// Offset of the string's bytes.
        offset: u64,
    },
    /// A metadata value type id outside 0..=12.
    #[error("metadata key {key:?}: unknown value type id {type_id}")]
    InvalidValueType {
        /// The key.
        key: String,
        /// The type id read.
        type_id: u32,
    },
    /// A bool value other than 0 or 1.
    #[error("metadata key {key:?}: bool byte is {value}, expected 0 or 1")]
    InvalidBool {
        /// The key.
        key: String,
        /// The byte read.
        value: u8,
    },
    /// Arrays nested deeper than [`MAX_ARRAY_NESTING`](crate::MAX_ARRAY_NESTING).
    #[error("metadata key {key:?}: arrays nested deeper than {max} levels")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// The limit.
        max: u32,
    },
    /// The same metadata key twice.
    #[error("duplicate metadata key {key:?}")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// The same tensor name twice.
    #[error("duplicate tensor name {tensor:?}")]
    DuplicateTensor {
        /// The tensor name.
        tensor: String,
    },
    /// `general.alignment` is zero or not a power of two.
    #[error("general.alignment is {value}: must be a non-zero power of two")]
    BadAlignment {
        /// The value.
        value: u64,
    },
    /// More than four dimensions (ggml's `GGML_MAX_DIMS`).
    #[error("tensor {tensor:?}: {n_dims} dimensions, at most 4 are supported")]
    TooManyDims {
        /// The tensor.
        tensor: String,
        /// Dimensions declared.
        n_dims: u32,
    },
    /// A tensor with no dimensions given to the writer.
    #[error("tensor {tensor:?}: no dimensions (at least 1 needed)")]
    NoDims {
        /// The tensor.
        tensor: String,
    },
    /// The element count or byte size of a tensor overflows (`i64` elements, `u64` bytes), or a
    /// dimension is negative when read as ggml's `int64_t`.
    #[error("tensor {tensor:?}: dimensions {dims:?} overflow (element count or byte size)")]
    DimsOverflow {
        /// The tensor.
        tensor: String,
        /// The dimensions, ne0 first.
        dims: Vec<u64>,
    },
    /// A ggml type id this crate does not know.
    #[error("tensor {tensor:?}: unknown ggml type id {type_id}")]
    UnknownType {
        /// The tensor.
        tensor: String,
        /// The id read.
        type_id: u32,
    },
    /// The row length (ne0) is not a multiple of the type's block size.
    #[error(
        "tensor {tensor:?}: row length {ne0} is not a multiple of the {ggml_type} block size {block_size}"
    )]
    RowNotBlockMultiple {
        /// The tensor.
        tensor: String,
        /// Its type.
        ggml_type: GgmlType,
        /// Its row length (first dimension).
        ne0: u64,
        /// The type's block size.
        block_size: u64,
    },
    /// A tensor offset that is not a multiple of the alignment.
    #[error(
        "tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedOffset {
        /// The tensor.
        tensor: String,
        /// Its offset, relative to the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's bytes extend past the end of the file.
    #[error(
        "tensor {tensor:?}: {size} bytes at data offset {offset} (data section starts at {data_start}) run past the end of the file ({file_len} bytes)"
    )]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Its offset, relative to the data section.
        offset: u64,
        /// Its byte size.
        size: u64,
        /// Absolute offset of the data section.
        data_start: u64,
        /// File length.
        file_len: u64,
    },
    /// Two tensors share bytes.
    #[error("tensor {tensor:?} overlaps tensor {other:?} in the data section")]
    TensorOverlap {
        /// The later tensor (by offset).
        tensor: String,
        /// The earlier tensor it overlaps.
        other: String,
    },
    /// A metadata key that a getter asked for is absent.
    #[error("missing metadata key {key:?}")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A tensor that was asked for is absent.
    #[error("missing tensor {tensor:?}")]
    MissingTensor {
        /// The tensor.
        tensor: String,
    },
    /// A metadata value of another type than the getter needs.
    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    WrongType {
        /// The key.
        key: String,
        /// What the getter accepts.
        expected: &'static str,
        /// What the file holds (e.g. `"string"`, `"array<f32>"`).
        found: String,
    },
    /// An integer value that does not fit the getter's type.
    #[error("metadata key {key:?}: value {value} does not fit in {target}")]
    ValueOutOfRange {
        /// The key.
        key: String,
        /// The value read, as text.
        value: String,
        /// The getter's type.
        target: &'static str,
    },
    /// Writer: tensor data of the wrong length for its type and dimensions.
    #[error(
        "tensor {tensor:?}: {actual} bytes of data given, its type and dimensions need {expected}"
    )]
    TensorSizeMismatch {
        /// The tensor.
        tensor: String,
        /// Bytes its type and dims need.
        expected: u64,
        /// Bytes given.
        actual: u64,
    },
    /// Writer: a tensor name llama.cpp would reject (`GGML_MAX_NAME` is 64 with the NUL).
    #[error("tensor {tensor:?}: name is {len} bytes, llama.cpp allows at most 63")]
    TensorNameTooLong {
        /// The tensor.
        tensor: String,
        /// Its length in bytes.
        len: usize,
    },
}

/// A GGUF read or write error: the file (when there is one) and what went wrong.
///
/// Match on [`kind`](Self::kind) for the specific failure.
#[derive(Debug)]
pub struct GgufError {
    /// The file read or written; `None` for in-memory buffers.
    pub file: Option<PathBuf>,
    /// What went wrong.
    pub kind: GgufErrorKind,
}

impl GgufError {
    /// An error about `file` (or an in-memory buffer when `None`).
    pub fn new(file: Option<&Path>, kind: GgufErrorKind) -> Self {
        Self {
            file: file.map(Path::to_path_buf),
            kind,
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> &GgufErrorKind {
        &self.kind
    }
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(p) => write!(f, "{}: {}", p.display(), self.kind),
            None => write!(f, "<in-memory GGUF>: {}", self.kind),
        }
    }
}

impl std::error::Error for GgufError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            GgufErrorKind::Io { source } => Some(source),
            _ => None,
        }
    }
}
