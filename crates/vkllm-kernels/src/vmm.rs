//! A SPIR-V pass for kernels naga emits under the Vulkan memory model (every kernel that uses
//! cooperative matrices): naga's workgroup-memory loads and stores are then *private* accesses,
//! which a control barrier does not order between invocations, so a driver may move them across
//! barriers. This pass marks every access through a Workgroup-storage pointer (OpLoad,
//! OpStore, cooperative-matrix loads and stores) `NonPrivatePointer`, and gives every barrier
//! whose semantics name WorkgroupMemory the `MakeAvailable | MakeVisible` bits, so barriers order
//! workgroup memory as WGSL's `workgroupBarrier` means. A second pass
//! ([`storage_coherent`]) makes every such module valid under that model: naga decorates
//! `@coherent` storage buffers `Coherent` (banned there) and uses device scope without its
//! capability.

use std::collections::{HashMap, HashSet};

const OP_CAPABILITY: u32 = 17;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_LOAD: u32 = 61;
const OP_STORE: u32 = 62;
const OP_ACCESS_CHAIN: u32 = 65;
const OP_IN_BOUNDS_ACCESS_CHAIN: u32 = 66;
const OP_PTR_ACCESS_CHAIN: u32 = 67;
const OP_COPY_OBJECT: u32 = 83;
const OP_CONTROL_BARRIER: u32 = 224;
const OP_MEMORY_BARRIER: u32 = 225;
const OP_COOP_LOAD: u32 = 4457;
const OP_COOP_STORE: u32 = 4458;
const OP_DECORATE: u32 = 71;
const CAPABILITY_VULKAN_MEMORY_MODEL: u32 = 5345;
const CAPABILITY_DEVICE_SCOPE: u32 = 5346;
const DECORATION_COHERENT: u32 = 23;
const SEMANTICS_UNIFORM_MEMORY: u32 = 0x40;
const STORAGE_WORKGROUP: u32 = 4;
const NON_PRIVATE_POINTER: u32 = 0x20;
const SEMANTICS_WORKGROUP_MEMORY: u32 = 0x100;
const SEMANTICS_MAKE_AVAILABLE_VISIBLE: u32 = 0x2000 | 0x4000;

/// Does the module declare the Vulkan memory model capability?
pub(crate) fn uses_vulkan_memory_model(words: &[u32]) -> bool {
    instructions(words).is_some_and(|v| {
        v.iter().any(|&(i, _)| {
            words[i] == (2 << 16 | OP_CAPABILITY) && words[i + 1] == CAPABILITY_VULKAN_MEMORY_MODEL
        })
    })
}

/// (offset, word count) of every instruction after the header; None on a malformed module.
pub(crate) fn instructions(words: &[u32]) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let mut i = 5;
    if words.len() < i {
        return None;
    }
    while i < words.len() {
        let n = (words[i] >> 16) as usize;
        if n == 0 || i + n > words.len() {
            return None;
        }
        out.push((i, n));
        i += n;
    }
    Some(out)
}

/// The workgroup pass (module description above). None on a malformed module.
pub(crate) fn workgroup_coherent(words: &[u32]) -> Option<Vec<u32>> {
    let insts = instructions(words)?;
    let roots = insts
        .iter()
        .filter(|&&(i, n)| {
            words[i] & 0xffff == OP_VARIABLE && n >= 4 && words[i + 3] == STORAGE_WORKGROUP
        })
        .map(|&(i, _)| words[i + 2])
        .collect();
    mark_non_private(words, &insts, roots, SEMANTICS_WORKGROUP_MEMORY, false)
}

/// The storage-buffer pass for every module under the Vulkan memory model, where `Coherent`
/// is not allowed and device scope needs its own capability: each `Coherent` variable loses
/// the decoration and its accesses become `NonPrivatePointer`, every barrier whose semantics
/// name UniformMemory makes them available and visible (what `Coherent` meant for the
/// cross-workgroup partial sums), and the module declares `VulkanMemoryModelDeviceScope`
/// (the device enables it with cooperative matrices). None on a malformed module.
pub(crate) fn storage_coherent(words: &[u32]) -> Option<Vec<u32>> {
    let insts = instructions(words)?;
    let roots = insts
        .iter()
        .filter(|&&(i, n)| {
            words[i] & 0xffff == OP_DECORATE && n == 3 && words[i + 2] == DECORATION_COHERENT
        })
        .map(|&(i, _)| words[i + 1])
        .collect();
    mark_non_private(words, &insts, roots, SEMANTICS_UNIFORM_MEMORY, true)
}

/// Accesses through pointers derived from `roots` become `NonPrivatePointer`; barriers whose
/// semantics include any of `storage` bits also make memory available and visible; with
/// `storage_pass`, `Coherent` decorations go and the device-scope capability is declared.
fn mark_non_private(
    words: &[u32],
    insts: &[(usize, usize)],
    mut ptrs: HashSet<u32>,
    storage: u32,
    storage_pass: bool,
) -> Option<Vec<u32>> {
    let op = |i: usize| words[i] & 0xffff;
    // Pointers derived from the roots, and the semantics constants barriers use.
    let mut semantics: HashSet<u32> = HashSet::new();
    let mut has_device_scope = false;
    for &(i, n) in insts {
        match op(i) {
            OP_ACCESS_CHAIN | OP_IN_BOUNDS_ACCESS_CHAIN | OP_PTR_ACCESS_CHAIN | OP_COPY_OBJECT
                if n >= 4 && ptrs.contains(&words[i + 3]) =>
            {
                ptrs.insert(words[i + 2]);
            }
            OP_CONTROL_BARRIER if n == 4 => {
                semantics.insert(words[i + 3]);
            }
            OP_MEMORY_BARRIER if n == 3 => {
                semantics.insert(words[i + 2]);
            }
            OP_CAPABILITY if n == 2 && words[i + 1] == CAPABILITY_DEVICE_SCOPE => {
                has_device_scope = true;
            }
            _ => {}
        }
    }
    // New constants for the barriers' semantics: old id -> (new id, value).
    let mut bound = words[3];
    let mut remap: HashMap<u32, u32> = HashMap::new();
    let mut out = Vec::with_capacity(words.len() + words.len() / 8);
    out.extend_from_slice(&words[..5]);
    for &(i, n) in insts {
        let mut inst = words[i..i + n].to_vec();
        let code = op(i);
        if storage_pass && code == OP_DECORATE && n == 3 && inst[2] == DECORATION_COHERENT {
            continue;
        }
        // Index of the memory-operand mask, if the instruction has one here.
        let (ptr_at, mask_at) = match code {
            OP_LOAD => (3, 4),
            OP_STORE => (1, 3),
            OP_COOP_LOAD => (3, 6),
            OP_COOP_STORE => (1, 5),
            _ => (0, 0),
        };
        if mask_at > 0 && n > ptr_at && ptrs.contains(&inst[ptr_at]) {
            if n > mask_at {
                inst[mask_at] |= NON_PRIVATE_POINTER;
            } else if n == mask_at {
                inst.push(NON_PRIVATE_POINTER);
                inst[0] = ((n as u32 + 1) << 16) | code;
            } else {
                // A cooperative access without its optional stride: leave it.
            }
        }
        match code {
            OP_CONTROL_BARRIER if n == 4 => {
                if let Some(&id) = remap.get(&inst[3]) {
                    inst[3] = id;
                }
            }
            OP_MEMORY_BARRIER if n == 3 => {
                if let Some(&id) = remap.get(&inst[2]) {
                    inst[2] = id;
                }
            }
            _ => {}
        }
        out.extend_from_slice(&inst);
        if storage_pass
            && !has_device_scope
            && code == OP_CAPABILITY
            && n == 2
            && inst[1] == CAPABILITY_VULKAN_MEMORY_MODEL
        {
            out.extend_from_slice(&[(2 << 16) | OP_CAPABILITY, CAPABILITY_DEVICE_SCOPE]);
        }
        if code == OP_CONSTANT
            && n == 4
            && semantics.contains(&words[i + 2])
            && words[i + 3] & storage != 0
            && words[i + 3] & SEMANTICS_MAKE_AVAILABLE_VISIBLE != SEMANTICS_MAKE_AVAILABLE_VISIBLE
        {
            let id = bound;
            bound += 1;
            remap.insert(words[i + 2], id);
            out.extend_from_slice(&[
                (4 << 16) | OP_CONSTANT,
                words[i + 1],
                id,
                words[i + 3] | SEMANTICS_MAKE_AVAILABLE_VISIBLE,
            ]);
        }
    }
    // Barriers are in function bodies, after every constant: all remapped above.
    out[3] = bound;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every instruction of `code` in `words`.
    fn find(words: &[u32], code: u32) -> Vec<&[u32]> {
        instructions(words)
            .unwrap()
            .into_iter()
            .filter(|&(i, _)| words[i] & 0xffff == code)
            .map(|(i, n)| &words[i..i + n])
            .collect()
    }

    /// A hand-assembled fragment: a workgroup variable, an access chain into it, a load and a
    /// store through the chain, a load through a function variable, and a barrier.
    #[test]
    fn marks_workgroup_accesses_and_barriers() {
        let words = vec![
            0x0723_0203,
            0x0001_0600,
            0,
            100,
            0,
            (2 << 16) | OP_CAPABILITY,
            CAPABILITY_VULKAN_MEMORY_MODEL,
            // %10 = OpConstant %1 0x108 (AcquireRelease | WorkgroupMemory)
            (4 << 16) | OP_CONSTANT,
            1,
            10,
            0x108,
            // %11 = OpConstant %1 2 (a scope, also an index)
            (4 << 16) | OP_CONSTANT,
            1,
            11,
            2,
            // %20 = OpVariable %2 Workgroup ; %21 = OpVariable %3 Function
            (4 << 16) | OP_VARIABLE,
            2,
            20,
            STORAGE_WORKGROUP,
            (4 << 16) | OP_VARIABLE,
            3,
            21,
            7,
            // %22 = OpAccessChain %4 %20 %11
            (5 << 16) | OP_ACCESS_CHAIN,
            4,
            22,
            20,
            11,
            // %23 = OpLoad %1 %22 ; OpStore %22 %23 ; %24 = OpLoad %1 %21 Aligned 4
            (4 << 16) | OP_LOAD,
            1,
            23,
            22,
            (3 << 16) | OP_STORE,
            22,
            23,
            (6 << 16) | OP_LOAD,
            1,
            24,
            21,
            2,
            4,
            // OpControlBarrier %11 %11 %10
            (4 << 16) | OP_CONTROL_BARRIER,
            11,
            11,
            10,
        ];
        assert!(uses_vulkan_memory_model(&words));
        let out = workgroup_coherent(&words).expect("well formed");
        // One new constant (id 100), bound 101.
        assert_eq!(out[3], 101);
        let find = |code: u32| find(&out, code);
        let consts = find(OP_CONSTANT);
        assert_eq!(consts.len(), 3);
        assert_eq!(
            consts[1],
            &[(4 << 16) | OP_CONSTANT, 1, 100, 0x108 | 0x6000]
        );
        let loads = find(OP_LOAD);
        assert_eq!(
            loads[0],
            &[(5 << 16) | OP_LOAD, 1, 23, 22, NON_PRIVATE_POINTER]
        );
        // The function-variable load keeps its operands.
        assert_eq!(loads[1], &[(6 << 16) | OP_LOAD, 1, 24, 21, 2, 4]);
        assert_eq!(
            find(OP_STORE)[0],
            &[(4 << 16) | OP_STORE, 22, 23, NON_PRIVATE_POINTER]
        );
        assert_eq!(
            find(OP_CONTROL_BARRIER)[0],
            &[(4 << 16) | OP_CONTROL_BARRIER, 11, 11, 100]
        );
    }

    /// A `Coherent` storage buffer: the decoration goes, its accesses become non-private, the
    /// storage barrier makes them available and visible, and device scope gets its capability;
    /// the workgroup pass leaves the same module's storage accesses alone.
    #[test]
    fn marks_coherent_storage_accesses_and_device_scope() {
        let words = vec![
            0x0723_0203,
            0x0001_0600,
            0,
            50,
            0,
            (2 << 16) | OP_CAPABILITY,
            CAPABILITY_VULKAN_MEMORY_MODEL,
            // OpDecorate %20 Coherent ; OpDecorate %21 Coherent-free (NonWritable 24)
            (3 << 16) | OP_DECORATE,
            20,
            DECORATION_COHERENT,
            (3 << 16) | OP_DECORATE,
            21,
            24,
            // %10 = OpConstant %1 0x48 (AcquireRelease | UniformMemory); %11 = OpConstant %1 1
            (4 << 16) | OP_CONSTANT,
            1,
            10,
            0x48,
            (4 << 16) | OP_CONSTANT,
            1,
            11,
            1,
            // %20, %21 = OpVariable %2 StorageBuffer
            (4 << 16) | OP_VARIABLE,
            2,
            20,
            12,
            (4 << 16) | OP_VARIABLE,
            2,
            21,
            12,
            // %22 = OpAccessChain %4 %20 %11 ; %23 = OpAccessChain %4 %21 %11
            (5 << 16) | OP_ACCESS_CHAIN,
            4,
            22,
            20,
            11,
            (5 << 16) | OP_ACCESS_CHAIN,
            4,
            23,
            21,
            11,
            // OpStore %22 %11 ; %24 = OpLoad %1 %23 ; %25 = OpLoad %1 %22
            (3 << 16) | OP_STORE,
            22,
            11,
            (4 << 16) | OP_LOAD,
            1,
            24,
            23,
            (4 << 16) | OP_LOAD,
            1,
            25,
            22,
            // OpControlBarrier %11 %11 %10 (workgroup execution... any scope ids will do here)
            (4 << 16) | OP_CONTROL_BARRIER,
            11,
            11,
            10,
        ];
        assert_eq!(
            workgroup_coherent(&words).as_deref(),
            Some(&words[..]),
            "no workgroup memory: unchanged"
        );
        let out = storage_coherent(&words).expect("well formed");
        assert_eq!(out[3], 51);
        let find = |code: u32| find(&out, code);
        assert_eq!(
            find(OP_CAPABILITY),
            vec![
                &[(2 << 16) | OP_CAPABILITY, CAPABILITY_VULKAN_MEMORY_MODEL][..],
                &[(2 << 16) | OP_CAPABILITY, CAPABILITY_DEVICE_SCOPE][..]
            ]
        );
        assert_eq!(
            find(OP_DECORATE),
            vec![&[(3 << 16) | OP_DECORATE, 21, 24][..]]
        );
        assert_eq!(
            find(OP_STORE)[0],
            &[(4 << 16) | OP_STORE, 22, 11, NON_PRIVATE_POINTER]
        );
        let loads = find(OP_LOAD);
        assert_eq!(loads[0], &[(4 << 16) | OP_LOAD, 1, 24, 23], "not coherent");
        assert_eq!(
            loads[1],
            &[(5 << 16) | OP_LOAD, 1, 25, 22, NON_PRIVATE_POINTER]
        );
        assert_eq!(
            find(OP_CONSTANT)[1],
            &[(4 << 16) | OP_CONSTANT, 1, 50, 0x48 | 0x6000]
        );
        assert_eq!(
            find(OP_CONTROL_BARRIER)[0],
            &[(4 << 16) | OP_CONTROL_BARRIER, 11, 11, 50]
        );
        // A second run finds nothing left to do.
        assert_eq!(storage_coherent(&out), Some(out.clone()));
    }

    #[test]
    fn malformed_modules_are_rejected() {
        assert_eq!(workgroup_coherent(&[0x0723_0203, 0, 0]), None);
        assert_eq!(
            workgroup_coherent(&[0x0723_0203, 0, 0, 5, 0, 0x0005_0000 | OP_LOAD, 1]),
            None
        );
    }
}
