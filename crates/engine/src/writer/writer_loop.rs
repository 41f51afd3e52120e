//! The writer thread's one loop, the same for both logs: it waits for an
//! input, takes what else is queued into the same *turn*, and ends the
//! turn; the [`WriterLog`] under it (the WAL's group commit in `pipeline`,
//! the Raft proposer in `replica_pipeline`) says what each step means.
//!
//! # A turn
//!
//! 1. **wait** ([`WriterLog::wait`]): for a caller's message, or for one
//!    of the log's own inputs, whichever the log puts first (an `interval`
//!    fsync or idle-vouch deadline on a single node; the replicated log's
//!    committed entries and leadership changes on a member, which come
//!    before callers);
//! 2. a log input is the log's alone ([`WriterLog::on_input`]), which says
//!    whether the turn goes on to its end;
//! 3. a caller's batch leaves the queue (its queue time is counted here)
//!    and the log **takes** it ([`WriterLog::take`]): the core decides it
//!    and the log gives it a place (an LSN in the group; a proposal
//!    number), or it is refused;
//! 4. **more of the queue joins the turn** while [`WriterLog::room`] says
//!    so: a single node fills a group up to its op limit (one WAL write and
//!    fsync); a member takes one input a turn, so a committed entry never
//!    waits behind callers;
//! 5. **the turn ends** ([`WriterLog::end_turn`]): the group is written,
//!    synced, applied and answered; a member proposes the confirmation its
//!    refusals wait for once the queue is empty.
//!
//! A [`Message::Stop`] (or every handle gone) ends the loop after its turn,
//! which takes everything queued before the stop: each was accepted and is
//! answered. Then the queue is closed and whatever still reaches it (a
//! caller that found the handle open was still sending) is answered
//! [`WriteError::ShuttingDown`], nothing applied: no batch is left without
//! an answer. Then the log finishes ([`WriterLog::finish`]) and hands back
//! the index writer.

use std::sync::atomic::Ordering;

use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use super::core::WriterCore;
use super::handle::{Message, PipelineExit, Request, SyncReply, add_elapsed};
use super::request::WriteError;

/// What a writer thread waited for.
pub(super) enum Wake<I> {
    /// A caller's message; `None` once every handle is gone.
    Message(Option<Message>),
    /// One of the log's own inputs.
    Log(I),
}

/// How a turn ended, for [`WriterLog::end_turn`].
pub(super) struct TurnEnd {
    /// No message waits in the queue.
    pub(super) queue_empty: bool,
    /// The loop stops after this turn.
    pub(super) stopping: bool,
}

/// The log under a writer thread's core (module docs): what it waits for
/// besides callers, what it does with a batch, and when a turn ends.
pub(super) trait WriterLog {
    /// The log's own inputs.
    type Input;

    /// The core this log writes through.
    fn core(&mut self) -> &mut WriterCore;

    /// Waits for the next input (step 1). Runs anything the log must do
    /// before it blocks.
    fn wait(&mut self, runtime: &Runtime, queue: &mut mpsc::Receiver<Message>)
    -> Wake<Self::Input>;

    /// One of the log's own inputs; returns whether the turn goes on to
    /// [`WriterLog::end_turn`].
    fn on_input(&mut self, input: Self::Input) -> bool;

    /// A caller's batch, taken from the queue (step 3).
    fn take(&mut self, request: Request);

    /// A caller wants the log durable through `lsn` (a snapshot).
    fn sync_through(&mut self, lsn: u64, reply: SyncReply);

    /// Whether more queued messages join this turn, which has taken
    /// `ops` operations so far (step 4). A stopping turn takes all.
    fn room(&self, ops: usize) -> bool;

    /// The turn's end (step 5).
    fn end_turn(&mut self, end: TurnEnd);

    /// After the last turn: answers what is left and hands back the writer.
    fn finish(self) -> PipelineExit;
}

/// Runs `log`'s writer thread over `queue` until stopped (module docs).
pub(super) fn run<L: WriterLog>(mut log: L, mut queue: mpsc::Receiver<Message>) -> PipelineExit {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("building the writer thread's runtime");
    let mut stopping = false;
    while !stopping {
        let mut ops = 0;
        match log.wait(&runtime, &mut queue) {
            Wake::Log(input) => {
                if !log.on_input(input) {
                    continue;
                }
            }
            Wake::Message(message) => {
                stopping = take_message(&mut log, message, &mut ops);
            }
        }
        // After a stop, take the rest: those batches were accepted before it.
        while stopping || log.room(ops) {
            match queue.try_recv() {
                Ok(message) => {
                    stopping |= take_message(&mut log, Some(message), &mut ops);
                }
                Err(_) => break,
            }
        }
        log.end_turn(TurnEnd {
            queue_empty: queue.is_empty(),
            stopping,
        });
    }
    refuse_late(&mut log, &runtime, &mut queue);
    log.finish()
}

/// Closes the queue and refuses what reached it after the stop's last
/// turn: a caller that found the handle open may still have been sending
/// when the stop came. Those batches were never taken, so they are
/// answered [`WriteError::ShuttingDown`] (nothing applied), not left to
/// find their answer dropped ([`WriteError::Unanswered`]: "may or may not
/// have been applied"); a late sync is served.
fn refuse_late<L: WriterLog>(log: &mut L, runtime: &Runtime, queue: &mut mpsc::Receiver<Message>) {
    queue.close();
    // Until `None`: a sender that holds a permit from before the close may
    // still put its message in (tokio's `Receiver::close`).
    while let Some(message) = runtime.block_on(queue.recv()) {
        match message {
            Message::Write(request) => {
                log.core().stats.queued.fetch_sub(1, Ordering::Relaxed);
                let _ = request.reply.send(Err(WriteError::ShuttingDown));
            }
            // The log is still open: a late sync (a snapshot racing the
            // stop) is served as in a turn.
            Message::Sync(lsn, reply) => log.sync_through(lsn, reply),
            Message::Stop => {}
        }
    }
}

/// Hands one message to the log; returns whether it asks the loop to stop.
fn take_message<L: WriterLog>(log: &mut L, message: Option<Message>, ops: &mut usize) -> bool {
    match message {
        None | Some(Message::Stop) => true,
        Some(Message::Write(request)) => {
            *ops += request.ops.len();
            let stats = &log.core().stats;
            stats.queued.fetch_sub(1, Ordering::Relaxed);
            add_elapsed(&stats.steps.queue_ns, request.submitted);
            log.take(request);
            false
        }
        Some(Message::Sync(lsn, reply)) => {
            log.sync_through(lsn, reply);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::writer::handle::WriteHandle;
    use crate::writer::request::{WriteOp, WriteOutcome};
    use uuid::Uuid;
    use uuidmap_index::sync::LsnWatermark;
    use uuidmap_index::{Index, Key};

    /// A log that answers each batch with its place in the order taken and
    /// writes down each turn: how many batches it took, how it ended.
    struct Recorder {
        core: WriterCore,
        /// Batches a turn may hold.
        room: usize,
        /// Ops taken in the open turn, its batches' replies.
        turn: Vec<Request>,
        taken: u64,
        turns: Arc<std::sync::Mutex<Vec<(usize, bool)>>>,
        /// Inputs of its own to hand out before any message, and whether
        /// each ends a turn.
        inputs: Vec<bool>,
    }

    impl WriterLog for Recorder {
        type Input = bool;

        fn core(&mut self) -> &mut WriterCore {
            &mut self.core
        }

        fn wait(&mut self, runtime: &Runtime, queue: &mut mpsc::Receiver<Message>) -> Wake<bool> {
            match self.inputs.pop() {
                Some(ends_turn) => Wake::Log(ends_turn),
                None => Wake::Message(runtime.block_on(queue.recv())),
            }
        }

        fn on_input(&mut self, ends_turn: bool) -> bool {
            ends_turn
        }

        fn take(&mut self, request: Request) {
            self.turn.push(request);
        }

        fn sync_through(&mut self, _lsn: u64, reply: SyncReply) {
            let _ = reply.send(Ok(()));
        }

        fn room(&self, ops: usize) -> bool {
            ops < self.room
        }

        fn end_turn(&mut self, end: TurnEnd) {
            self.turns
                .lock()
                .unwrap()
                .push((self.turn.len(), end.stopping));
            for request in self.turn.drain(..) {
                self.taken += 1;
                let _ = request.reply.send(Ok(WriteOutcome { lsn: self.taken }));
            }
        }

        fn finish(self) -> PipelineExit {
            PipelineExit {
                writer: self.core.writer,
                next_lsn: self.taken + 1,
            }
        }
    }

    fn put(n: u8) -> Vec<WriteOp> {
        vec![WriteOp::Put {
            key: Key::new(Uuid::from_bytes([n; 16])).unwrap(),
            value: Uuid::from_bytes([n; 16]),
        }]
    }

    /// Queues `writes` one-op batches, then a stop, before the thread runs;
    /// returns the answers in submit order, the turns, and the exit.
    fn run_queued(
        writes: u8,
        room: usize,
        inputs: Vec<bool>,
    ) -> (Vec<u64>, Vec<(usize, bool)>, PipelineExit) {
        let (handle, queue) = WriteHandle::new(64, 16);
        let (writer, _index) = Index::with_capacity(16);
        let turns = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Recorder {
            core: WriterCore::new(writer, Arc::new(LsnWatermark::new(0)), handle.stats_arc()),
            room,
            turn: Vec::new(),
            taken: 0,
            turns: turns.clone(),
            inputs,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let answers: Vec<_> = (1..=writes)
            .map(|n| {
                let handle = handle.clone();
                runtime.spawn(async move { handle.write(put(n)).await })
            })
            .collect();
        // Let every write reach the queue, then the stop behind them.
        runtime.block_on(async {
            while queue.len() < usize::from(writes) {
                tokio::task::yield_now().await;
            }
        });
        handle.send_stop();
        let exit = std::thread::spawn(move || run(log, queue)).join().unwrap();
        let lsns = answers
            .into_iter()
            .map(|a| runtime.block_on(a).unwrap().unwrap().lsn)
            .collect();
        let turns = turns.lock().unwrap().clone();
        (lsns, turns, exit)
    }

    #[test]
    fn a_write_sent_after_the_stops_last_turn_is_refused_never_left_unanswered() {
        // A caller that found the handle open and holds a place in the
        // queue (a permit) sends its batch only after the stop's last turn
        // ended: it must be told ShuttingDown, not find its answer dropped.
        let (handle, queue) = WriteHandle::new(64, 16);
        let (writer, _index) = Index::with_capacity(16);
        let turns = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Recorder {
            core: WriterCore::new(writer, Arc::new(LsnWatermark::new(0)), handle.stats_arc()),
            room: 8,
            turn: Vec::new(),
            taken: 0,
            turns: turns.clone(),
            inputs: Vec::new(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (tx, request, answer) = handle.raw_request(put(1));
        let permit = runtime.block_on(tx.reserve()).unwrap();
        handle.send_stop();
        let thread = std::thread::spawn(move || run(log, queue));
        // The stop's turn ends meanwhile, with nothing to take.
        while turns.lock().unwrap().is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        permit.send(Message::Write(request));
        thread.join().unwrap();
        assert_eq!(*turns.lock().unwrap(), vec![(0, true)]);
        // Bounded: a batch left in the queue would wait for its answer as
        // long as a handle lives.
        let answer = runtime.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), answer).await
        });
        assert!(
            matches!(answer, Ok(Ok(Err(WriteError::ShuttingDown)))),
            "{answer:?}"
        );
    }

    #[test]
    fn a_turn_takes_the_queue_while_the_log_has_room_and_a_stop_takes_the_rest() {
        let (lsns, turns, exit) = run_queued(7, 3, Vec::new());
        // Taken in queue order, each answered once.
        assert_eq!(lsns, (1..=7).collect::<Vec<_>>());
        // Three a turn; the stop's turn takes the last one and the stop.
        assert_eq!(turns, vec![(3, false), (3, false), (1, true)]);
        assert_eq!(exit.next_lsn, 8);
    }

    #[test]
    fn with_no_room_each_turn_is_one_input_and_the_stop_still_takes_all() {
        let (lsns, turns, _) = run_queued(2, 0, Vec::new());
        assert_eq!(lsns, vec![1, 2]);
        assert_eq!(turns, vec![(1, false), (1, false), (0, true)]);
    }

    #[test]
    fn a_log_input_ends_a_turn_only_when_the_log_says_so() {
        // Popped from the back: an input that ends its turn, then one
        // that does not.
        let (lsns, turns, _) = run_queued(1, 0, vec![true, false]);
        assert_eq!(lsns, vec![1]);
        assert_eq!(turns, vec![(0, false), (1, false), (0, true)]);
    }
}
