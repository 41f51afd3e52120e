//! The index crate's tests, one binary with a module per subject (it links
//! once). They use the index alone: `cargo test -p uuidmap-index` compiles
//! nothing above it.
//!
//! - `model`: random operations against a `HashMap` model, proptest;
//!   `bad_input`: typed errors, never a panic.
//! - `scan`: scans under a concurrent writer; `stress`: one writer and
//!   three readers; `image`: segment images lent back to a new index.
//! - `lsn_watermark`, `lifo_semaphore`: the `sync` primitives as their
//!   users rely on them.
//!
//! Proptest keeps its regressions in `tests/proptest-regressions/`
//! (beside this directory: proptest's default for a source under a
//! `main.rs`).

mod bad_input;
mod image;
mod lifo_semaphore;
mod lsn_watermark;
mod model;
mod scan;
mod stress;

/// The tests' one deterministic generator, splitmix64, from the I/O rig's
/// file: included by path, because the rig crate depends on the engine and
/// the index's tests compile nothing above the index.
#[path = "../../../testkit-io/src/data.rs"]
#[allow(dead_code)]
mod data;
