//! uuidmap's engine: what makes the index durable. The write-ahead log, the
//! mmap'd snapshots, recovery from them, and the single-writer pipeline that
//! decides, logs, syncs and applies every write in LSN order, all behind
//! [`writer::DurableIndex`]. It builds on `uuidmap-index` and knows nothing
//! of the network: the server crate serves it, the binary runs it. Every
//! file access goes through [`store::Io`], so tests can put it on a
//! simulated disk (the testkit crate's `SimIo`).

#![warn(missing_docs, unreachable_pub)]

pub mod store;
pub mod writer;
