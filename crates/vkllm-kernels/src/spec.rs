//! Kernel descriptions and the dispatch value a typed binding produces.

use crate::Error;

/// How a kernel uses one of its buffers (the runtime derives barriers from this).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

impl Access {
    pub fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }
    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// One storage-buffer binding of a kernel: `@group(0) @binding(index)` where `index` is its
/// position in [`KernelSpec::bindings`].
#[derive(Clone, Copy, Debug)]
pub struct BindingSpec {
    pub name: &'static str,
    pub access: Access,
}

/// One compute entry point of a WGSL file.
#[derive(Debug)]
pub struct KernelSpec {
    /// Unique name, used in errors, timings and the pipeline cache key.
    pub name: &'static str,
    /// File under `shaders/` (GLSL kernels: `glsl/NAME.comp`).
    pub file: &'static str,
    /// WGSL entry point.
    pub entry: &'static str,
    /// The embedded WGSL source.
    pub source: &'static str,
    /// Storage buffers, in binding order (binding `i` of group 0 is `bindings[i]`).
    pub bindings: &'static [BindingSpec],
    /// Size in bytes of its `var<immediate>` block (0 if none).
    pub push_size: u32,
    /// Decorate every float add/sub/mul with SPIR-V `NoContraction` so drivers cannot fuse them
    /// into FMAs (naga has no WGSL syntax for it): for kernels that must match the CPU bit for
    /// bit (the sampler).
    pub exact_fp: bool,
    /// A kernel written in GLSL instead (`source` then empty): its checked-in SPIR-V.
    pub glsl: Option<&'static GlslKernel>,
}

/// A kernel written in GLSL, where naga cannot reach (integer cooperative matrices): the SPIR-V
/// glslc wrote from `shaders/glsl/NAME.comp` (`scripts/glsl.sh`), and the
/// `layout(constant_id = ID)` of each override name. Overrides become the specialization
/// constants' values ([`crate::compile_spirv`]); the workgroup size is one of them
/// (`local_size_x_id`).
#[derive(Debug)]
pub struct GlslKernel {
    pub spirv: &'static [u8],
    pub spec_ids: &'static [(&'static str, u32)],
}

pub(crate) const fn rd(name: &'static str) -> BindingSpec {
    BindingSpec {
        name,
        access: Access::Read,
    }
}
pub(crate) const fn wr(name: &'static str) -> BindingSpec {
    BindingSpec {
        name,
        access: Access::Write,
    }
}
pub(crate) const fn rw(name: &'static str) -> BindingSpec {
    BindingSpec {
        name,
        access: Access::ReadWrite,
    }
}

/// Values for a kernel's WGSL `override` constants, kept sorted by name so equal sets compare
/// and hash equal (the pipeline cache key is `(kernel name, overrides)`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Overrides(Vec<(&'static str, u64)>);

impl Overrides {
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets `name` (replacing an earlier value).
    pub fn set(mut self, name: &'static str, value: f64) -> Self {
        let bits = value.to_bits();
        match self.0.binary_search_by(|(n, _)| n.cmp(&name)) {
            Ok(i) => self.0[i].1 = bits,
            Err(i) => self.0.insert(i, (name, bits)),
        }
        self
    }
    pub fn get(&self, name: &str) -> Option<f64> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, b)| f64::from_bits(b))
    }
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        self.0.iter().map(|&(n, b)| (n, f64::from_bits(b)))
    }
}

impl std::fmt::Display for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.iter().map(|(n, v)| format!("{n}={v}")).collect();
        write!(f, "{{{}}}", parts.join(","))
    }
}

/// A buffer handle as a kernel binding sees it: only its size matters here (bindings check that
/// every buffer is large enough for the dispatch).
pub trait KernelBuffer: Copy {
    fn byte_len(&self) -> u64;
}

/// Element type of a weight matrix or table.
///
/// Float types: 16-bit types are stored packed two to a `u32` word (element `e` is the low half
/// of word `e / 2` when `e` is even). Quantized types are llama.cpp's block formats, stored as
/// the GGUF file stores them (each row `cols / block_size` blocks of `block_bytes` bytes, rows
/// back to back, the buffer padded to a whole word); they are read by `shaders/mat_quant.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's spelling: Q4_K, IQ4_NL, ...
pub enum WeightType {
    F32,
    F16,
    Bf16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
}

impl WeightType {
    /// Every quantized type the kernels read.
    pub const QUANTIZED: [WeightType; 12] = [
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q5_1,
        WeightType::Q8_0,
        WeightType::Q2_K,
        WeightType::Q3_K,
        WeightType::Q4_K,
        WeightType::Q5_K,
        WeightType::Q6_K,
        WeightType::IQ4_NL,
        WeightType::IQ4_XS,
    ];

    /// The `DTYPE` override value the float shaders switch on (0 for quantized types, which go
    /// to `mat_quant.wgsl` and its `QTYPE` override instead, see [`WeightType::ggml_id`]).
    pub fn code(self) -> f64 {
        match self {
            WeightType::F16 => 1.0,
            WeightType::Bf16 => 2.0,
            _ => 0.0,
        }
    }

    /// ggml's `ggml_type` id (the `QTYPE` override of `mat_quant.wgsl`).
    pub fn ggml_id(self) -> u32 {
        match self {
            WeightType::F32 => 0,
            WeightType::F16 => 1,
            WeightType::Q4_0 => 2,
            WeightType::Q4_1 => 3,
            WeightType::Q5_0 => 6,
            WeightType::Q5_1 => 7,
            WeightType::Q8_0 => 8,
            WeightType::Q2_K => 10,
            WeightType::Q3_K => 11,
            WeightType::Q4_K => 12,
            WeightType::Q5_K => 13,
            WeightType::Q6_K => 14,
            WeightType::IQ4_NL => 20,
            WeightType::IQ4_XS => 23,
            WeightType::Bf16 => 30,
        }
    }

    /// The type with ggml id `id`, if the kernels read it.
    pub fn from_ggml_id(id: u32) -> Option<Self> {
        [WeightType::F32, WeightType::F16, WeightType::Bf16]
            .into_iter()
            .chain(Self::QUANTIZED)
            .find(|t| t.ggml_id() == id)
    }

    /// A llama.cpp block format (read by `mat_quant.wgsl`), not a float type.
    pub fn is_quantized(self) -> bool {
        !matches!(self, WeightType::F32 | WeightType::F16 | WeightType::Bf16)
    }

    /// Elements per block (1 for float types).
    pub fn block_size(self) -> usize {
        match self {
            WeightType::F32 | WeightType::F16 | WeightType::Bf16 => 1,
            WeightType::Q4_0
            | WeightType::Q4_1
            | WeightType::Q5_0
            | WeightType::Q5_1
            | WeightType::Q8_0
            | WeightType::IQ4_NL => 32,
            _ => 256,
        }
    }

    /// Bytes per block (per element for float types).
    pub fn bytes(self) -> u64 {
        match self {
            WeightType::F32 => 4,
            WeightType::F16 | WeightType::Bf16 => 2,
            WeightType::Q4_0 | WeightType::IQ4_NL => 18,
            WeightType::Q4_1 => 20,
            WeightType::Q5_0 => 22,
            WeightType::Q5_1 => 24,
            WeightType::Q8_0 => 34,
            WeightType::Q2_K => 84,
            WeightType::Q3_K => 110,
            WeightType::Q4_K => 144,
            WeightType::Q5_K => 176,
            WeightType::Q6_K => 210,
            WeightType::IQ4_XS => 136,
        }
    }

    /// ggml's name (`"q4_K"`, `"bf16"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "f32",
            WeightType::F16 => "f16",
            WeightType::Bf16 => "bf16",
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
            WeightType::Q5_0 => "q5_0",
            WeightType::Q5_1 => "q5_1",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q2_K => "q2_K",
            WeightType::Q3_K => "q3_K",
            WeightType::Q4_K => "q4_K",
            WeightType::Q5_K => "q5_K",
            WeightType::Q6_K => "q6_K",
            WeightType::IQ4_NL => "iq4_nl",
            WeightType::IQ4_XS => "iq4_xs",
        }
    }

    /// Bytes of one row of `cols` elements as the file stores it (no padding), or `None` when
    /// `cols` is not a whole number of blocks.
    pub fn row_bytes(self, cols: u64) -> Option<u64> {
        let b = self.block_size() as u64;
        cols.is_multiple_of(b).then(|| cols / b * self.bytes())
    }

    /// Bytes of `n` elements as stored, rounded up to whole `u32` words (`n` a whole number of
    /// blocks for quantized types; a partial block counts as a whole one).
    pub fn storage_bytes(self, n: u64) -> u64 {
        (n.div_ceil(self.block_size() as u64) * self.bytes()).div_ceil(4) * 4
    }
}

/// One kernel launch, ready for the runtime to record.
#[derive(Clone, Debug)]
pub struct Dispatch<B> {
    pub kernel: &'static KernelSpec,
    pub overrides: Overrides,
    /// One buffer per entry of `kernel.bindings`, same order.
    pub buffers: Vec<B>,
    /// Push-constant bytes (`kernel.push_size` long).
    pub push: Vec<u8>,
    /// Workgroup counts (x, y, z); for an indirect launch, the largest grid it may read.
    pub groups: [u32; 3],
    /// Launch sizes read from a buffer when the dispatch runs instead of `groups`.
    pub indirect: Option<Indirect>,
}

/// Where an indirect launch reads its three workgroup counts (u32 x, y, z; zero launches
/// nothing): `offset` bytes into the buffer bound at `binding`, which the kernel wrote earlier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Indirect {
    pub binding: usize,
    pub offset: u64,
}

impl<B: KernelBuffer> Dispatch<B> {
    pub(crate) fn new<P: bytemuck::Pod>(
        kernel: &'static KernelSpec,
        overrides: Overrides,
        buffers: Vec<B>,
        push: &P,
        groups: [u32; 3],
    ) -> Self {
        let push = bytemuck::bytes_of(push).to_vec();
        debug_assert_eq!(push.len() as u32, kernel.push_size, "{}", kernel.name);
        debug_assert_eq!(buffers.len(), kernel.bindings.len(), "{}", kernel.name);
        Dispatch {
            kernel,
            overrides,
            buffers,
            push,
            groups,
            indirect: None,
        }
    }

    /// The same launch, its workgroup counts read from `at` when it runs (at most `groups`).
    pub(crate) fn indirect(self, at: Indirect) -> Self {
        Dispatch {
            indirect: Some(at),
            ..self
        }
    }
}

/// Checks that `buf` (binding `binding` of `kernel`) holds at least `need` bytes.
pub(crate) fn need<B: KernelBuffer>(
    kernel: &'static KernelSpec,
    binding: &'static str,
    buf: &B,
    need: u64,
) -> Result<(), Error> {
    let have = buf.byte_len();
    if have < need {
        return Err(Error::BufferTooSmall {
            kernel: kernel.name,
            binding,
            need,
            have,
        });
    }
    Ok(())
}

pub(crate) fn shape_err(kernel: &'static KernelSpec, message: impl Into<String>) -> Error {
    Error::Shape {
        kernel: kernel.name,
        message: message.into(),
    }
}

/// Maximum workgroup count per grid dimension every Vulkan device supports.
pub const MAX_GROUPS_X: u32 = 65535;

/// A grid of `n` workgroups laid out as (x, y) with x <= 65535; shaders recover the linear
/// workgroup index as `wid.y * num_workgroups.x + wid.x` and skip indices >= n.
pub fn grid_for(kernel: &'static KernelSpec, n: u64) -> Result<[u32; 3], Error> {
    if n == 0 {
        return Err(shape_err(kernel, "empty dispatch"));
    }
    let x = n.min(MAX_GROUPS_X as u64);
    let y = n.div_ceil(x);
    if y > MAX_GROUPS_X as u64 {
        return Err(shape_err(kernel, format!("{n} workgroups is too many")));
    }
    Ok([x as u32, y as u32, 1])
}

/// `u64` -> `u32` for a shader parameter, or a shape error naming it.
pub(crate) fn to_u32(kernel: &'static KernelSpec, what: &str, v: usize) -> Result<u32, Error> {
    u32::try_from(v).map_err(|_| shape_err(kernel, format!("{what} = {v} does not fit in u32")))
}
