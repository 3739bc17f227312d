// Workgroup reductions through subgroup operations and `red` (one partial per subgroup: up to 64
// subgroups, so any workgroup of at most 256 invocations at subgroup size >= 4). Not a kernel:
// appended to each file naming it in a `// #include reduce.inc.wgsl` line. Every invocation calls
// them in uniform control flow and gets the result; `red` is free again when they return.

var<workgroup> red: array<f32, 64>;

fn wg_sum(v: f32, sg_id: u32, sg_lane: u32, n_sg: u32) -> f32 {
    let s = subgroupAdd(v);
    if (sg_lane == 0u) {
        red[sg_id] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < n_sg; i++) {
        total += red[i];
    }
    workgroupBarrier();
    return total;
}

fn wg_max(v: f32, sg_id: u32, sg_lane: u32, n_sg: u32) -> f32 {
    let s = subgroupMax(v);
    if (sg_lane == 0u) {
        red[sg_id] = s;
    }
    workgroupBarrier();
    var m = red[0];
    for (var i = 1u; i < n_sg; i++) {
        m = max(m, red[i]);
    }
    workgroupBarrier();
    return m;
}
