//! Compiles the protobuf interfaces with protox, a protobuf compiler in Rust (no system
//! protoc is needed):
//!
//! - Triton's model configuration messages (proto/model_config.proto), as a file descriptor
//!   set that `triton::parse` reads config.pbtxt files with;
//! - the Open Inference Protocol's gRPC service (proto/grpc_service.proto, importing the
//!   former) and TEI's (proto/tei.proto) into prost messages and tonic servers, and their
//!   descriptor set for server reflection and for reading the HTTP API's JSON into the
//!   same messages.

use prost::Message;

fn main() {
    println!("cargo:rerun-if-changed=proto");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set"));
    let config = protox::compile(["model_config.proto"], ["proto"])
        .expect("proto/model_config.proto compiles");
    std::fs::write(out.join("model_config.bin"), config.encode_to_vec())
        .expect("OUT_DIR is writable");
    let service = protox::compile(["grpc_service.proto", "tei.proto"], ["proto"])
        .expect("proto/grpc_service.proto and proto/tei.proto compile");
    std::fs::write(out.join("grpc_service.bin"), service.encode_to_vec())
        .expect("OUT_DIR is writable");
    tonic_prost_build::configure()
        .build_client(false)
        .build_transport(false)
        .compile_fds(service)
        .expect("the gRPC service generates");
}
