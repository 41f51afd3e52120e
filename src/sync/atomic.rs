//! The shared-memory primitives `sync` is built from: `std`'s normally,
//! loom's when the loom models are compiled
//! (`RUSTFLAGS="--cfg uuidmap_loom --cfg crossbeam_loom"`).
//!
//! Everything the primitives share between threads (atomics, the per-shard
//! mutex of the watermark, the waker cells of the semaphore) goes through
//! these types, so the loom models check the same code that ships.

#[cfg(uuidmap_loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(uuidmap_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(uuidmap_loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(uuidmap_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

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
