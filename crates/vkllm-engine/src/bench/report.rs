//! The bench report's tables: markdown for people, JSON for scripts, and the per-region (or
//! per-kernel) profile sums.

use super::{BenchReport, ProfileRow};

/// Sums timed dispatches by region (by kernel when `by_kernel`): (rows in first-seen order, busy
/// µs, span µs).
pub(super) fn by_region(
    t: &[vkllm_models::ProfiledDispatch],
    by_kernel: bool,
) -> (Vec<ProfileRow>, f64, f64) {
    let mut rows: Vec<ProfileRow> = Vec::new();
    let mut busy = 0.0;
    for d in t {
        busy += d.ns / 1e3;
        let key = if by_kernel { d.kernel } else { d.region };
        match rows.iter_mut().find(|r| r.region == key) {
            Some(r) => {
                r.dispatches += 1;
                r.us += d.ns / 1e3;
            }
            None => rows.push(ProfileRow {
                region: key,
                dispatches: 1,
                us: d.ns / 1e3,
            }),
        }
    }
    let span = t
        .iter()
        .map(|d| (d.start_ns + d.ns) / 1e3)
        .fold(0.0, f64::max);
    (rows, busy, span)
}

fn profile_table(title: &str, rows: &[ProfileRow], busy: f64, span: f64) -> String {
    let mut s =
        format!("\n{title}\n\n| region | dispatches | µs | % of GPU time |\n|---|---|---|---|\n");
    for p in rows {
        s += &format!(
            "| {} | {} | {:.1} | {:.1} |\n",
            p.region,
            p.dispatches,
            p.us,
            100.0 * p.us / busy.max(1e-9)
        );
    }
    s += &format!(
        "| gaps (span - busy) | | {:.1} | |\n| **span** | {} | {:.1} | |\n",
        span - busy,
        rows.iter().map(|p| p.dispatches).sum::<usize>(),
        span
    );
    s
}

impl BenchReport {
    /// A markdown table of the tests, then the profile (when measured).
    pub fn markdown(&self) -> String {
        let mut s = String::from(
            "| test | batch | sampling | tok/s | ms/step | eff. GB/s | TTFT ms | median s | min..max s |\n|---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let opt = |x: Option<f64>, p: usize| x.map_or("-".into(), |v| format!("{v:.p$}"));
            s += &format!(
                "| {} | {} | {} | {:.1} | {} | {} | {} | {:.4} | {:.4}..{:.4} |\n",
                r.test,
                r.batch,
                r.sampling,
                r.tok_s,
                opt(r.ms_per_step, 3),
                opt(r.eff_gb_s, 0),
                opt(r.ttft_ms, 1),
                r.median_s,
                r.min_s,
                r.max_s
            );
        }
        s += &format!(
            "\ncopy bandwidth {:.0} GB/s; weights read per decode step {:.1} MB",
            self.copy_gb_s,
            self.weight_bytes as f64 / 1e6
        );
        if self.kept_f16_bytes > 0 {
            s += &format!(
                "; resident f16 weight copies {:.1} MB",
                self.kept_f16_bytes as f64 / 1e6
            );
        }
        s += "\n";
        if !self.profile.is_empty() {
            s += &profile_table(
                "one decode step:",
                &self.profile,
                self.profile_busy_us,
                self.profile_span_us,
            );
        }
        if !self.prefill_profile.is_empty() {
            s += &profile_table(
                "one prefill chunk:",
                &self.prefill_profile,
                self.prefill_busy_us,
                self.prefill_span_us,
            );
        }
        s
    }

    /// The report as JSON (with the caller's metadata object merged in).
    pub fn json(&self, meta: serde_json::Value) -> serde_json::Value {
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "test": r.test, "batch": r.batch, "sampling": r.sampling, "tokens": r.tokens,
                    "median_s": r.median_s, "min_s": r.min_s, "max_s": r.max_s,
                    "tok_s": r.tok_s, "ms_per_step": r.ms_per_step,
                    "eff_gb_s": r.eff_gb_s, "ttft_ms": r.ttft_ms,
                })
            })
            .collect();
        let profile: Vec<_> = self
            .profile
            .iter()
            .map(
                |p| serde_json::json!({"region": p.region, "dispatches": p.dispatches, "us": p.us}),
            )
            .collect();
        serde_json::json!({
            "meta": meta,
            "copy_gb_s": self.copy_gb_s,
            "weight_bytes": self.weight_bytes,
            "kept_f16_bytes": self.kept_f16_bytes,
            "rows": rows,
            "profile": profile,
            "profile_busy_us": self.profile_busy_us,
            "profile_span_us": self.profile_span_us,
            "prefill_profile": self.prefill_profile.iter().map(
                |p| serde_json::json!({"region": p.region, "dispatches": p.dispatches, "us": p.us}),
            ).collect::<Vec<_>>(),
            "prefill_busy_us": self.prefill_busy_us,
            "prefill_span_us": self.prefill_span_us,
        })
    }
}
