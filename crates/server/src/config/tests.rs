use super::*;

pub(super) fn member(f: impl FnOnce(&mut ServeOptions)) -> Result<ServeConfig, String> {
    let mut o = ServeOptions {
        node_id: Some(1),
        raft_listen: Some("127.0.0.1:7880".parse().unwrap()),
        ..ServeOptions::default()
    };
    f(&mut o);
    o.into_config().map_err(|e| e.to_string())
}

/// `uuidmap serve`'s arguments as the binary parses them.
pub(super) fn parse(args: &[&str]) -> Result<ServeArgs, String> {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    <Cli as clap::Parser>::try_parse_from(args)
        .map(|cli| cli.serve)
        .map_err(|e| e.to_string())
}

#[test]
fn a_member_is_made_of_its_id_its_raft_port_and_its_peers() {
    assert_eq!(ServeArgs::default().resolve().unwrap().cluster, None);
    let c = member(|o| {
        o.peers = Some(
            "2=127.0.0.1:7890@http://127.0.0.1:7888, 3=h3:7900@https://h3:7898"
                .parse()
                .unwrap(),
        );
        o.cluster_init = Some(true);
    })
    .unwrap()
    .cluster
    .unwrap();
    assert_eq!(c.node_id, 1);
    assert_eq!(
        c.raft_advertise, "127.0.0.1:7880",
        "defaults to --raft-listen"
    );
    assert_eq!(c.advertise_url, "http://127.0.0.1:7878", "from --listen");
    assert!(c.init);
    assert_eq!(
        c.peers,
        vec![
            Peer {
                id: 2,
                raft_addr: "127.0.0.1:7890".into(),
                client_url: "http://127.0.0.1:7888".into()
            },
            Peer {
                id: 3,
                raft_addr: "h3:7900".into(),
                client_url: "https://h3:7898".into()
            },
        ]
    );
    // The same from the TOML file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(
        &path,
        "node_id = 1\nraft_listen = \"127.0.0.1:7880\"\ncluster_init = true\n\
         peers = \"2=127.0.0.1:7890@http://127.0.0.1:7888,3=h3:7900@https://h3:7898\"\n",
    )
    .unwrap();
    let from_file = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    assert_eq!(from_file.resolve().unwrap().cluster, Some(c));
}

#[test]
fn replica_group_options_that_do_not_fit_are_refused_in_words() {
    type Change = Box<dyn FnOnce(&mut ServeOptions)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|o| o.node_id = None),
            "--raft-listen is an option of a replica group member",
        ),
        (Box::new(|o| o.node_id = Some(0)), "at least 1"),
        (Box::new(|o| o.raft_listen = None), "needs --raft-listen"),
        (
            Box::new(|o| o.raft_listen = Some("127.0.0.1:7878".parse().unwrap())),
            "its own port",
        ),
        (
            Box::new(|o| o.raft_listen = Some("0.0.0.0:7880".parse().unwrap())),
            "give --raft-advertise",
        ),
        (
            Box::new(|o| o.listen = Some("0.0.0.0:7878".parse().unwrap())),
            "give --advertise-url",
        ),
        (
            Box::new(|o| o.advertise_url = Some("10.0.0.1:7878".into())),
            "not an http:// or https:// URL",
        ),
        (
            Box::new(|o| o.peers = Some("1=h:1@http://h:2".parse().unwrap())),
            "which is this member",
        ),
    ];
    for (change, words) in cases {
        let e = member(change).unwrap_err();
        assert!(e.contains(words), "{e:?} should say {words:?}");
    }
    for (peers, words) in [
        ("2=h:1", "no `@`"),
        ("x=h:1@http://h", "not a number"),
        ("0=h:1@http://h", "start at 1"),
        ("2=h@http://h", "not host:port"),
        ("2=h:1@ftp://h", "not an http"),
        ("2=h:1@http://h,2=g:1@http://g", "given twice"),
    ] {
        let e = peers.parse::<Peers>().unwrap_err();
        assert!(
            e.contains(words) && e.contains("ID=RAFT_ADDR@CLIENT_URL"),
            "{e}"
        );
    }
}

#[test]
fn raft_dial_sends_a_members_raft_calls_elsewhere_and_a_bad_value_names_the_flag() {
    let member = ["serve", "--node-id", "1", "--raft-listen", "127.0.0.1:7880"];
    let with = |extra: &[&'static str]| [&member[..], extra].concat();
    let c = parse(&with(&["--raft-dial", "2=127.0.0.1:17890, 3=h3:17900"]))
        .unwrap()
        .resolve()
        .unwrap()
        .cluster
        .unwrap();
    let want: HashMap<u64, String> = [(2, "127.0.0.1:17890".into()), (3, "h3:17900".into())]
        .into_iter()
        .collect();
    assert_eq!(c.dial, want);
    // None given: the membership's addresses.
    let plain = parse(&member).unwrap().resolve().unwrap().cluster.unwrap();
    assert!(plain.dial.is_empty());
    // The same from the TOML file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(
        &path,
        "node_id = 1\nraft_listen = \"127.0.0.1:7880\"\n\
         raft_dial = \"2=127.0.0.1:17890,3=h3:17900\"\n",
    )
    .unwrap();
    let from_file = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    assert_eq!(from_file.resolve().unwrap().cluster.unwrap().dial, want);

    // A bad value: refused naming the flag and the form it takes.
    for (value, words) in [
        ("2", "no `=`"),
        ("x=h:1", "not a number"),
        ("0=h:1", "start at 1"),
        ("2=h", "not host:port"),
        ("2=h:1,2=g:1", "given twice"),
    ] {
        let e = parse(&with(&["--raft-dial", value])).unwrap_err();
        assert!(
            e.contains("--raft-dial") && e.contains(words) && e.contains("ID=HOST:PORT"),
            "{value}: {e}"
        );
    }
    // Only a member dials, and never itself.
    let e = parse(&["serve", "--raft-dial", "2=h:1"])
        .unwrap()
        .resolve()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--raft-dial is an option of a replica group member"),
        "{e}"
    );
    let e = parse(&with(&["--raft-dial", "1=h:1"]))
        .unwrap()
        .resolve()
        .unwrap_err()
        .to_string();
    assert!(e.contains("which is this member"), "{e}");
}

#[test]
fn defaults_are_loopback_7878_local_data_dir_and_fsync_always() {
    let c = ServeArgs::default().resolve().unwrap();
    assert_eq!(c.listen, "127.0.0.1:7878".parse().unwrap());
    assert_eq!(c.data_dir, PathBuf::from("uuidmap-data"));
    assert_eq!(c.fsync, FsyncPolicy::Always);
    assert!(!c.insecure);
    assert_eq!(c.metrics_listen, Some("127.0.0.1:7879".parse().unwrap()));
}

#[test]
fn metrics_listen_comes_from_the_flag_or_the_file_and_can_be_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(&path, "metrics_listen = \"off\"\n").unwrap();
    let from_file = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    assert_eq!(from_file.resolve().unwrap().metrics_listen, None);
    let flag: MetricsListen = "127.0.0.1:9100".parse().unwrap();
    let flag_wins = ServeArgs {
        config: Some(path.clone()),
        options: ServeOptions {
            metrics_listen: Some(flag),
            ..ServeOptions::default()
        },
    };
    assert_eq!(flag_wins.resolve().unwrap().metrics_listen, flag.0);
    std::fs::write(&path, "metrics_listen = \"nowhere\"\n").unwrap();
    let e = from_file.resolve().unwrap_err().to_string();
    assert!(e.contains("metrics_listen") && e.contains("`off`"), "{e}");
    assert_eq!(ServeConfig::new("d").metrics_listen, None);
}

#[test]
fn resp_listen_is_off_by_default_and_comes_from_the_flag_or_the_file() {
    assert_eq!(ServeArgs::default().resolve().unwrap().resp_listen, None);
    assert_eq!(ServeConfig::new("d").resp_listen, None);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(&path, "resp_listen = \"127.0.0.1:6390\"\n").unwrap();
    let from_file = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    let file_addr = "127.0.0.1:6390".parse().unwrap();
    assert_eq!(from_file.resolve().unwrap().resp_listen, Some(file_addr));
    let mut args = parse(&["x", "--resp-listen", "127.0.0.1:6391"]).unwrap();
    args.config = Some(path);
    let flag_addr = "127.0.0.1:6391".parse().unwrap();
    assert_eq!(args.resolve().unwrap().resp_listen, Some(flag_addr));
}

#[test]
fn flags_override_the_file_which_overrides_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:9000\"\ndata_dir = \"/from/file\"\nfsync = \"never\"\nmax_batch_keys = 10\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        options: ServeOptions {
            data_dir: Some("/from/flag".into()),
            ..ServeOptions::default()
        },
    };
    let c = args.resolve().unwrap();
    assert_eq!(c.listen, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(c.data_dir, PathBuf::from("/from/flag"));
    assert_eq!(c.fsync, FsyncPolicy::Never);
    assert_eq!(c.limits.max_batch_keys, 10);
}

#[test]
fn tls_needs_both_cert_and_key_and_client_ca_needs_tls() {
    let only_cert = ServeArgs {
        options: ServeOptions {
            tls_cert: Some("c.pem".into()),
            ..ServeOptions::default()
        },
        ..ServeArgs::default()
    };
    let e = only_cert.resolve().unwrap_err().to_string();
    assert!(e.contains("go together"), "{e}");
    let only_ca = ServeArgs {
        options: ServeOptions {
            tls_client_ca: Some("ca.pem".into()),
            ..ServeOptions::default()
        },
        ..ServeArgs::default()
    };
    let e = only_ca.resolve().unwrap_err().to_string();
    assert!(e.contains("needs TLS on"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(
        &path,
        "tls_cert = \"c.pem\"\ntls_key = \"k.pem\"\ntokens_file = \"t\"\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        options: ServeOptions {
            tls_client_ca: Some("ca.pem".into()),
            ..ServeOptions::default()
        },
    };
    let c = args.resolve().unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(tls.cert, PathBuf::from("c.pem"));
    assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
    assert_eq!(c.tokens_file, Some(PathBuf::from("t")));
}

#[test]
fn admission_limits_come_from_flags_then_file_then_defaults_and_zero_is_refused() {
    let defaults = ServeArgs::default().resolve().unwrap().admission;
    assert_eq!(defaults, AdmissionLimits::default());
    assert!(defaults.max_long_polls >= 50_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(
        &path,
        "read_permits = 8\nread_queue = 9\nwrite_permits = 10\nwrite_queue = 11\n\
         scan_permits = 2\nscan_queue = 3\nmax_long_polls = 70000\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path.clone()),
        options: ServeOptions {
            scan_permits: Some(5),
            max_long_polls: Some(60_000),
            ..ServeOptions::default()
        },
    };
    let a = args.resolve().unwrap().admission;
    assert_eq!(
        a,
        AdmissionLimits {
            read_permits: 8,
            read_queue: 9,
            write_permits: 10,
            write_queue: 11,
            scan_permits: 5,
            scan_queue: 3,
            max_long_polls: 60_000,
        }
    );
    // Clap reads the flags and the environment variables.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let cli = <Cli as clap::Parser>::try_parse_from([
        "serve",
        "--read-queue",
        "100",
        "--write-permits",
        "7",
        "--scan-queue",
        "1",
    ])
    .unwrap();
    let a = cli.serve.resolve().unwrap().admission;
    assert_eq!((a.read_queue, a.write_permits, a.scan_queue), (100, 7, 1));
    // Zero is refused, by name and with the way to set it.
    let zero = ServeArgs {
        options: ServeOptions {
            scan_permits: Some(0),
            ..ServeOptions::default()
        },
        ..ServeArgs::default()
    };
    let e = zero.resolve().unwrap_err().to_string();
    assert!(
        e.contains("--scan-permits must be at least 1")
            && e.contains("UUIDMAP_SCAN_PERMITS")
            && e.contains("scan_permits = "),
        "{e}"
    );
    std::fs::write(&path, "read_queue = 0\n").unwrap();
    let e = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    }
    .resolve()
    .unwrap_err()
    .to_string();
    assert!(e.contains("--read-queue must be at least 1"), "{e}");
}

#[test]
fn wal_file_and_snapshot_triggers_come_from_flags_then_file_and_minimums_are_refused() {
    let defaults = ServeArgs::default().resolve().unwrap();
    assert_eq!(defaults.wal_file_bytes, 64 << 20);
    assert_eq!(defaults.snapshot_wal_bytes, 256 << 20);
    assert_eq!(defaults.snapshot_interval, Some(Duration::from_secs(600)));
    assert_eq!(defaults.max_replay, Some(Duration::from_millis(500)));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(
        &path,
        "wal_file_bytes = 2097152
snapshot_wal_bytes = 8388608
snapshot_interval = 30
max_replay_ms = 250
",
    )
    .unwrap();
    let from_file = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    let c = from_file.resolve().unwrap();
    assert_eq!(
        (c.wal_file_bytes, c.snapshot_wal_bytes, c.snapshot_interval),
        (2 << 20, 8 << 20, Some(Duration::from_secs(30)))
    );
    assert_eq!(c.max_replay, Some(Duration::from_millis(250)));

    // Flags win over the file.
    let mut args = parse(&[
        "serve",
        "--wal-file-bytes",
        "1048576",
        "--snapshot-interval",
        "10m",
    ])
    .unwrap();
    args.config = Some(path.clone());
    let c = args.resolve().unwrap();
    assert_eq!(
        (c.wal_file_bytes, c.snapshot_wal_bytes, c.snapshot_interval),
        (1 << 20, 8 << 20, Some(Duration::from_secs(600)))
    );
    let off = parse(&["serve", "--snapshot-interval", "off"]).unwrap();
    assert_eq!(off.resolve().unwrap().snapshot_interval, None);
    let mut budget = parse(&["serve", "--max-replay-ms", "100"]).unwrap();
    budget.config = Some(path.clone());
    assert_eq!(
        budget.resolve().unwrap().max_replay,
        Some(Duration::from_millis(100))
    );
    let off = parse(&["serve", "--max-replay-ms", "off"]).unwrap();
    assert_eq!(off.resolve().unwrap().max_replay, None);
    assert_eq!(defaults.wal_preallocate, Preallocate::Background);
    let off = parse(&["serve", "--wal-preallocate", "off"]).unwrap();
    assert_eq!(off.resolve().unwrap().wal_preallocate, Preallocate::Off);
    assert!(!defaults.wal_overlap_syncs);
    assert!(defaults.runtime_lifo_slot);
    let off = parse(&["serve", "--runtime-lifo-slot", "off"]).unwrap();
    assert!(!off.resolve().unwrap().runtime_lifo_slot);
    let on = parse(&["serve", "--wal-overlap-syncs", "on"]).unwrap();
    assert!(on.resolve().unwrap().wal_overlap_syncs);
    let e = parse(&["serve", "--wal-overlap-syncs", "maybe"]).unwrap_err();
    assert!(
        e.contains("--wal-overlap-syncs") && e.contains("`on`"),
        "{e}"
    );
    let e = parse(&["serve", "--wal-preallocate", "sometimes"]).unwrap_err();
    assert!(e.contains("--wal-preallocate") && e.contains("`on`"), "{e}");
    assert_eq!(defaults.replay_workers, ReplayWorkers::PerCore);
    for (flag, workers) in [
        ("serial", ReplayWorkers::Serial),
        ("3", ReplayWorkers::Threads(3)),
        ("auto", ReplayWorkers::PerCore),
    ] {
        let args = parse(&["serve", "--replay-workers", flag]).unwrap();
        assert_eq!(args.resolve().unwrap().replay_workers, workers);
    }
    let e = parse(&["serve", "--replay-workers", "0"]).unwrap_err();
    assert!(
        e.contains("--replay-workers") && e.contains("serial"),
        "{e}"
    );
    let e = parse(&["serve", "--max-replay-ms", "1s"]).unwrap_err();
    assert!(e.contains("--max-replay-ms") && e.contains("`off`"), "{e}");
    let e = parse(&["serve", "--snapshot-interval", "5 minutes"]).unwrap_err();
    assert!(
        e.contains("--snapshot-interval") && e.contains("`off`"),
        "{e}"
    );
    // (The variables are read by the binary in tests/server/serve_process.rs:
    // setting one here would race the other tests' threads.)

    // Below the minimums: refused, naming the option's three spellings.
    for (args, names) in [
        (
            &["serve", "--wal-file-bytes", "65536"][..],
            [
                "--wal-file-bytes must be at least 1048576",
                "UUIDMAP_WAL_FILE_BYTES",
                "wal_file_bytes = ",
            ],
        ),
        (
            &["serve", "--snapshot-wal-bytes", "1000"][..],
            [
                "--snapshot-wal-bytes must be at least 1048576",
                "UUIDMAP_SNAPSHOT_WAL_BYTES",
                "snapshot_wal_bytes = ",
            ],
        ),
        (
            &["serve", "--max-replay-ms", "0"][..],
            [
                "--max-replay-ms must be at least 1",
                "UUIDMAP_MAX_REPLAY_MS",
                "max_replay_ms = ",
            ],
        ),
        (
            &["serve", "--snapshot-interval", "0"][..],
            [
                "--snapshot-interval must be at least 1 second",
                "UUIDMAP_SNAPSHOT_INTERVAL",
                "`off`",
            ],
        ),
    ] {
        let e = parse(args).unwrap().resolve().unwrap_err().to_string();
        for name in names {
            assert!(e.contains(name), "{args:?}: {e}");
        }
    }
    std::fs::write(&path, "snapshot_interval = \"0s\"\n").unwrap();
    let e = from_file.resolve().unwrap_err().to_string();
    assert!(e.contains("--snapshot-interval must be at least"), "{e}");
    std::fs::write(
        &path,
        "max_replay_ms = \"off\"\nreplay_workers = \"serial\"\nwal_preallocate = \"off\"\n",
    )
    .unwrap();
    let c = from_file.resolve().unwrap();
    assert_eq!(
        (c.max_replay, c.replay_workers, c.wal_preallocate),
        (None, ReplayWorkers::Serial, Preallocate::Off)
    );
    std::fs::write(&path, "snapshot_interval = \"soon\"\n").unwrap();
    let e = from_file.resolve().unwrap_err().to_string();
    assert!(
        e.contains("uuidmap.toml") && e.contains("snapshot_interval"),
        "{e}"
    );
}

#[test]
fn an_unknown_key_in_the_file_is_refused_with_the_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "lisen = \"127.0.0.1:1\"\n").unwrap();
    let args = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    let e = args.resolve().unwrap_err().to_string();
    assert!(e.contains("bad.toml") && e.contains("lisen"), "{e}");
}

#[test]
fn the_raft_tls_files_go_together_and_name_what_is_missing() {
    let c = member(|o| {
        o.raft_tls_cert = Some("n1.pem".into());
        o.raft_tls_key = Some("n1.key".into());
        o.raft_tls_ca = Some("ca.pem".into());
    })
    .unwrap();
    let tls = c.cluster.unwrap().tls.expect("Raft TLS on");
    assert_eq!(tls.ca, PathBuf::from("ca.pem"));
    let e = member(|o| {
        o.raft_tls_cert = Some("n1.pem".into());
        o.raft_tls_key = Some("n1.key".into());
    })
    .unwrap_err();
    assert!(
        e.contains("all three") && e.contains("missing --raft-tls-ca"),
        "{e}"
    );
    assert!(member(|_| {}).unwrap().cluster.unwrap().tls.is_none());
    // A member's options, without --node-id.
    for f in [
        (|o: &mut ServeOptions| o.raft_tls_ca = Some("ca.pem".into())) as fn(&mut _),
        |o: &mut ServeOptions| o.raft_insecure = Some(true),
    ] {
        let mut o = ServeOptions::default();
        f(&mut o);
        let e = o.into_config().unwrap_err().to_string();
        assert!(e.contains("--node-id"), "{e}");
    }
    // --insecure is not --raft-insecure.
    let c = member(|o| o.insecure = Some(true)).unwrap();
    assert!(!c.cluster.unwrap().raft_insecure);
    let c = member(|o| o.raft_insecure = Some(true)).unwrap();
    assert!(c.cluster.unwrap().raft_insecure && !c.insecure);
}

#[test]
fn each_option_is_a_flag_a_variable_and_a_file_key_spelled_alike() {
    use clap::CommandFactory;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    let command = Cli::command();
    let mut count = 0;
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        assert_eq!(arg.get_long(), Some(id.replace('_', "-").as_str()), "{id}");
        let env = arg.get_env().unwrap().to_str().unwrap();
        assert_eq!(env, format!("UUIDMAP_{}", id.to_ascii_uppercase()), "{id}");
        if id == "config" {
            continue;
        }
        // The key is known to the file (an unknown one is refused),
        // and a value no option takes is refused naming the key.
        std::fs::write(&path, format!("{id} = [1, 2]\n")).unwrap();
        let e = ServeArgs {
            config: Some(path.clone()),
            ..ServeArgs::default()
        }
        .resolve()
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(!e.contains("unknown field"), "{id}: {e}");
        assert!(
            e.contains(id) && e.contains("a string, a number or true/false"),
            "{id}: {e}"
        );
        count += 1;
    }
    assert_eq!(
        count, 47,
        "a new option? add it to the README and the module doc"
    );
}

#[test]
fn a_file_value_is_read_as_the_flag_text_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uuidmap.toml");
    std::fs::write(
        &path,
        "insecure = true\nfsync = \"interval=5\"\nreplay_workers = 3\n\
         snapshot_interval = \"2m\"\nmax_replay_ms = 40\n",
    )
    .unwrap();
    let c = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    }
    .resolve()
    .unwrap();
    assert!(c.insecure);
    assert_eq!(c.fsync, "interval=5".parse().unwrap());
    assert_eq!(c.replay_workers, ReplayWorkers::Threads(3));
    assert_eq!(c.snapshot_interval, Some(Duration::from_secs(120)));
    assert_eq!(c.max_replay, Some(Duration::from_millis(40)));
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    for (args, insecure) in [
        (&["serve"][..], false),
        (&["serve", "--insecure"][..], true),
        (
            &["serve", "--insecure", "--listen", "127.0.0.1:1"][..],
            true,
        ),
        (&["serve", "--insecure=false"][..], false),
    ] {
        let cli = <Cli as clap::Parser>::try_parse_from(args).unwrap();
        assert_eq!(cli.serve.resolve().unwrap().insecure, insecure, "{args:?}");
    }
}

#[test]
fn metrics_listen_is_an_address_or_off() {
    assert_eq!("off".parse(), Ok(MetricsListen(None)));
    assert_eq!(
        "127.0.0.1:0".parse(),
        Ok(MetricsListen(Some("127.0.0.1:0".parse().unwrap())))
    );
    let e = "localhost".parse::<MetricsListen>().unwrap_err();
    assert!(e.contains("off") && e.contains("7879"), "{e}");
}

#[test]
fn each_default_is_shown_in_the_help_and_the_readme_as_its_row_states_it() {
    use clap::CommandFactory;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let help = show_defaults(Cli::command()).render_long_help().to_string();
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let mut in_readme = 0;
    for (option, text) in OPTION_DEFAULTS {
        let flag = format!("--{}", option.replace('_', "-"));
        let shown = format!("[default: {text}]");
        let at = help
            .find(&format!("{flag} <"))
            .expect("every option is a flag");
        let next = help[at..].find("\n\n  ").map_or(help.len(), |n| at + n);
        assert!(
            help[at..next].contains(&shown),
            "{flag}: {}",
            &help[at..next]
        );
        // The README's table of options says the same.
        let row = readme
            .lines()
            .find(|l| l.starts_with("| `") && l.contains(&format!("`{flag}`")));
        if let Some(row) = row {
            assert!(row.contains(text), "README's row of {flag}: {row}");
            in_readme += 1;
        }
    }
    assert!(
        in_readme >= 20,
        "the README's table lists {in_readme} options"
    );
}

#[test]
fn the_servers_defaults_for_the_store_and_the_group_are_the_librarys() {
    let server = ServeConfig::new("d");
    let store = uuidmap_engine::writer::DurableConfig::new("d");
    assert_eq!(server.wal_file_bytes, store.wal_segment_bytes);
    assert_eq!(server.wal_preallocate, store.wal_preallocate);
    assert_eq!(server.wal_overlap_syncs, store.pipeline.overlap_syncs);
    assert_eq!(
        server.snapshot_wal_bytes,
        store.pipeline.snapshot_every_bytes
    );
    assert_eq!(server.snapshot_interval, store.snapshot_every);
    assert_eq!(server.max_replay, store.max_replay);
    assert_eq!(server.replay_workers, store.recovery.replay_workers);
    let d = ServeOptions::defaults();
    assert_eq!(
        d.raft_snapshot_entries,
        Some(uuidmap_cluster::replica::SNAPSHOT_ENTRIES)
    );
    assert_eq!(
        d.raft_keep_entries,
        Some(uuidmap_cluster::replica::LOGS_TO_KEEP)
    );
}

#[test]
fn a_members_resp_address_for_moved_is_its_resp_listen_or_the_advertised_host() {
    let c = member(|_| {}).unwrap().cluster.unwrap();
    assert_eq!(
        c.resp_advertise, "",
        "no RESP port, none to send clients to"
    );
    let c = member(|o| o.resp_listen = Some("127.0.0.1:6380".parse().unwrap()))
        .unwrap()
        .cluster
        .unwrap();
    assert_eq!(c.resp_advertise, "127.0.0.1:6380");
    let c = member(|o| {
        o.resp_listen = Some("0.0.0.0:6380".parse().unwrap());
        o.advertise_url = Some("https://db1.example:7878".into());
    })
    .unwrap()
    .cluster
    .unwrap();
    assert_eq!(
        c.resp_advertise, "db1.example:6380",
        "every interface: the URL's host"
    );
    let c = member(|o| {
        o.resp_listen = Some("[::]:6380".parse().unwrap());
        o.advertise_url = Some("http://[fd00::1]:7878".into());
    })
    .unwrap()
    .cluster
    .unwrap();
    assert_eq!(c.resp_advertise, "[fd00::1]:6380");
}
