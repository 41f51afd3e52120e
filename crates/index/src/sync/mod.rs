//! Concurrency primitives that serve the upper layers (writer, server).
//!
//! - [`LsnWatermark`]: the applied-LSN watermark. The writer publishes the
//!   applied LSN after each group; any task waits, without polling, until it
//!   reaches a number (read-your-writes, follower catch-up, long-poll
//!   watches). Sharded waiter registry; no lost wakeup.
//! - [`LifoSemaphore`]: admission control, one per request class. Lock-free,
//!   serves the newest waiter first, bounded queue, deadline-aware; release
//!   only wakes.
//!
//! Both ship with loom models (`sync_loom_models`, run with
//! `RUSTFLAGS="--cfg uuidmap_loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=2
//! cargo test -p uuidmap-index --release --lib --target-dir target/loom -- loom`).

// Without the `tokio` feature the deadline-aware acquires are left out, and
// with them the only users of the semaphore's wait queue outside the loom
// models: the queue is kept (the models check it), not warned about.
#[cfg_attr(not(feature = "tokio"), allow(dead_code, unused_imports))]
mod lifo_semaphore;
#[cfg_attr(not(feature = "tokio"), allow(unused_imports))]
mod lsn_watermark;

#[cfg(all(test, uuidmap_loom))]
mod sync_loom_models;

#[cfg(not(feature = "tokio"))]
pub(crate) use std::time::Instant;
/// Deadlines are tokio's instants when the `tokio` feature (the deadline
/// timers) is on, so that they follow tokio's clock; without it only the
/// deadline-free waits exist, and `std`'s instant serves them.
#[cfg(feature = "tokio")]
pub(crate) use tokio::time::Instant;

#[cfg(feature = "tokio")]
pub use lifo_semaphore::AcquireOwned;
pub use lifo_semaphore::{AcquireError, LifoSemaphore, OwnedPermit, Permit};
pub use lsn_watermark::{LsnWatermark, WaitTimedOut};
