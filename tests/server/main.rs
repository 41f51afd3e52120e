//! End-to-end tests of the server and the CLI: the real server on an
//! ephemeral loopback port over a temporary data directory, called through
//! the generated client, raw HTTP/2, and the `uuidmap` binary. One test
//! binary with a module per subject, so that it links once.
//!
//! - The test server and the helpers every module uses come from
//!   `uuidmap_testkit::server`.
//! - `rpcs`: every RPC and its codes; `bad_input`: malformed requests;
//!   `protocol`: health, reflection, compression, framing;
//!   `compressed_flag`: `grpc-encoding` and each message's compressed flag
//!   agree when deadlines race the answer, as a non-tonic client sees it;
//!   `scan`, `watch`, `waitfor`, `lookup`: the streams and the long-polls; `admission`,
//!   `auth`, `tls`: who gets in, and when; `ops`: metrics and stats;
//!   `disk_failure`: a full or failing data disk; `cli`: the binary's
//!   client commands against a running server; `group`: the server as a
//!   member of a replica group; `group_watch`: Watch on its members;
//!   `read_consistency`: linearizable and stale reads on its members;
//!   `partitions`: servers of a partitioned cluster over a real etcd.
//! - `uuidmap serve` and the data-directory commands as processes:
//!   `serve_process` (options from the command line and the environment,
//!   a failed final snapshot), `dir_lock_process` (one process at a time),
//!   `repair_command` (`check` and `repair`), `replay_process` (a server
//!   killed with SIGKILL, recovered serially and in parallel); the child
//!   process itself is `../serve_child/`, shared with `tests/client/`.

mod admission;
mod auth;
mod bad_input;
mod cli;
mod compressed_flag;
mod dir_lock_process;
mod disk_failure;
mod group;
mod group_watch;
mod lookup;
mod ops;
mod partitions;
mod protocol;
mod read_consistency;
mod repair_command;
mod replay_process;
mod rpcs;
mod scan;
#[path = "../serve_child/mod.rs"]
mod serve_child;
mod serve_process;
mod tls;
mod waitfor;
mod watch;
