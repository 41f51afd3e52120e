//! The Raft service's `InstallSnapshot` against bad streams: each is
//! refused with `INVALID_ARGUMENT` in words that say what was wrong, the
//! partly received file is removed, and the member goes on serving.

use std::collections::HashMap;

use tokio::net::TcpListener;
use uuidmap_cluster::ToWire;
use uuidmap_cluster::raft_wire::SnapshotHeader;
use uuidmap_cluster::types::{SnapshotMeta, Vote};
use uuidmap_engine::writer::ProposalChain;
use uuidmap_proto::raft::v1 as pb;
use uuidmap_proto::raft::v1::raft_client::RaftClient;
use uuidmap_testkit::cluster::{ReplicaNode, writable_leader};

fn meta(file_len: u64) -> pb::SnapshotChunk {
    let header = SnapshotHeader {
        vote: Vote::new(1, 1),
        meta: SnapshotMeta::default(),
        file_len,
        snapshot_lsn: 0,
        chain: ProposalChain::default(),
    };
    pb::SnapshotChunk {
        chunk: Some(pb::snapshot_chunk::Chunk::Meta(header.to_wire())),
    }
}

fn bytes(offset: u64, data: &[u8], crc32c: u32) -> pb::SnapshotChunk {
    pb::SnapshotChunk {
        chunk: Some(pb::snapshot_chunk::Chunk::Bytes(pb::SnapshotBytes {
            offset,
            crc32c,
            data: data.to_vec().into(),
        })),
    }
}

fn good(offset: u64, data: &[u8]) -> pb::SnapshotChunk {
    bytes(offset, data, uuidmap_engine::store::crc32c(data))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_snapshot_streams_are_refused_in_words_and_leave_no_file() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let nodes = ReplicaNode::group_on(vec![listener], HashMap::new()).await;
    writable_leader(&nodes).await;
    let mut client = RaftClient::connect(format!("http://{addr}")).await.unwrap();
    let data = vec![7u8; 1000];
    let cases: Vec<(&str, Vec<pb::SnapshotChunk>, &str)> = vec![
        ("an empty stream", vec![], "the snapshot stream is empty"),
        (
            "bytes before the meta",
            vec![good(0, &data)],
            "the first message of a snapshot must be its meta",
        ),
        (
            "a second meta",
            vec![meta(1000), meta(1000)],
            "a snapshot has one meta, at its start",
        ),
        (
            "a damaged chunk",
            vec![meta(2000), good(0, &data), bytes(1000, &data, 1)],
            "the snapshot chunk at byte 1000 fails its CRC-32C",
        ),
        (
            "a chunk out of place",
            vec![meta(2000), good(0, &data), good(1500, &data)],
            "a snapshot chunk starts at byte 1500, but 1000 bytes came before it",
        ),
        (
            "more bytes than the meta gave",
            vec![meta(1500), good(0, &data), good(1000, &data)],
            "the snapshot runs past the 1500 bytes its meta gave",
        ),
        (
            "fewer bytes than the meta gave",
            vec![meta(3000), good(0, &data), good(1000, &data)],
            "the snapshot ended after 2000 of the 3000 bytes its meta gave",
        ),
    ];
    for (what, messages, says) in cases {
        let status = client
            .install_snapshot(tokio_stream::iter(messages))
            .await
            .expect_err(what);
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{what}: {status:?}"
        );
        assert!(status.message().contains(says), "{what}: {status:?}");
        let left: Vec<String> = std::fs::read_dir(nodes[0].dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("snapshot-incoming-"))
            .collect();
        assert!(left.is_empty(), "{what}: {left:?} left behind");
    }
    // The member still takes writes.
    writable_leader(&nodes).await;
    for n in nodes {
        n.stop().await;
    }
}
