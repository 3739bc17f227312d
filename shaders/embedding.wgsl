// Embedding gather: out[t, :] = table[ids[t], :] converted to f32.
//
// Shapes: table [vocab, dim] as u32 words (DTYPE 0: f32 bits; 1: f16 pairs; 2: bf16 pairs, element
// e in the low half of word e/2 when e is even); ids [n] u32; out [n, dim] f32.
// Workgroup: WG invocations (default 256) over one row's `dim` elements; grid (ceil(dim/WG), n):
// wid.x = column block, wid.y = token (n <= 65535 tokens per dispatch).
// Tables larger than one storage-buffer range are split by rows into parts: one dispatch per
// part (rows [row_start, row_start + part_rows)), tokens whose id lies elsewhere are skipped.
// An id >= vocab writes NaN in the part with row_start 0 (the caller validates ids; NaN makes a
// bad id visible downstream).
// Shared memory: none. Memory bound: one gather of a contiguous row per token.

override WG: u32 = 256;
override DTYPE: u32 = 0;

struct Params {
    n: u32,
    dim: u32,
    vocab: u32,
    row_start: u32,
    part_rows: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> table: array<u32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

fn load(e: u32) -> f32 {
    if (DTYPE == 0u) {
        return bitcast<f32>(table[e]);
    }
    let word = table[e >> 1u];
    let odd = (e & 1u) == 1u;
    if (DTYPE == 1u) {
        let pair = unpack2x16float(word);
        return select(pair.x, pair.y, odd);
    }
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, odd));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let col = wid.x * WG + lid;
    let t = wid.y;
    if (col >= p.dim || t >= p.n) {
        return;
    }
    let id = ids[t];
    if (id >= p.vocab) {
        if (p.row_start == 0u) {
            out[t * p.dim + col] = bitcast<f32>(0x7fc00000u);
        }
        return;
    }
    if (id < p.row_start || id - p.row_start >= p.part_rows) {
        return;
    }
    out[t * p.dim + col] = load((id - p.row_start) * p.dim + col);
}
