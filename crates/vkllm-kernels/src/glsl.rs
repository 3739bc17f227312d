//! Specialization of GLSL kernels' SPIR-V ([`crate::GlslKernel`]): each override sets the
//! default value of the specialization constant its name maps to, so the module goes through
//! the same pipeline path (and cache key) as the WGSL kernels, which naga specializes itself.

use crate::{Error, GlslKernel, KernelSpec, Overrides};

const MAGIC: u32 = 0x0723_0203;
const OP_TYPE_BOOL: u32 = 20;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_SPEC_CONSTANT_TRUE: u32 = 48;
const OP_SPEC_CONSTANT_FALSE: u32 = 49;
const OP_SPEC_CONSTANT: u32 = 50;
const OP_DECORATE: u32 = 71;
const DECORATION_SPEC_ID: u32 = 1;

/// The scalar type of a specialization constant.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar {
    Bool,
    Int { width: u32, signed: bool },
    Float { width: u32 },
}

/// `kernel`'s SPIR-V with every override's specialization constant set to its value: an error
/// naming the kernel for a malformed module, an override without a constant id, or a value the
/// constant's type cannot hold.
pub(crate) fn specialize(
    kernel: &'static KernelSpec,
    g: &GlslKernel,
    overrides: &Overrides,
) -> Result<Vec<u32>, Error> {
    let bad = |message: String| Error::Override {
        kernel: kernel.name,
        overrides: overrides.to_string(),
        message,
    };
    let malformed = || Error::Spirv {
        kernel: kernel.name,
        message: "malformed SPIR-V in the GLSL kernel's module".into(),
    };
    if !g.spirv.len().is_multiple_of(4) || g.spirv.len() < 20 {
        return Err(malformed());
    }
    let mut words: Vec<u32> = g
        .spirv
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if words[0] != MAGIC {
        return Err(malformed());
    }
    let insts = crate::vmm::instructions(&words).ok_or_else(malformed)?;
    let mut types = std::collections::HashMap::new();
    let mut by_spec_id = std::collections::HashMap::new();
    let mut constants = std::collections::HashMap::new();
    for &(i, n) in &insts {
        match (words[i] & 0xffff, n) {
            (OP_TYPE_BOOL, 2) => {
                types.insert(words[i + 1], Scalar::Bool);
            }
            (OP_TYPE_INT, 4) => {
                let signed = words[i + 3] != 0;
                types.insert(
                    words[i + 1],
                    Scalar::Int {
                        width: words[i + 2],
                        signed,
                    },
                );
            }
            (OP_TYPE_FLOAT, 3..) => {
                types.insert(
                    words[i + 1],
                    Scalar::Float {
                        width: words[i + 2],
                    },
                );
            }
            (OP_DECORATE, 4) if words[i + 2] == DECORATION_SPEC_ID => {
                by_spec_id.insert(words[i + 3], words[i + 1]);
            }
            (OP_SPEC_CONSTANT_TRUE | OP_SPEC_CONSTANT_FALSE | OP_SPEC_CONSTANT, 3..) => {
                constants.insert(words[i + 2], (i, n));
            }
            _ => {}
        }
    }
    for (name, value) in overrides.iter() {
        let &(_, id) = g
            .spec_ids
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| bad(format!("no specialization constant for {name}")))?;
        let target = by_spec_id
            .get(&id)
            .ok_or_else(|| bad(format!("constant_id {id} ({name}) is not in the module")))?;
        let &(at, n) = constants.get(target).ok_or_else(malformed)?;
        let ty = *types.get(&words[at + 1]).ok_or_else(malformed)?;
        match ty {
            Scalar::Bool => {
                let op = if value != 0.0 {
                    OP_SPEC_CONSTANT_TRUE
                } else {
                    OP_SPEC_CONSTANT_FALSE
                };
                words[at] = (words[at] & 0xffff_0000) | op;
            }
            Scalar::Int { width: 32, signed } if n == 4 => {
                let fits = value.fract() == 0.0
                    && match signed {
                        true => (i32::MIN as f64..=i32::MAX as f64).contains(&value),
                        false => (0.0..=u32::MAX as f64).contains(&value),
                    };
                if !fits {
                    return Err(bad(format!("{name} = {value} is not a 32-bit integer")));
                }
                words[at + 3] = if signed {
                    value as i32 as u32
                } else {
                    value as u32
                };
            }
            Scalar::Float { width: 32 } if n == 4 => words[at + 3] = (value as f32).to_bits(),
            _ => return Err(bad(format!("{name}: unsupported constant type {ty:?}"))),
        }
    }
    Ok(words)
}
