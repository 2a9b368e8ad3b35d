//! A client's fault that tonic reports as the server's, as gRPC's own servers and
//! docs/grpc.md say it: a message over the size limit is RESOURCE_EXHAUSTED (tonic says
//! OUT_OF_RANGE), and one that is not protobuf INVALID_ARGUMENT (tonic says INTERNAL).
//! Rewritten on a unary call's trailers-only answer, and on a stream's when its handler
//! reads the message.

use http::Response;
use tonic::body::Body;
use tonic::{Code, Status};

/// What tonic says of a message past `max_decoding_message_size`.
const TONIC_TOO_LARGE: &str = "message length too large";
/// What prost says of bytes that are not the message.
const PROST_UNDECODABLE: &str = "failed to decode Protobuf message";

/// `status` as the client is told it, where tonic misnames a client's fault.
pub fn message_status(status: Status) -> Status {
    let message = status.message();
    match status.code() {
        Code::OutOfRange if message.contains(TONIC_TOO_LARGE) => Status::resource_exhausted(
            format!("the request message exceeds limits.max_body_bytes ({message})"),
        ),
        Code::Internal if message.starts_with(PROST_UNDECODABLE) => {
            Status::invalid_argument(format!("the request is not the RPC's message: {message}"))
        }
        _ => status,
    }
}

/// A unary call refused before its handler ran, with the status the client is told, and
/// the HTTP status that refusal maps to where it was a client's message tonic refused.
pub fn client_faults(response: Response<Body>) -> (Response<Body>, Option<http::StatusCode>) {
    match Status::from_header_map(response.headers()) {
        Some(status) if matches!(status.code(), Code::OutOfRange | Code::Internal) => {
            let told = message_status(status.clone());
            match told.code() == status.code() {
                true => (response, None),
                false => {
                    let refused = match told.code() {
                        Code::ResourceExhausted => http::StatusCode::PAYLOAD_TOO_LARGE,
                        _ => http::StatusCode::BAD_REQUEST,
                    };
                    (told.into_http(), Some(refused))
                }
            }
        }
        _ => (response, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tonic_s_names_for_a_client_s_faults_become_grpc_s() {
        let big = Status::out_of_range("Error, decoded message length too large: found 9 bytes");
        assert_eq!(message_status(big).code(), Code::ResourceExhausted);
        let garbage = Status::internal("failed to decode Protobuf message: invalid wire type");
        assert_eq!(message_status(garbage).code(), Code::InvalidArgument);
        let ours = Status::internal("the model failed");
        assert_eq!(message_status(ours).code(), Code::Internal);
        let (response, refused) =
            client_faults(Status::internal("failed to decode Protobuf message: x").into_http());
        let told = Status::from_header_map(response.headers()).unwrap();
        assert_eq!(told.code(), Code::InvalidArgument);
        assert_eq!(refused, Some(http::StatusCode::BAD_REQUEST));
        let (_, refused) = client_faults(Status::internal("the model failed").into_http());
        assert_eq!(refused, None);
    }
}
