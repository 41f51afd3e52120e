//! Compiles the workspace's `proto/uuidmap/v1/*.proto` and
//! `proto/uuidmap/raft/v1/raft.proto` with protox (a pure-Rust protobuf
//! compiler, so no system `protoc` is needed) and generates the tonic
//! server and client with tonic-prost-build. Also writes the encoded file
//! descriptor set to `$OUT_DIR/uuidmap_descriptor.bin`, for gRPC
//! reflection.

use std::path::PathBuf;

const PROTOS: [&str; 3] = [
    "uuidmap/v1/uuidmap.proto",
    "uuidmap/v1/admin.proto",
    "uuidmap/v1/cluster.proto",
];
const RAFT_PROTOS: [&str; 1] = ["uuidmap/raft/v1/raft.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The protocol lives at the top of the workspace, beside README.md.
    let protos = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", protos.display());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut compiler = protox::Compiler::new([&protos])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(PROTOS)?;
    std::fs::write(
        out_dir.join("uuidmap_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    tonic_prost_build::configure()
        // Keys and values are decoded without a copy out of the request
        // buffer.
        .bytes(".uuidmap.v1")
        // Undecodable requests are INVALID_ARGUMENT, not INTERNAL.
        .codec_path("crate::codec::UuidMapCodec")
        .compile_fds(compiler.file_descriptor_set())?;

    // The Raft service of a replica group: served on its own listener, so
    // it stays out of the client port's reflection descriptor.
    let mut raft = protox::Compiler::new([&protos])?;
    raft.open_files(RAFT_PROTOS)?;
    tonic_prost_build::configure()
        .bytes(".uuidmap.raft.v1")
        .codec_path("crate::codec::UuidMapCodec")
        .compile_fds(raft.file_descriptor_set())?;
    Ok(())
}
