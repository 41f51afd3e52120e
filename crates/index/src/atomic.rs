//! The shared-memory primitives the crate is built from: `std`'s normally,
//! loom's when the loom models are compiled
//! (`RUSTFLAGS="--cfg uuidmap_loom --cfg crossbeam_loom"`).
//!
//! Everything that concurrent readers and the writer share (the slots and
//! seqlocks of the index, the watermark's per-shard mutex, the semaphore's
//! waker cells) goes through these types, so the loom models check the same
//! code that ships. This is the crate's only loom shim.

#[cfg(uuidmap_loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(uuidmap_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(uuidmap_loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(uuidmap_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// Loom's cell checks every access against the happens-before relation, so a
/// protocol that lets two threads touch a waker cell at once fails its model.
#[cfg(uuidmap_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std::cell::UnsafeCell` behind loom's closure-style API.
#[cfg(not(uuidmap_loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(uuidmap_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a pointer to the value; the caller's protocol must make
    /// the access exclusive.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Locks `mutex`, ignoring poisoning: the critical sections in `sync` only
/// move entries between collections and never leave them half-updated.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

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
