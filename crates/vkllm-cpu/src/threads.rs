//! How many threads a large op uses. Ops split their *outputs* between threads (each output
//! element is computed by exactly one thread, in a fixed order), so results are bit-identical
//! whatever the thread count.

use std::sync::OnceLock;

/// Ops below this many multiply-accumulates run on the calling thread: spawning costs more.
pub(crate) const PAR_MIN_WORK: usize = 1 << 20;

/// `std::thread::available_parallelism`, read once (it consults cgroup files on Linux).
pub fn max_threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Threads to use for `work` MACs split over `units` independent outputs.
pub(crate) fn threads_for(work: usize, units: usize) -> usize {
    if work < PAR_MIN_WORK {
        1
    } else {
        max_threads().min(units).max(1)
    }
}

/// Runs `f(first_unit, part)` over `out` cut into parts of `units_per_part * unit_len` elements
/// (the last may be shorter), on up to [`max_threads`] threads. Each part is written by exactly
/// one call, so the result does not depend on the thread count. `unit_len` is the length of one
/// unit (a matrix row, a block): parts never split one.
///
/// # Panics
/// If `unit_len` is zero or does not divide `out.len()` (a programming error).
pub fn for_each_part<T: Send>(
    out: &mut [T],
    unit_len: usize,
    units_per_part: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(unit_len > 0 && out.len().is_multiple_of(unit_len));
    let part = unit_len * units_per_part.max(1);
    let n_parts = out.len().div_ceil(part);
    let threads = max_threads().min(n_parts).max(1);
    if threads <= 1 {
        for (i, p) in out.chunks_mut(part).enumerate() {
            f(i * units_per_part.max(1), p);
        }
        return;
    }
    // Parts are handed out in order from a shared counter: threads that finish early take more.
    let parts: Vec<std::sync::Mutex<Option<&mut [T]>>> = out
        .chunks_mut(part)
        .map(|p| std::sync::Mutex::new(Some(p)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(slot) = parts.get(i) else { break };
            let taken = slot.lock().map(|mut g| g.take()).unwrap_or(None);
            if let Some(p) = taken {
                f(i * units_per_part.max(1), p);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
}
