//! The generated protocol code (`proto/uuidmap/v1/*.proto`, compiled by
//! `build.rs`): messages, the tonic servers and the clients.

/// Package `uuidmap.v1`: the data service `UuidMap` and the admin service
/// `UuidMapAdmin`.
pub mod v1 {
    tonic::include_proto!("uuidmap.v1");
}

/// The encoded `FileDescriptorSet` of the protocol, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/uuidmap_descriptor.bin"));
