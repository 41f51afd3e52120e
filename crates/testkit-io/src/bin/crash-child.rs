//! The process the crash tests kill: it opens a data directory, writes
//! deterministic batches from several threads with fsync policy `always`,
//! and prints one line per acknowledged batch. Not part of the product.
//!
//! Usage: `crash-child <dir> <run-seed> <writers>`
//!
//! Prints `ready <entries> <last_lsn>` once recovered, then
//! `ack <writer> <seq> <lsn>` after each acknowledged batch. Batches are
//! `uuidmap_testkit_io::crashtest::batch(run_seed, writer, seq)`, so the parent can
//! recompute them. Snapshots are triggered every few KiB of WAL and every
//! 20 ms, so kills land in the middle of snapshots too. Runs with an even
//! seed overlap one group's fsync with writing the next
//! (`PipelineConfig::overlap_syncs`), odd ones sync inline, so the kills
//! land in both pipelines.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use uuidmap_engine::writer::{DurableConfig, DurableIndex};
use uuidmap_testkit_io::crashtest;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: crash-child <dir> <run-seed> <writers>");
        std::process::exit(2);
    }
    let dir = &args[1];
    let seed: u64 = args[2].parse().expect("run seed");
    let writers: u32 = args[3].parse().expect("writer count");
    let mut config = DurableConfig::new(dir);
    config.pipeline.snapshot_every_bytes = 16 << 10;
    config.wal_segment_bytes = 64 << 10;
    config.snapshot_every = Some(Duration::from_millis(20));
    config.pipeline.overlap_syncs = seed.is_multiple_of(2);
    let durable = match DurableIndex::open(config) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            eprintln!("crash-child: cannot open {dir}: {e}");
            std::process::exit(1);
        }
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "ready {} {}",
            durable.index().len(),
            durable.watermark().current()
        );
        let _ = out.flush();
    }
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let durable = durable.clone();
            std::thread::spawn(move || {
                for seq in 0.. {
                    let ops = crashtest::batch(seed, w, seq, |k| durable.index().get(&k));
                    match durable.writes().write_blocking(ops) {
                        Ok(outcome) => {
                            let mut out = std::io::stdout().lock();
                            let _ = writeln!(out, "ack {w} {seq} {}", outcome.lsn);
                            let _ = out.flush();
                        }
                        Err(e) => {
                            eprintln!("crash-child: write failed: {e}");
                            std::process::exit(1);
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}
