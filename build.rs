//! Compiles `proto/uuidmap/v1/*.proto` with protox (a pure-Rust protobuf
//! compiler, so no system `protoc` is needed) and generates the tonic
//! server and client with tonic-prost-build. Also writes the encoded file
//! descriptor set to `$OUT_DIR/uuidmap_descriptor.bin`, for gRPC
//! reflection.

use std::path::PathBuf;

const PROTOS: [&str; 2] = ["uuidmap/v1/uuidmap.proto", "uuidmap/v1/admin.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut compiler = protox::Compiler::new(["proto"])?;
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
        .codec_path("crate::server::codec::UuidMapCodec")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
