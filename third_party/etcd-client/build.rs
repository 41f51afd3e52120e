//! Compiles etcd's protos with protox (pure Rust) instead of upstream's
//! `protoc`, into the same modules upstream's build generates.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");
    let fds = protox::compile(
        [
            "proto/etcd/api/authpb/auth.proto",
            "proto/etcd/api/etcdserverpb/rpc.proto",
            "proto/etcd/api/mvccpb/kv.proto",
            "proto/etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
            "proto/etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
        ],
        [proto_root],
    )?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
