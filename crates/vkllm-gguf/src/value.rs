//! Owned metadata values (what the writer takes) and the typed-getter conversions.

use crate::metadata::{ArrayElem, MetaArrayRef, MetaValueRef, StrArray, TypedArray, ValueType};

/// An owned GGUF metadata value, as given to the [writer](crate::writer::GgufWriter) or copied
/// out of a file with [`MetaValueRef::to_value`].
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
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
    /// UTF-8 string.
    String(String),
    /// Array (homogeneous by construction).
    Array(MetaArray),
}

impl MetaValue {
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
}

/// An owned, homogeneous GGUF array. Arrays of arrays may mix element types between the inner
/// arrays (each inner array carries its own type in the file).
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    /// `u8` elements.
    U8(Vec<u8>),
    /// `i8` elements.
    I8(Vec<i8>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `i16` elements.
    I16(Vec<i16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `u64` elements.
    U64(Vec<u64>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f64` elements.
    F64(Vec<f64>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// String elements.
    String(Vec<String>),
    /// Nested arrays.
    Array(Vec<MetaArray>),
}

impl MetaArray {
    /// The element type.
    pub fn elem_type(&self) -> ValueType {
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

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Self::U8(v) => v.len(),
            Self::I8(v) => v.len(),
            Self::U16(v) => v.len(),
            Self::I16(v) => v.len(),
            Self::U32(v) => v.len(),
            Self::I32(v) => v.len(),
            Self::U64(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::F32(v) => v.len(),
            Self::F64(v) => v.len(),
            Self::Bool(v) => v.len(),
            Self::String(v) => v.len(),
            Self::Array(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for MetaValue {
            fn from(x: $t) -> Self { MetaValue::$v(x) }
        }
        impl From<Vec<$t>> for MetaArray {
            fn from(x: Vec<$t>) -> Self { MetaArray::$v(x) }
        }
        impl From<Vec<$t>> for MetaValue {
            fn from(x: Vec<$t>) -> Self { MetaValue::Array(MetaArray::$v(x)) }
        }
    )*};
}

from_scalar!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String);

impl From<&str> for MetaValue {
    fn from(s: &str) -> Self {
        MetaValue::String(s.to_string())
    }
}

impl From<Vec<&str>> for MetaValue {
    fn from(v: Vec<&str>) -> Self {
        MetaValue::Array(MetaArray::String(
            v.into_iter().map(str::to_string).collect(),
        ))
    }
}

impl From<MetaArray> for MetaValue {
    fn from(a: MetaArray) -> Self {
        MetaValue::Array(a)
    }
}

impl From<Vec<MetaArray>> for MetaValue {
    fn from(v: Vec<MetaArray>) -> Self {
        MetaValue::Array(MetaArray::Array(v))
    }
}

/// Why a [`FromMetaValue`] conversion failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The value has another type.
    WrongType,
    /// An integer of a fitting type whose value does not fit the target.
    OutOfRange,
}

/// Types the typed getters ([`GgufFile::get_as`](crate::GgufFile::get_as)) can produce.
///
/// Integers accept any GGUF integer width whose value fits (llama.cpp writers vary between
/// u32, i32 and u64 for the same key); `f32`/`f64` accept either float width; other types
/// need their exact GGUF type.
pub trait FromMetaValue<'a>: Sized {
    /// What the conversion accepts, for messages (`"integer fitting u32"`, `"string"`, ...).
    const EXPECTED: &'static str;
    /// Converts, or says why not.
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch>;
}

macro_rules! from_meta_int {
    ($($t:ty),*) => {$(
        impl<'a> FromMetaValue<'a> for $t {
            const EXPECTED: &'static str = concat!("an integer fitting ", stringify!($t));
            fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
                let wide = v.as_i128().ok_or(Mismatch::WrongType)?;
                <$t>::try_from(wide).map_err(|_| Mismatch::OutOfRange)
            }
        }
    )*};
}

from_meta_int!(u8, i8, u16, i16, u32, i32, u64, i64, usize);

impl<'a> FromMetaValue<'a> for f32 {
    const EXPECTED: &'static str = "f32 or f64";
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
        match v {
            MetaValueRef::F32(x) => Ok(x),
            MetaValueRef::F64(x) => Ok(x as f32),
            _ => Err(Mismatch::WrongType),
        }
    }
}

impl<'a> FromMetaValue<'a> for f64 {
    const EXPECTED: &'static str = "f32 or f64";
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
        v.as_f64().ok_or(Mismatch::WrongType)
    }
}

impl<'a> FromMetaValue<'a> for bool {
    const EXPECTED: &'static str = "bool";
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
        v.as_bool().ok_or(Mismatch::WrongType)
    }
}

impl<'a> FromMetaValue<'a> for &'a str {
    const EXPECTED: &'static str = "string";
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
        v.as_str().ok_or(Mismatch::WrongType)
    }
}

impl<'a> FromMetaValue<'a> for MetaArrayRef<'a> {
    const EXPECTED: &'static str = "array";
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
        v.as_array().ok_or(Mismatch::WrongType)
    }
}

impl<'a> FromMetaValue<'a> for StrArray<'a> {
    const EXPECTED: &'static str = "array<string>";
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
        v.as_array()
            .and_then(|a| a.as_strs())
            .ok_or(Mismatch::WrongType)
    }
}

impl<'a, T: ArrayElem> FromMetaValue<'a> for TypedArray<'a, T> {
    const EXPECTED: &'static str = "array of the requested element type";
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
        v.as_array()
            .and_then(|a| a.as_typed::<T>())
            .ok_or(Mismatch::WrongType)
    }
}

impl<'a> FromMetaValue<'a> for MetaValueRef<'a> {
    const EXPECTED: &'static str = "any value";
    fn from_meta(v: MetaValueRef<'a>) -> Result<Self, Mismatch> {
        Ok(v)
    }
}
