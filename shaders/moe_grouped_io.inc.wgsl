// The push constants and bindings moe_experts_grouped.wgsl and moe_experts_coop.wgsl share (one
// Rust binding, `MoeExpertsGrouped`, launches both).

struct Params {
    n: u32,
    top_k: u32,
    // Rows and columns of one expert's matrix (grouped), hidden (sum).
    rows: u32,
    cols: u32,
    n_experts: u32,
    stage: u32,
    pad0: u32,
    pad1: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read> weights: array<f32>;
@group(0) @binding(4) var<storage, read_write> lists: array<u32>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;

// What quant_blocks.inc.wgsl reads the weight through.
fn wd(i: u32) -> u32 {
    return w[i];
}
