//! The WAL's sync thread: runs one group's fsync while the writer thread
//! decides and writes the next group (see `pipeline`, "Overlapping fsyncs").
//!
//! # Protocol
//!
//! The writer thread hands over a sync-only handle on the WAL file
//! ([`SyncThread::start`]), goes on with other work, and later takes the
//! result ([`SyncThread::finish`]), which blocks until the fsync returns.
//! At most one fsync is in flight: `start` is only called after the
//! previous one was finished, so the WAL's synced-end bookkeeping stays
//! that of one fsync after another (`wal::writer`).
//!
//! The thread owns nothing but the handle it was given; it stops when the
//! [`SyncThread`] is dropped (its channel closes).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::store::FileSync;

/// What the thread reports for one fsync: its result and how long it took
/// (nanoseconds).
type Done = (std::io::Result<()>, u64);

/// A thread that fsyncs WAL files on request.
pub(crate) struct SyncThread {
    requests: Option<SyncSender<Arc<dyn FileSync>>>,
    done: Receiver<Done>,
    /// Whether a fsync was started and not yet finished.
    in_flight: bool,
    thread: Option<JoinHandle<()>>,
}

impl SyncThread {
    /// Starts the thread.
    pub(crate) fn spawn() -> std::io::Result<SyncThread> {
        let (requests, incoming) = sync_channel::<Arc<dyn FileSync>>(1);
        let (report, done) = sync_channel::<Done>(1);
        let thread = std::thread::Builder::new()
            .name("uuidmap-wal-sync".into())
            .spawn(move || {
                for file in incoming {
                    let started = Instant::now();
                    let result = file.sync();
                    let nanos = started.elapsed().as_nanos() as u64;
                    if report.send((result, nanos)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(SyncThread {
            requests: Some(requests),
            done,
            in_flight: false,
            thread: Some(thread),
        })
    }

    /// Starts a fsync of `file` on the thread. There must be none in flight.
    pub(crate) fn start(&mut self, file: Arc<dyn FileSync>) {
        assert!(!self.in_flight, "one WAL fsync at a time");
        let sent = self
            .requests
            .as_ref()
            .expect("the requests channel lives as long as the thread")
            .send(file);
        // The thread only stops when `requests` closes, or after a send of
        // ours failed: neither can have happened yet.
        sent.expect("the WAL sync thread is running");
        self.in_flight = true;
    }

    /// Waits for the fsync in flight and returns its result and duration.
    /// There must be one.
    pub(crate) fn finish(&mut self) -> Done {
        assert!(self.in_flight, "no WAL fsync in flight");
        self.in_flight = false;
        match self.done.recv() {
            Ok(done) => done,
            // The thread died in the middle (it cannot panic short of an
            // allocation failure): the fsync's outcome is unknown, which
            // is a failed fsync.
            Err(_) => (Err(std::io::Error::other("the WAL sync thread stopped")), 0),
        }
    }
}

impl Drop for SyncThread {
    fn drop(&mut self) {
        if self.in_flight {
            let _ = self.done.recv();
        }
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
