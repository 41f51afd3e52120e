//! The options of a partitioned server (`--etcd` and the rest): what they
//! make, and what they refuse.

use super::tests::{member, parse};
use super::*;

#[test]
fn a_partitioned_server_is_made_of_etcd_and_its_group() {
    let c = parse(&[
        "serve",
        "--etcd",
        "http://127.0.0.1:2379, http://e2:2379",
        "--group",
        "g1",
    ])
    .unwrap()
    .resolve()
    .unwrap();
    let p = c.partitions.unwrap();
    assert_eq!(p.etcd, ["http://127.0.0.1:2379", "http://e2:2379"]);
    assert_eq!(p.group.as_str(), "g1");
    assert_eq!(p.cluster, "uuidmap", "the default cluster name");
    assert_eq!(p.member, "single");
    assert_eq!(p.advertise_url, "http://127.0.0.1:7878", "from --listen");
    assert_eq!(p.lease_ttl, Duration::from_secs(10));
    // A member of a replica group registers under its node id and URL.
    let c = member(|o| {
        o.etcd = Some("http://127.0.0.1:2379".parse().unwrap());
        o.group = Some("g2".into());
        o.etcd_cluster = Some("prod".into());
        o.advertise_url = Some("http://10.0.0.1:7878".into());
        o.etcd_lease_ttl = Some(4);
    })
    .unwrap();
    let p = c.partitions.unwrap();
    assert_eq!(
        (
            p.member.as_str(),
            p.advertise_url.as_str(),
            p.cluster.as_str()
        ),
        ("node-1", "http://10.0.0.1:7878", "prod")
    );
    assert_eq!(p.lease_ttl, Duration::from_secs(4));
    // A single node of a partitioned cluster may name its URL.
    let c = parse(&[
        "serve",
        "--etcd",
        "http://127.0.0.1:2379",
        "--group",
        "g1",
        "--advertise-url",
        "http://h1:7878",
    ])
    .unwrap()
    .resolve()
    .unwrap();
    assert_eq!(c.partitions.unwrap().advertise_url, "http://h1:7878");
    assert!(ServeConfig::new("d").partitions.is_none());
}

#[test]
fn partition_options_that_do_not_fit_are_refused_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["serve", "--group", "g1"],
            "--group is an option of a partitioned cluster",
        ),
        (
            &["serve", "--etcd-cluster", "x"],
            "--etcd-cluster is an option",
        ),
        (
            &["serve", "--etcd-lease-ttl", "5"],
            "--etcd-lease-ttl is an option",
        ),
        (
            &["serve", "--etcd", "http://e:2379"],
            "--etcd needs --group",
        ),
        (
            &["serve", "--etcd", "http://e:2379", "--group", "G1"],
            "not a group name",
        ),
        (
            &[
                "serve",
                "--etcd",
                "http://e:2379",
                "--group",
                "g",
                "--etcd-cluster",
                "a/b",
            ],
            "not a cluster name",
        ),
        (
            &[
                "serve",
                "--etcd",
                "http://e:2379",
                "--group",
                "g",
                "--etcd-lease-ttl",
                "1",
            ],
            "etcd_lease_ttl",
        ),
        (
            &[
                "serve",
                "--etcd",
                "http://e:2379",
                "--group",
                "g",
                "--resp-listen",
                "127.0.0.1:6380",
            ],
            "--resp-listen is not served in a partitioned cluster",
        ),
        (
            &[
                "serve",
                "--etcd",
                "http://e:2379",
                "--group",
                "g",
                "--listen",
                "0.0.0.0:7878",
                "--insecure",
            ],
            "give --advertise-url",
        ),
        (
            &["serve", "--advertise-url", "http://h:1"],
            "--advertise-url is an option of a replica",
        ),
    ];
    for (args, want) in cases {
        let e = parse(args)
            .and_then(|a| a.resolve().map_err(|e| e.to_string()))
            .map(|_| ())
            .unwrap_err();
        assert!(e.contains(want), "{args:?}: {e}");
    }
    for bad in ["", "e:2379", "ftp://e"] {
        let e = parse(&["serve", "--etcd", bad, "--group", "g"]).unwrap_err();
        assert!(e.contains("--etcd"), "{bad:?}: {e}");
    }
}
