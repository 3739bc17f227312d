// Decode advance: the bookkeeping between two recorded decode steps, on the device, so several
// steps run in one submit with no host round trip.
//
// For every slot row r whose position is live (pos[r] < capacity): the sampled token becomes the
// next step's input (ids[r]), is appended to the id ring at the current ring step, counted for
// repetition penalties (counts[r, id] += 1 when the row uses counts), the row's sampler step
// counter (cfg[r].step, 64-bit) increments, and the position advances; a position reaching the
// capacity retires the row (pos = 0xffffffff, cfg[r].active = 0: later steps skip it). Idle rows
// write 0xffffffff into the ring. Then the ring step ctl[0] increments.
// Reference: vkllm_cpu::decode::advance.
//
// Shapes: sampled [n_rows] u32; ids [n_rows] u32; pos [n_rows] u32; cfg [n_rows] x 20 u32
// (vkllm-kernels' SampleRow: word 1 use_counts, words 15/16 step lo/hi, word 17 active); counts
// [n_rows, V] u32; ring [ring_steps, n_rows] u32; ctl [1+] u32.
// Workgroup: one, WG = 64 invocations, rows strided over them. Shared memory: none.

const WG: u32 = 64u;
const NONE: u32 = 0xffffffffu;
const ROW_WORDS: u32 = 20u;

struct Params {
    n_rows: u32,
    v: u32,
    capacity: u32,
    ring_steps: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> sampled: array<u32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> pos: array<u32>;
@group(0) @binding(3) var<storage, read_write> cfg: array<u32>;
@group(0) @binding(4) var<storage, read_write> counts: array<u32>;
@group(0) @binding(5) var<storage, read_write> ring: array<u32>;
@group(0) @binding(6) var<storage, read_write> ctl: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
    let step = ctl[0];
    for (var r = lid; r < p.n_rows; r += WG) {
        var out = NONE;
        let ps = pos[r];
        if (ps < p.capacity) {
            let id = sampled[r];
            out = id;
            ids[r] = id;
            let c = r * ROW_WORDS;
            if (cfg[c + 1u] != 0u && id < p.v) {
                counts[r * p.v + id] += 1u;
            }
            let lo = cfg[c + 15u] + 1u;
            cfg[c + 15u] = lo;
            if (lo == 0u) {
                cfg[c + 16u] = cfg[c + 16u] + 1u;
            }
            if (ps + 1u >= p.capacity) {
                pos[r] = NONE;
                cfg[c + 17u] = 0u;
            } else {
                pos[r] = ps + 1u;
            }
        }
        if (step < p.ring_steps) {
            ring[step * p.n_rows + r] = out;
        }
    }
    storageBarrier();
    workgroupBarrier();
    if (lid == 0u) {
        ctl[0] = step + 1u;
    }
}
