//! The atomics the index is built from: `std`'s normally, loom's when the loom
//! models are compiled (`RUSTFLAGS="--cfg uuidmap_loom --cfg crossbeam_loom"`).
//!
//! Everything that a concurrent reader and the writer share goes through these
//! types, so the loom models check the same code that ships.

#[cfg(uuidmap_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(uuidmap_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// Backs off inside a spin loop (a pause hint; under loom, a yield so that the
/// model checker schedules the other thread).
#[inline]
pub(crate) fn spin_pause() {
    #[cfg(uuidmap_loom)]
    loom::thread::yield_now();
    #[cfg(not(uuidmap_loom))]
    std::hint::spin_loop();
}

/// Gives the CPU away while waiting for another thread to make progress.
#[inline]
pub(crate) fn yield_thread() {
    #[cfg(uuidmap_loom)]
    loom::thread::yield_now();
    #[cfg(not(uuidmap_loom))]
    std::thread::yield_now();
}
