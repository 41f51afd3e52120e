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
//! Both ship with loom models (`loom_models`, run with
//! `RUSTFLAGS="--cfg uuidmap_loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=2
//! cargo test --release --lib --target-dir target/loom -- loom`).

mod atomic;
mod lifo_semaphore;
mod lsn_watermark;

#[cfg(all(test, uuidmap_loom))]
mod loom_models;

pub use lifo_semaphore::{AcquireError, AcquireOwned, LifoSemaphore, OwnedPermit, Permit};
pub use lsn_watermark::{LsnWatermark, WaitTimedOut};
