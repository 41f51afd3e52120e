//! The `uuidmap` command.
//!
//! - `selftest`: build an index of random entries in this process, check
//!   every entry reads back, and print insert and lookup rates and memory per
//!   entry — a quick way to see what the index does on this machine.
//! - `check`: recover a data directory the way a restart does, without
//!   changing a file, and report what was found (snapshot, WAL replayed,
//!   damage, what a start would cut) and how long it took.
//! - `repair`: cut a damaged WAL back to its last good record and set aside
//!   the snapshots past it, after a dry run (`--dry-run`) that says what
//!   would be lost.
//!
//! - `serve`: run the gRPC server (see `uuidmap serve --help`) until SIGTERM
//!   or SIGINT, then stop accepting, finish in-flight calls and shut the index
//!   down (writes drained, final snapshot; exit code 1 if that snapshot
//!   failed, with nothing lost: the WAL holds the writes).
//! - `get`, `put`, `del`, `scan`, `stats`, `snapshot`: a client of a
//!   running server (`cli.rs`; exit codes there).

mod bench;
mod cli;
mod cli_common;
mod cli_partitions;

use std::time::Instant;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use uuid::Uuid;
use uuidmap::Index;

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(version, about = "uuidmap: a lock-free UUID -> UUID index")]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, env = "UUIDMAP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gRPC server (uuidmap.v1) over a data directory.
    Serve(Box<uuidmap::server::ServeArgs>),
    /// Build an index of random entries, verify it and print its rates.
    Selftest {
        /// Entries to insert.
        #[arg(long, default_value_t = 1_000_000)]
        entries: usize,
        /// Reader threads for the lookup pass (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
    },
    #[command(flatten)]
    Client(cli::ClientCommand),
    /// Recover a data directory as a restart would, without changing any
    /// file, and report what was found and what a start would do (cut a
    /// torn WAL tail, set a damaged snapshot aside). Safe to run next to a
    /// running server.
    Check {
        /// The data directory.
        #[arg(long, env = "UUIDMAP_DATA_DIR", default_value = uuidmap::server::config::default_text("data_dir"))]
        data_dir: std::path::PathBuf,
        /// Skip the snapshot checksum pass (faster; trusts the segment bytes).
        #[arg(long)]
        no_verify: bool,
    },
    /// Repair a data directory whose WAL is damaged: cut the log back to its
    /// last good record (removing what follows) and set aside the snapshots
    /// that hold writes past the cut (renamed *.beyond-log), so that the
    /// server can start. Acknowledged writes after the cut are lost: run
    /// with --dry-run first to see what would be cut and lost. The server
    /// must be stopped.
    Repair {
        /// The data directory.
        #[arg(long, env = "UUIDMAP_DATA_DIR", default_value = uuidmap::server::config::default_text("data_dir"))]
        data_dir: std::path::PathBuf,
        /// Change nothing; report what a repair would cut and lose.
        #[arg(long)]
        dry_run: bool,
    },
}

fn main() {
    // `serve`'s help shows each option's default from its row.
    let command = Cli::command().mut_subcommand("serve", uuidmap::server::config::show_defaults);
    let cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: in a log file they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match cli.log_format {
        LogFormat::Text => subscriber.init(),
        LogFormat::Json => subscriber.json().init(),
    }
    match cli.command {
        Command::Serve(args) => {
            if let Err(e) = serve(&args) {
                tracing::error!("uuidmap serve: {e}");
                std::process::exit(1);
            }
        }
        Command::Client(command) => std::process::exit(cli::run(command)),
        Command::Check {
            data_dir,
            no_verify,
        } => {
            if let Err(e) = check(&data_dir, !no_verify, Mode::Inspect) {
                eprintln!("uuidmap check: {e}");
                std::process::exit(1);
            }
        }
        Command::Repair { data_dir, dry_run } => {
            let mode = if dry_run {
                Mode::RepairDryRun
            } else {
                Mode::Repair
            };
            if let Err(e) = check(&data_dir, true, mode) {
                eprintln!("uuidmap repair: {e}");
                std::process::exit(1);
            }
        }
        Command::Selftest { entries, threads } => {
            let threads = threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                .max(1);
            if let Err(e) = selftest(entries, threads) {
                eprintln!("uuidmap selftest failed: {e}");
                std::process::exit(1);
            }
        }
    }
}

fn serve(args: &uuidmap::server::ServeArgs) -> Result<(), String> {
    let config = args.resolve().map_err(|e| e.to_string())?;
    let dir = config.data_dir.clone();
    return_freed_memory_while_idle();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("uuidmap-rpc");
    if !config.runtime_lifo_slot {
        answer_in_batches(&mut builder);
    }
    let runtime = builder
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        // The Redis protocol beside gRPC, over the same handles.
        let mut front_ends: Vec<Box<dyn uuidmap::server::front_end::FrontEnd>> = Vec::new();
        if let Some(addr) = config.resp_listen {
            let resp = uuidmap::resp::RespFrontEnd::bind(addr, &config)
                .await
                .map_err(|e| format!("{e} (--resp-listen)"))?;
            front_ends.push(Box::new(resp));
        }
        uuidmap::server::serve_with(config, front_ends, shutdown_signal())
            .await
            .map_err(|e| describe(&e, &dir))
    })
}

/// What `serve` says when the server cannot start or stopped on an error.
fn describe(e: &uuidmap::server::ServeError, dir: &std::path::Path) -> String {
    use uuidmap::server::ServeError;
    match e {
        ServeError::Open(store) => format!("{e}{}", repair_hint(store, dir)),
        ServeError::NotLoopback { .. } => format!(
            "{e}. Flags: --tls-cert and --tls-key for TLS; --tokens-file or \
             --tls-client-ca for client authentication; --insecure \
             (UUIDMAP_INSECURE=true) to serve anyway"
        ),
        ServeError::MetricsNotLoopback { .. } => format!(
            "{e}. Flags: --metrics-listen 127.0.0.1:7879, --metrics-listen off, or \
             --insecure (UUIDMAP_INSECURE=true)"
        ),
        ServeError::Tls(t) => format!("{e} (the files of {})", t.flags()),
        _ => e.to_string(),
    }
}

/// Lets jemalloc's background threads hand freed pages back to the kernel.
/// Without them jemalloc purges only when the process allocates again, so a
/// server that loaded its index and then went quiet kept every table it had
/// outgrown while growing: 1.0 GiB resident for 0.4 GiB allocated at 10M
/// entries (see BENCHMARKS.md, "Resident memory of the server").
fn return_freed_memory_while_idle() {
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(
            "cannot start jemalloc's background purging ({e}); memory freed by \
             index growth is returned to the system only as the server allocates"
        );
    }
}

/// Turns off tokio's LIFO slot (`--runtime-lifo-slot off`), so that one
/// connection's answers leave in one `writev`.
///
/// With the slot, a task woken by the task running now runs next. When a
/// group commit (or a batch of Gets) answers many streams of one HTTP/2
/// connection, each stream's task wakes the connection's task, which then
/// runs at once and flushes that one answer: about one `writev` per call.
/// Without the slot the connection's task waits its turn behind the other
/// answered streams and sends them all in one write. The price: every task
/// scheduled goes through the run queue and may wake the other worker, so
/// calls on many one-call connections and Lookup streams, where there is
/// nothing to gather, cost more. Measured side by side in BENCHMARKS.md,
/// "Answers in batches"; so the slot stays on unless asked.
///
/// The switch is one of tokio's unstable APIs: `.cargo/config.toml` builds
/// with `--cfg tokio_unstable`, and `Cargo.lock` pins the tokio it was
/// measured with. A build whose `RUSTFLAGS` replace the config's flags
/// cannot turn the slot off, and says so.
fn answer_in_batches(builder: &mut tokio::runtime::Builder) {
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    #[cfg(not(tokio_unstable))]
    {
        let _ = builder;
        tracing::warn!(
            "--runtime-lifo-slot off has no effect: this build lacks `--cfg tokio_unstable` \
             (RUSTFLAGS set in the environment replace .cargo/config.toml's), so tokio's LIFO \
             slot stays on"
        );
    }
}

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot listen for SIGTERM ({e}); only Ctrl-C stops the server");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
}

fn selftest(entries: usize, threads: usize) -> Result<(), String> {
    if entries == 0 {
        return Err("--entries must be at least 1".into());
    }
    let (mut writer, index) = Index::builder()
        .capacity(entries)
        .build()
        .map_err(|e| format!("cannot build an index for {entries} entries: {e}"))?;
    let keys = random_keys(entries)?;
    let t = Instant::now();
    for k in &keys {
        writer.insert(*k, value_for(k)).map_err(|e| e.to_string())?;
    }
    let insert_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let chunk = entries.div_ceil(threads).max(1);
    let missing: usize = std::thread::scope(|s| {
        let handles: Vec<_> = keys
            .chunks(chunk)
            .map(|part| {
                let index = index.clone();
                s.spawn(move || {
                    part.iter()
                        .filter(|k| index.get(k) != Some(value_for(k)))
                        .count()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(usize::MAX))
            .sum()
    });
    let get_s = t.elapsed().as_secs_f64();
    if missing != 0 {
        return Err(format!(
            "{missing} of {entries} entries did not read back correctly"
        ));
    }
    let scanned = index.scan().count();
    if scanned != entries {
        return Err(format!(
            "a full scan returned {scanned} entries, expected {entries}"
        ));
    }
    println!("entries           {entries}");
    println!("segments          {}", index.segment_count());
    println!(
        "inserts/s         {:.2} M (one writer, presized)",
        entries as f64 / insert_s / 1e6
    );
    println!(
        "gets/s            {:.2} M ({threads} threads)",
        entries as f64 / get_s / 1e6
    );
    println!(
        "slot bytes/entry  {:.1}",
        index.table_bytes() as f64 / entries.max(1) as f64
    );
    println!("verified          every entry read back; full scan complete");
    Ok(())
}

/// What `check` and `repair` do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Read only, as a start would see it.
    Inspect,
    /// Read only, as a repair would see it.
    RepairDryRun,
    /// Cut and set aside.
    Repair,
}

/// The operator's next step after a refusal a repair can get past.
fn repair_hint(e: &uuidmap::store::StoreError, dir: &std::path::Path) -> String {
    if e.repairable() {
        format!(
            "\n\nTo see what a repair would cut and lose:  uuidmap repair --data-dir {d} \
             --dry-run\nTo repair (losing that):                uuidmap repair --data-dir {d}",
            d = dir.display()
        )
    } else {
        String::new()
    }
}

fn check(dir: &std::path::Path, verify: bool, mode: Mode) -> Result<(), String> {
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    // A member's WAL is its Raft log: a repair would cut entries the group
    // may have committed, and a check would read it as a single node's.
    if dir
        .join(uuidmap::store::raft_state::RAFT_STATE_FILE)
        .exists()
    {
        return Err(format!(
            "{} holds the Raft log of a replica group member (its `raft-state` file): `check` \
             and `repair` read a single node's data only. A member whose log is damaged is \
             removed from its group (`uuidmap cluster remove`), its directory emptied, and \
             added again (`uuidmap cluster add`)",
            dir.display()
        ));
    }
    let options = uuidmap::store::recovery::RecoveryOptions {
        verify_checksums: verify,
        truncate_corrupt_wal: mode != Mode::Inspect,
        read_only: mode != Mode::Repair,
        ..Default::default()
    };
    // A repair writes: never next to a running server. Looking needs no lock.
    let _lock = if mode == Mode::Repair {
        Some(uuidmap::store::lock_data_dir(&uuidmap::store::OsIo, dir).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let t = Instant::now();
    let recovered = uuidmap::store::recovery::recover(&uuidmap::store::OsIo, dir, &options)
        .map_err(|e| {
            let hint = if mode == Mode::Inspect {
                repair_hint(&e, dir)
            } else {
                String::new()
            };
            format!("{e}{hint}")
        })?;
    let r = &recovered.report;
    let snapshot = r
        .snapshot
        .as_ref()
        .map_or("none".to_string(), |p| p.display().to_string());
    let mut out = Fields::default();
    out.field("data directory", dir.display());
    out.field("snapshot", snapshot);
    for why in &r.rejected {
        out.field("rejected", why);
    }
    out.field("entries", recovered.index.len());
    out.field("last LSN", r.last_lsn);
    out.field("WAL records read", r.records_replayed);
    // (After a cut, a later candidate sees the same damaged record as the
    // log's torn end: the cut already says it.)
    if r.torn_bytes > 0 && r.cut.is_none() {
        let verb = if mode == Mode::Repair {
            "cut"
        } else {
            "a start cuts"
        };
        out.field(
            "torn WAL tail",
            format!(
                "{} bytes written after the last fsync ({verb} them; never acknowledged as \
                 durable)",
                r.torn_bytes
            ),
        );
    }
    let would = if mode == Mode::Repair {
        ""
    } else {
        "would be "
    };
    if let Some(cut) = &r.cut {
        out.field(
            "WAL damage",
            format!(
                "{} at byte {}: {}",
                cut.path.display(),
                cut.offset,
                cut.reason
            ),
        );
        out.field(
            "WAL cut",
            format!(
                "{} bytes {would}removed; every record from LSN {} on {would}lost",
                cut.bytes, cut.first_lsn_lost
            ),
        );
    }
    for aside in &r.set_aside {
        out.field(
            "snapshot set aside",
            format!("{} {would}renamed *.beyond-log", aside.display()),
        );
    }
    if mode != Mode::Inspect {
        let lost_to = r
            .cut
            .as_ref()
            .and_then(|c| c.last_readable_lsn)
            .into_iter()
            .chain(r.set_aside.iter().filter_map(|p| snapshot_lsn(p)))
            .max();
        match (r.cut.is_some() || !r.set_aside.is_empty(), lost_to) {
            (false, _) => out.field("repair", "nothing to repair: the server can start as it is"),
            (true, Some(to)) if to > r.last_lsn => out.field(
                "acknowledged writes lost",
                format!(
                    "at least {} batches (LSN {}..={to}), and any after them that no file \
                     still shows",
                    to - r.last_lsn,
                    r.last_lsn + 1
                ),
            ),
            (true, _) => out.field(
                "acknowledged writes lost",
                format!(
                    "every batch after LSN {} that was acknowledged (none can still be read)",
                    r.last_lsn
                ),
            ),
        }
    }
    out.field(
        "open + verify",
        format!(
            "{:.1} ms{}",
            r.open_time.as_secs_f64() * 1e3,
            if verify {
                ""
            } else {
                " (checksums not verified)"
            }
        ),
    );
    out.field(
        "WAL replay",
        format!("{:.1} ms", r.replay_time.as_secs_f64() * 1e3),
    );
    out.field(
        "total",
        format!("{:.1} ms", t.elapsed().as_secs_f64() * 1e3),
    );
    out.print();
    Ok(())
}

/// `name  value` lines, the values aligned.
#[derive(Default)]
struct Fields(Vec<(&'static str, String)>);

impl Fields {
    fn field(&mut self, name: &'static str, value: impl std::fmt::Display) {
        self.0.push((name, value.to_string()));
    }

    fn print(&self) {
        let fields: Vec<(&str, String)> = self.0.iter().map(|(n, v)| (*n, v.clone())).collect();
        cli::print_fields(&fields);
    }
}

/// The LSN in a snapshot file's name.
fn snapshot_lsn(path: &std::path::Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("snapshot-")?
        .strip_suffix(".snap")?
        .parse()
        .ok()
}

/// `n` distinct-looking random v4 UUIDs, fast: a splitmix64 stream seeded once
/// from the OS (one `getrandom` per key would dominate the run).
fn random_keys(n: usize) -> Result<Vec<Uuid>, String> {
    let mut state = Uuid::new_v4().as_u64_pair().0;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut keys = Vec::new();
    keys.try_reserve_exact(n).map_err(|_| {
        format!(
            "not enough memory for {n} test keys ({} MiB)",
            (n * 16) >> 20
        )
    })?;
    keys.extend((0..n).map(|_| {
        let bytes = ((next() as u128) << 64 | next() as u128).to_le_bytes();
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }));
    Ok(keys)
}

/// A value derived from the key, so that reading it back proves it.
fn value_for(key: &Uuid) -> Uuid {
    Uuid::from_u128(key.as_u128().rotate_left(17) ^ 0x5555)
}
