//! `tli-proto`: the tli control API, package `tli.v1`, generated from
//! `proto/tli/v1/*.proto` (messages, tonic clients and servers), plus the
//! encoded file descriptor set for gRPC server reflection.

#[allow(clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("tli.v1");

    /// Descriptors of every `tli.v1` file, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("tli_v1_descriptor");
}
