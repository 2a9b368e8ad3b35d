//! `ModelInfer`'s request message: protobuf decoding, the gRPC-to-v2 conversion
//! (`grpc::wire`) and v2's validation, as a gRPC call reaches them.

use prost::Message;

use super::{assert_client_error, validate_decoded};
use crate::grpc::{pb, wire};

/// Arbitrary bytes as a `ModelInferRequest`: one that decodes is converted and validated
/// against the model it names; a refusal is a 4xx; the binary section built from typed
/// contents is at most eight bytes per byte of message (a one-byte varint as an INT64).
pub fn grpc_infer(data: &[u8]) {
    let Ok(request) = pb::ModelInferRequest::decode(data) else {
        return;
    };
    let (request, binary) = match wire::request_of(request) {
        Ok(converted) => converted,
        Err(e) => return assert_client_error(e),
    };
    assert!(
        binary.len() <= 8 * data.len(),
        "{} bytes of tensors from a {}-byte message",
        binary.len(),
        data.len()
    );
    // Every element took at least a byte of the message, as of a JSON body.
    validate_decoded(request, &binary, data.len());
}
