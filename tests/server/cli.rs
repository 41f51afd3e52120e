//! The `uuidmap` binary's client commands, run as a user runs them, against
//! the real server on an ephemeral port (and the serve command's loopback
//! refusal).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::tls::TlsFiles;
use uuidmap_testkit::server::{TestServer, config, put_op};

const KEY: &str = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
const VALUE: &str = "00000000-0000-4000-8000-00000000000a";

/// Runs `uuidmap args` with only the `UUIDMAP_*` variables in `env`.
/// The binary with `args`, and no `UUIDMAP_*` variable from the test's
/// environment.
fn uuidmap_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uuidmap"));
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("UUIDMAP_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

async fn uuidmap(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = uuidmap_command(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Blocking wait, off the runtime that serves the test server.
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_del_through_the_binary_with_exit_codes_0_found_1_missing() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let url = format!("http://{}", server.addr);
    let at = [("UUIDMAP_SERVER", url.as_str())];

    let put = uuidmap(&["put", KEY, VALUE], &at).await;
    assert_eq!(put.status.code(), Some(0), "{}", stderr(&put));
    assert_eq!(stdout(&put), "lsn 1\n");

    // The key in another accepted text form; the value printed hyphenated.
    let get = uuidmap(&["get", "{6F9619FF-8B86-D011-B42D-00C04FC964FF}"], &at).await;
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
    assert_eq!(stdout(&get), format!("{VALUE}\n"));

    let stats = uuidmap(&["stats"], &at).await;
    assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
    assert!(
        stdout(&stats).contains("entries                    1\n"),
        "{}",
        stdout(&stats)
    );

    // --server overrides the environment.
    let del = uuidmap(
        &["del", KEY, "--server", &url],
        &[("UUIDMAP_SERVER", "http://127.0.0.1:1")],
    )
    .await;
    assert_eq!(del.status.code(), Some(0), "{}", stderr(&del));
    assert_eq!(stdout(&del), "lsn 2\n");

    let gone = uuidmap(&["get", KEY], &at).await;
    assert_eq!(gone.status.code(), Some(1), "not found is exit code 1");
    assert_eq!(stdout(&gone), "");
    assert!(
        stderr(&gone).contains(&format!("{KEY} has no entry")),
        "{}",
        stderr(&gone)
    );

    let snap = uuidmap(&["snapshot"], &at).await;
    assert_eq!(snap.status.code(), Some(0), "{}", stderr(&snap));
    assert!(
        stdout(&snap).contains("lsn              2\n"),
        "{}",
        stdout(&snap)
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_uuids_are_refused_naming_the_argument_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let url = format!("http://{}", server.addr);
    let at = [("UUIDMAP_SERVER", url.as_str())];

    for (args, named) in [
        (vec!["get", "not-a-uuid"], "<KEY>"),
        (vec!["put", KEY, "12345"], "<VALUE>"),
        (vec!["del", "6f9619ff-8b86-d011-b42d-00c04fc964fz"], "<KEY>"),
        (vec!["scan", "--values", &format!("{VALUE},zz")], "--values"),
        (vec!["scan", "--split", "4/4"], "--split"),
        (vec!["scan", "--cursor", "xyz"], "--cursor"),
    ] {
        let o = uuidmap(&args, &at).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = stderr(&o);
        assert!(e.contains(named), "{args:?}: {e}");
    }
    let o = uuidmap(&["get", "zz"], &at).await;
    assert!(stderr(&o).contains("expected text like"), "{}", stderr(&o));

    // A reserved key is refused by the CLI, naming the argument, before
    // any call.
    let nil = uuidmap(&["get", "00000000-0000-0000-0000-000000000000"], &at).await;
    assert_eq!(nil.status.code(), Some(2));
    let e = stderr(&nil);
    assert!(e.contains("<KEY>") && e.contains("nil UUID"), "{e}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_running_names_the_address_and_exits_2() {
    // A port nobody listens on: bound, then released.
    let port = uuidmap_testkit::ports::unused_port();
    let url = format!("http://127.0.0.1:{port}");
    let o = uuidmap(&["get", KEY, "--server", &url], &[]).await;
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains(&url) && e.contains("connection refused") && e.contains("server running"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_tokens_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let ca = uuidmap_testkit::server::pki::Ca::new("cli CA");
    let leaf = ca.server();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "read cli-read-token-0001\nwrite cli-write-token-0002\n",
    )
    .unwrap();
    let mut c = config(&dir.path().join("data"));
    c.tls = Some(TlsFiles {
        cert: uuidmap_testkit::server::pki::write(dir.path(), "server.pem", &leaf.cert),
        key: uuidmap_testkit::server::pki::write(dir.path(), "server.key", &leaf.key),
        client_ca: None,
    });
    c.tokens_file = Some(tokens);
    let server = TestServer::start_with(c).await;
    let url = format!("https://127.0.0.1:{}", server.addr.port());
    let ca_pem = uuidmap_testkit::server::pki::write(dir.path(), "ca.pem", &ca.pem);
    let ca_pem = ca_pem.to_str().unwrap();
    let env = |token: &'static str| {
        [
            ("UUIDMAP_SERVER", url.clone()),
            ("UUIDMAP_TLS_CA", ca_pem.to_string()),
            ("UUIDMAP_TOKEN", token.to_string()),
        ]
    };
    async fn run(args: &[&str], env: &[(&str, String)]) -> Output {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        uuidmap(args, &env).await
    }

    let w = env("cli-write-token-0002");
    let put = run(&["put", KEY, VALUE], &w).await;
    assert_eq!(put.status.code(), Some(0), "{}", stderr(&put));
    let r = env("cli-read-token-0001");
    let get = run(&["get", KEY], &r).await;
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
    assert_eq!(stdout(&get), format!("{VALUE}\n"));
    // By DNS name: the client connects to the name's address and still
    // checks the certificate against the name.
    let mut by_name = r.clone();
    by_name[0].1 = format!("https://localhost:{}", server.addr.port());
    let get = run(&["get", KEY], &by_name).await;
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
    assert_eq!(stdout(&get), format!("{VALUE}\n"));

    let denied = run(&["del", KEY], &r).await;
    assert_eq!(denied.status.code(), Some(2));
    assert!(
        stderr(&denied).contains("PERMISSION_DENIED"),
        "{}",
        stderr(&denied)
    );
    let snap = run(&["snapshot"], &r).await;
    assert!(
        stderr(&snap).contains("PERMISSION_DENIED"),
        "{}",
        stderr(&snap)
    );

    let wrong = run(&["get", KEY], &env("not-the-token-at-all")).await;
    assert_eq!(wrong.status.code(), Some(2));
    let e = stderr(&wrong);
    assert!(
        e.contains("UNAUTHENTICATED") && !e.contains("not-the-token-at-all"),
        "{e}"
    );

    // https without --tls-ca is explained.
    let no_ca = uuidmap(&["get", KEY, "--server", &url], &[]).await;
    assert_eq!(no_ca.status.code(), Some(2));
    assert!(stderr(&no_ca).contains("--tls-ca"), "{}", stderr(&no_ca));
    server.stop().await.unwrap();
}

/// `uuidmap serve` on a non-loopback address without TLS and tokens.
fn serve_refused(dir: &Path, extra: &[&str]) -> String {
    let data = dir.join("data");
    let mut args = vec![
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--data-dir",
        data.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = Command::new(env!("CARGO_BIN_EXE_uuidmap"))
        .args(&args)
        .env_remove("UUIDMAP_INSECURE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{args:?}");
    assert!(!data.exists(), "refused before opening the data directory");
    stderr(&o)
}

#[test]
fn serve_refuses_a_public_address_without_tls_and_client_auth() {
    let dir = tempfile::tempdir().unwrap();
    let e = serve_refused(dir.path(), &[]);
    assert!(
        e.contains("refusing to listen on 0.0.0.0:0")
            && e.contains("neither TLS nor client authentication")
            && e.contains("--insecure"),
        "{e}"
    );
    // TLS alone is not enough.
    let ca = uuidmap_testkit::server::pki::Ca::new("CA");
    let leaf = ca.server();
    let cert = uuidmap_testkit::server::pki::write(dir.path(), "s.pem", &leaf.cert);
    let key = uuidmap_testkit::server::pki::write(dir.path(), "s.key", &leaf.key);
    let e = serve_refused(
        dir.path(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(e.contains("no client authentication is configured"), "{e}");
}

/// Entries for the scan tests: 3,000 keys, values cycling over 7 UUIDs.
const SCAN_ENTRIES: u128 = 3_000;

fn scan_entry(i: u128) -> (Uuid, Uuid) {
    (
        Uuid::from_u128(0x5ca0_0000_0000_0000_0000_0000_0000_0000 | (i + 1)),
        Uuid::from_u128(0x7a10_0000_0000_0000_0000_0000_0000_0000 | (i % 7)),
    )
}

/// A server holding the scan entries, written through the generated
/// client; its URL.
async fn scan_server(dir: &Path) -> (TestServer, String) {
    let mut c = config(dir);
    c.limits.max_write_ops = 500;
    let server = TestServer::start_with(c).await;
    let mut client = server.client().await;
    let all: Vec<u128> = (0..SCAN_ENTRIES).collect();
    for chunk in all.chunks(500) {
        let ops = chunk
            .iter()
            .map(|&i| {
                let (k, v) = scan_entry(i);
                put_op(k, v)
            })
            .collect();
        let w = client.write(pb::WriteRequest { ops }).await.unwrap();
        assert!(w.into_inner().applied);
    }
    let url = format!("http://{}", server.addr);
    (server, url)
}

/// The `key value` lines of a scan's stdout, checking that no key repeats.
fn scanned(o: &Output) -> HashMap<Uuid, Uuid> {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    let mut out = HashMap::new();
    for line in stdout(o).lines() {
        let (k, v) = line.split_once(' ').expect("a `key value` line");
        let (k, v) = (Uuid::parse_str(k).unwrap(), Uuid::parse_str(v).unwrap());
        assert!(out.insert(k, v).is_none(), "{k} printed twice");
    }
    out
}

/// The `--cursor` a limited scan printed on stderr, if any.
fn printed_cursor(o: &Output) -> Option<String> {
    let e = stderr(o);
    let (_, rest) = e.split_once("--cursor ")?;
    Some(rest.split_whitespace().next().unwrap().to_string())
}

fn expected_scan(keep: impl Fn(&Uuid) -> bool) -> HashMap<Uuid, Uuid> {
    (0..SCAN_ENTRIES)
        .map(scan_entry)
        .filter(|(_, v)| keep(v))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_prints_exactly_the_entries_and_splits_cover_them_once() {
    let dir = tempfile::tempdir().unwrap();
    let (server, url) = scan_server(dir.path()).await;
    let at = [("UUIDMAP_SERVER", url.as_str())];

    let all = uuidmap(&["scan"], &at).await;
    assert_eq!(scanned(&all), expected_scan(|_| true));
    assert_eq!(stderr(&all), "", "a finished scan is quiet when piped");

    let first = scanned(&uuidmap(&["scan", "--split", "0/2"], &at).await);
    let second = scanned(&uuidmap(&["scan", "--split", "1/2"], &at).await);
    assert!(
        !first.is_empty() && !second.is_empty(),
        "both splits hold entries"
    );
    assert!(
        first.keys().all(|k| !second.contains_key(k)),
        "no entry in both splits"
    );
    let mut union = first;
    union.extend(second);
    assert_eq!(union, expected_scan(|_| true));

    // A filter by two values, and the same filter over splits.
    let (a, b) = (scan_entry(1).1, scan_entry(3).1);
    let values = format!("{a},{b}");
    let filtered = uuidmap(&["scan", "--values", &values], &at).await;
    let want = expected_scan(|v| *v == a || *v == b);
    assert_eq!(scanned(&filtered), want);
    let mut union = HashMap::new();
    for split in ["0/3", "1/3", "2/3"] {
        let part = uuidmap(&["scan", "--values", &values, "--split", split], &at).await;
        for (k, v) in scanned(&part) {
            assert!(union.insert(k, v).is_none(), "{k} in two splits");
        }
    }
    assert_eq!(union, want);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_scan_prints_a_cursor_that_resumes_exactly_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (server, url) = scan_server(dir.path()).await;
    let at = [("UUIDMAP_SERVER", url.as_str())];

    // 1,000 at a time, following the printed cursor, then the rest at once.
    let mut seen = HashMap::new();
    let first = uuidmap(&["scan", "--limit", "1000"], &at).await;
    let page = scanned(&first);
    assert_eq!(page.len(), 1000);
    assert!(
        stderr(&first).contains("stopped after 1000 entries (--limit)"),
        "{}",
        stderr(&first)
    );
    seen.extend(page);
    let cursor = printed_cursor(&first).expect("a limited scan prints its cursor");
    let second = uuidmap(&["scan", "--limit", "1000", "--cursor", &cursor], &at).await;
    let page = scanned(&second);
    assert_eq!(page.len(), 1000);
    for (k, v) in page {
        assert!(
            seen.insert(k, v).is_none(),
            "{k} printed again after resuming"
        );
    }
    let cursor = printed_cursor(&second).expect("a cursor again");
    let rest = uuidmap(&["scan", "--cursor", &cursor], &at).await;
    let page = scanned(&rest);
    assert_eq!(page.len(), 1000);
    assert_eq!(printed_cursor(&rest), None, "the scan is done");
    for (k, v) in page {
        assert!(
            seen.insert(k, v).is_none(),
            "{k} printed again after resuming"
        );
    }
    assert_eq!(seen, expected_scan(|_| true));

    // The same with a filter (the cursor is resumed with the same filter).
    let a = scan_entry(2).1;
    let values = a.to_string();
    let want = expected_scan(|v| *v == a);
    let first = uuidmap(&["scan", "--values", &values, "--limit", "100"], &at).await;
    let mut seen = scanned(&first);
    assert_eq!(seen.len(), 100);
    let cursor = printed_cursor(&first).unwrap();
    let rest = uuidmap(&["scan", "--values", &values, "--cursor", &cursor], &at).await;
    for (k, v) in scanned(&rest) {
        assert!(
            seen.insert(k, v).is_none(),
            "{k} printed again after resuming"
        );
    }
    assert_eq!(seen, want);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_scan_flags_are_refused_with_a_message_and_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let url = format!("http://{}", server.addr);
    let at = [("UUIDMAP_SERVER", url.as_str())];

    // Refused by the command line parser: (arguments, what stderr names).
    for (args, named) in [
        (vec!["scan", "--split", "2/2"], "0 <= I < N"),
        (vec!["scan", "--split", "1"], "expected I/N"),
        (vec!["scan", "--split", "1/0"], "--split"),
        (vec!["scan", "--limit", "ten"], "--limit"),
        (vec!["scan", "--limit", "-1"], "'-1'"),
        (vec!["scan", "--limit", "0"], "at least 1"),
        (vec!["scan", "--cursor", "abc"], "even number of hex digits"),
        (vec!["scan", "--values", ""], "--values"),
        (vec!["scan", "--bogus"], "--bogus"),
        (vec!["scan", "extra"], "extra"),
    ] {
        let o = uuidmap(&args, &at).await;
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(named), "{args:?}: {e}");
        assert_eq!(stdout(&o), "", "{args:?}");
    }

    // Well-formed hex that is no cursor of this server: its INVALID_ARGUMENT.
    let o = uuidmap(&["scan", "--cursor", "00112233"], &at).await;
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("INVALID_ARGUMENT") && e.contains("cursor"),
        "{e}"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_each_change_after_an_lsn_and_from_now_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let url = format!("http://{}", server.addr);
    let at = [("UUIDMAP_SERVER", url.as_str())];
    let other = "00000000-0000-4000-8000-0000000000b2";
    for args in [
        vec!["put", KEY, VALUE],
        vec!["put", other, VALUE],
        vec!["del", KEY],
    ] {
        let o = uuidmap(&args, &at).await;
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    }

    // From the start, and from the middle.
    let all = uuidmap(&["watch", "--after", "0", "--batches", "3"], &at).await;
    assert_eq!(all.status.code(), Some(0), "{}", stderr(&all));
    assert_eq!(
        stdout(&all),
        format!("1 {KEY} {VALUE}\n2 {other} {VALUE}\n3 {KEY} -\n")
    );
    let last = uuidmap(&["watch", "--after", "2", "--batches", "1"], &at).await;
    assert_eq!(stdout(&last), format!("3 {KEY} -\n"));

    // By default it starts at the applied LSN: the first batch it prints
    // is one written after it started, never an older one.
    let child = uuidmap_command(&["watch", "--batches", "1", "--server", &url])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut c = server.client().await;
    let exited = {
        let mut child = child;
        let mut written = Vec::new();
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                break (status, child, written);
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "the watch printed nothing in 10 s"
            );
            let key = Uuid::from_u128(0xc000 + written.len() as u128);
            let lsn = c
                .put(pb::PutRequest {
                    key: key.as_bytes().to_vec().into(),
                    value: Uuid::parse_str(VALUE).unwrap().as_bytes().to_vec().into(),
                })
                .await
                .unwrap()
                .into_inner()
                .lsn;
            written.push((lsn, key));
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    let (status, child, written) = exited;
    assert!(status.success());
    let out = std::io::read_to_string(child.stdout.unwrap()).unwrap();
    assert!(
        written
            .iter()
            .any(|(lsn, key)| out == format!("{lsn} {key} {VALUE}\n")),
        "{out:?} is none of the writes made after it started: {written:?}"
    );

    // Refused by the command line parser.
    for (args, named) in [
        (vec!["watch", "--batches", "0"], "--batches"),
        (vec!["watch", "--after", "x"], "--after"),
        (vec!["watch", "--after", "-1"], "'-1'"),
    ] {
        let o = uuidmap(&args, &at).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(named), "{args:?}: {}", stderr(&o));
    }
    server.stop().await.unwrap();
}

/// Field `name` of `uuidmap bench`'s JSON line (its last line on stdout).
fn bench_field(o: &Output, name: &str) -> f64 {
    let out = stdout(o);
    let line = out.lines().last().unwrap_or_default();
    let at = format!("\"{name}\":");
    let start = line
        .find(&at)
        .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        + at.len();
    let rest = &line[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("{name} in {line:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_bench_exits_0_with_no_errors_and_a_put_run_reads_its_keys_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let url = format!("http://{}", server.addr);
    let at = [("UUIDMAP_SERVER", url.as_str())];
    let common = ["--secs", "1", "--tasks", "8", "--entries", "5000"];

    let put = uuidmap(
        &[&["bench", "--op", "put", "--json"][..], &common].concat(),
        &at,
    )
    .await;
    assert_eq!(put.status.code(), Some(0), "{}", stderr(&put));
    assert_eq!(stdout(&put).lines().count(), 1, "{}", stdout(&put));
    let calls = bench_field(&put, "calls");
    let read_back = bench_field(&put, "read_back");
    assert!(calls > 0.0 && bench_field(&put, "calls_per_s") > 0.0);
    assert!(
        read_back > 0.0 && read_back <= calls.min(1000.0),
        "{} read back of {calls} puts",
        read_back
    );
    for zero in ["errors", "wrong", "misses", "retries"] {
        assert_eq!(bench_field(&put, zero), 0.0, "{zero}: {}", stdout(&put));
    }
    assert_eq!(stderr(&put), "");

    // The human form, for a read of what the puts wrote.
    let get = uuidmap(
        &[&["bench", "--op", "batch-get", "--keys", "50"][..], &common].concat(),
        &at,
    )
    .await;
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
    let out = stdout(&get);
    for line in [
        "errors       0 failed calls\n",
        "wrong        0 answers\n",
        "retries      0\n",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    assert_eq!(
        bench_field(&get, "read_back"),
        0.0,
        "reads check as they go"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bench_whose_calls_fail_exits_1_counting_them_apart_and_a_wrong_answer_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "read bench-read-token-01\nwrite bench-write-token-02\n",
    )
    .unwrap();
    let mut c = config(&dir.path().join("data"));
    c.tokens_file = Some(tokens);
    let server = TestServer::start_with(c).await;
    let url = format!("http://{}", server.addr);

    // Puts with a token that may only read: every call is refused.
    let reader = [
        ("UUIDMAP_SERVER", url.as_str()),
        ("UUIDMAP_TOKEN", "bench-read-token-01"),
    ];
    let args = [
        "bench", "--op", "put", "--secs", "1", "--tasks", "4", "--json",
    ];
    let refused = uuidmap(&args, &reader).await;
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        bench_field(&refused, "errors") > 0.0,
        "{}",
        stdout(&refused)
    );
    for zero in ["calls", "calls_per_s", "p50_us", "wrong", "read_back"] {
        assert_eq!(
            bench_field(&refused, zero),
            0.0,
            "{zero}: {}",
            stdout(&refused)
        );
    }
    let e = stderr(&refused);
    assert!(
        e.starts_with("uuidmap bench: ")
            && e.contains("calls failed")
            && e.contains("PERMISSION_DENIED")
            && e.lines().count() == 1,
        "{e}"
    );

    // Key 0 of the bench's sequence, and a value that is not its own
    // (its own is e4d97177-1b65-2c20-0000-000000000000): every read of
    // it is a wrong answer.
    let writer = [
        ("UUIDMAP_SERVER", url.as_str()),
        ("UUIDMAP_TOKEN", "bench-write-token-02"),
    ];
    let key0 = "e220a839-7b1d-cdaf-8000-000000000000";
    let put = uuidmap(&["put", key0, VALUE], &writer).await;
    assert_eq!(put.status.code(), Some(0), "{}", stderr(&put));
    let args = [
        "bench",
        "--op",
        "get",
        "--entries",
        "1",
        "--secs",
        "1",
        "--tasks",
        "2",
        "--json",
    ];
    let wrong = uuidmap(&args, &reader).await;
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    assert!(bench_field(&wrong, "wrong") > 0.0, "{}", stdout(&wrong));
    let e = stderr(&wrong);
    assert!(
        e.contains("wrong answers") && e.contains(key0) && e.contains(VALUE),
        "{e}"
    );
    server.stop().await.unwrap();

    // Nobody listening: the bench cannot run.
    let gone = uuidmap(&["bench", "--secs", "1", "--server", &url], &[]).await;
    assert_eq!(gone.status.code(), Some(2), "{}", stderr(&gone));
    assert!(stderr(&gone).contains(&url), "{}", stderr(&gone));
}
