enable f16;
enable wgpu_cooperative_matrix;
// #include attention_prefill_coop2_out.inc.wgsl

// Attention for prefill on cooperative matrices, second form (VK_KHR_cooperative_matrix,
// subgroup scope, f16 x f16 -> f32 in 16 x 16 x 16 steps): the contract of
// `attention_prefill_coop.wgsl` (causal, GQA, optional window and softcap, ring caches, f32 or
// f16 KV, queries at consecutive positions pos0 + i), organised for latency:
//
// - One workgroup per (query tile, kv head): its 16 * NSG rows are (query, head) pairs of one
//   GQA group, query-major (row r: query q0 + r / G, head kvh * G + r % G, G = n_heads /
//   n_kv_heads), so each K/V tile is staged once for all the group's heads. BQ = floor(16 * NSG /
//   G) queries per tile; rows past BQ * G are padding. Heavy tiles (late queries) start first.
// - K/V are read with 16-byte word groups into registers ahead of use (software pipelining)
//   and staged in one shared buffer: K of step i is staged while V of step i sits in
//   registers; after the scores, V of step i is staged and V of step i + 1 loaded; after P V,
//   K of step i + 1 (loaded at the top of step i) is staged.
// - Scores S[16, BK] per subgroup on cooperative matrices (two independent accumulators), then
//   the softmax by all lanes: SG / 16 lanes per row, BK / (SG / 16) keys each, combined with
//   subgroup shuffles. Only steps that touch the diagonal, a window edge or the range's end
//   apply the per-key mask.
// - The output accumulator stays in cooperative matrices (HD / 16 tiles of 16 x 16 f32 per
//   subgroup). Rescaling is lazy: a row keeps its running max m until a step's max exceeds it by
//   more than RESCALE_T (probabilities exp(s - m) stay below e^RESCALE_T, within f16 range);
//   only then (workgroup-uniform, rare after the first keys) the accumulators go through shared
//   memory to be scaled row by row. RESCALE_T 0 rescales whenever a max grows (tests).
// - The epilogue writes each output tile through shared memory, divided by the row sums.
// - KV split (SPLIT > 1): a tile whose key range takes at least `split_min` steps is walked by
//   SPLIT workgroups, part s taking steps [s * per, (s + 1) * per) (per = ceil(steps / SPLIT);
//   whole steps, so only the range's end is partial, as before). Each writes its unnormalised
//   output rows with their running max and sum to `kv_part` ([tile][s][row][HD + 2] f32, tile =
//   kvh * tiles + query tile) and counts itself in on the tile's counter; the last of them
//   resets the counter to 0 and writes `out` from the SPLIT parts merged in part order
//   (deterministic whatever order they ran in). Ordering as matmul_coop.wgsl's split-K (the
//   CUB "last block" pattern): partial stores; storageBarrier(); invocation 0's atomicAdd;
//   storageBarrier() in the last workgroup, then its reads; `kv_part` is Coherent. Workgroups x
//   run over (query tile, part) pairs, heavy tiles first; a tile below `split_min` runs whole in
//   its part 0 and its other parts return at once. Why: causal tiles hold 1..n_q / BQ steps, and
//   with one workgroup per SM the chunk waited on the heaviest (Qwen3-0.6B pp512: 128
//   workgroups, 1 to 16 steps). The counters must be zero before the first dispatch; a dispatch
//   that completes leaves them zero. SPLIT = 1: `kv_part` and `kv_ctr` are bound but never touched.
//   SPLIT is a push constant (`split`) behind the SPLIT_ON override.
// Barriers per step: K visible; scores visible and K consumed; P and V visible (with the rescale
// decision, workgroupUniformLoad); V consumed. Cooperative operations run in uniform control
// flow (loop bounds and branches depend on overrides, push constants and uniform loads only).
//
// Shapes: q [n_q, n_heads, HD] f32; k, v [rows, n_kv_heads, HD] as 16-byte words (KV_DTYPE 0: f32
// bits, 1: f16 pairs), the key at position j in row j % ring; out [n_q, n_heads, HD] f32.
// HD: a multiple of 16 in 32..=256. BK: 32 keys per step, or 64 (HD <= 128, f16 K/V,
// subgroups of 32 or more): the queries then stay in cooperative-matrix registers (QREG),
// staged once through the K/V buffer, which leaves the shared memory to the wider tiles.
// Value columns (VD < HD, for head dims past 128): workgroup z computes output columns
// [z VD, (z + 1) VD) only (its P V products and output tiles), the scores over all HD dims (so
// HD / VD workgroups per tile repeat Q K^T); VD <= 128 keeps the output accumulators at <= 8
// tiles per subgroup. Split, each column group writes its columns of the parts' rows (and the
// same running max and sum: the scores are the same) and counts and merges on its own counter.
// Shared memory (HD 128, NSG 4): Q 17 KiB, K/V 8.5 KiB, scores 9 KiB, P 5 KiB: 40 KiB; with
// BK 64 (Q in registers) K/V 17 KiB, scores 17 KiB, P 9 KiB: 44 KiB.
// Every workgroup variable's size is a multiple of 16 bytes: cooperative loads need 16-byte
// aligned addresses and the driver places the variables in an order of its choosing (a 4-byte
// flag placed first broke every load on the H200). Rust applies `vmm.rs`'s pass to this kernel
// (workgroup accesses NonPrivatePointer, barriers MakeAvailable | MakeVisible).
// Precision: q, k, v and the probabilities are rounded to f16 (products exact, sums f32).
// HALF: 1 also writes the output as f16 pairs to out16 (to_f16.wgsl's layout over `out`), for
// the o projection's cooperative-matrix matmul: the epilogue then walks element pairs (2c,
// 2c + 1) of each tile row, each element by the same expression as without it.

override HD: u32 = 128;
// Output (value) columns per workgroup: HD, or a divisor of it (see the header).
override VD: u32 = 128;
override NSG: u32 = 4;
override SG: u32 = 32;
override WG: u32 = 128;
override KV_DTYPE: u32 = 0;
// 16-byte K (and V) slots per invocation and step: ceil(32 * HD / (4 or 8) / WG).
override SPT: u32 = 8;
override RESCALE_T: f32 = 8.0;
override HALF: u32 = 0;
// 1: the launch may split tiles (their count is the push constant `split`, so every count
// shares one pipeline); 0: the split code is left out.
override SPLIT_ON: u32 = 0;
// 1: V is loaded into registers one step ahead, like K; 0: each step loads its V when it stages
// it (fewer registers: head dims past 128 hold 16 slots of each).
override VAHEAD: u32 = 1;
// Timing diagnostics (Rust's CoopAttn2Tile::skip; 0 computes attention): parts of every step
// left out, a mask of 1 (probabilities without exp), 2 (no K/V loads), 4 (no Q K^T), 8 (no
// P V). The P V block sits in its branch on purpose: with that block structure NVIDIA's compiler
// emits much faster code for head_dim 64 (head_dim 128 unchanged; docs/benchmarks.md).
override SKIP: u32 = 0;
override BK: u32 = 32u;
// 1: Q in registers (BK 64), 0: Q staged in `qs` and read every step.
override QREG: u32 = BK / 64u;
// Row strides: staged Q, K/V rows and P rows in vec4<f16> units, score rows in floats.
override QLD: u32 = HD / 4u + 2u;
override PLD: u32 = BK / 4u + 2u;
override SLD: u32 = BK + 4u;
// Offsets of key rows 32 and 48 of a 64-key tile (BK - 32 and BK - 16: in range whatever BK,
// since naga checks constant indices in branches a smaller BK leaves dead).
override K2: u32 = (BK - 32u) * QLD;
override K3: u32 = (BK - 16u) * QLD;
// Rows of `qs`: the workgroup's, or one (unused) with Q in registers.
override QSR: u32 = NSG * 16u * (1u - QREG) + QREG;
// 16-byte slots per staged K/V row: f32 4 elements, f16 8.
override SPR: u32 = HD / (8u - 4u * (1u - KV_DTYPE));
// V slots per row this workgroup loads (its VD value columns) and per invocation and step.
override SPRV: u32 = SPR * VD / HD;
override SPTV: u32 = (BK * SPRV + WG - 1u) / WG;

const FLOOR: f32 = -1e30;
const MASKED: f32 = -3e38;

struct Params {
    n_q: u32,
    n_heads: u32,
    n_kv_heads: u32,
    n_kv: u32,
    scale: f32,
    softcap: f32,
    window: u32,
    ring: u32,
    pos0: u32,
    // Fewest steps of a tile that is split (SPLIT > 1).
    split_min: u32,
    // SPLIT: workgroups a split tile's keys are walked by (1: no split).
    split: u32,
}
var<immediate> p: Params;

@group(0) @binding(0) var<storage, read> q: array<f32>;
// K and V as 16-byte words (every row is whole 16-byte slots: HD a multiple of 16).
@group(0) @binding(1) var<storage, read> k: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> q_pos: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> out16: array<u32>;
@coherent @group(0) @binding(6) var<storage, read_write> kv_part: array<f32>;
@group(0) @binding(7) var<storage, read_write> kv_ctr: array<atomic<u32>>;

// Staged rows: HD + 8 halves (16-byte aligned rows, consecutive rows in different banks).
var<workgroup> qs: array<vec4<f16>, QSR * (HD / 4u + 2u)>;
// The K tile, then the V tile of the same keys (one buffer: K is consumed before V is stored).
var<workgroup> kvs: array<vec4<f16>, BK * (HD / 4u + 2u)>;
// Per subgroup: scores [16, BK] f32 (row stride BK + 4), reused as a 16 x 16 tile scratch.
var<workgroup> sc: array<f32, NSG * 16u * (BK + 4u)>;
// Per subgroup: probabilities [16, BK] f16 (row stride BK + 8).
var<workgroup> ps: array<vec4<f16>, NSG * 16u * (BK / 4u + 2u)>;
var<workgroup> row_a: array<f32, NSG * 16u>;
var<workgroup> row_l: array<f32, NSG * 16u>;
// The rescale flag (element 0) and the last-part flag (element 1), padded to 16 bytes: cooperative loads need 16-byte aligned
// addresses, and a driver may place this variable before the staged buffers.
var<workgroup> resc: array<atomic<u32>, 4>;


// The first output column of this workgroup (z VD), set once from the workgroup id.
var<private> cm_d0: u32;

// First visible key of a query at position qp.
fn first_key(qp: u32) -> u32 {
    if (p.window > 0u && qp + 1u > p.window) {
        return qp + 1u - p.window;
    }
    return 0u;
}

// Row and 16-byte column of slot s of a K tile (rows of SPR slots) or of this workgroup's V
// columns (rows of SPRV slots from its first value column).
fn slot_at(is_v: bool, s: u32) -> vec2<u32> {
    if (is_v) {
        return vec2<u32>(s / SPRV, s % SPRV + cm_d0 / (HD / SPR));
    }
    return vec2<u32>(s / SPR, s % SPR);
}

// Slot s (`slot_at`) of the K or V tile at key kb, as raw words; zero past key hi.
fn load_slot(is_v: bool, kb: u32, hi: u32, kvh: u32, s: u32) -> vec4<u32> {
    let rc = slot_at(is_v, s);
    let jj = rc.x;
    let c = rc.y;
    let j = kb + jj;
    var w = vec4<u32>(0u);
    if ((SKIP & 2u) == 0u && jj < BK && j <= hi) {
        // Without a ring (ring = n_kv) the row is the position: no division.
        var jr = j;
        if (p.ring < p.n_kv) {
            jr = j % p.ring;
        }
        let row = jr * p.n_kv_heads + kvh;
        // 16-byte slot index: rows of HD / 4 (f32) or HD / 8 (f16) slots.
        let e = row * SPR + c;
        if (is_v) {
            w = v[e];
        } else {
            w = k[e];
        }
    }
    return w;
}

fn store_slot(is_v: bool, s: u32, w: vec4<u32>) {
    let rc = slot_at(is_v, s);
    let jj = rc.x;
    let c = rc.y;
    if (jj >= BK) {
        return;
    }
    if (KV_DTYPE == 0u) {
        kvs[jj * QLD + c] = vec4<f16>(bitcast<vec4<f32>>(w));
        return;
    }
    let o = jj * QLD + 2u * c;
    kvs[o] = vec4<f16>(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)));
    kvs[o + 1u] = vec4<f16>(vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));
}

// Multiplies row r of the subgroup's 16 x 16 scratch tile by row_a[sb + r].
fn scale_rows(sbase: u32, sb: u32, lane: u32) {
    for (var e = lane; e < 256u; e += SG) {
        let r = e / 16u;
        let i = sbase + r * SLD + e % 16u;
        sc[i] = sc[i] * row_a[sb + r];
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let g = p.n_heads / p.n_kv_heads;
    let bq = (NSG * 16u) / g;
    // Heavy tiles first; x runs over (tile, part).
    let tiles = nwg.x / p.split;
    let tile = tiles - 1u - wid.x / p.split;
    let sp = wid.x % p.split;
    let q0 = tile * bq;
    let kvh = wid.y;
    cm_d0 = wid.z * VD;
    // V columns of this workgroup's output tiles, in vec4<f16> units of a staged row.
    let vb = cm_d0 / 4u;
    let q_last = min(q0 + bq, p.n_q) - 1u;
    let t_lo = first_key(p.pos0 + q0);
    let t_hi = min(p.pos0 + q_last, p.n_kv - 1u);
    // This part's keys [lo, hi] (empty when lo > hi).
    let steps = (t_hi - t_lo) / BK + 1u;
    let split = SPLIT_ON == 1u && p.split > 1u && steps >= p.split_min;
    // An unsplit tile's other parts walk no keys and write nothing (no early return: naga's
    // uniformity analysis would then reject the cooperative operations below).
    let idle = !split && sp > 0u;
    var lo = t_lo;
    var hi = t_hi;
    if (idle) {
        lo = 1u;
        hi = 0u;
    }
    if (split) {
        let per = (steps + p.split - 1u) / p.split;
        lo = t_lo + sp * per * BK;
        hi = min(lo + per * BK - 1u, t_hi);
    }
    // Keys every row sees without a mask: [first_key(last query), first query].
    let full_lo = first_key(p.pos0 + q_last);
    let full_hi = p.pos0 + q0;

    // The first K/V tile into registers, Q staged meanwhile.
    var kr: array<vec4<u32>, 16>;
    var vr: array<vec4<u32>, 16>;
    for (var i = 0u; i < SPT; i++) {
        kr[i] = load_slot(false, lo, hi, kvh, lid + i * WG);
    }
    if (VAHEAD == 1u) {
        for (var i = 0u; i < SPTV; i++) {
            vr[i] = load_slot(true, lo, hi, kvh, lid + i * WG);
        }
    }
    for (var i = lid; i < NSG * 16u * (HD / 4u); i += WG) {
        let t = i / (HD / 4u);
        let c = i % (HD / 4u);
        let qi = q0 + t / g;
        var x = vec4<f32>(0.0);
        if (t < bq * g && qi < p.n_q) {
            let e = (qi * p.n_heads + kvh * g + t % g) * HD + 4u * c;
            x = vec4<f32>(q[e], q[e + 1u], q[e + 2u], q[e + 3u]);
        }
        if (QREG == 0u) {
            qs[t * QLD + c] = vec4<f16>(x);
        } else {
            kvs[t * QLD + c] = vec4<f16>(x);
        }
    }
    // This subgroup's rows and scratch; this lane's row and share of the keys.
    let sb = sg_id * 16u;
    // With QREG, each subgroup takes its rows' HD / 16 query tiles from the K/V buffer.
    var qa0: coop_mat16x16<f16, A>;
    var qa1: coop_mat16x16<f16, A>;
    var qa2: coop_mat16x16<f16, A>;
    var qa3: coop_mat16x16<f16, A>;
    var qa4: coop_mat16x16<f16, A>;
    var qa5: coop_mat16x16<f16, A>;
    var qa6: coop_mat16x16<f16, A>;
    var qa7: coop_mat16x16<f16, A>;
    if (QREG == 1u) {
        workgroupBarrier();
        qa0 = coopLoadT<coop_mat16x16<f16, A>>(&kvs[sb * QLD], QLD);
        qa1 = coopLoadT<coop_mat16x16<f16, A>>(&kvs[sb * QLD + 4u], QLD);
        if (HD > 32u) {
            qa2 = coopLoadT<coop_mat16x16<f16, A>>(&kvs[sb * QLD + 8u], QLD);
        }
        if (HD > 48u) {
            qa3 = coopLoadT<coop_mat16x16<f16, A>>(&kvs[sb * QLD + 12u], QLD);
        }
        if (HD > 64u) {
            qa4 = coopLoadT<coop_mat16x16<f16, A>>(&kvs[sb * QLD + 16u], QLD);
        }
        if (HD > 80u) {
            qa5 = coopLoadT<coop_mat16x16<f16, A>>(&kvs[sb * QLD + 20u], QLD);
        }
        if (HD > 96u) {
            qa6 = coopLoadT<coop_mat16x16<f16, A>>(&kvs[sb * QLD + 24u], QLD);
        }
        if (HD > 112u) {
            qa7 = coopLoadT<coop_mat16x16<f16, A>>(&kvs[sb * QLD + 28u], QLD);
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < SPT; i++) {
        store_slot(false, lid + i * WG, kr[i]);
    }

    let sbase = sb * SLD;
    let pbase = sb * PLD;
    let lpr = SG / 16u;
    let kpl = BK / lpr;
    let row = lane % 16u;
    let part = lane / 16u;
    let t = sb + row;
    let qi = q0 + t / g;
    let valid = t < bq * g && qi < p.n_q;
    var qp = 0u;
    if (valid) {
        qp = q_pos[qi];
    }
    let kf = first_key(qp);
    var m_run = FLOOR;
    var l_run = 0.0;

    var zero: coop_mat16x16<f32, C>;
    var o0 = zero;
    var o1 = zero;
    var o2 = zero;
    var o3 = zero;
    var o4 = zero;
    var o5 = zero;
    var o6 = zero;
    var o7 = zero;
    var sv: array<f32, 32>;

    for (var kb = lo; kb <= hi; kb += BK) {
        workgroupBarrier();
        // The rescale flag of this step (read after two more barriers, set after one).
        if (lid == 0u) {
            atomicStore(&resc[0], 0u);
        }
        // K of this step is staged, V in registers: the next K into registers.
        let nxt = kb + BK;
        let more = nxt <= hi;
        if (more) {
            for (var i = 0u; i < SPT; i++) {
                kr[i] = load_slot(false, nxt, hi, kvh, lid + i * WG);
            }
        }
        // S[16, BK] = Q K^T.
        var s0 = zero;
        var s1 = zero;
        var s2 = zero;
        var s3 = zero;
        if (QREG == 0u) {
            for (var d = 0u; d < HD / 16u; d++) {
                let a = coopLoadT<coop_mat16x16<f16, A>>(&qs[sb * QLD + 4u * d], QLD);
                let b0 = coopLoad<coop_mat16x16<f16, B>>(&kvs[4u * d], QLD);
                let b1 = coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 4u * d], QLD);
                if ((SKIP & 4u) == 0u) {
                    s0 = coopMultiplyAdd(a, b0, s0);
                    s1 = coopMultiplyAdd(a, b1, s1);
                }
            }
        } else {
            if ((SKIP & 4u) == 0u) {
                s0 = coopMultiplyAdd(qa0, coopLoad<coop_mat16x16<f16, B>>(&kvs[0u], QLD), s0);
                s1 = coopMultiplyAdd(qa0, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 0u], QLD), s1);
                s2 = coopMultiplyAdd(qa0, coopLoad<coop_mat16x16<f16, B>>(&kvs[K2 + 0u], QLD), s2);
                s3 = coopMultiplyAdd(qa0, coopLoad<coop_mat16x16<f16, B>>(&kvs[K3 + 0u], QLD), s3);
                s0 = coopMultiplyAdd(qa1, coopLoad<coop_mat16x16<f16, B>>(&kvs[4u], QLD), s0);
                s1 = coopMultiplyAdd(qa1, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 4u], QLD), s1);
                s2 = coopMultiplyAdd(qa1, coopLoad<coop_mat16x16<f16, B>>(&kvs[K2 + 4u], QLD), s2);
                s3 = coopMultiplyAdd(qa1, coopLoad<coop_mat16x16<f16, B>>(&kvs[K3 + 4u], QLD), s3);
                if (HD > 32u) {
                    s0 = coopMultiplyAdd(qa2, coopLoad<coop_mat16x16<f16, B>>(&kvs[8u], QLD), s0);
                    s1 = coopMultiplyAdd(qa2, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 8u], QLD), s1);
                    s2 = coopMultiplyAdd(qa2, coopLoad<coop_mat16x16<f16, B>>(&kvs[K2 + 8u], QLD), s2);
                    s3 = coopMultiplyAdd(qa2, coopLoad<coop_mat16x16<f16, B>>(&kvs[K3 + 8u], QLD), s3);
                }
                if (HD > 48u) {
                    s0 = coopMultiplyAdd(qa3, coopLoad<coop_mat16x16<f16, B>>(&kvs[12u], QLD), s0);
                    s1 = coopMultiplyAdd(qa3, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 12u], QLD), s1);
                    s2 = coopMultiplyAdd(qa3, coopLoad<coop_mat16x16<f16, B>>(&kvs[K2 + 12u], QLD), s2);
                    s3 = coopMultiplyAdd(qa3, coopLoad<coop_mat16x16<f16, B>>(&kvs[K3 + 12u], QLD), s3);
                }
                if (HD > 64u) {
                    s0 = coopMultiplyAdd(qa4, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u], QLD), s0);
                    s1 = coopMultiplyAdd(qa4, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 16u], QLD), s1);
                    s2 = coopMultiplyAdd(qa4, coopLoad<coop_mat16x16<f16, B>>(&kvs[K2 + 16u], QLD), s2);
                    s3 = coopMultiplyAdd(qa4, coopLoad<coop_mat16x16<f16, B>>(&kvs[K3 + 16u], QLD), s3);
                }
                if (HD > 80u) {
                    s0 = coopMultiplyAdd(qa5, coopLoad<coop_mat16x16<f16, B>>(&kvs[20u], QLD), s0);
                    s1 = coopMultiplyAdd(qa5, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 20u], QLD), s1);
                    s2 = coopMultiplyAdd(qa5, coopLoad<coop_mat16x16<f16, B>>(&kvs[K2 + 20u], QLD), s2);
                    s3 = coopMultiplyAdd(qa5, coopLoad<coop_mat16x16<f16, B>>(&kvs[K3 + 20u], QLD), s3);
                }
                if (HD > 96u) {
                    s0 = coopMultiplyAdd(qa6, coopLoad<coop_mat16x16<f16, B>>(&kvs[24u], QLD), s0);
                    s1 = coopMultiplyAdd(qa6, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 24u], QLD), s1);
                    s2 = coopMultiplyAdd(qa6, coopLoad<coop_mat16x16<f16, B>>(&kvs[K2 + 24u], QLD), s2);
                    s3 = coopMultiplyAdd(qa6, coopLoad<coop_mat16x16<f16, B>>(&kvs[K3 + 24u], QLD), s3);
                }
                if (HD > 112u) {
                    s0 = coopMultiplyAdd(qa7, coopLoad<coop_mat16x16<f16, B>>(&kvs[28u], QLD), s0);
                    s1 = coopMultiplyAdd(qa7, coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * QLD + 28u], QLD), s1);
                    s2 = coopMultiplyAdd(qa7, coopLoad<coop_mat16x16<f16, B>>(&kvs[K2 + 28u], QLD), s2);
                    s3 = coopMultiplyAdd(qa7, coopLoad<coop_mat16x16<f16, B>>(&kvs[K3 + 28u], QLD), s3);
                }
            }
        }
        coopStoreT(s0, &sc[sbase], SLD);
        coopStoreT(s1, &sc[sbase + 16u], SLD);
        if (BK > 32u) {
            coopStoreT(s2, &sc[sbase + 32u], SLD);
            coopStoreT(s3, &sc[sbase + 48u], SLD);
        }
        workgroupBarrier();
        // K consumed: stage this step's V, load the next V (VAHEAD 0: load this step's now).
        for (var i = 0u; i < SPTV; i++) {
            if (VAHEAD == 1u) {
                store_slot(true, lid + i * WG, vr[i]);
            } else {
                store_slot(true, lid + i * WG, load_slot(true, kb, hi, kvh, lid + i * WG));
            }
        }
        if (more && VAHEAD == 1u) {
            for (var i = 0u; i < SPTV; i++) {
                vr[i] = load_slot(true, nxt, hi, kvh, lid + i * WG);
            }
        }

        // Online softmax: this lane's kpl keys of its row.
        let full = kb >= full_lo && kb + BK - 1u <= full_hi && kb + BK - 1u <= hi;
        let k0 = kb + part * kpl;
        var mt = MASKED;
        for (var u4 = 0u; u4 < kpl / 4u; u4++) {
            let sx = sbase + row * SLD + part * kpl + 4u * u4;
            let x = vec4<f32>(sc[sx], sc[sx + 1u], sc[sx + 2u], sc[sx + 3u]) * p.scale;
            for (var c = 0u; c < 4u; c++) {
                var s = x[c];
                if (p.softcap > 0.0) {
                    s = p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0));
                }
                let j = k0 + 4u * u4 + c;
                if (!full && !(valid && j >= kf && j <= qp)) {
                    s = MASKED;
                }
                sv[4u * u4 + c] = s;
                mt = max(mt, s);
            }
        }
        for (var x = 16u; x < SG; x *= 2u) {
            mt = max(mt, subgroupShuffleXor(mt, x));
        }
        let raise = mt > m_run + RESCALE_T;
        var m_new = m_run;
        if (raise) {
            m_new = mt;
        }
        let a = exp(m_run - m_new);
        if (raise && m_run > 0.5 * FLOOR) {
            atomicStore(&resc[0], 1u);
        }
        var sum = 0.0;
        for (var u4 = 0u; u4 < kpl / 4u; u4++) {
            var pv4 = vec4<f32>(0.0);
            for (var c = 0u; c < 4u; c++) {
                if ((SKIP & 1u) == 0u) {
                    pv4[c] = exp(sv[4u * u4 + c] - m_new);
                } else {
                    pv4[c] = sv[4u * u4 + c];
                }
            }
            sum += pv4.x + pv4.y + pv4.z + pv4.w;
            ps[pbase + row * PLD + part * (kpl / 4u) + u4] = vec4<f16>(pv4);
        }
        for (var x = 16u; x < SG; x *= 2u) {
            sum += subgroupShuffleXor(sum, x);
        }
        l_run = l_run * a + sum;
        m_run = m_new;
        if (part == 0u) {
            row_a[t] = a;
        }
        // Probabilities visible (the load is a barrier); rescale where any row needs it.
        let flag = workgroupUniformLoad(&resc[0]);
        if (flag != 0u) {
            coopStoreT(o0, &sc[sbase], SLD);
            workgroupBarrier();
            scale_rows(sbase, sb, lane);
            workgroupBarrier();
            o0 = coopLoadT<coop_mat16x16<f32, C>>(&sc[sbase], SLD);
            workgroupBarrier();
            coopStoreT(o1, &sc[sbase], SLD);
            workgroupBarrier();
            scale_rows(sbase, sb, lane);
            workgroupBarrier();
            o1 = coopLoadT<coop_mat16x16<f32, C>>(&sc[sbase], SLD);
            workgroupBarrier();
            if (VD > 32u) {
                coopStoreT(o2, &sc[sbase], SLD);
                workgroupBarrier();
                scale_rows(sbase, sb, lane);
                workgroupBarrier();
                o2 = coopLoadT<coop_mat16x16<f32, C>>(&sc[sbase], SLD);
                workgroupBarrier();
            }
            if (VD > 48u) {
                coopStoreT(o3, &sc[sbase], SLD);
                workgroupBarrier();
                scale_rows(sbase, sb, lane);
                workgroupBarrier();
                o3 = coopLoadT<coop_mat16x16<f32, C>>(&sc[sbase], SLD);
                workgroupBarrier();
            }
            if (VD > 64u) {
                coopStoreT(o4, &sc[sbase], SLD);
                workgroupBarrier();
                scale_rows(sbase, sb, lane);
                workgroupBarrier();
                o4 = coopLoadT<coop_mat16x16<f32, C>>(&sc[sbase], SLD);
                workgroupBarrier();
            }
            if (VD > 80u) {
                coopStoreT(o5, &sc[sbase], SLD);
                workgroupBarrier();
                scale_rows(sbase, sb, lane);
                workgroupBarrier();
                o5 = coopLoadT<coop_mat16x16<f32, C>>(&sc[sbase], SLD);
                workgroupBarrier();
            }
            if (VD > 96u) {
                coopStoreT(o6, &sc[sbase], SLD);
                workgroupBarrier();
                scale_rows(sbase, sb, lane);
                workgroupBarrier();
                o6 = coopLoadT<coop_mat16x16<f32, C>>(&sc[sbase], SLD);
                workgroupBarrier();
            }
            if (VD > 112u) {
                coopStoreT(o7, &sc[sbase], SLD);
                workgroupBarrier();
                scale_rows(sbase, sb, lane);
                workgroupBarrier();
                o7 = coopLoadT<coop_mat16x16<f32, C>>(&sc[sbase], SLD);
                workgroupBarrier();
            }
        }
        // O += P V.
        let p0 = coopLoadT<coop_mat16x16<f16, A>>(&ps[pbase], PLD);
        let p1 = coopLoadT<coop_mat16x16<f16, A>>(&ps[pbase + 4u], PLD);
        var p2: coop_mat16x16<f16, A>;
        var p3: coop_mat16x16<f16, A>;
        if (BK > 32u) {
            p2 = coopLoadT<coop_mat16x16<f16, A>>(&ps[pbase + 8u], PLD);
            p3 = coopLoadT<coop_mat16x16<f16, A>>(&ps[pbase + 12u], PLD);
        }
        if ((SKIP & 8u) == 0u) {
            o0 = coopMultiplyAdd(p0, coopLoadT<coop_mat16x16<f16, B>>(&kvs[vb + 0u], QLD), o0);
            o0 = coopMultiplyAdd(p1, coopLoadT<coop_mat16x16<f16, B>>(&kvs[16u * QLD + vb + 0u], QLD), o0);
            if (BK > 32u) {
                o0 = coopMultiplyAdd(p2, coopLoadT<coop_mat16x16<f16, B>>(&kvs[32u * QLD + vb + 0u], QLD), o0);
                o0 = coopMultiplyAdd(p3, coopLoadT<coop_mat16x16<f16, B>>(&kvs[48u * QLD + vb + 0u], QLD), o0);
            }
            o1 = coopMultiplyAdd(p0, coopLoadT<coop_mat16x16<f16, B>>(&kvs[vb + 4u], QLD), o1);
            o1 = coopMultiplyAdd(p1, coopLoadT<coop_mat16x16<f16, B>>(&kvs[16u * QLD + vb + 4u], QLD), o1);
            if (BK > 32u) {
                o1 = coopMultiplyAdd(p2, coopLoadT<coop_mat16x16<f16, B>>(&kvs[32u * QLD + vb + 4u], QLD), o1);
                o1 = coopMultiplyAdd(p3, coopLoadT<coop_mat16x16<f16, B>>(&kvs[48u * QLD + vb + 4u], QLD), o1);
            }
            if (VD > 32u) {
                o2 = coopMultiplyAdd(p0, coopLoadT<coop_mat16x16<f16, B>>(&kvs[vb + 8u], QLD), o2);
                o2 = coopMultiplyAdd(p1, coopLoadT<coop_mat16x16<f16, B>>(&kvs[16u * QLD + vb + 8u], QLD), o2);
                if (BK > 32u) {
                    o2 = coopMultiplyAdd(p2, coopLoadT<coop_mat16x16<f16, B>>(&kvs[32u * QLD + vb + 8u], QLD), o2);
                    o2 = coopMultiplyAdd(p3, coopLoadT<coop_mat16x16<f16, B>>(&kvs[48u * QLD + vb + 8u], QLD), o2);
                }
            }
            if (VD > 48u) {
                o3 = coopMultiplyAdd(p0, coopLoadT<coop_mat16x16<f16, B>>(&kvs[vb + 12u], QLD), o3);
                o3 = coopMultiplyAdd(p1, coopLoadT<coop_mat16x16<f16, B>>(&kvs[16u * QLD + vb + 12u], QLD), o3);
                if (BK > 32u) {
                    o3 = coopMultiplyAdd(p2, coopLoadT<coop_mat16x16<f16, B>>(&kvs[32u * QLD + vb + 12u], QLD), o3);
                    o3 = coopMultiplyAdd(p3, coopLoadT<coop_mat16x16<f16, B>>(&kvs[48u * QLD + vb + 12u], QLD), o3);
                }
            }
            if (VD > 64u) {
                o4 = coopMultiplyAdd(p0, coopLoadT<coop_mat16x16<f16, B>>(&kvs[vb + 16u], QLD), o4);
                o4 = coopMultiplyAdd(p1, coopLoadT<coop_mat16x16<f16, B>>(&kvs[16u * QLD + vb + 16u], QLD), o4);
                if (BK > 32u) {
                    o4 = coopMultiplyAdd(p2, coopLoadT<coop_mat16x16<f16, B>>(&kvs[32u * QLD + vb + 16u], QLD), o4);
                    o4 = coopMultiplyAdd(p3, coopLoadT<coop_mat16x16<f16, B>>(&kvs[48u * QLD + vb + 16u], QLD), o4);
                }
            }
            if (VD > 80u) {
                o5 = coopMultiplyAdd(p0, coopLoadT<coop_mat16x16<f16, B>>(&kvs[vb + 20u], QLD), o5);
                o5 = coopMultiplyAdd(p1, coopLoadT<coop_mat16x16<f16, B>>(&kvs[16u * QLD + vb + 20u], QLD), o5);
                if (BK > 32u) {
                    o5 = coopMultiplyAdd(p2, coopLoadT<coop_mat16x16<f16, B>>(&kvs[32u * QLD + vb + 20u], QLD), o5);
                    o5 = coopMultiplyAdd(p3, coopLoadT<coop_mat16x16<f16, B>>(&kvs[48u * QLD + vb + 20u], QLD), o5);
                }
            }
            if (VD > 96u) {
                o6 = coopMultiplyAdd(p0, coopLoadT<coop_mat16x16<f16, B>>(&kvs[vb + 24u], QLD), o6);
                o6 = coopMultiplyAdd(p1, coopLoadT<coop_mat16x16<f16, B>>(&kvs[16u * QLD + vb + 24u], QLD), o6);
                if (BK > 32u) {
                    o6 = coopMultiplyAdd(p2, coopLoadT<coop_mat16x16<f16, B>>(&kvs[32u * QLD + vb + 24u], QLD), o6);
                    o6 = coopMultiplyAdd(p3, coopLoadT<coop_mat16x16<f16, B>>(&kvs[48u * QLD + vb + 24u], QLD), o6);
                }
            }
            if (VD > 112u) {
                o7 = coopMultiplyAdd(p0, coopLoadT<coop_mat16x16<f16, B>>(&kvs[vb + 28u], QLD), o7);
                o7 = coopMultiplyAdd(p1, coopLoadT<coop_mat16x16<f16, B>>(&kvs[16u * QLD + vb + 28u], QLD), o7);
                if (BK > 32u) {
                    o7 = coopMultiplyAdd(p2, coopLoadT<coop_mat16x16<f16, B>>(&kvs[32u * QLD + vb + 28u], QLD), o7);
                    o7 = coopMultiplyAdd(p3, coopLoadT<coop_mat16x16<f16, B>>(&kvs[48u * QLD + vb + 28u], QLD), o7);
                }
            }
        }
        // V consumed: stage the next K.
        workgroupBarrier();
        if (more) {
            for (var i = 0u; i < SPT; i++) {
                store_slot(false, lid + i * WG, kr[i]);
            }
        }
    }

    if (split) {
        // This part's rows: unnormalised output, running max and sum.
        let pb = ((kvh * tiles + tile) * p.split + sp) * NSG * 16u;
        if (part == 0u) {
            kv_part[(pb + t) * (HD + 2u) + HD] = m_run;
            kv_part[(pb + t) * (HD + 2u) + HD + 1u] = l_run;
        }
        emit_part(o0, 0u, sbase, sb, lane, pb);
        emit_part(o1, 1u, sbase, sb, lane, pb);
        if (VD > 32u) {
            emit_part(o2, 2u, sbase, sb, lane, pb);
        }
        if (VD > 48u) {
            emit_part(o3, 3u, sbase, sb, lane, pb);
        }
        if (VD > 64u) {
            emit_part(o4, 4u, sbase, sb, lane, pb);
        }
        if (VD > 80u) {
            emit_part(o5, 5u, sbase, sb, lane, pb);
        }
        if (VD > 96u) {
            emit_part(o6, 6u, sbase, sb, lane, pb);
        }
        if (VD > 112u) {
            emit_part(o7, 7u, sbase, sb, lane, pb);
        }
        storageBarrier();
        // One counter per (value-column group, kv head, tile): each group merges its columns.
        let c = (wid.z * nwg.y + kvh) * tiles + tile;
        if (lid == 0u) {
            let before = atomicAdd(&kv_ctr[c], 1u);
            atomicStore(&resc[1], select(0u, 1u, before == p.split - 1u));
        }
        storageBarrier();
        if (workgroupUniformLoad(&resc[1]) != 0u) {
            if (lid == 0u) {
                atomicStore(&kv_ctr[c], 0u);
            }
            merge_parts((kvh * tiles + tile) * p.split * NSG * 16u, q0, kvh, g, bq, lid);
        }
    } else if (!idle) {
        finish(o0, o1, o2, o3, o4, o5, o6, o7, t, l_run, part, sbase, sb, lane, q0, kvh, g, bq);
    }
}
