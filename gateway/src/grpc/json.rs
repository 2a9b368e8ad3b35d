//! The HTTP API's JSON answers (model metadata, configuration, statistics, the repository
//! index) read into the gRPC messages of the same names, through the service's own
//! descriptors: both protocols answer from one source, so their fields cannot drift apart.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage};

use crate::error::ApiError;

/// The compiled grpc_service.proto (with model_config.proto): reflection serves it too.
pub static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/grpc_service.bin"));

/// The service's descriptors, decoded once; a build that compiled them wrong is a 500 on
/// the calls that read them, not a panic.
fn pool() -> Result<&'static DescriptorPool, ApiError> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    let decoded =
        POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string()));
    decoded.as_ref().map_err(|e| {
        ApiError::Internal(format!(
            "the compiled grpc_service.proto does not decode: {e}"
        ))
    })
}

/// `json` in the protocol's JSON form as the message `M` (`inference.NAME`). Fields the
/// message lacks are dropped, as a client's parser drops them.
pub fn message<M: prost::Message + Default>(
    name: &str,
    json: serde_json::Value,
) -> Result<M, ApiError> {
    let failed = |e: &dyn std::fmt::Display| {
        ApiError::Internal(format!("cannot encode the answer as inference.{name}: {e}"))
    };
    let descriptor = pool()?
        .get_message_by_name(&format!("inference.{name}"))
        .ok_or_else(|| failed(&"no such message"))?;
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let dynamic = DynamicMessage::deserialize_with_options(descriptor, json, &options)
        .map_err(|e| failed(&e))?;
    M::decode(prost::Message::encode_to_vec(&dynamic).as_slice()).map_err(|e| failed(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::pb;

    #[test]
    fn json_reads_into_the_generated_message() {
        let json = serde_json::json!({
            "name": "m", "versions": ["1"], "platform": "tandem_mlp",
            "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 4]}],
            "outputs": [], "extra": true,
        });
        let m: pb::ModelMetadataResponse = message("ModelMetadataResponse", json).unwrap();
        assert_eq!(m.inputs[0].shape, vec![-1, 4]);
        assert_eq!(m.versions, vec!["1"]);
        let bad = serde_json::json!({"name": 3});
        let e = message::<pb::ModelMetadataResponse>("ModelMetadataResponse", bad).unwrap_err();
        assert!(e.to_string().contains("ModelMetadataResponse"), "{e}");
    }
}
