//! Plain `SET key value` commands pipelined one after another (as
//! `redis-cli --pipe` and a client's pipeline send them) run as one write
//! batch: one trip through the writer and one WAL write and fsync for the
//! run, where each alone waits for its own before the next is read (a
//! mass insertion of 200,000 SETs took 8.8 s against Redis's 0.45 s).
//!
//! Each SET is answered as it would be alone, in order: `+OK` once the
//! batch is applied and durable; the error it alone would get (no `AUTH`,
//! a role too low, a key or value that is not a UUID), and it is then
//! left out of the batch; or the batch's refusal (a follower's `MOVED`, a
//! full disk, a stop), which none of them escapes, since nothing of the
//! batch was written. The batch applies its puts in order, so a key set
//! twice in the run ends with the later value, as one at a time would.
//! What is not the same: a failure cannot fall between two SETs of a run
//! (all of it is written, or none), which one at a time could.
//!
//! Only plain SETs: one with `NX`, `XX` or `IFEQ` reads before it writes,
//! and any other command (a read above all) runs after the run before it
//! is answered, so it sees the run's writes. A run is at most
//! `--max-write-ops` SETs.

use std::time::Instant;

use uuidmap_engine::writer::WriteOp;
use uuidmap_server::deadline::wait_from_now;
use uuidmap_server::methods::Class;

use crate::command_table::lookup;
use crate::commands::{Commands, Session, role_refusal};
use crate::reply;
use crate::uuid_arg::{parse_key, parse_value};
use crate::write_commands::{Refusal, submit};

/// Whether `args` is a `SET key value` with no option: one that may join a
/// run.
pub fn is_plain_set(args: [&[u8]; 3]) -> bool {
    args[0].eq_ignore_ascii_case(b"set")
}

impl Commands {
    /// Runs `sets` (each a plain `SET`'s three arguments, pipelined one
    /// after another) as one write batch, and appends their answers to
    /// `out` in order.
    pub async fn execute_sets(&self, session: &Session, sets: &[[&[u8]; 3]], out: &mut Vec<u8>) {
        let Some((row, command)) = lookup(b"set") else {
            unreachable!("SET is in the command table");
        };
        let started = Instant::now();
        // The connection's role is the same for every SET of the run.
        let refusal = role_refusal(command, session);
        let decided: Vec<Result<WriteOp, String>> = sets
            .iter()
            .map(|args| {
                if let Some(refusal) = &refusal {
                    return Err(refusal.clone());
                }
                match (parse_key(args[1]), parse_value(args[2])) {
                    (Ok((key, _)), Ok(value)) => Ok(WriteOp::Put { key, value }),
                    (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
                }
            })
            .collect();
        let ops: Vec<WriteOp> = decided
            .iter()
            .filter_map(|d| d.as_ref().ok().copied())
            .collect();
        let outcome = if ops.is_empty() {
            Ok(())
        } else {
            self.write_run(ops).await
        };
        for d in &decided {
            let ok = match (d, &outcome) {
                (Err(e), _) | (Ok(_), Err(e)) => {
                    reply::error(out, e);
                    false
                }
                (Ok(_), Ok(())) => {
                    reply::simple(out, "OK");
                    true
                }
            };
            self.count(row, ok, started);
        }
    }

    /// One batch of puts under one write permit, as one SET takes one.
    async fn write_run(&self, ops: Vec<WriteOp>) -> Result<(), String> {
        let wait = wait_from_now(None, self.shared.limits.max_wait);
        let _permit = self
            .shared
            .admission
            .permit(Class::Write, wait)
            .await
            .map_err(|e| format!("ERR {e}"))?;
        submit(&self.shared, ops)
            .await
            .map_err(|e| Refusal::from(e).to_string())
    }
}
