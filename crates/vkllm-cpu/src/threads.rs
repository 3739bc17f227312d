//! How many threads a large op uses. Ops split their *outputs* between threads (each output
//! element is computed by exactly one thread, in a fixed order), so results are bit-identical
//! whatever the thread count.

use std::sync::OnceLock;

/// Ops below this many multiply-accumulates run on the calling thread: spawning costs more.
pub(crate) const PAR_MIN_WORK: usize = 1 << 20;

/// `std::thread::available_parallelism`, read once (it consults cgroup files on Linux).
pub(crate) fn max_threads() -> usize {
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
