// Rotary position embedding, in place, from a host-computed (cos, sin) table.
//
// Shapes: x [n_tok, n_heads, head_dim] f32 (q or k, in place); pos [n_tok] u32 (positions live in
// a device buffer so a recorded decode step replays with new positions); table [max_pos,
// rotary_dim / 2] vec2<f32> = (cos, sin) of pos * inv_freq[i], computed on the host from the CPU
// op's inv_freq (so GPU and CPU share frequencies and scaling: Llama-3 and linear scaling are
// properties of the table, and the GPU never evaluates sin/cos of large angles, whose accuracy
// Vulkan leaves loose outside [-pi, pi]).
// Pairs: STYLE 0 interleaved (2i, 2i + 1); STYLE 1 NeoX / rotate_half (i, i + rotary_dim / 2).
// Dimensions >= rotary_dim (partial rotary) are left untouched. A position >= max_pos writes NaN
// to the pair (the caller sizes the table; NaN makes the bug visible).
// Workgroup: WG invocations (default 256), one rotation pair each, 2-D grid. Shared memory: none.

override WG: u32 = 256;

struct Params {
    n_tok: u32,
    n_heads: u32,
    head_dim: u32,
    rotary_dim: u32,
    style: u32,
    max_pos: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> pos: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<vec2<f32>>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let half = p.rotary_dim / 2u;
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    if (idx >= p.n_tok * p.n_heads * half) {
        return;
    }
    let i = idx % half;
    let th = idx / half; // token * n_heads + head
    let t = th / p.n_heads;
    let base = th * p.head_dim;
    var a = base + 2u * i;
    var b = a + 1u;
    if (p.style == 1u) {
        a = base + i;
        b = a + half;
    }
    let ps = pos[t];
    if (ps >= p.max_pos) {
        let nan = bitcast<f32>(0x7fc00000u);
        x[a] = nan;
        x[b] = nan;
        return;
    }
    let cs = table[ps * half + i];
    let x0 = x[a];
    let x1 = x[b];
    x[a] = x0 * cs.x - x1 * cs.y;
    x[b] = x1 * cs.x + x0 * cs.y;
}
