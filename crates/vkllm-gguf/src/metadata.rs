//! Zero-copy views of GGUF metadata values.
//!
//! The reader records where each value lies in the file ([`RawValue`]); the views here borrow
//! the file's bytes and decode on access. A string array keeps one offset per element (no
//! `String` per element), numeric arrays keep only their byte range.

use std::fmt;
use std::marker::PhantomData;

use crate::value::{MetaArray, MetaValue};

/// GGUF metadata value type ids (`enum gguf_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// `u8`
    U8 = 0,
    /// `i8`
    I8 = 1,
    /// `u16`
    U16 = 2,
    /// `i16`
    I16 = 3,
    /// `u32`
    U32 = 4,
    /// `i32`
    I32 = 5,
    /// `f32`
    F32 = 6,
    /// `bool` (one byte, 0 or 1)
    Bool = 7,
    /// UTF-8 string (u64 length, bytes)
    String = 8,
    /// Array (u32 element type, u64 count, elements)
    Array = 9,
    /// `u64`
    U64 = 10,
    /// `i64`
    I64 = 11,
    /// `f64`
    F64 = 12,
}

impl ValueType {
    /// The type with GGUF id `id`, if any.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The GGUF id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Short name: `"u8"`, ..., `"bool"`, `"string"`, `"array"`.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Encoded size of one value for fixed-size types; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A byte range of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

/// Where a value lies in the file (scalars decoded, strings and arrays as ranges).
#[derive(Debug, Clone)]
pub(crate) enum RawValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(Span),
    Array(RawArray),
}

/// An array's element type, count, element bytes and (for strings and nested arrays) index.
#[derive(Debug, Clone)]
pub(crate) struct RawArray {
    pub elem: ValueType,
    pub len: usize,
    /// The element bytes (after the type and count).
    pub span: Span,
    pub index: ArrayIndex,
}

#[derive(Debug, Clone)]
pub(crate) enum ArrayIndex {
    /// Fixed-size elements: element `i` is at `span.start + i * size`.
    Fixed,
    /// Start of each string's bytes (after its length prefix). String `i` ends 8 bytes before
    /// string `i + 1` starts (its prefix), the last at `span.end`.
    Strings(Box<[usize]>),
    /// Each nested array.
    Nested(Box<[RawArray]>),
}

/// Decodes the fixed-size value of type `ty` at the start of `b`.
fn decode_scalar<'a>(ty: ValueType, b: &[u8]) -> Option<MetaValueRef<'a>> {
    Some(match ty {
        ValueType::U8 => MetaValueRef::U8(u8::decode(b.get(..1)?)),
        ValueType::I8 => MetaValueRef::I8(i8::decode(b.get(..1)?)),
        ValueType::U16 => MetaValueRef::U16(u16::decode(b.get(..2)?)),
        ValueType::I16 => MetaValueRef::I16(i16::decode(b.get(..2)?)),
        ValueType::U32 => MetaValueRef::U32(u32::decode(b.get(..4)?)),
        ValueType::I32 => MetaValueRef::I32(i32::decode(b.get(..4)?)),
        ValueType::F32 => MetaValueRef::F32(f32::decode(b.get(..4)?)),
        ValueType::Bool => MetaValueRef::Bool(bool::decode(b.get(..1)?)),
        ValueType::U64 => MetaValueRef::U64(u64::decode(b.get(..8)?)),
        ValueType::I64 => MetaValueRef::I64(i64::decode(b.get(..8)?)),
        ValueType::F64 => MetaValueRef::F64(f64::decode(b.get(..8)?)),
        ValueType::String | ValueType::Array => return None,
    })
}

/// Strings were validated as UTF-8 when the file was opened, so the fallback is unreachable.
fn str_of(bytes: &[u8], span: Span) -> &str {
    bytes
        .get(span.start..span.end)
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("")
}

/// A metadata value borrowed from a [`GgufFile`](crate::GgufFile).
#[derive(Debug, Clone, Copy)]
pub enum MetaValueRef<'a> {
    /// `u8`
    U8(u8),
    /// `i8`
    I8(i8),
    /// `u16`
    U16(u16),
    /// `i16`
    I16(i16),
    /// `u32`
    U32(u32),
    /// `i32`
    I32(i32),
    /// `u64`
    U64(u64),
    /// `i64`
    I64(i64),
    /// `f32`
    F32(f32),
    /// `f64`
    F64(f64),
    /// `bool`
    Bool(bool),
    /// A string, borrowed from the file.
    String(&'a str),
    /// An array, borrowed from the file.
    Array(MetaArrayRef<'a>),
}

impl<'a> MetaValueRef<'a> {
    pub(crate) fn new(bytes: &'a [u8], raw: &'a RawValue) -> Self {
        match raw {
            RawValue::U8(v) => Self::U8(*v),
            RawValue::I8(v) => Self::I8(*v),
            RawValue::U16(v) => Self::U16(*v),
            RawValue::I16(v) => Self::I16(*v),
            RawValue::U32(v) => Self::U32(*v),
            RawValue::I32(v) => Self::I32(*v),
            RawValue::U64(v) => Self::U64(*v),
            RawValue::I64(v) => Self::I64(*v),
            RawValue::F32(v) => Self::F32(*v),
            RawValue::F64(v) => Self::F64(*v),
            RawValue::Bool(v) => Self::Bool(*v),
            RawValue::Str(span) => Self::String(str_of(bytes, *span)),
            RawValue::Array(raw) => Self::Array(MetaArrayRef { bytes, raw }),
        }
    }

    /// The value's GGUF type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Self::U8(_) => ValueType::U8,
            Self::I8(_) => ValueType::I8,
            Self::U16(_) => ValueType::U16,
            Self::I16(_) => ValueType::I16,
            Self::U32(_) => ValueType::U32,
            Self::I32(_) => ValueType::I32,
            Self::U64(_) => ValueType::U64,
            Self::I64(_) => ValueType::I64,
            Self::F32(_) => ValueType::F32,
            Self::F64(_) => ValueType::F64,
            Self::Bool(_) => ValueType::Bool,
            Self::String(_) => ValueType::String,
            Self::Array(_) => ValueType::Array,
        }
    }

    /// Type description for messages: `"u32"`, `"string"`, `"array<f32>"`.
    pub fn type_description(&self) -> String {
        match self {
            Self::Array(a) => format!("array<{}>", a.elem_type()),
            v => v.value_type().name().to_string(),
        }
    }

    /// Any integer value, widened; `None` for non-integers.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Self::U8(v) => v.into(),
            Self::I8(v) => v.into(),
            Self::U16(v) => v.into(),
            Self::I16(v) => v.into(),
            Self::U32(v) => v.into(),
            Self::I32(v) => v.into(),
            Self::U64(v) => v.into(),
            Self::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Any integer value that fits in `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i128().and_then(|v| u64::try_from(v).ok())
    }

    /// Any integer value that fits in `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_i128().and_then(|v| i64::try_from(v).ok())
    }

    /// An `f32` or `f64` value, as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => None,
        }
    }

    /// A bool value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<MetaArrayRef<'a>> {
        match *self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }

    /// An owned copy (allocates: one `String` per string).
    pub fn to_value(&self) -> MetaValue {
        match *self {
            Self::U8(v) => MetaValue::U8(v),
            Self::I8(v) => MetaValue::I8(v),
            Self::U16(v) => MetaValue::U16(v),
            Self::I16(v) => MetaValue::I16(v),
            Self::U32(v) => MetaValue::U32(v),
            Self::I32(v) => MetaValue::I32(v),
            Self::U64(v) => MetaValue::U64(v),
            Self::I64(v) => MetaValue::I64(v),
            Self::F32(v) => MetaValue::F32(v),
            Self::F64(v) => MetaValue::F64(v),
            Self::Bool(v) => MetaValue::Bool(v),
            Self::String(s) => MetaValue::String(s.to_string()),
            Self::Array(a) => MetaValue::Array(a.to_array()),
        }
    }
}

/// An array value borrowed from a [`GgufFile`](crate::GgufFile).
#[derive(Clone, Copy)]
pub struct MetaArrayRef<'a> {
    bytes: &'a [u8],
    raw: &'a RawArray,
}

impl fmt::Debug for MetaArrayRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "array<{}>[{}]", self.raw.elem, self.raw.len)
    }
}

impl<'a> MetaArrayRef<'a> {
    /// The element type.
    pub fn elem_type(&self) -> ValueType {
        self.raw.elem
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<MetaValueRef<'a>> {
        if i >= self.raw.len {
            return None;
        }
        match &self.raw.index {
            ArrayIndex::Fixed => {
                let size = self.raw.elem.fixed_size()?;
                let start = self.raw.span.start.checked_add(i.checked_mul(size)?)?;
                decode_scalar(self.raw.elem, self.bytes.get(start..self.raw.span.end)?)
            }
            ArrayIndex::Strings(_) => self.as_strs()?.get(i).map(MetaValueRef::String),
            ArrayIndex::Nested(children) => Some(MetaValueRef::Array(MetaArrayRef {
                bytes: self.bytes,
                raw: children.get(i)?,
            })),
        }
    }

    /// All elements in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = MetaValueRef<'a>> + 'a {
        let this = *self;
        (0..self.raw.len).map(move |i| this.get(i).unwrap_or(MetaValueRef::U8(0)))
    }

    /// The elements of a string array (e.g. `tokenizer.ggml.tokens`), or `None` for another
    /// element type.
    pub fn as_strs(&self) -> Option<StrArray<'a>> {
        match &self.raw.index {
            ArrayIndex::Strings(starts) => Some(StrArray {
                bytes: self.bytes,
                starts,
                end: self.raw.span.end,
            }),
            _ => None,
        }
    }

    /// The elements as `T` when the element type is exactly `T`'s (e.g. `f32` for
    /// `tokenizer.ggml.scores`, `i32` for `tokenizer.ggml.token_type`), else `None`.
    pub fn as_typed<T: ArrayElem>(&self) -> Option<TypedArray<'a, T>> {
        if self.raw.elem != T::VALUE_TYPE {
            return None;
        }
        let data = self.bytes.get(self.raw.span.start..self.raw.span.end)?;
        Some(TypedArray {
            data,
            len: self.raw.len,
            _elem: PhantomData,
        })
    }

    /// The nested arrays of an array of arrays, or `None` for another element type.
    pub fn as_nested(&self) -> Option<impl ExactSizeIterator<Item = MetaArrayRef<'a>> + 'a> {
        let bytes = self.bytes;
        match &self.raw.index {
            ArrayIndex::Nested(children) => {
                Some(children.iter().map(move |raw| MetaArrayRef { bytes, raw }))
            }
            _ => None,
        }
    }

    /// An owned copy.
    pub fn to_array(&self) -> MetaArray {
        fn typed<T: ArrayElem>(a: &MetaArrayRef<'_>) -> Vec<T> {
            a.as_typed::<T>().map(|t| t.to_vec()).unwrap_or_default()
        }
        match self.raw.elem {
            ValueType::U8 => MetaArray::U8(typed(self)),
            ValueType::I8 => MetaArray::I8(typed(self)),
            ValueType::U16 => MetaArray::U16(typed(self)),
            ValueType::I16 => MetaArray::I16(typed(self)),
            ValueType::U32 => MetaArray::U32(typed(self)),
            ValueType::I32 => MetaArray::I32(typed(self)),
            ValueType::U64 => MetaArray::U64(typed(self)),
            ValueType::I64 => MetaArray::I64(typed(self)),
            ValueType::F32 => MetaArray::F32(typed(self)),
            ValueType::F64 => MetaArray::F64(typed(self)),
            ValueType::Bool => MetaArray::Bool(typed(self)),
            ValueType::String => MetaArray::String(
                self.as_strs()
                    .map(|s| s.iter().map(str::to_string).collect())
                    .unwrap_or_default(),
            ),
            ValueType::Array => MetaArray::Array(
                self.as_nested()
                    .map(|n| n.map(|a| a.to_array()).collect())
                    .unwrap_or_default(),
            ),
        }
    }
}

/// A string array borrowed from the file: `len()`, `get(i)`, `iter()` of `&str`.
#[derive(Clone, Copy)]
pub struct StrArray<'a> {
    bytes: &'a [u8],
    starts: &'a [usize],
    end: usize,
}

impl fmt::Debug for StrArray<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StrArray[{}]", self.starts.len())
    }
}

impl<'a> StrArray<'a> {
    /// Number of strings.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// True when there are no strings.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// String `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<&'a str> {
        let start = *self.starts.get(i)?;
        let end = match self.starts.get(i + 1) {
            Some(next) => next.checked_sub(8)?,
            None => self.end,
        };
        Some(str_of(self.bytes, Span { start, end }))
    }

    /// All strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        let this = *self;
        (0..self.len()).map(move |i| this.get(i).unwrap_or(""))
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Element types of numeric and bool arrays (decoded from little-endian bytes).
pub trait ArrayElem: sealed::Sealed + Copy + fmt::Debug + 'static {
    /// The matching GGUF value type.
    const VALUE_TYPE: ValueType;
    /// Encoded size in bytes.
    const SIZE: usize;
    /// Decodes from exactly `SIZE` little-endian bytes.
    ///
    /// # Panics
    /// If `b.len() != SIZE` (a programming error: callers slice exactly).
    fn decode(b: &[u8]) -> Self;
}

macro_rules! array_elem {
    ($t:ty, $vt:ident, $n:literal) => {
        impl sealed::Sealed for $t {}
        impl ArrayElem for $t {
            const VALUE_TYPE: ValueType = ValueType::$vt;
            const SIZE: usize = $n;
            fn decode(b: &[u8]) -> Self {
                let mut a = [0u8; $n];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    };
}

array_elem!(u8, U8, 1);
array_elem!(i8, I8, 1);
array_elem!(u16, U16, 2);
array_elem!(i16, I16, 2);
array_elem!(u32, U32, 4);
array_elem!(i32, I32, 4);
array_elem!(u64, U64, 8);
array_elem!(i64, I64, 8);
array_elem!(f32, F32, 4);
array_elem!(f64, F64, 8);

impl sealed::Sealed for bool {}
impl ArrayElem for bool {
    const VALUE_TYPE: ValueType = ValueType::Bool;
    const SIZE: usize = 1;
    fn decode(b: &[u8]) -> Self {
        assert_eq!(b.len(), 1, "bool decode takes one byte");
        b[0] != 0
    }
}

/// A numeric or bool array borrowed from the file, decoded on access (the bytes need not be
/// aligned, so no `&[T]` is handed out; [`to_vec`](Self::to_vec) copies).
#[derive(Clone, Copy)]
pub struct TypedArray<'a, T: ArrayElem> {
    data: &'a [u8],
    len: usize,
    _elem: PhantomData<T>,
}

impl<T: ArrayElem> fmt::Debug for TypedArray<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TypedArray<{}>[{}]", T::VALUE_TYPE, self.len)
    }
}

impl<'a, T: ArrayElem> TypedArray<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<T> {
        if i >= self.len {
            return None;
        }
        let start = i.checked_mul(T::SIZE)?;
        self.data.get(start..start + T::SIZE).map(T::decode)
    }

    /// All elements in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = T> + 'a {
        self.data
            .chunks_exact(T::SIZE)
            .take(self.len)
            .map(T::decode)
    }

    /// The element bytes, little-endian, `len() * size_of::<T>()` of them.
    pub fn raw_bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The elements copied into a `Vec`.
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().collect()
    }
}
