// The sums of a team's lanes, shared by the team-layout decode matvecs (matvec_fused,
// matvec_q8a). Not a kernel: appended to each file naming it in a
// `// #include matvec_team.inc.wgsl` line. The including file declares `red` (f32 workgroup
// scratch, one entry per subgroup and slot) and the override LPR (lanes per team).

// The sum of v over the lanes of cluster `cl` (LPR consecutive lanes of a subgroup larger than
// a team), returned to that cluster's lanes. Called by every lane of the subgroup.
fn cluster_sum(v: f32, cl: u32, sg_size: u32) -> f32 {
    var mine = 0.0;
    for (var j = 0u; j < sg_size / LPR; j++) {
        let s = subgroupAdd(select(0.0, v, cl == j));
        if (cl == j) {
            mine = s;
        }
    }
    return mine;
}

// Slot k's total for `team` when a team spans several subgroups: the sum of its subgroups'
// partials, which lane 0 of each left at red[sg_id * sn + k] before a workgroup barrier.
fn red_team_sum(team: u32, k: u32, sn: u32, sg_size: u32) -> f32 {
    let per = LPR / sg_size;
    var s = 0.0;
    for (var i = 0u; i < per; i++) {
        s += red[(team * per + i) * sn + k];
    }
    return s;
}
