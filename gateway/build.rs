//! Compiles Triton's model configuration messages (proto/model_config.proto) into a file
//! descriptor set that `triton::parse` reads config.pbtxt files with. protox is a protobuf
//! compiler in Rust: no system protoc is needed.

use prost::Message;

fn main() {
    println!("cargo:rerun-if-changed=proto/model_config.proto");
    let descriptors = protox::compile(["model_config.proto"], ["proto"])
        .expect("proto/model_config.proto compiles");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set"));
    std::fs::write(out.join("model_config.bin"), descriptors.encode_to_vec())
        .expect("OUT_DIR is writable");
}
