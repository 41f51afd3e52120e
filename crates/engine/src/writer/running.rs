//! [`RunningWriter`]: a writer thread's life, the same for both logs: it
//! is spawned with its handle's receiving end, and stopped by a
//! [`Message::Stop`](super::handle::Message) through the handle, after
//! which it answers what was queued before the stop and hands back the
//! index writer. Dropping it stops it too (unless the thread that drops
//! it is panicking: a panic on the writer is resumed by the stop).

use std::thread::JoinHandle;

use super::handle::{PipelineExit, WriteHandle};

/// A writer thread and the handle that reaches it.
pub(super) struct RunningWriter {
    handle: WriteHandle,
    thread: Option<JoinHandle<PipelineExit>>,
}

impl RunningWriter {
    /// Spawns `body` on a thread named `name`; `handle` is the sending
    /// side of the queue `body` reads.
    pub(super) fn spawn(
        name: &str,
        handle: WriteHandle,
        body: impl FnOnce() -> PipelineExit + Send + 'static,
    ) -> std::io::Result<RunningWriter> {
        let thread = std::thread::Builder::new().name(name.into()).spawn(body)?;
        Ok(RunningWriter {
            handle,
            thread: Some(thread),
        })
    }

    /// The handle for submitting writes.
    pub(super) fn handle(&self) -> &WriteHandle {
        &self.handle
    }

    /// Stops accepting writes, lets the thread finish what is queued and
    /// returns what it hands back (`None`: stopped already).
    pub(super) fn stop(&mut self) -> Option<PipelineExit> {
        let thread = self.thread.take()?;
        Some(self.handle.stop_and_join(thread))
    }
}

impl Drop for RunningWriter {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.stop();
        }
    }
}
