//! The dead-branch pass of `compile_spirv` (`SpirvOptions::prune_dead_branches`): branches the
//! resolved overrides make dead are gone from the SPIR-V, and so are the workgroup arrays only
//! they used; every kernel still emits SPIR-V with the pass off (the reference path).

use vkllm_kernels::{KernelSpec, Overrides, SpirvOptions, all_kernels, compile_spirv};

const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const STORAGE_WORKGROUP: u32 = 4;

/// The byte sizes of a SPIR-V module's workgroup-storage `OpVariable`s (scalars and arrays of
/// scalars), sorted.
fn workgroup_sizes(words: &[u32]) -> Vec<u64> {
    use std::collections::HashMap;
    let mut size: HashMap<u32, u64> = HashMap::new();
    let mut constant: HashMap<u32, u64> = HashMap::new();
    let mut pointee: HashMap<u32, u32> = HashMap::new();
    let mut vars = Vec::new();
    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        assert!(count > 0, "malformed SPIR-V at word {i}");
        let w = &words[i..i + count];
        match w[0] & 0xffff {
            OP_TYPE_INT | OP_TYPE_FLOAT => {
                size.insert(w[1], u64::from(w[2] / 8));
            }
            OP_TYPE_ARRAY => {
                let n = constant[&w[3]];
                size.insert(w[1], size.get(&w[2]).map_or(0, |s| s * n));
            }
            OP_TYPE_POINTER => {
                pointee.insert(w[1], w[3]);
            }
            OP_CONSTANT => {
                constant.insert(w[2], u64::from(w[3]));
            }
            OP_VARIABLE if w[3] == STORAGE_WORKGROUP => vars.push(w[1]),
            _ => {}
        }
        i += count;
    }
    let mut out: Vec<u64> = vars
        .iter()
        .map(|t| size.get(&pointee[t]).copied().unwrap_or(0))
        .collect();
    out.sort();
    out
}

fn workgroup_vars(words: &[u32]) -> usize {
    workgroup_sizes(words).len()
}

static GATED: KernelSpec = KernelSpec {
    name: "prune_test_gated",
    file: "prune_test.wgsl",
    entry: "main",
    source: r#"
override MODE: u32 = 0;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
var<workgroup> big: array<f32, 4096>;
var<workgroup> small: array<f32, 64>;

fn from_big(i: u32) -> f32 {
    return big[i] + big[i ^ 1u];
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
    small[lid] = f32(lid);
    if (MODE == 1u) {
        big[lid] = 2.0;
    }
    workgroupBarrier();
    var x = small[63u - lid];
    if (MODE == 1u) {
        x += from_big(lid);
    } else if (MODE == 2u) {
        x = -x;
    }
    out[lid] = x;
}
"#,
    bindings: &[],
    push_size: 0,
    exact_fp: false,
    glsl: None,
};

fn opts(prune: bool) -> SpirvOptions {
    SpirvOptions {
        prune_dead_branches: prune,
        ..SpirvOptions::default()
    }
}

#[test]
fn dead_branches_drop_their_workgroup_arrays() {
    let off = Overrides::new().set("MODE", 0.0);
    let on = Overrides::new().set("MODE", 1.0);
    let neg = Overrides::new().set("MODE", 2.0);
    let count =
        |o: &Overrides, prune| workgroup_vars(&compile_spirv(&GATED, o, opts(prune)).unwrap());
    assert_eq!(count(&off, true), 1, "MODE 0 references only `small`");
    assert_eq!(
        count(&neg, true),
        1,
        "MODE 2 (an else-if) references only `small`"
    );
    assert_eq!(count(&on, true), 2);
    // Without the pass naga keeps the dead branch and with it `big`.
    assert_eq!(count(&off, false), 2);
}

#[test]
fn pruned_modules_are_smaller_and_live_code_stays() {
    let o = Overrides::new().set("MODE", 0.0);
    let pruned = compile_spirv(&GATED, &o, opts(true)).unwrap();
    let kept = compile_spirv(&GATED, &o, opts(false)).unwrap();
    assert!(
        pruned.len() < kept.len(),
        "{} vs {}",
        pruned.len(),
        kept.len()
    );
    let on = compile_spirv(&GATED, &Overrides::new().set("MODE", 1.0), opts(true)).unwrap();
    assert!(on.len() > pruned.len());
}

#[test]
fn every_kernel_emits_spirv_without_the_pass() {
    for k in all_kernels() {
        let words = compile_spirv(k, &Overrides::new(), opts(false))
            .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(words[0], 0x0723_0203, "{}: not SPIR-V", k.name);
    }
}

#[test]
fn grouped_decode_attention_keeps_only_its_arrays() {
    // The rotated-key staging must not pull the plain split's arrays into split_gqa (or the
    // reverse): the driver sizes shared memory from every array a kernel references.
    use vkllm_kernels::attention::{ATTN_SPLIT, ATTN_SPLIT_GQA};
    for prune in [false, true] {
        for rot in [0.0, 1.0] {
            let o = Overrides::new().set("KV_DTYPE", 2.0).set("KV_ROT_K", rot);
            let gqa = workgroup_sizes(&compile_spirv(&ATTN_SPLIT_GQA, &o, opts(prune)).unwrap());
            let plain = workgroup_sizes(&compile_spirv(&ATTN_SPLIT, &o, opts(prune)).unwrap());
            // wg_skip, ml_g, sg_sc, qg (16 KiB); wg_skip, red, qs, sc (CHUNK 256): no qs in the
            // grouped split, no qg in the plain one.
            assert_eq!(gqa, [4, 64, 8192, 16384], "prune {prune} rot {rot}");
            assert_eq!(plain, [4, 256, 1024, 1024], "prune {prune} rot {rot}");
        }
    }
}

#[test]
fn wide_decode_attention_keeps_only_its_arrays() {
    // wg_skip, ml, the scores (GQ * CHUNK f32) and the key groups' partials (16 KiB).
    use vkllm_kernels::attention::ATTN_SPLIT_WIDE;
    for prune in [false, true] {
        for (gq, chunk, sc) in [(4.0, 256.0, 4096), (8.0, 64.0, 2048)] {
            let o = Overrides::new().set("GQ", gq).set("CHUNK", chunk);
            let got = workgroup_sizes(&compile_spirv(&ATTN_SPLIT_WIDE, &o, opts(prune)).unwrap());
            assert_eq!(got, [4, 64, sc, 16384], "prune {prune} GQ {gq}");
        }
    }
}
