//! A GGUF v3 writer producing files llama.cpp reads.
//!
//! Layout written (the same as llama.cpp's `gguf_write_to_file` and the Python `gguf`
//! package's `GGUFWriter`): header; metadata in insertion order; tensor infos in insertion
//! order with offsets packed from 0, each tensor's size rounded up to the alignment; zero
//! padding up to the alignment; each tensor's bytes followed by zero padding up to the
//! alignment (the last one too). `general.alignment` (u32) is written only when the alignment
//! was set explicitly, like those writers do; readers default to 32.
//!
//! Also enforced, because llama.cpp rejects such files: 1 to 4 dimensions, tensor names under
//! 64 bytes, row lengths a multiple of the type's block size.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::error::{GgufError, GgufErrorKind};
use crate::file::TensorInfo;
use crate::reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC, align_up};
use crate::types::GgmlType;
use crate::value::{MetaArray, MetaValue};

/// Longest tensor name llama.cpp accepts, in bytes (`GGML_MAX_NAME` - 1).
pub const MAX_TENSOR_NAME_LEN: usize = 63;

/// A callback that writes a tensor's bytes (exactly its size) when the file is written, so a
/// large model need not be held in memory.
pub type TensorFill<'a> = Box<dyn FnMut(&mut dyn Write) -> io::Result<()> + 'a>;

enum TensorSource<'a> {
    Bytes(Cow<'a, [u8]>),
    Fill(TensorFill<'a>),
}

struct PendingTensor<'a> {
    info: TensorInfo,
    source: TensorSource<'a>,
}

/// Builds a GGUF v3 file from metadata and tensors.
///
/// ```
/// use vkllm_gguf::{GgmlType, GgufFile, writer::GgufWriter};
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", "llama")?;
/// w.add_tensor("output_norm.weight", GgmlType::F32, &[4], vec![0u8; 16])?;
/// let file = GgufFile::from_bytes(w.to_bytes()?)?;
/// assert_eq!(file.architecture()?, "llama");
/// # Ok::<(), vkllm_gguf::GgufError>(())
/// ```
pub struct GgufWriter<'a> {
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor<'a>>,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        Self::new()
    }
}

fn err(kind: GgufErrorKind) -> GgufError {
    GgufError { file: None, kind }
}

impl<'a> GgufWriter<'a> {
    /// An empty writer with the default alignment (32).
    pub fn new() -> Self {
        Self {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// The alignment that will be used.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Sets the alignment (a non-zero power of two) and writes it as `general.alignment`.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<(), GgufError> {
        if !alignment.is_power_of_two() {
            return Err(err(GgufErrorKind::BadAlignment {
                value: alignment.into(),
            }));
        }
        self.alignment = alignment.into();
        let value = MetaValue::U32(alignment);
        match self
            .metadata
            .iter_mut()
            .find(|(k, _)| k == "general.alignment")
        {
            Some((_, v)) => *v = value,
            None => self.metadata.push(("general.alignment".to_string(), value)),
        }
        Ok(())
    }

    /// Adds a metadata entry (kept in insertion order). A duplicate key is an error.
    /// `general.alignment` must be an integer that is a power of two fitting `u32`; it sets
    /// the alignment and is written as u32.
    pub fn add_metadata(
        &mut self,
        key: impl Into<String>,
        value: impl Into<MetaValue>,
    ) -> Result<(), GgufError> {
        let key = key.into();
        let value = value.into();
        if self.metadata.iter().any(|(k, _)| *k == key) {
            return Err(err(GgufErrorKind::DuplicateKey { key }));
        }
        if key == "general.alignment" {
            let v = int_of(&value).ok_or_else(|| {
                err(GgufErrorKind::WrongType {
                    key: key.clone(),
                    expected: "an integer fitting u32",
                    found: value.value_type().name().to_string(),
                })
            })?;
            let a = u32::try_from(v).map_err(|_| {
                err(GgufErrorKind::BadAlignment {
                    value: u64::try_from(v).unwrap_or(0),
                })
            })?;
            return self.set_alignment(a);
        }
        self.metadata.push((key, value));
        Ok(())
    }

    /// Number of metadata entries so far.
    pub fn metadata_len(&self) -> usize {
        self.metadata.len()
    }

    /// Number of tensors so far.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    fn check_tensor(
        &self,
        name: String,
        ggml_type: GgmlType,
        dims: &[u64],
    ) -> Result<TensorInfo, GgufError> {
        if self.tensors.iter().any(|t| t.info.name() == name) {
            return Err(err(GgufErrorKind::DuplicateTensor { tensor: name }));
        }
        if name.len() > MAX_TENSOR_NAME_LEN {
            let len = name.len();
            return Err(err(GgufErrorKind::TensorNameTooLong { tensor: name, len }));
        }
        if dims.is_empty() {
            return Err(err(GgufErrorKind::NoDims { tensor: name }));
        }
        TensorInfo::new(name, dims, ggml_type, 0).map_err(err)
    }

    /// Adds a tensor: `dims` in ggml order (ne0, the row length, first), `data` its raw bytes
    /// in that type's encoding (exactly `row_size(ne0) * rows` bytes).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ggml_type: GgmlType,
        dims: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<(), GgufError> {
        let info = self.check_tensor(name.into(), ggml_type, dims)?;
        let data = data.into();
        if data.len() as u64 != info.n_bytes() {
            return Err(err(GgufErrorKind::TensorSizeMismatch {
                tensor: info.name().to_string(),
                expected: info.n_bytes(),
                actual: data.len() as u64,
            }));
        }
        self.tensors.push(PendingTensor {
            info,
            source: TensorSource::Bytes(data),
        });
        Ok(())
    }

    /// Adds a tensor whose bytes `fill` writes when the file is written (it must write exactly
    /// the tensor's size, else the write fails with `TensorSizeMismatch`).
    pub fn add_tensor_fill(
        &mut self,
        name: impl Into<String>,
        ggml_type: GgmlType,
        dims: &[u64],
        fill: TensorFill<'a>,
    ) -> Result<(), GgufError> {
        let info = self.check_tensor(name.into(), ggml_type, dims)?;
        self.tensors.push(PendingTensor {
            info,
            source: TensorSource::Fill(fill),
        });
        Ok(())
    }

    /// Writes the file to `out`; returns the bytes written.
    pub fn write_to<W: Write>(&mut self, out: W) -> Result<u64, GgufError> {
        self.write_inner(out).map_err(err)
    }

    /// The whole file in memory.
    pub fn to_bytes(&mut self) -> Result<Vec<u8>, GgufError> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }

    /// Writes the file to `path` (created or truncated); returns the bytes written.
    pub fn write_file(&mut self, path: impl AsRef<Path>) -> Result<u64, GgufError> {
        let path = path.as_ref();
        let with_path = |kind| GgufError::new(Some(path), kind);
        let file = File::create(path).map_err(|e| with_path(e.into()))?;
        let mut out = BufWriter::new(file);
        let n = self.write_inner(&mut out).map_err(with_path)?;
        out.flush().map_err(|e| with_path(e.into()))?;
        Ok(n)
    }

    fn write_inner<W: Write>(&mut self, out: W) -> Result<u64, GgufErrorKind> {
        let align = self.alignment;
        let mut w = Counting { inner: out, n: 0 };
        w.write_all(&GGUF_MAGIC)?;
        w.write_all(&3u32.to_le_bytes())?;
        w.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
        w.write_all(&(self.metadata.len() as u64).to_le_bytes())?;
        for (key, value) in &self.metadata {
            write_str(&mut w, key)?;
            w.write_all(&value.value_type().id().to_le_bytes())?;
            write_value(&mut w, value)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            let info = &t.info;
            write_str(&mut w, info.name())?;
            w.write_all(&(info.n_dims() as u32).to_le_bytes())?;
            for d in info.dims() {
                w.write_all(&d.to_le_bytes())?;
            }
            w.write_all(&info.ggml_type().id().to_le_bytes())?;
            w.write_all(&offset.to_le_bytes())?;
            offset = offset
                .checked_add(info.n_bytes())
                .and_then(|end| align_up(end, align))
                .ok_or_else(|| GgufErrorKind::DimsOverflow {
                    tensor: info.name().to_string(),
                    dims: info.dims().to_vec(),
                })?;
        }
        pad(&mut w, align)?;
        for t in &mut self.tensors {
            let start = w.n;
            match &mut t.source {
                TensorSource::Bytes(b) => w.write_all(b)?,
                TensorSource::Fill(f) => f(&mut w)?,
            }
            let actual = w.n - start;
            if actual != t.info.n_bytes() {
                return Err(GgufErrorKind::TensorSizeMismatch {
                    tensor: t.info.name().to_string(),
                    expected: t.info.n_bytes(),
                    actual,
                });
            }
            pad(&mut w, align)?;
        }
        w.flush()?;
        Ok(w.n)
    }
}

fn int_of(v: &MetaValue) -> Option<i128> {
    Some(match *v {
        MetaValue::U8(x) => x.into(),
        MetaValue::I8(x) => x.into(),
        MetaValue::U16(x) => x.into(),
        MetaValue::I16(x) => x.into(),
        MetaValue::U32(x) => x.into(),
        MetaValue::I32(x) => x.into(),
        MetaValue::U64(x) => x.into(),
        MetaValue::I64(x) => x.into(),
        _ => return None,
    })
}

/// Counts the bytes written through it.
struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn pad<W: Write>(w: &mut Counting<W>, align: u64) -> io::Result<()> {
    let target = align_up(w.n, align).unwrap_or(w.n);
    let zeros = [0u8; 64];
    let mut left = target - w.n;
    while left > 0 {
        let k = left.min(zeros.len() as u64) as usize;
        w.write_all(&zeros[..k])?;
        left -= k as u64;
    }
    Ok(())
}

fn write_str(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_value(w: &mut impl Write, v: &MetaValue) -> io::Result<()> {
    match v {
        MetaValue::U8(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::I8(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::U16(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::I16(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::U32(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::I32(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::U64(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::I64(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::F32(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::F64(x) => w.write_all(&x.to_le_bytes()),
        MetaValue::Bool(x) => w.write_all(&[u8::from(*x)]),
        MetaValue::String(s) => write_str(w, s),
        MetaValue::Array(a) => write_array(w, a),
    }
}

/// An array's payload: element type, count, elements (nested arrays the same, recursively).
fn write_array(w: &mut impl Write, a: &MetaArray) -> io::Result<()> {
    w.write_all(&a.elem_type().id().to_le_bytes())?;
    w.write_all(&(a.len() as u64).to_le_bytes())?;
    macro_rules! each {
        ($v:expr) => {{
            for x in $v {
                w.write_all(&x.to_le_bytes())?;
            }
            Ok(())
        }};
    }
    match a {
        MetaArray::U8(v) => w.write_all(v),
        MetaArray::I8(v) => each!(v),
        MetaArray::U16(v) => each!(v),
        MetaArray::I16(v) => each!(v),
        MetaArray::U32(v) => each!(v),
        MetaArray::I32(v) => each!(v),
        MetaArray::U64(v) => each!(v),
        MetaArray::I64(v) => each!(v),
        MetaArray::F32(v) => each!(v),
        MetaArray::F64(v) => each!(v),
        MetaArray::Bool(v) => each!(v.iter().map(|&b| u8::from(b))),
        MetaArray::String(v) => {
            for s in v {
                write_str(w, s)?;
            }
            Ok(())
        }
        MetaArray::Array(v) => {
            for inner in v {
                write_array(w, inner)?;
            }
            Ok(())
        }
    }
}
