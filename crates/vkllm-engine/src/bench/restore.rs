//! The hybrid bench's `restore @ dD` row (issue #31's hybrid state restore).

use std::time::Instant;

use vkllm_models::{Backend, ModelError, VulkanBackend};

use super::{BenchRow, HybridNet, Net, ids, median_spread};

/// The `restore @ dD` row: a snapshot of a sequence at depth `d` (its KV rows and recurrent
/// states, as a prefix-cache hit brings them back) restored into its slot, GPU work waited
/// for; `ms_per_step` holds the median milliseconds.
pub(super) fn restore_row(
    b: &mut VulkanBackend,
    net: &HybridNet<'_>,
    d: usize,
    reps: usize,
) -> Result<BenchRow, ModelError> {
    let (model, st) = net.g;
    let fill = ids(d, net.graph().vocab(), 77);
    net.prefill(b, 0, &fill, 0)?;
    let snap = model.snapshot_slot(b, st, 0)?;
    Backend::sync(b)?;
    let one = |b: &mut VulkanBackend| -> Result<f64, ModelError> {
        let t0 = Instant::now();
        model.restore_slot(b, &snap, st, 0)?;
        Backend::sync(b)?;
        Ok(t0.elapsed().as_secs_f64())
    };
    one(b)?;
    let times = (0..reps.max(3))
        .map(|_| one(b))
        .collect::<Result<Vec<_>, _>>()?;
    let (med, min, max) = median_spread(times);
    Ok(BenchRow {
        test: format!("restore @ d{d}"),
        batch: 1,
        sampling: "-",
        tokens: d,
        median_s: med,
        min_s: min,
        max_s: max,
        tok_s: d as f64 / med,
        ms_per_step: Some(med * 1e3),
        eff_gb_s: None,
        ttft_ms: None,
    })
}
