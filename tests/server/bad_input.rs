//! Malformed requests against the real server: each is INVALID_ARGUMENT
//! with a message that names the field and the problem, and none writes
//! anything.

use prost::bytes::Bytes;
use tonic::Code;
use tonic::transport::Channel;
use uuid::Uuid;
use uuidmap::server::proto::v1 as pb;
use uuidmap::server::proto::v1::uuid_map_client::UuidMapClient;
use uuidmap_testkit::server::{
    MAX_BATCH_KEYS, MAX_WRITE_OPS, RPCS, TestServer, b, put_op, raw_call, u,
};

async fn call(c: &mut UuidMapClient<Channel>, case: &Case) -> tonic::Status {
    let r = match case.req.clone() {
        Req::Get(r) => c.get(r).await.map(|_| ()),
        Req::BatchGet(r) => c.batch_get(r).await.map(|_| ()),
        Req::Put(r) => c.put(r).await.map(|_| ()),
        Req::Delete(r) => c.delete(r).await.map(|_| ()),
        Req::Cas(r) => c.compare_and_set(r).await.map(|_| ()),
        Req::Write(r) => c.write(r).await.map(|_| ()),
    };
    r.expect_err(case.name)
}

#[derive(Clone)]
enum Req {
    Get(pb::GetRequest),
    BatchGet(pb::BatchGetRequest),
    Put(pb::PutRequest),
    Delete(pb::DeleteRequest),
    Cas(pb::CompareAndSetRequest),
    Write(pb::WriteRequest),
}

struct Case {
    name: &'static str,
    req: Req,
    /// A phrase the message must contain.
    says: &'static str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_invalid_argument_with_a_message_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let get = |key: Vec<u8>| {
        Req::Get(pb::GetRequest {
            key: key.into(),
            min_lsn: 0,
            ..Default::default()
        })
    };
    let batch = |keys: Vec<u8>| {
        Req::BatchGet(pb::BatchGetRequest {
            keys: keys.into(),
            min_lsn: 0,
            ..Default::default()
        })
    };
    let write = |ops: Vec<pb::WriteOp>| Req::Write(pb::WriteRequest { ops });
    let mut nil_in_batch = vec![7u8; 48];
    nil_in_batch[16..32].fill(0);
    let cases = [
        Case {
            name: "15-byte key",
            req: get(vec![1; 15]),
            says: "key must be a 16-byte UUID, but it is 15 bytes",
        },
        Case {
            name: "17-byte key",
            req: get(vec![1; 17]),
            says: "17 bytes",
        },
        Case {
            name: "empty key",
            req: get(vec![]),
            says: "0 bytes",
        },
        Case {
            name: "nil key",
            req: get(vec![0; 16]),
            says: "nil UUID",
        },
        Case {
            name: "max key",
            req: get(vec![0xff; 16]),
            says: "max UUID",
        },
        Case {
            name: "15-byte value",
            req: Req::Put(pb::PutRequest {
                key: b(u(1)),
                value: vec![1; 15].into(),
            }),
            says: "value must be a 16-byte UUID",
        },
        Case {
            name: "nil key on delete",
            req: Req::Delete(pb::DeleteRequest {
                key: vec![0; 16].into(),
            }),
            says: "nil UUID",
        },
        Case {
            name: "3-byte CAS expected",
            req: Req::Cas(pb::CompareAndSetRequest {
                key: b(u(1)),
                expected: Some(vec![1; 3].into()),
                new_value: None,
            }),
            says: "expected must be a 16-byte UUID",
        },
        Case {
            name: "batch keys not a multiple of 16",
            req: batch(vec![1; 33]),
            says: "not a multiple of 16",
        },
        Case {
            name: "batch one byte short of two keys",
            req: batch(vec![1; 31]),
            says: "its 31 bytes are not a multiple of 16",
        },
        Case {
            name: "too many batch keys",
            req: batch(vec![1; (MAX_BATCH_KEYS + 1) * 16]),
            says: "at most 100 keys (the server's `max_batch_keys`); this one holds 101",
        },
        Case {
            name: "nil key inside a batch",
            req: batch(nil_in_batch),
            says: "keys[1]: the nil UUID",
        },
        Case {
            name: "empty write batch",
            req: write(vec![]),
            says: "at least one operation",
        },
        Case {
            name: "unknown write op",
            req: write(vec![put_op(u(1), u(2)), pb::WriteOp { op: None }]),
            says: "ops[1] sets no operation",
        },
        Case {
            name: "too many write ops",
            req: write(
                (0..=MAX_WRITE_OPS as u128)
                    .map(|i| put_op(u(i + 1), u(1)))
                    .collect(),
            ),
            says: "at most 10 operations (the server's `max_write_ops`); this one holds 11",
        },
        Case {
            name: "bad key inside a write op",
            req: write(vec![
                put_op(u(1), u(2)),
                pb::WriteOp {
                    op: Some(pb::write_op::Op::Delete(pb::DeleteOp {
                        key: vec![1; 17].into(),
                    })),
                },
            ]),
            says: "ops[1].delete.key must be a 16-byte UUID",
        },
        Case {
            name: "nil key on put",
            req: Req::Put(pb::PutRequest {
                key: vec![0; 16].into(),
                value: b(u(1)),
            }),
            says: "nil UUID",
        },
        Case {
            name: "17-byte CAS new_value",
            req: Req::Cas(pb::CompareAndSetRequest {
                key: b(u(1)),
                expected: None,
                new_value: Some(vec![1; 17].into()),
            }),
            says: "new_value must be a 16-byte UUID, but it is 17 bytes",
        },
        Case {
            name: "max key inside a batch",
            req: batch([b(u(5)), b(Uuid::max())].concat()),
            says: "keys[1]: the max UUID",
        },
        Case {
            name: "bad expected inside a write op",
            req: write(vec![pb::WriteOp {
                op: Some(pb::write_op::Op::CompareAndSet(pb::CompareAndSetOp {
                    key: b(u(1)),
                    expected: Some(Bytes::new()),
                    new_value: None,
                })),
            }]),
            says: "ops[0].compare_and_set.expected must be a 16-byte UUID, but it is 0 bytes",
        },
    ];
    assert!(cases.len() >= 20);
    for case in &cases {
        let status = call(&mut c, case).await;
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{}: {status:?}",
            case.name
        );
        assert!(
            status.message().contains(case.says),
            "{}: {:?}",
            case.name,
            status.message()
        );
    }
    // Nothing of it was written.
    let stats = c.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert_eq!((stats.entries, stats.applied_lsn), (0, 0));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_a_protobuf_message_are_invalid_argument_not_internal() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let channel = server.channel().await;
    // A field 1 whose length runs past the end; a lone 0x0b (field 1 with
    // the deprecated start-group wire type); bytes with no valid tag.
    let bodies = [vec![0x0a, 0x7f, 1, 2], vec![0x0b], vec![0xff, 0xff, 0xff]];
    for (n, &path) in RPCS.iter().enumerate() {
        let body = bodies[n % bodies.len()].clone();
        let status = raw_call(&channel, path, tonic::Request::new(body))
            .await
            .expect_err(path);
        assert_eq!(status.code(), Code::InvalidArgument, "{path}: {status:?}");
        assert!(
            status.message().contains("could not be decoded"),
            "{path}: {}",
            status.message()
        );
    }
    server.stop().await.unwrap();
}
