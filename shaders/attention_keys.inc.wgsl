// Shared by the decode attention kernels (attention.wgsl, attention_fused.wgsl,
// attention_wide.wgsl): which keys a query sees and how the split cuts them into chunks. Not a
// kernel on its own. The including file provides `p` (n_kv, n_chunks, window), `q_pos` and the
// override constants CHUNK and CHUNK_MIN.

// The keys query i sees, [lo, hi] (inclusive; empty when lo > hi): causal (j <= q_pos[i]), the
// sliding window (j > q_pos[i] - window when window > 0), clipped to the cache. Written so that
// q_pos = 0xffffffff (an idle slot) does not wrap: with a window it sees nothing.
fn visible_keys(i: u32) -> vec2<u32> {
    let qp = q_pos[i];
    let hi = min(qp, p.n_kv - 1u);
    var lo = 0u;
    if (p.window > 0u && qp >= p.window) {
        lo = qp - p.window + 1u;
    }
    return vec2<u32>(lo, hi);
}

// The adaptive split's chunk count target (vkllm_kernels::attention::ADAPT_CHUNKS).
const ADAPT_CHUNKS: u32 = 128u;

// Keys per chunk for the visible range [lo, hi]: CHUNK, or with CHUNK_MIN > 0 (the adaptive
// split, an override of the including file) the smallest power of two from CHUNK_MIN that covers
// the range in at most ADAPT_CHUNKS chunks, at most CHUNK: a recorded step sized for a long cache
// still splits a short context finely.
fn chunk_keys(lo: u32, hi: u32) -> u32 {
    if (CHUNK_MIN == 0u || lo > hi) {
        return CHUNK;
    }
    let n = hi - lo + 1u;
    var ck = CHUNK_MIN;
    while (ck < CHUNK && ck * ADAPT_CHUNKS < n) {
        ck *= 2u;
    }
    return ck;
}

// Chunks of chunk_keys(lo, hi) keys the visible range [lo, hi] splits into (chunk c starts at
// lo + c * that), at most the grid's n_chunks (more only for a position past the cache, whose
// output is not used).
fn live_chunks(lo: u32, hi: u32) -> u32 {
    if (lo > hi) {
        return 0u;
    }
    return min((hi - lo) / chunk_keys(lo, hi) + 1u, p.n_chunks);
}
