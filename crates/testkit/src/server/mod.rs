//! The shared rig of the end-to-end server tests: a real server on an
//! ephemeral loopback port ([`TestServer`]), calls the generated client
//! cannot make (raw gRPC bytes, bare HTTP/2 with the server's own deadline
//! answer), reading `/metrics`, small value helpers, a throw-away
//! certificate authority ([`pki`]), a replica group of servers
//! ([`TestGroup`]), and servers of a partitioned cluster
//! ([`start_partitioned`]).

mod metrics_text;
mod partitioned;
pub mod pki;
mod raw_grpc;
mod request_fields;
mod test_group;
mod test_server;

pub use metrics_text::{http_get, sample, scrape};
pub use partitioned::start_partitioned;
pub use raw_grpc::{
    RPCS, RawAnswer, RawCodec, RawConnection, RawDecoder, RawEncoder, Stalled, framed,
    percent_decode, raw_call, raw_status, stalled_call,
};
pub use request_fields::{b, cas_req, get_req, put_op, put_req, spread_key, u};
pub use test_group::{Configure, TestGroup, group_member_config, member_config};
pub use test_server::{MAX_BATCH_KEYS, MAX_FILTER_VALUES, MAX_WRITE_OPS, TestServer, config};
