//! mTLS on the Raft port (`uuidmap_cluster::raft_tls`), over the real Raft
//! service on loopback: a group whose members hold certificates of one
//! Raft CA elects, replicates and adds a member; the port refuses a caller
//! without a certificate, one of another CA, a node of the CA that is not
//! a member, and a member that claims to speak for another node; a member
//! dialing node N refuses a peer that cannot prove it is N.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use uuid::Uuid;
use uuidmap_cluster::raft_tls::{RaftTls, node_name};
use uuidmap_cluster::types::{Vote, VoteRequest};
use uuidmap_cluster::{ToWire, membership, network};
use uuidmap_engine::writer::WriteOp;
use uuidmap_index::Key;
use uuidmap_proto::raft::v1 as pb;
use uuidmap_proto::raft::v1::raft_client::RaftClient;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader, write_batches};
use uuidmap_testkit::server::pki::{Ca, Leaf};

fn batch(b: u128) -> Vec<WriteOp> {
    (0..4)
        .map(|i| WriteOp::Put {
            key: Key::new(Uuid::from_u128(b * 4 + i + 1)).unwrap(),
            value: Uuid::from_u128(b),
        })
        .collect()
}

/// A group of three (ids 1..=3) on loopback, each member with its
/// certificate of `ca`.
async fn tls_group(ca: &Ca) -> Vec<ReplicaNode> {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let tls: HashMap<u64, RaftTls> = (1..=3).map(|id| (id, ca.raft_tls(id))).collect();
    ReplicaNode::group_configured(listeners, HashMap::new(), move |c| {
        c.tls = Some(tls[&c.id].clone());
    })
    .await
}

/// A Raft client of the member at `addr`, which must prove it is node
/// `target` by a certificate of `ca`; presenting `leaf`, if any.
async fn dial(
    addr: &str,
    target: u64,
    ca: &Ca,
    leaf: Option<&Leaf>,
) -> Result<RaftClient<tonic::transport::Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name(node_name(target));
    if let Some(leaf) = leaf {
        tls = tls.identity(Identity::from_pem(&leaf.cert, &leaf.key));
    }
    let channel = Endpoint::from_shared(format!("https://{addr}"))?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await?;
    Ok(RaftClient::new(channel))
}

/// A vote request from candidate `from` in term 1 (stale for a group
/// that has elected: harmless).
fn vote_from(from: u64) -> pb::VoteRequest {
    VoteRequest::new(Vote::new(1, from), None).to_wire()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_over_raft_tls_elects_replicates_and_adds_a_member() {
    let ca = Ca::new("raft CA");
    let mut nodes = tls_group(&ca).await;
    let lsn = write_batches(&nodes, 0..30, batch).await;
    for n in &nodes {
        n.applied(lsn).await;
    }
    let expected = nodes[0].contents();
    assert_eq!(expected.len(), 120);

    // Node 4, in no group yet, takes the leader's calls (any node of the
    // CA), catches up and votes.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls = ca.raft_tls(4);
    let fourth = ReplicaNode::start_configured(
        4,
        tempfile::tempdir().unwrap(),
        listener,
        HashMap::new(),
        move |c| c.tls = Some(tls),
    )
    .await;
    let l = writable_leader(&nodes).await;
    let raft = nodes[l].replica.raft().clone();
    membership::add_learner(&raft, 4, fourth.node.clone())
        .await
        .expect("node 4 is added over TLS, and catches up");
    membership::promote(&raft, BTreeSet::from([4]))
        .await
        .expect("node 4 is promoted");
    nodes.push(fourth);
    let lsn = write_batches(&nodes, 30..40, batch).await;
    nodes[3].applied(lsn).await;
    assert_eq!(nodes[3].contents(), nodes[l].contents());
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_port_refuses_a_caller_without_a_certificate_or_with_another_cas() {
    let ca = Ca::new("raft CA");
    let nodes = tls_group(&ca).await;
    let addr = nodes[0].node.raft_addr.clone();

    // The control: node 2's certificate of the group's CA is served.
    let member = ca.raft_node(2);
    let mut client = dial(&addr, 1, &ca, Some(&member)).await.unwrap();
    let answer = client.identify(pb::IdentifyRequest {}).await;
    assert_eq!(answer.expect("a member is served").into_inner().node_id, 1);

    // No certificate: the handshake (or the first call) fails.
    let refused = match dial(&addr, 1, &ca, None).await {
        Err(_) => true,
        Ok(mut c) => c.identify(pb::IdentifyRequest {}).await.is_err(),
    };
    assert!(refused, "a caller without a certificate was served");

    // Node 2's name, from another CA.
    let other = Ca::new("another CA");
    let forged = other.raft_node(2);
    let refused = match dial(&addr, 1, &ca, Some(&forged)).await {
        Err(_) => true,
        Ok(mut c) => {
            let vote = c.vote(vote_from(2)).await;
            let identify = c.identify(pb::IdentifyRequest {}).await;
            vote.is_err() && identify.is_err()
        }
    };
    assert!(refused, "a certificate of another CA was served");
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_the_ca_that_is_not_a_member_is_refused_and_a_member_speaks_only_for_itself() {
    let ca = Ca::new("raft CA");
    let nodes = tls_group(&ca).await;
    let addr = nodes[0].node.raft_addr.clone();

    // Node 9 holds a valid certificate of the CA, but is no member.
    let outsider = ca.raft_node(9);
    let mut c = dial(&addr, 1, &ca, Some(&outsider)).await.unwrap();
    for status in [
        c.vote(vote_from(9)).await.unwrap_err(),
        c.pre_vote(vote_from(9)).await.unwrap_err(),
        c.append_entries(pb::AppendEntriesRequest::default())
            .await
            .unwrap_err(),
        c.transfer_leader(pb::TransferLeaderRequest::default())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        assert!(
            status.message().contains("node 9") && status.message().contains("not a member"),
            "{}",
            status.message()
        );
    }
    // Identify answers any node of the CA (a node being added is asked).
    assert_eq!(
        c.identify(pb::IdentifyRequest {})
            .await
            .expect("Identify answers a node of the CA")
            .into_inner()
            .node_id,
        1
    );

    // Node 2 is a member, but may not vote for node 3.
    let member = ca.raft_node(2);
    let mut c = dial(&addr, 1, &ca, Some(&member)).await.unwrap();
    let status = c.vote(vote_from(3)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains("node 3") && status.message().contains("node 2's"),
        "{}",
        status.message()
    );
    let status = c.pre_vote(vote_from(3)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    // The control: for itself, its (stale) vote is answered.
    c.vote(vote_from(2))
        .await
        .expect("a member's vote for itself is answered");
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_dialing_node_n_refuses_a_peer_that_is_not_n() {
    let ca = Ca::new("raft CA");
    let nodes = tls_group(&ca).await;
    let tls = ca.raft_tls(2);
    let at_1 = nodes[0].node.raft_addr.clone();
    // Node 1 listens there; dialed as node 3, it cannot prove it.
    let e = network::identify(&at_1, 3, Some(&tls), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(e.contains(&at_1), "{e}");
    let found = network::identify(&at_1, 1, Some(&tls), Duration::from_secs(5))
        .await
        .expect("node 1 proves it is node 1");
    assert_eq!(found.node_id, 1);
    for n in nodes {
        n.stop().await;
    }
}

#[test]
fn a_certificate_that_names_another_node_cannot_serve_this_one() {
    let ca = Ca::new("raft CA");
    let leaf = ca.raft_node(2);
    let e = RaftTls::new(
        1,
        leaf.cert.into_bytes(),
        leaf.key.into_bytes(),
        ca.pem.clone().into_bytes(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("node 1") && e.contains("node-2.raft.uuidmap"),
        "{e}"
    );
}
