//! The client commands of the `uuidmap` binary: `get`, `put`, `del`,
//! `scan`, `stats`, `snapshot`, against a running server.
//!
//! UUIDs are read and printed in their text form
//! (`67e55044-10b1-426f-9247-bb680e5fe0c8`; the simple, braced and URN
//! forms are read too). Exit codes: 0 done (for `get`: found), 1 `get`
//! found no entry, 2 any error (bad arguments, no server, a refused call);
//! errors go to stderr, answers to stdout. `bench` has exit codes of its own.
//!
//! `scan` prints one `key value` line per entry. On a terminal (stderr) it
//! shows a progress bar; piped or redirected, stderr stays quiet. If the
//! stream breaks, or `--limit` stops it, the message on stderr gives the
//! `--cursor` that continues exactly after the last printed entry.

use std::io::{IsTerminal, Write};
#[cfg(test)]
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use prost::bytes::Bytes;
use uuid::Uuid;

use uuidmap::Key;
use uuidmap_client::{Client, ScanOptions};

#[cfg(test)]
use crate::cli_common::seconds;
use crate::cli_common::{
    CliError, ConnectArgs, ConsistencyArgs, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK,
};

/// The client commands (flattened into the binary's commands).
#[derive(clap::Subcommand, Clone, Debug)]
pub enum ClientCommand {
    /// Print the value of KEY (exit code 1 if it has none).
    Get {
        /// The file id, as a UUID (e.g. 67e55044-10b1-426f-9247-bb680e5fe0c8).
        #[arg(value_parser = key_arg)]
        key: Key,
        /// How up to date the answer must be.
        #[command(flatten)]
        consistency: ConsistencyArgs,
        /// How to reach the server.
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Set KEY to VALUE; prints the write's LSN.
    Put {
        /// The file id, as a UUID (e.g. 67e55044-10b1-426f-9247-bb680e5fe0c8).
        #[arg(value_parser = key_arg)]
        key: Key,
        /// Its location, as a UUID.
        #[arg(value_parser = uuid_arg)]
        value: Uuid,
        /// How to reach the server.
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Remove KEY (whether or not it has an entry); prints the LSN.
    Del {
        /// The file id, as a UUID (e.g. 67e55044-10b1-426f-9247-bb680e5fe0c8).
        #[arg(value_parser = key_arg)]
        key: Key,
        /// How to reach the server.
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Print entries, one `key value` line each.
    Scan(Box<ScanArgs>),
    /// Print the changes of the write batches after an LSN as they are
    /// applied, one `lsn key value` line each (`-` for a removed key),
    /// until interrupted or --batches have been printed.
    Watch {
        /// Print the batches after this LSN (default: the server's applied
        /// LSN when the command starts: only changes from now on). A server
        /// keeps the changes since its older retained snapshot; before
        /// that, the command fails: scan instead.
        #[arg(long, value_name = "LSN")]
        after: Option<u64>,
        /// Stop after this many batches.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        batches: Option<u64>,
        /// How to reach the server.
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Print the server's figures.
    Stats {
        /// How to reach the server.
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Take a snapshot now (needs the write role).
    Snapshot {
        /// How to reach the server.
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// The replica group a member serves in (`serve --node-id`).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Load the server and measure it: calls/s, keys/s, latency
    /// percentiles, every answer checked; the last line is JSON.
    ///
    /// Only answered calls make the rates and percentiles; failed calls
    /// are counted as `errors`, the client's retries as `retries`. A Put
    /// run reads back up to 1000 of the keys it wrote (`read_back`), each
    /// of which must hold the value written.
    ///
    /// Exit codes: 0 every call answered and every answer right; 1 calls
    /// failed (errors), no answer wrong; 2 a wrong answer, or the bench
    /// could not run (bad arguments, no server, a failed --load). When
    /// not 0, the last line on stderr says why.
    Bench(Box<crate::bench::BenchArgs>),
}

/// `uuidmap scan`.
#[derive(clap::Args, Clone, Debug)]
pub struct ScanArgs {
    /// Only split I of N (0 <= I < N): N such scans together print every
    /// entry once.
    #[arg(long, value_name = "I/N", value_parser = split_arg)]
    pub split: Option<(u32, u32)>,
    /// Only entries whose value is one of these (comma-separated UUIDs).
    #[arg(long, value_name = "V,...", value_delimiter = ',', value_parser = uuid_arg)]
    pub values: Vec<Uuid>,
    /// Stop after this many entries (at least 1; without --limit, every
    /// entry is printed).
    #[arg(long, value_parser = limit_arg)]
    pub limit: Option<u64>,
    /// Continue a scan where an earlier one stopped (the hex cursor it
    /// printed); --split is then ignored.
    #[arg(long, value_parser = cursor_arg)]
    pub cursor: Option<Bytes>,
    /// How up to date the scan must be (checked when it starts).
    #[command(flatten)]
    pub consistency: ConsistencyArgs,
    /// How to reach the server.
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// Runs `command`; the process exit code.
pub fn run(command: ClientCommand) -> i32 {
    let name = command.name();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("uuidmap {name}: cannot start the async runtime: {e}");
            return EXIT_ERROR;
        }
    };
    match runtime.block_on(execute(command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("uuidmap {name}: {e}");
            EXIT_ERROR
        }
    }
}

/// `uuidmap cluster ...`.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum ClusterCommand {
    /// Print the member's view of its group: role, term, leader, commit
    /// and applied indexes, members, and on the leader each member's lag.
    Status {
        /// How to reach the member.
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Add a node to the group: as a learner, which receives the log (the
    /// command waits until it has caught up), then as a voter unless
    /// --learner; with --replace OLD, remove member OLD after.
    Add {
        /// The node: ID=RAFT_ADDR@CLIENT_URL (its --node-id, its Raft
        /// address, the URL its clients use).
        node: uuidmap::server::config::Peers,
        /// Leave it a learner (no vote).
        #[arg(long)]
        learner: bool,
        /// The member it replaces (a dead one): removed once the new node
        /// votes.
        #[arg(long, value_name = "OLD_ID")]
        replace: Option<u64>,
        /// How to reach the group (its members' URLs, comma-separated:
        /// changes are made on the leader).
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Remove members (voters or learners) from the group. A member whose
    /// data was lost must be removed before it is added again.
    Remove {
        /// Their node ids.
        #[arg(required = true)]
        ids: Vec<u64>,
        /// How to reach the group (its members' URLs, comma-separated).
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Hand the group's leadership to voter ID: the leader stops serving as
    /// the leader, asks the group, and the command waits until ID leads.
    TransferLeader {
        /// The voter's node id.
        id: u64,
        /// How to reach the group (its members' URLs, comma-separated:
        /// the transfer is asked of the leader).
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// A partitioned cluster's map in etcd: which group owns each of the
    /// 4096 partitions, the groups' registered members, moves under way
    /// (README "Partitions"). `init` makes the table.
    Partitions(Box<crate::cli_partitions::PartitionsArgs>),
    /// Move a partition to another group, online: copy it, fence writes to
    /// it for the flip (they are refused as retryable meanwhile), make the
    /// group its owner in etcd. Prints what it did and how long writes
    /// were refused.
    Move(Box<crate::cli_partitions::MoveArgs>),
}

impl ClientCommand {
    fn name(&self) -> &'static str {
        match self {
            ClientCommand::Get { .. } => "get",
            ClientCommand::Put { .. } => "put",
            ClientCommand::Del { .. } => "del",
            ClientCommand::Scan(_) => "scan",
            ClientCommand::Stats { .. } => "stats",
            ClientCommand::Watch { .. } => "watch",
            ClientCommand::Snapshot { .. } => "snapshot",
            ClientCommand::Cluster(ClusterCommand::Status { .. }) => "cluster status",
            ClientCommand::Cluster(ClusterCommand::Add { .. }) => "cluster add",
            ClientCommand::Cluster(ClusterCommand::Remove { .. }) => "cluster remove",
            ClientCommand::Cluster(ClusterCommand::TransferLeader { .. }) => {
                "cluster transfer-leader"
            }
            ClientCommand::Cluster(ClusterCommand::Partitions(_)) => "cluster partitions",
            ClientCommand::Cluster(ClusterCommand::Move(_)) => "cluster move",
            ClientCommand::Bench(_) => "bench",
        }
    }
}

/// A membership once changed.
fn print_membership(m: &uuidmap::server::proto::v1::MembershipResponse) {
    let list = |ids: &[u64]| {
        ids.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    print_fields(&[
        ("lsn", m.lsn.to_string()),
        ("voters", list(&m.voters)),
        ("learners", list(&m.learners)),
    ]);
}

/// A member's view of its group, as `stats` and `cluster status` print it.
fn cluster_fields(c: &uuidmap::server::proto::v1::ClusterStats) -> Vec<(&'static str, String)> {
    let opt = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
    let list = |ids: &[u64]| {
        ids.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut fields = vec![
        ("node_id", c.node_id.to_string()),
        ("role", c.role.clone()),
        ("term", c.term.to_string()),
        ("leader_id", opt(c.leader_id)),
        (
            "leader_url",
            c.leader_url.clone().unwrap_or_else(|| "none".into()),
        ),
        ("commit_index", opt(c.commit_index)),
        ("applied_index", opt(c.applied_index)),
        ("last_log_index", opt(c.last_log_index)),
        ("voters", list(&c.voters)),
        ("learners", list(&c.learners)),
    ];
    if !c.members.is_empty() {
        let urls: Vec<String> = c
            .members
            .iter()
            .map(|m| format!("{}={}", m.node_id, m.client_url))
            .collect();
        fields.push(("member_urls", urls.join(" ")));
    }
    if !c.followers.is_empty() {
        let lags: Vec<String> = c
            .followers
            .iter()
            .map(|f| format!("{}:{}", f.node_id, f.lag))
            .collect();
        fields.push(("follower_lag", lags.join(" ")));
    }
    fields
}

async fn execute(command: ClientCommand) -> Result<i32, CliError> {
    match command {
        ClientCommand::Get {
            key,
            consistency,
            connect,
        } => {
            let c = Client::connect(&connect.options())
                .await?
                .with_consistency(consistency.level());
            match c.get_unary(key.uuid()).await? {
                Some(value) => {
                    println!("{value}");
                    Ok(EXIT_OK)
                }
                None => {
                    eprintln!("uuidmap get: {key} has no entry");
                    Ok(EXIT_NOT_FOUND)
                }
            }
        }
        ClientCommand::Put {
            key,
            value,
            connect,
        } => {
            let c = Client::connect(&connect.options()).await?;
            println!("lsn {}", c.put(key.uuid(), value).await?);
            Ok(EXIT_OK)
        }
        ClientCommand::Del { key, connect } => {
            let c = Client::connect(&connect.options()).await?;
            println!("lsn {}", c.delete(key.uuid()).await?);
            Ok(EXIT_OK)
        }
        ClientCommand::Stats { connect } => {
            let c = Client::connect(&connect.options()).await?;
            let s = c.stats().await?;
            let mut fields = vec![
                ("entries", s.entries.to_string()),
                ("table_bytes", s.table_bytes.to_string()),
                ("applied_lsn", s.applied_lsn.to_string()),
                ("wal_bytes", s.wal_bytes.to_string()),
                ("wal_failures", s.wal_failures.to_string()),
                ("queued_batches", s.queued_batches.to_string()),
                ("snapshots_taken", s.snapshots_taken.to_string()),
                ("snapshots_failed", s.snapshots_failed.to_string()),
                ("last_snapshot_lsn", s.last_snapshot_lsn.to_string()),
                (
                    "snapshot_age_ms",
                    s.snapshot_age_ms.map_or("none".into(), |ms| ms.to_string()),
                ),
                (
                    "last_snapshot_duration_us",
                    s.last_snapshot_duration_us.to_string(),
                ),
            ];
            if let Some(r) = s.restart {
                // Where this server's start went, and the restart budget.
                let workers: Vec<String> = r
                    .workers
                    .iter()
                    .map(|w| format!("{}ops/{}us", w.ops, w.apply_us))
                    .collect();
                fields.extend([
                    ("restart_snapshot_used", r.snapshot_used.to_string()),
                    ("restart_map_us", r.map_us.to_string()),
                    ("restart_snapshot_read", r.snapshot_read.to_string()),
                    ("restart_verify_us", r.verify_us.to_string()),
                    ("restart_restore_us", r.restore_us.to_string()),
                    ("restart_presize_us", r.presize_us.to_string()),
                    ("restart_replay_us", r.replay_us.to_string()),
                    ("restart_ops_replayed", r.ops_replayed.to_string()),
                    ("restart_workers", workers.join(" ")),
                    ("max_replay_ms", r.max_replay_ms.to_string()),
                    ("replay_bytes_per_sec", r.replay_bytes_per_sec.to_string()),
                    (
                        "snapshot_trigger_bytes",
                        r.snapshot_trigger_bytes.to_string(),
                    ),
                ]);
            }
            if let Some(c) = &s.cluster {
                fields.extend(cluster_fields(c));
            }
            if let Some(p) = &s.partitions {
                fields.extend(crate::cli_partitions::stats_fields(p));
            }
            print_fields(&fields);
            Ok(EXIT_OK)
        }
        ClientCommand::Cluster(ClusterCommand::Partitions(args)) => {
            crate::cli_partitions::execute(*args).await
        }
        ClientCommand::Cluster(ClusterCommand::Move(args)) => {
            crate::cli_partitions::execute_move(*args).await
        }
        ClientCommand::Cluster(ClusterCommand::Status { connect }) => {
            let c = Client::connect(&connect.options()).await?;
            print_fields(&cluster_fields(&c.cluster_status().await?));
            Ok(EXIT_OK)
        }
        ClientCommand::Cluster(ClusterCommand::Add {
            node,
            learner,
            replace,
            connect,
        }) => {
            let [node] = node.0.as_slice() else {
                return Err(CliError::Refused(
                    "give one node: ID=RAFT_ADDR@CLIENT_URL".into(),
                ));
            };
            if replace == Some(node.id) {
                return Err(CliError::Refused(format!(
                    "node {} cannot replace itself",
                    node.id
                )));
            }
            let c = Client::connect(&connect.options()).await?;
            let mut m = c
                .add_learner(node.id, &node.raft_addr, &node.client_url)
                .await?;
            if !learner {
                m = c.promote(&[node.id]).await?;
            }
            if let Some(old) = replace {
                m = c.remove_members(&[old]).await?;
            }
            print_membership(&m);
            Ok(EXIT_OK)
        }
        ClientCommand::Cluster(ClusterCommand::Remove { ids, connect }) => {
            let c = Client::connect(&connect.options()).await?;
            print_membership(&c.remove_members(&ids).await?);
            Ok(EXIT_OK)
        }
        ClientCommand::Cluster(ClusterCommand::TransferLeader { id, connect }) => {
            let c = Client::connect(&connect.options()).await?;
            let t = c.transfer_leader(id).await?;
            print_fields(&[
                ("leader", t.leader_id.to_string()),
                ("leader_url", t.leader_url),
                ("term", t.term.to_string()),
            ]);
            Ok(EXIT_OK)
        }
        ClientCommand::Snapshot { connect } => {
            let c = Client::connect(&connect.options()).await?;
            let s = c.snapshot().await?;
            print_fields(&[
                ("path", s.path),
                ("lsn", s.lsn.to_string()),
                ("min_capture_lsn", s.min_capture_lsn.to_string()),
                ("entries", s.entries.to_string()),
                ("bytes", s.bytes.to_string()),
                ("duration_us", s.duration_us.to_string()),
            ]);
            Ok(EXIT_OK)
        }
        ClientCommand::Scan(args) => scan(*args).await,
        ClientCommand::Watch {
            after,
            batches,
            connect,
        } => watch(after, batches, connect).await,
        ClientCommand::Bench(args) => crate::bench::run(*args).await,
    }
}

async fn scan(args: ScanArgs) -> Result<i32, CliError> {
    let client = Client::connect(&args.connect.options())
        .await?
        .with_consistency(args.consistency.level());
    let (split, splits) = args.split.unwrap_or((0, 1));
    let progress = progress_bar(&client, &args, splits).await;
    let options = ScanOptions {
        cursor: args.cursor.clone().unwrap_or_default(),
        split,
        splits,
        values: args.values.clone(),
        limit: args.limit.unwrap_or(0),
        partitions: Vec::new(),
    };
    let mut cursor = options.cursor.clone();
    let mut stream = client.scan(options);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut printed = 0u64;
    loop {
        let page = match stream.next_page().await {
            Ok(Some(page)) => page,
            Ok(None) => break,
            Err(source) => {
                progress.finish_and_clear();
                flush(&mut out)?;
                return Err(CliError::ScanStopped {
                    printed,
                    cursor: hex(&cursor),
                    source,
                });
            }
        };
        let written = progress.suspend(|| -> std::io::Result<()> {
            for (k, v) in &page.entries {
                writeln!(out, "{k} {v}")?;
            }
            Ok(())
        });
        match written {
            Ok(()) => {}
            // `uuidmap scan | head`: the reader has seen enough.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(EXIT_OK),
            Err(e) => return Err(CliError::Output(e)),
        }
        printed += page.entries.len() as u64;
        progress.inc(page.entries.len() as u64);
        cursor = page.cursor;
    }
    progress.finish_and_clear();
    flush(&mut out)?;
    if !cursor.is_empty() {
        eprintln!(
            "uuidmap scan: stopped after {printed} entries (--limit); continue with --cursor {}",
            hex(&cursor)
        );
    }
    Ok(EXIT_OK)
}

async fn watch(
    after: Option<u64>,
    batches: Option<u64>,
    connect: ConnectArgs,
) -> Result<i32, CliError> {
    let client = Client::connect(&connect.options()).await?;
    let after = match after {
        Some(lsn) => lsn,
        None => client.stats().await?.applied_lsn,
    };
    let mut stream = client.watch(after);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    while batches.is_none_or(|n| printed < n) {
        let batch = stream.next().await?;
        let written = (|| -> std::io::Result<()> {
            for (key, value) in &batch.changes {
                match value {
                    Some(v) => writeln!(out, "{} {key} {v}", batch.lsn)?,
                    None => writeln!(out, "{} {key} -", batch.lsn)?,
                }
            }
            // Each batch as it comes: a reader may be waiting for it.
            out.flush()
        })();
        match written {
            Ok(()) => {}
            // `uuidmap watch | head`: the reader has seen enough.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(EXIT_OK),
            Err(e) => return Err(CliError::Output(e)),
        }
        printed += 1;
    }
    Ok(EXIT_OK)
}

/// One `name  value` line per field, the values aligned two spaces after
/// the longest name.
pub fn print_fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(name, _)| name.len()).max().unwrap_or(0) + 2;
    for (name, value) in fields {
        println!("{name:width$}{value}");
    }
}

fn flush(out: &mut impl Write) -> Result<(), CliError> {
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Output(e)),
        _ => Ok(()),
    }
}

/// A bar on stderr when it is a terminal (with the expected total when the
/// scan is unfiltered: the entry count over the splits, capped by the
/// limit); hidden otherwise.
async fn progress_bar(client: &Client, args: &ScanArgs, splits: u32) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let total = if args.values.is_empty() && args.cursor.is_none() {
        client
            .stats()
            .await
            .ok()
            .map(|s| s.entries / u64::from(splits.max(1)))
            .map(|n| args.limit.map_or(n, |l| n.min(l)))
    } else {
        args.limit
    };
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = match total {
        Some(_) => "{bar:40} {human_pos}/{human_len} entries, {per_sec}, {eta} left",
        None => "{spinner} {human_pos} entries, {per_sec}",
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// A key argument: a UUID that is neither nil nor max, refused here
/// rather than by the server.
fn key_arg(s: &str) -> Result<Key, String> {
    Key::new(uuid_arg(s)?).map_err(|e| e.to_string())
}

fn uuid_arg(s: &str) -> Result<Uuid, String> {
    Uuid::parse_str(s).map_err(|e| {
        format!("not a UUID ({e}); expected text like 67e55044-10b1-426f-9247-bb680e5fe0c8")
    })
}

fn split_arg(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("expected I/N with 0 <= I < N, like 0/4 (got {s:?})");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let i: u32 = i.trim().parse().map_err(|_| bad())?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    if i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// The wire's `limit = 0` means "no limit", so a user's `--limit 0` would
/// print every entry: refused instead.
fn limit_arg(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => {
            Err("the limit must be at least 1 (leave --limit out to print every entry)".into())
        }
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "expected a number of entries, like 1000 (got {s:?})"
        )),
    }
}

fn cursor_arg(s: &str) -> Result<Bytes, String> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return Err("a cursor is an even number of hex digits, as printed by uuidmap scan".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map(Bytes::from)
        .map_err(|_| "a cursor is hex digits only, as printed by uuidmap scan".into())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_with_a_message_that_says_what_was_expected() {
        assert_eq!(
            uuid_arg("00000000-0000-0000-0000-000000000001").unwrap(),
            Uuid::from_u128(1)
        );
        assert!(uuid_arg("xyz").unwrap_err().contains("not a UUID"));
        assert!(key_arg("xyz").unwrap_err().contains("not a UUID"));
        assert!(
            key_arg(&Uuid::nil().to_string())
                .unwrap_err()
                .contains("nil UUID")
        );
        assert!(
            key_arg(&Uuid::max().to_string())
                .unwrap_err()
                .contains("max UUID")
        );
        assert_eq!(
            key_arg(&Uuid::from_u128(1).to_string()).unwrap().uuid(),
            Uuid::from_u128(1)
        );
        assert_eq!(split_arg("2/8"), Ok((2, 8)));
        for bad in ["8/8", "1", "a/b", "3/0"] {
            assert!(split_arg(bad).is_err(), "{bad}");
        }
        assert_eq!(limit_arg("1000"), Ok(1000));
        assert!(limit_arg("0").unwrap_err().contains("at least 1"));
        assert!(limit_arg("x").is_err() && limit_arg("-1").is_err());
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert!(seconds("0").is_err() && seconds("x").is_err());
    }

    #[test]
    fn a_printed_cursor_reads_back_as_the_same_bytes() {
        let c = Bytes::from_static(&[0, 1, 0xab, 0xff]);
        assert_eq!(hex(&c), "0001abff");
        assert_eq!(cursor_arg(&hex(&c)).unwrap(), c);
        assert!(cursor_arg("abc").is_err() && cursor_arg("zz").is_err());
    }
}
