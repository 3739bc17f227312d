//! The GGUF parser: validates a whole file's layout and records where everything lies.
//!
//! Layout (v2 and v3, little-endian): `"GGUF"`, u32 version, u64 tensor count, u64 metadata
//! count; metadata entries (string key, u32 type, value); tensor infos (string name, u32
//! n_dims, u64 dims ne0 first, u32 ggml type, u64 offset into the data section); padding to
//! `general.alignment` (default 32); the data section. A string is a u64 length and bytes.
//!
//! Every count is checked against the bytes left before anything proportional to it is
//! allocated, and all offset arithmetic is overflow-checked.

use crate::error::{GgufErrorKind, Section};
use crate::file::TensorInfo;
use crate::metadata::{ArrayIndex, RawArray, RawValue, Span, ValueType};
use crate::types::GgmlType;

/// The magic bytes that open every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest array-of-array nesting the reader accepts (1 = a plain array).
pub const MAX_ARRAY_NESTING: u32 = 8;
/// Most tensor dimensions (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// Smallest encoded sizes, used to bound counts before allocating.
const MIN_KV_BYTES: usize = 8 + 4 + 1; // empty key, type, one-byte value
const MIN_TENSOR_INFO_BYTES: usize = 8 + 4 + 4 + 8; // empty name, n_dims 0, type, offset
const MIN_NESTED_ARRAY_BYTES: usize = 4 + 8; // type, count

/// One metadata entry: the key's byte range and its value.
#[derive(Debug, Clone)]
pub(crate) struct RawKv {
    pub key: Span,
    pub value: RawValue,
}

/// Everything the parser learned about a file.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: u64,
    pub data_offset: u64,
    pub kvs: Vec<RawKv>,
    pub tensors: Vec<TensorInfo>,
}

struct Parser<'a> {
    buf: &'a [u8],
    pos: usize,
    section: Section,
    /// The key or tensor being read, for messages.
    item: String,
}

impl<'a> Parser<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], GgufErrorKind> {
        let available = self.remaining();
        let end = self.pos.checked_add(n).filter(|_| n <= available);
        match end.and_then(|end| self.buf.get(self.pos..end).map(|b| (b, end))) {
            Some((bytes, end)) => {
                self.pos = end;
                Ok(bytes)
            }
            None => Err(GgufErrorKind::Truncated {
                section: self.section,
                item: self.item.clone(),
                offset: self.pos as u64,
                needed: n as u64,
                available: available as u64,
            }),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufErrorKind> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, GgufErrorKind> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, GgufErrorKind> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, GgufErrorKind> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of things needing at least `min_size` bytes each, checked against what is left.
    fn count(&mut self, what: &'static str, min_size: usize) -> Result<usize, GgufErrorKind> {
        let count = self.u64()?;
        let available = self.remaining();
        let max = (available / min_size.max(1)) as u64;
        if count > max {
            return Err(GgufErrorKind::CountTooLarge {
                section: self.section,
                item: self.item.clone(),
                what,
                count,
                max,
                available: available as u64,
            });
        }
        // count <= max <= available, so it fits in usize.
        Ok(count as usize)
    }

    /// A length-prefixed UTF-8 string; returns its byte range.
    fn string(&mut self) -> Result<Span, GgufErrorKind> {
        let len = self.u64()?;
        let available = self.remaining();
        if len > available as u64 {
            return Err(GgufErrorKind::StringPastEof {
                section: self.section,
                item: self.item.clone(),
                offset: self.pos as u64,
                len,
                available: available as u64,
            });
        }
        let start = self.pos;
        let bytes = self.take(len as usize)?;
        if std::str::from_utf8(bytes).is_err() {
            return Err(GgufErrorKind::InvalidUtf8 {
                section: self.section,
                item: self.item.clone(),
                offset: start as u64,
            });
        }
        Ok(Span {
            start,
            end: self.pos,
        })
    }

    fn str_at(&self, span: Span) -> &'a str {
        self.buf
            .get(span.start..span.end)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    }

    fn value_type(&mut self) -> Result<ValueType, GgufErrorKind> {
        let id = self.u32()?;
        ValueType::from_id(id).ok_or_else(|| GgufErrorKind::InvalidValueType {
            key: self.item.clone(),
            type_id: id,
        })
    }

    fn check_bool(&self, b: u8) -> Result<bool, GgufErrorKind> {
        match b {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(GgufErrorKind::InvalidBool {
                key: self.item.clone(),
                value,
            }),
        }
    }

    fn value(&mut self, ty: ValueType) -> Result<RawValue, GgufErrorKind> {
        Ok(match ty {
            ValueType::U8 => RawValue::U8(self.u8()?),
            ValueType::I8 => RawValue::I8(i8::from_le_bytes(self.array()?)),
            ValueType::U16 => RawValue::U16(u16::from_le_bytes(self.array()?)),
            ValueType::I16 => RawValue::I16(i16::from_le_bytes(self.array()?)),
            ValueType::U32 => RawValue::U32(self.u32()?),
            ValueType::I32 => RawValue::I32(i32::from_le_bytes(self.array()?)),
            ValueType::U64 => RawValue::U64(self.u64()?),
            ValueType::I64 => RawValue::I64(i64::from_le_bytes(self.array()?)),
            ValueType::F32 => RawValue::F32(f32::from_le_bytes(self.array()?)),
            ValueType::F64 => RawValue::F64(f64::from_le_bytes(self.array()?)),
            ValueType::Bool => {
                let b = self.u8()?;
                RawValue::Bool(self.check_bool(b)?)
            }
            ValueType::String => RawValue::Str(self.string()?),
            ValueType::Array => RawValue::Array(self.array_value(1)?),
        })
    }

    /// An array (element type, count, elements) at nesting level `depth` (1 = outermost).
    fn array_value(&mut self, depth: u32) -> Result<RawArray, GgufErrorKind> {
        if depth > MAX_ARRAY_NESTING {
            return Err(GgufErrorKind::NestingTooDeep {
                key: self.item.clone(),
                max: MAX_ARRAY_NESTING,
            });
        }
        let elem = self.value_type()?;
        let min_size = match elem {
            ValueType::String => 8,
            ValueType::Array => MIN_NESTED_ARRAY_BYTES,
            fixed => fixed.fixed_size().unwrap_or(1),
        };
        let len = self.count("array elements", min_size)?;
        let start = self.pos;
        let index = match elem {
            ValueType::String => {
                let mut starts = Vec::with_capacity(len);
                for _ in 0..len {
                    starts.push(self.string()?.start);
                }
                ArrayIndex::Strings(starts.into_boxed_slice())
            }
            ValueType::Array => {
                let mut children = Vec::with_capacity(len);
                for _ in 0..len {
                    children.push(self.array_value(depth + 1)?);
                }
                ArrayIndex::Nested(children.into_boxed_slice())
            }
            fixed => {
                // count() bounded len * size by the bytes left, so this cannot overflow.
                let size = fixed.fixed_size().unwrap_or(1);
                let bytes = self.take(len * size)?;
                if fixed == ValueType::Bool {
                    for &b in bytes {
                        self.check_bool(b)?;
                    }
                }
                ArrayIndex::Fixed
            }
        };
        Ok(RawArray {
            elem,
            len,
            span: Span {
                start,
                end: self.pos,
            },
            index,
        })
    }
}

/// Parses and validates the whole file held in `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, GgufErrorKind> {
    let mut p = Parser {
        buf,
        pos: 0,
        section: Section::Header,
        item: "magic".to_string(),
    };

    // Header.
    let magic = buf.get(..4).unwrap_or(buf);
    if (magic.len() == 4 && magic != GGUF_MAGIC) || !GGUF_MAGIC.starts_with(magic) {
        return Err(GgufErrorKind::BadMagic {
            found: magic.to_vec(),
        });
    }
    p.take(4)?;
    p.item = "version".to_string();
    let version = p.u32()?;
    if version != 2 && version != 3 {
        return Err(GgufErrorKind::UnsupportedVersion { version });
    }
    p.item = "tensor count".to_string();
    let n_tensors_raw = p.u64()?;
    p.item = "metadata count".to_string();
    let n_kv = p.count("metadata entries", MIN_KV_BYTES)?;
    p.item = "tensor count".to_string();
    let available = p.remaining();
    let max_tensors = (available / MIN_TENSOR_INFO_BYTES) as u64;
    if n_tensors_raw > max_tensors {
        return Err(GgufErrorKind::CountTooLarge {
            section: Section::Header,
            item: p.item.clone(),
            what: "tensors",
            count: n_tensors_raw,
            max: max_tensors,
            available: available as u64,
        });
    }
    let n_tensors = n_tensors_raw as usize;

    // Metadata.
    p.section = Section::Metadata;
    let mut kvs = Vec::with_capacity(n_kv);
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..n_kv {
        p.item = format!("metadata entry #{i}");
        let key = p.string()?;
        p.item = p.str_at(key).to_string();
        let ty = p.value_type()?;
        let value = p.value(ty)?;
        if p.item == "general.alignment" {
            alignment = read_alignment(&value, &p.item)?;
        }
        kvs.push(RawKv { key, value });
    }
    let mut keys: Vec<&str> = kvs.iter().map(|kv| p.str_at(kv.key)).collect();
    keys.sort_unstable();
    if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
        return Err(GgufErrorKind::DuplicateKey {
            key: w[0].to_string(),
        });
    }

    // Tensor infos.
    p.section = Section::TensorInfo;
    let mut tensors = Vec::with_capacity(n_tensors);
    for i in 0..n_tensors {
        p.item = format!("tensor #{i}");
        let name_span = p.string()?;
        let name = p.str_at(name_span).to_string();
        p.item.clone_from(&name);
        let n_dims = p.u32()?;
        if n_dims as usize > MAX_DIMS {
            return Err(GgufErrorKind::TooManyDims {
                tensor: name,
                n_dims,
            });
        }
        let mut dims = [1u64; MAX_DIMS];
        for d in dims.iter_mut().take(n_dims as usize) {
            *d = p.u64()?;
        }
        let type_id = p.u32()?;
        let offset = p.u64()?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| GgufErrorKind::UnknownType {
            tensor: name.clone(),
            type_id,
        })?;
        let info = TensorInfo::new(name, &dims[..n_dims as usize], ggml_type, offset)?;
        if !offset.is_multiple_of(alignment) {
            return Err(GgufErrorKind::MisalignedOffset {
                tensor: info.name().to_string(),
                offset,
                alignment,
            });
        }
        tensors.push(info);
    }
    let mut by_name: Vec<&TensorInfo> = tensors.iter().collect();
    by_name.sort_unstable_by(|a, b| a.name().cmp(b.name()));
    if let Some(w) = by_name.windows(2).find(|w| w[0].name() == w[1].name()) {
        return Err(GgufErrorKind::DuplicateTensor {
            tensor: w[0].name().to_string(),
        });
    }

    // Data section.
    p.section = Section::TensorData;
    let file_len = buf.len() as u64;
    let data_offset = align_up(p.pos as u64, alignment)
        .ok_or(GgufErrorKind::BadAlignment { value: alignment })?;
    check_tensor_bounds(&tensors, data_offset, file_len)?;

    Ok(Parsed {
        version,
        alignment,
        data_offset,
        kvs,
        tensors,
    })
}

/// `general.alignment`: any integer type, non-zero power of two.
fn read_alignment(value: &RawValue, key: &str) -> Result<u64, GgufErrorKind> {
    let v: i128 = match *value {
        RawValue::U8(v) => v.into(),
        RawValue::I8(v) => v.into(),
        RawValue::U16(v) => v.into(),
        RawValue::I16(v) => v.into(),
        RawValue::U32(v) => v.into(),
        RawValue::I32(v) => v.into(),
        RawValue::U64(v) => v.into(),
        RawValue::I64(v) => v.into(),
        _ => {
            let found = match value {
                RawValue::Str(_) => "string",
                RawValue::Array(_) => "array",
                RawValue::Bool(_) => "bool",
                _ => "float",
            };
            return Err(GgufErrorKind::WrongType {
                key: key.to_string(),
                expected: "an integer fitting u32",
                found: found.to_string(),
            });
        }
    };
    match u32::try_from(v) {
        Ok(a) if a.is_power_of_two() => Ok(a.into()),
        _ => Err(GgufErrorKind::BadAlignment {
            value: u64::try_from(v).unwrap_or(0),
        }),
    }
}

/// Rounds `x` up to a multiple of the power of two `align`.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// Every tensor inside the file, and no two sharing bytes.
fn check_tensor_bounds(
    tensors: &[TensorInfo],
    data_offset: u64,
    file_len: u64,
) -> Result<(), GgufErrorKind> {
    for t in tensors {
        let end = data_offset
            .checked_add(t.offset())
            .and_then(|start| start.checked_add(t.n_bytes()));
        if end.is_none_or(|end| end > file_len) {
            return Err(GgufErrorKind::TensorOutOfBounds {
                tensor: t.name().to_string(),
                offset: t.offset(),
                size: t.n_bytes(),
                data_start: data_offset,
                file_len,
            });
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes() > 0).collect();
    by_offset.sort_unstable_by_key(|t| t.offset());
    for w in by_offset.windows(2) {
        // In bounds above, so offset + n_bytes cannot overflow.
        if w[0].offset() + w[0].n_bytes() > w[1].offset() {
            return Err(GgufErrorKind::TensorOverlap {
                tensor: w[1].name().to_string(),
                other: w[0].name().to_string(),
            });
        }
    }
    Ok(())
}
