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
    /// File under `shaders/`.
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

/// Element type of a weight matrix or table. 16-bit types are stored packed two to a `u32`
/// word (element `e` is the low half of word `e / 2` when `e` is even).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightType {
    F32,
    F16,
    Bf16,
}

impl WeightType {
    /// The `DTYPE` override value the shaders switch on.
    pub fn code(self) -> f64 {
        match self {
            WeightType::F32 => 0.0,
            WeightType::F16 => 1.0,
            WeightType::Bf16 => 2.0,
        }
    }
    pub fn bytes(self) -> u64 {
        match self {
            WeightType::F32 => 4,
            _ => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "f32",
            WeightType::F16 => "f16",
            WeightType::Bf16 => "bf16",
        }
    }
    /// Bytes of `n` elements as stored (16-bit types round up to whole words).
    pub fn storage_bytes(self, n: u64) -> u64 {
        match self {
            WeightType::F32 => 4 * n,
            _ => n.div_ceil(2) * 4,
        }
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
    /// Workgroup counts (x, y, z).
    pub groups: [u32; 3],
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
