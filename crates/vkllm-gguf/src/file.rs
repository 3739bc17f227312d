//! [`GgufFile`]: an opened, validated GGUF file, and its [`TensorInfo`] records.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{GgufError, GgufErrorKind};
use crate::metadata::{ArrayElem, MetaArrayRef, MetaValueRef, StrArray, TypedArray};
use crate::reader::{self, MAX_DIMS, RawKv};
use crate::types::GgmlType;
use crate::value::{FromMetaValue, Mismatch};

/// One tensor-info record: name, dimensions (ggml order), type and data offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    name: String,
    dims: [u64; MAX_DIMS],
    n_dims: u8,
    ggml_type: GgmlType,
    offset: u64,
    n_elements: u64,
    n_bytes: u64,
}

impl TensorInfo {
    /// Validates the geometry: at most 4 dims, element count within `i64`, row length a
    /// multiple of the block size, byte size within `u64`.
    pub(crate) fn new(
        name: String,
        dims: &[u64],
        ggml_type: GgmlType,
        offset: u64,
    ) -> Result<Self, GgufErrorKind> {
        if dims.len() > MAX_DIMS {
            return Err(GgufErrorKind::TooManyDims {
                tensor: name,
                n_dims: u32::try_from(dims.len()).unwrap_or(u32::MAX),
            });
        }
        let overflow = |name: String| GgufErrorKind::DimsOverflow {
            tensor: name,
            dims: dims.to_vec(),
        };
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64 && dims.iter().all(|&d| d <= i64::MAX as u64));
        let Some(n_elements) = n_elements else {
            return Err(overflow(name));
        };
        let ne0 = dims.first().copied().unwrap_or(1);
        let block_size = ggml_type.block_size();
        if !ne0.is_multiple_of(block_size) {
            return Err(GgufErrorKind::RowNotBlockMultiple {
                tensor: name,
                ggml_type,
                ne0,
                block_size,
            });
        }
        // ne0 is a multiple of the block size, so n_elements is too.
        let Some(n_bytes) = (n_elements / block_size).checked_mul(ggml_type.type_size()) else {
            return Err(overflow(name));
        };
        let mut d = [1u64; MAX_DIMS];
        d[..dims.len()].copy_from_slice(dims);
        Ok(Self {
            name,
            dims: d,
            n_dims: dims.len() as u8,
            ggml_type,
            offset,
            n_elements,
            n_bytes,
        })
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Dimensions in ggml order: `dims()[0]` (ne0) is the row length, the fastest-varying
    /// index. A PyTorch `[out, in]` weight is `[in, out]` here.
    pub fn dims(&self) -> &[u64] {
        &self.dims[..self.n_dims as usize]
    }

    /// Number of dimensions (0..=4).
    pub fn n_dims(&self) -> usize {
        self.n_dims as usize
    }

    /// The element type.
    pub fn ggml_type(&self) -> GgmlType {
        self.ggml_type
    }

    /// Offset of the tensor's bytes from the start of the data section (a multiple of the
    /// alignment). Add [`GgufFile::data_offset`] for the file offset.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Number of elements (product of the dims).
    pub fn n_elements(&self) -> u64 {
        self.n_elements
    }

    /// Size of the tensor's data in bytes.
    pub fn n_bytes(&self) -> u64 {
        self.n_bytes
    }

    /// Row length (ne0; 1 for a 0-dim tensor).
    pub fn row_len(&self) -> u64 {
        self.dims[0]
    }

    /// Number of rows (elements / ne0; 0 when ne0 is 0).
    pub fn n_rows(&self) -> u64 {
        self.n_elements.checked_div(self.dims[0]).unwrap_or(0)
    }
}

enum Backing {
    Mmap(Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// An opened GGUF file (v2 or v3): validated on open, then read in place (zero-copy).
///
/// Metadata strings and arrays and tensor bytes are borrowed from the mapping; only the tensor
/// names, one offset per string-array element and the lookup indices are allocated.
pub struct GgufFile {
    path: Option<PathBuf>,
    data: Backing,
    version: u32,
    alignment: u64,
    data_offset: u64,
    kvs: Vec<RawKv>,
    /// Indices into `kvs`, sorted by key.
    kv_sorted: Vec<usize>,
    tensors: Vec<TensorInfo>,
    /// Indices into `tensors`, sorted by name.
    tensor_sorted: Vec<usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("len", &self.as_bytes().len())
            .field("metadata", &self.kvs.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and validates the file at `path`.
    ///
    /// The mapping assumes nobody truncates or rewrites the file while it is open (as every
    /// mmap-based loader does).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref();
        let err = |source: std::io::Error| GgufError::new(Some(path), GgufErrorKind::Io { source });
        let file = File::open(path).map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        let data = if len == 0 {
            Backing::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only; the documented contract is that the file is not
            // modified while this GgufFile lives.
            Backing::Mmap(unsafe { Mmap::map(&file) }.map_err(err)?)
        };
        Self::from_backing(Some(path.to_path_buf()), data)
    }

    /// Validates a GGUF image held in memory (tests, fuzzing, downloaded buffers).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::from_backing(None, Backing::Owned(bytes))
    }

    fn from_backing(path: Option<PathBuf>, data: Backing) -> Result<Self, GgufError> {
        let parsed = match reader::parse(data.bytes()) {
            Ok(p) => p,
            Err(kind) => return Err(GgufError { file: path, kind }),
        };
        let mut file = Self {
            path,
            data,
            version: parsed.version,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
            kv_sorted: (0..parsed.kvs.len()).collect(),
            kvs: parsed.kvs,
            tensor_sorted: (0..parsed.tensors.len()).collect(),
            tensors: parsed.tensors,
        };
        let mut kv_sorted = std::mem::take(&mut file.kv_sorted);
        kv_sorted.sort_unstable_by(|&a, &b| file.key_at(a).cmp(file.key_at(b)));
        file.kv_sorted = kv_sorted;
        let tensors = &file.tensors;
        file.tensor_sorted
            .sort_unstable_by(|&a, &b| tensors[a].name.cmp(&tensors[b].name));
        Ok(file)
    }

    fn key_at(&self, i: usize) -> &str {
        let span = self.kvs[i].key;
        self.as_bytes()
            .get(span.start..span.end)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    }

    fn err(&self, kind: GgufErrorKind) -> GgufError {
        GgufError::new(self.path.as_deref(), kind)
    }

    /// The path given to [`open`](Self::open); `None` for [`from_bytes`](Self::from_bytes).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of the data section and tensor offsets (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// File offset where the data section starts (tensor offsets are relative to it).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.bytes()
    }

    /// Number of metadata entries.
    pub fn metadata_len(&self) -> usize {
        self.kvs.len()
    }

    /// All metadata entries in file order.
    pub fn metadata(&self) -> impl ExactSizeIterator<Item = (&str, MetaValueRef<'_>)> + '_ {
        let bytes = self.as_bytes();
        (0..self.kvs.len())
            .map(move |i| (self.key_at(i), MetaValueRef::new(bytes, &self.kvs[i].value)))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<MetaValueRef<'_>> {
        let pos = self
            .kv_sorted
            .binary_search_by(|&i| self.key_at(i).cmp(key))
            .ok()?;
        let kv = &self.kvs[self.kv_sorted[pos]];
        Some(MetaValueRef::new(self.as_bytes(), &kv.value))
    }

    /// True when `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The value of `key` as `T`: `MissingKey` when absent, `WrongType` or `ValueOutOfRange`
    /// when it does not convert (see [`FromMetaValue`] for what converts).
    pub fn get_as<'a, T: FromMetaValue<'a>>(&'a self, key: &str) -> Result<T, GgufError> {
        self.get_opt(key)?.ok_or_else(|| {
            self.err(GgufErrorKind::MissingKey {
                key: key.to_string(),
            })
        })
    }

    /// Like [`get_as`](Self::get_as), but `Ok(None)` when the key is absent (a present key of
    /// the wrong type is still an error).
    pub fn get_opt<'a, T: FromMetaValue<'a>>(&'a self, key: &str) -> Result<Option<T>, GgufError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match T::from_meta(v) {
            Ok(t) => Ok(Some(t)),
            Err(Mismatch::WrongType) => Err(self.err(GgufErrorKind::WrongType {
                key: key.to_string(),
                expected: T::EXPECTED,
                found: v.type_description(),
            })),
            Err(Mismatch::OutOfRange) => Err(self.err(GgufErrorKind::ValueOutOfRange {
                key: key.to_string(),
                value: v
                    .as_i128()
                    .map_or_else(|| format!("{v:?}"), |x| x.to_string()),
                target: T::EXPECTED,
            })),
        }
    }

    /// `key` as `u32` (any integer type whose value fits).
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.get_as(key)
    }

    /// `key` as `u64` (any integer type whose value fits).
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.get_as(key)
    }

    /// `key` as `usize` (any integer type whose value fits).
    pub fn get_usize(&self, key: &str) -> Result<usize, GgufError> {
        self.get_as(key)
    }

    /// `key` as `i32` (any integer type whose value fits).
    pub fn get_i32(&self, key: &str) -> Result<i32, GgufError> {
        self.get_as(key)
    }

    /// `key` as `i64` (any integer type whose value fits).
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        self.get_as(key)
    }

    /// `key` as `f32` (an `f32`, or an `f64` rounded).
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.get_as(key)
    }

    /// `key` as `f64` (an `f32` or `f64`).
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        self.get_as(key)
    }

    /// `key` as a bool.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        self.get_as(key)
    }

    /// `key` as a string borrowed from the file (e.g. `tokenizer.chat_template`).
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        self.get_as(key)
    }

    /// `key` as an array of any element type.
    pub fn get_array(&self, key: &str) -> Result<MetaArrayRef<'_>, GgufError> {
        self.get_as(key)
    }

    /// `key` as a string array (e.g. `tokenizer.ggml.tokens`, `tokenizer.ggml.merges`).
    pub fn get_str_array(&self, key: &str) -> Result<StrArray<'_>, GgufError> {
        self.get_as(key)
    }

    /// `key` as an array whose element type is exactly `T` (e.g. `f32` for
    /// `tokenizer.ggml.scores`, `i32` for `tokenizer.ggml.token_type`).
    pub fn get_typed_array<T: ArrayElem>(&self, key: &str) -> Result<TypedArray<'_, T>, GgufError> {
        match self.get_as::<TypedArray<'_, T>>(key) {
            Err(GgufError {
                file,
                kind: GgufErrorKind::WrongType { key, found, .. },
            }) => Err(GgufError {
                file,
                kind: GgufErrorKind::WrongType {
                    key,
                    expected: array_name::<T>(),
                    found,
                },
            }),
            r => r,
        }
    }

    /// `general.architecture` (e.g. `"llama"`, `"qwen2"`, `"gemma3"`).
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        let pos = self
            .tensor_sorted
            .binary_search_by(|&i| self.tensors[i].name.as_str().cmp(name))
            .ok()?;
        Some(&self.tensors[self.tensor_sorted[pos]])
    }

    /// The tensor named `name`, or a `MissingTensor` error naming it and the file.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor(name).ok_or_else(|| {
            self.err(GgufErrorKind::MissingTensor {
                tensor: name.to_string(),
            })
        })
    }

    /// The bytes of a tensor of this file (zero-copy).
    ///
    /// # Panics
    /// If `info` does not come from this file and lies outside it (a programming error).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let range = self.data_offset.checked_add(info.offset).and_then(|start| {
            let end = start.checked_add(info.n_bytes)?;
            Some(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
        });
        match range.and_then(|r| self.as_bytes().get(r)) {
            Some(b) => b,
            None => panic!(
                "TensorInfo {:?} does not belong to this GgufFile",
                info.name
            ),
        }
    }

    /// The bytes of the tensor named `name`, if present.
    pub fn tensor_data(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).map(|t| self.tensor_bytes(t))
    }
}

fn array_name<T: ArrayElem>() -> &'static str {
    use crate::metadata::ValueType::*;
    match T::VALUE_TYPE {
        U8 => "array<u8>",
        I8 => "array<i8>",
        U16 => "array<u16>",
        I16 => "array<i16>",
        U32 => "array<u32>",
        I32 => "array<i32>",
        U64 => "array<u64>",
        I64 => "array<i64>",
        F32 => "array<f32>",
        F64 => "array<f64>",
        Bool => "array<bool>",
        String => "array<string>",
        Array => "array<array>",
    }
}
