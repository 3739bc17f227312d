//! Hugging Face safetensors checkpoints: one `model.safetensors`, or shards listed by a
//! `model.safetensors.index.json` (`weight_map`: tensor name -> shard file name).
//!
//! Each file is memory-mapped; headers are parsed and validated by the `safetensors` crate
//! (when it rejects one, this module works out which tensor lies and how, for the message).
//! Views are zero-copy; [`TensorView::to_f32_vec`] converts f32/f16/bf16 data.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use memmap2::Mmap;

/// Element types of safetensors tensors (re-exported from the `safetensors` crate).
pub use ::safetensors::Dtype;

/// File name of a single-file checkpoint inside a model directory.
pub const SINGLE_FILE_NAME: &str = "model.safetensors";
/// File name of a sharded checkpoint's index inside a model directory.
pub const INDEX_FILE_NAME: &str = "model.safetensors.index.json";

/// What went wrong loading a safetensors checkpoint. Wrapped in [`SafetensorsError`], which
/// adds the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetensorsErrorKind {
    /// Opening or mapping the file failed.
    #[error("I/O error: {source}")]
    Io {
        /// The underlying error.
        #[from]
        source: std::io::Error,
    },
    /// A directory with neither a single-file checkpoint nor an index.
    #[error("no safetensors checkpoint found (looked for {looked_for:?})")]
    NotFound {
        /// The files looked for.
        looked_for: Vec<PathBuf>,
    },
    /// The index is not valid JSON or has no usable `weight_map`.
    #[error("bad safetensors index: {reason}")]
    BadIndex {
        /// What is wrong.
        reason: String,
    },
    /// The index names a shard by an absolute path or one that leaves the directory.
    #[error(
        "index entry for tensor {tensor:?} names shard {shard:?}, which is not a file name inside the checkpoint directory"
    )]
    BadShardName {
        /// The tensor.
        tensor: String,
        /// The shard name as written.
        shard: String,
    },
    /// A shard listed in the index does not exist.
    #[error("shard {shard:?} (listed for tensor {tensor:?}) does not exist")]
    ShardMissing {
        /// The shard's path.
        shard: PathBuf,
        /// A tensor the index places in it.
        tensor: String,
    },
    /// The index places a tensor in a shard whose header does not list it.
    #[error("tensor {tensor:?} is not in shard {shard:?}, where the index places it")]
    TensorNotInShard {
        /// The tensor.
        tensor: String,
        /// The shard's path.
        shard: PathBuf,
    },
    /// A header that cannot be read: too short, too long, not UTF-8, not JSON, bad field.
    #[error("invalid safetensors header: {reason}")]
    BadHeader {
        /// What is wrong.
        reason: String,
    },
    /// A tensor's data offsets run past the data section.
    #[error(
        "tensor {tensor:?}: data offsets {start}..{end} run past the {data_len}-byte data section"
    )]
    OffsetsOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Declared start.
        start: usize,
        /// Declared end.
        end: usize,
        /// Bytes in the data section.
        data_len: usize,
    },
    /// A tensor whose byte range does not match shape x dtype size.
    #[error("tensor {tensor:?}: {dtype} {shape:?} needs {} bytes, its offsets are {start}..{end}", expected.map_or("an overflowing number of".to_string(), |e| e.to_string()))]
    SizeMismatch {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes shape x dtype needs (`None` if that overflows).
        expected: Option<usize>,
        /// Declared start offset.
        start: usize,
        /// Declared end offset.
        end: usize,
    },
    /// Any other inconsistency the `safetensors` crate reports (gaps between tensors, bytes
    /// after the last tensor, ...).
    #[error("inconsistent safetensors header: {reason}")]
    InconsistentHeader {
        /// What the `safetensors` crate reported.
        reason: String,
    },
    /// A tensor that is not in the checkpoint.
    #[error("tensor {tensor:?} not found in {files:?}")]
    TensorNotFound {
        /// The tensor.
        tensor: String,
        /// The checkpoint's files.
        files: Vec<PathBuf>,
    },
    /// Conversion of a dtype other than f32, f16 and bf16.
    #[error("tensor {tensor:?}: dtype {dtype} cannot be converted to f32 (only F32, F16, BF16)")]
    UnsupportedDtype {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
    },
}

/// A safetensors loading error: the file at fault and what went wrong.
#[derive(Debug)]
pub struct SafetensorsError {
    /// The file (shard, index or directory) at fault.
    pub path: PathBuf,
    /// What went wrong.
    pub kind: SafetensorsErrorKind,
}

impl SafetensorsError {
    fn new(path: &Path, kind: SafetensorsErrorKind) -> Self {
        Self {
            path: path.to_path_buf(),
            kind,
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> &SafetensorsErrorKind {
        &self.kind
    }
}

impl fmt::Display for SafetensorsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.kind)
    }
}

impl std::error::Error for SafetensorsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            SafetensorsErrorKind::Io { source } => Some(source),
            _ => None,
        }
    }
}

enum Backing {
    Mmap(Mmap),
    Owned(Vec<u8>),
    Empty,
}

struct Shard {
    path: PathBuf,
    map: Backing,
}

impl Shard {
    fn bytes(&self) -> &[u8] {
        match &self.map {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
            Backing::Empty => &[],
        }
    }
}

struct Entry {
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Byte range within the shard file.
    start: usize,
    end: usize,
}

/// A safetensors checkpoint (single file or sharded), memory-mapped.
pub struct SafetensorsModel {
    path: PathBuf,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
}

impl fmt::Debug for SafetensorsModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SafetensorsModel")
            .field("path", &self.path)
            .field("shards", &self.shards.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// A tensor of a [`SafetensorsModel`], borrowed from its file.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    name: &'a str,
    dtype: Dtype,
    shape: &'a [usize],
    bytes: &'a [u8],
    file: &'a Path,
}

impl<'a> TensorView<'a> {
    /// The tensor's name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Its shape, outermost first (PyTorch order: a linear weight is `[out, in]`).
    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    /// Its raw little-endian bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The file holding it.
    pub fn file(&self) -> &'a Path {
        self.file
    }

    /// Number of elements (product of the shape).
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The values as f32 (F32 copied, F16 and BF16 widened exactly); other dtypes are an
    /// `UnsupportedDtype` error.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, SafetensorsError> {
        let b = self.bytes;
        Ok(match self.dtype {
            Dtype::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            dtype => {
                return Err(SafetensorsError::new(
                    self.file,
                    SafetensorsErrorKind::UnsupportedDtype {
                        tensor: self.name.to_string(),
                        dtype,
                    },
                ));
            }
        })
    }
}

#[derive(serde::Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

impl SafetensorsModel {
    /// Opens a checkpoint: a directory (holding `model.safetensors.index.json` or
    /// `model.safetensors`), an index file (`*.json`), or a single `.safetensors` file.
    ///
    /// For a sharded checkpoint, every shard the index names is opened and every tensor it
    /// lists is checked to be in its shard; tensors a shard holds but the index does not list
    /// are not exposed.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SafetensorsError> {
        let path = path.as_ref();
        if path.is_dir() {
            let index = path.join(INDEX_FILE_NAME);
            let single = path.join(SINGLE_FILE_NAME);
            if index.is_file() {
                Self::open_index(&index)
            } else if single.is_file() {
                Self::open_single(&single)
            } else {
                Err(SafetensorsError::new(
                    path,
                    SafetensorsErrorKind::NotFound {
                        looked_for: vec![index, single],
                    },
                ))
            }
        } else if path.extension().is_some_and(|e| e == "json") {
            Self::open_index(path)
        } else {
            Self::open_single(path)
        }
    }

    /// Validates a single-file checkpoint held in memory (tests, fuzzing); `label` stands for
    /// the file in errors and [`TensorView::file`].
    pub fn from_bytes(label: impl AsRef<Path>, bytes: Vec<u8>) -> Result<Self, SafetensorsError> {
        let shard = Shard {
            path: label.as_ref().to_path_buf(),
            map: Backing::Owned(bytes),
        };
        Self::from_shard(shard)
    }

    fn open_single(path: &Path) -> Result<Self, SafetensorsError> {
        Self::from_shard(map_file(path)?)
    }

    fn from_shard(shard: Shard) -> Result<Self, SafetensorsError> {
        let path = shard.path.clone();
        let meta = read_header(&shard)?;
        let data_start = meta.0;
        let tensors = meta
            .1
            .tensors()
            .into_iter()
            .map(|(name, info)| (name, entry(0, data_start, info)))
            .collect();
        Ok(Self {
            path,
            shards: vec![shard],
            tensors,
        })
    }

    fn open_index(index_path: &Path) -> Result<Self, SafetensorsError> {
        let bad = |reason: String| {
            SafetensorsError::new(index_path, SafetensorsErrorKind::BadIndex { reason })
        };
        let text = std::fs::read_to_string(index_path).map_err(|source| {
            SafetensorsError::new(index_path, SafetensorsErrorKind::Io { source })
        })?;
        let index: Index = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let dir = index_path.parent().unwrap_or(Path::new("."));

        let mut shard_ids: BTreeMap<&str, usize> = BTreeMap::new();
        let mut shards = Vec::new();
        let mut headers = Vec::new();
        let mut tensors = BTreeMap::new();
        for (name, shard_name) in &index.weight_map {
            let id = match shard_ids.get(shard_name.as_str()) {
                Some(&id) => id,
                None => {
                    let rel = Path::new(shard_name);
                    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
                    if !plain || shard_name.is_empty() {
                        return Err(SafetensorsError::new(
                            index_path,
                            SafetensorsErrorKind::BadShardName {
                                tensor: name.clone(),
                                shard: shard_name.clone(),
                            },
                        ));
                    }
                    let shard_path = dir.join(rel);
                    if !shard_path.is_file() {
                        return Err(SafetensorsError::new(
                            index_path,
                            SafetensorsErrorKind::ShardMissing {
                                shard: shard_path,
                                tensor: name.clone(),
                            },
                        ));
                    }
                    let shard = map_file(&shard_path)?;
                    headers.push(read_header(&shard)?);
                    shards.push(shard);
                    shard_ids.insert(shard_name, shards.len() - 1);
                    shards.len() - 1
                }
            };
            let (data_start, meta) = &headers[id];
            let Some(info) = meta.info(name) else {
                return Err(SafetensorsError::new(
                    &shards[id].path,
                    SafetensorsErrorKind::TensorNotInShard {
                        tensor: name.clone(),
                        shard: shards[id].path.clone(),
                    },
                ));
            };
            tensors.insert(name.clone(), entry(id, *data_start, info));
        }
        Ok(Self {
            path: index_path.to_path_buf(),
            shards,
            tensors,
        })
    }

    /// The path the checkpoint was opened from (the index file or the single file).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checkpoint's tensor files.
    pub fn files(&self) -> impl ExactSizeIterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the checkpoint has no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// True when a tensor named `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The tensor named `name`, if present.
    pub fn get(&self, name: &str) -> Option<TensorView<'_>> {
        let (name, e) = self.tensors.get_key_value(name)?;
        let shard = self.shards.get(e.shard)?;
        Some(TensorView {
            name,
            dtype: e.dtype,
            shape: &e.shape,
            bytes: shard.bytes().get(e.start..e.end)?,
            file: &shard.path,
        })
    }

    /// The tensor named `name`, or `TensorNotFound` naming it and the checkpoint's files.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, SafetensorsError> {
        self.get(name).ok_or_else(|| {
            SafetensorsError::new(
                &self.path,
                SafetensorsErrorKind::TensorNotFound {
                    tensor: name.to_string(),
                    files: self.files().map(Path::to_path_buf).collect(),
                },
            )
        })
    }

    /// All tensors, sorted by name.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.tensors.keys().filter_map(|n| self.get(n))
    }
}

fn entry(shard: usize, data_start: usize, info: &::safetensors::tensor::TensorInfo) -> Entry {
    // Offsets were validated against the file by `read_metadata`.
    Entry {
        shard,
        dtype: info.dtype,
        shape: info.shape.clone(),
        start: data_start + info.data_offsets.0,
        end: data_start + info.data_offsets.1,
    }
}

fn map_file(path: &Path) -> Result<Shard, SafetensorsError> {
    let io = |source| SafetensorsError::new(path, SafetensorsErrorKind::Io { source });
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let map = if len == 0 {
        Backing::Empty
    } else {
        // SAFETY: read-only map; the file must not be modified while the model is open (the
        // contract of every mmap-based loader).
        Backing::Mmap(unsafe { Mmap::map(&file) }.map_err(io)?)
    };
    Ok(Shard {
        path: path.to_path_buf(),
        map,
    })
}

/// Parses and validates a shard's header; returns the data section's start and the metadata.
fn read_header(
    shard: &Shard,
) -> Result<(usize, ::safetensors::tensor::Metadata), SafetensorsError> {
    let bytes = shard.bytes();
    match ::safetensors::SafeTensors::read_metadata(bytes) {
        Ok((n, meta)) => Ok((8 + n, meta)),
        Err(e) => Err(SafetensorsError::new(&shard.path, diagnose(bytes, e))),
    }
}

/// Turns a `safetensors` crate error into a kind naming the tensor at fault where possible.
fn diagnose(bytes: &[u8], e: ::safetensors::SafeTensorError) -> SafetensorsErrorKind {
    use ::safetensors::SafeTensorError as E;
    let reason = e.to_string();
    match e {
        E::InvalidHeader(_)
        | E::InvalidHeaderDeserialization(_)
        | E::HeaderTooLarge
        | E::HeaderTooSmall
        | E::InvalidHeaderLength
        | E::JsonError(_) => return SafetensorsErrorKind::BadHeader { reason },
        _ => {}
    }
    find_lying_tensor(bytes).unwrap_or(SafetensorsErrorKind::InconsistentHeader { reason })
}

/// Re-reads a header the crate rejected and finds a tensor whose size or offsets are wrong.
fn find_lying_tensor(bytes: &[u8]) -> Option<SafetensorsErrorKind> {
    let n = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let header = bytes.get(8..8usize.checked_add(n)?)?;
    let data_len = bytes.len() - 8 - n;
    let map: BTreeMap<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    for (name, value) in map {
        if name == "__metadata__" {
            continue;
        }
        let info: ::safetensors::tensor::TensorInfo = serde_json::from_value(value).ok()?;
        let (start, end) = info.data_offsets;
        let expected = info
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(info.dtype.bitsize()))
            .map(|bits| bits.div_ceil(8));
        if end < start || expected != Some(end - start) {
            return Some(SafetensorsErrorKind::SizeMismatch {
                tensor: name,
                dtype: info.dtype,
                shape: info.shape,
                expected,
                start,
                end,
            });
        }
        if end > data_len {
            return Some(SafetensorsErrorKind::OffsetsOutOfBounds {
                tensor: name,
                start,
                end,
                data_len,
            });
        }
    }
    None
}
