//! The load generator's gRPC client: `ModelInfer` of KServe v2's
//! `inference.GRPCInferenceService` over HTTP/2 without TLS (h2c), one call at a time on a
//! connection, as [`super::http1`] sends one request at a time on each of its: run for
//! run, the protocols differ only in what goes over the wire.
//!
//! A call is one HTTP/2 stream: `POST /inference.GRPCInferenceService/ModelInfer` with
//! `content-type: application/grpc` and `te: trailers`, and one length-prefixed message (a
//! flag byte, 0 for uncompressed, the protobuf's length as 4 big-endian bytes, then the
//! protobuf). The message is built once per body, the rows little-endian in
//! `raw_input_contents` (tritonclient's default); the answer is read to its last byte but
//! not decoded. Its `grpc-status` (in the trailers, or in the headers of a trailers-only
//! answer) becomes a status in HTTP's terms, as the server's table in docs/grpc.md maps
//! them the other way: OK is 200, RESOURCE_EXHAUSTED 429 (shed), DEADLINE_EXCEEDED 504,
//! UNAVAILABLE 503, any other code `GRPC_CODE_BASE + code`.
//!
//! The crate `h2` (hyper's HTTP/2, without hyper's layers) speaks the protocol; each
//! connection's I/O runs on a task of its own, which answers the server's PINGs between
//! calls too.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use tokio::net::TcpStream;

use super::http1::{Cached, Reply};

/// The method every call goes to.
pub const INFER_PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

/// A gRPC status code other than those with an HTTP equivalent is reported as this plus
/// the code (`grpc-N` in the outcomes).
pub const GRPC_CODE_BASE: u16 = 1000;

/// The fields of `inference.ModelInferRequest` (gateway/proto/grpc_service.proto) a
/// request of FP32 rows needs; the tags are the proto's.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferRequest {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<InferInputTensor>,
    /// One entry per input, in order: its elements, little-endian.
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub raw_input_contents: Vec<Vec<u8>>,
}

/// `inference.ModelInferRequest.InferInputTensor`, without parameters or contents.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferInputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}

/// The framed `ModelInfer` message asking `model` for the FP32 `values` of shape `shape`
/// as its input `input`.
pub fn infer_message(model: &str, input: &str, shape: &[usize], values: &[f32]) -> Bytes {
    let request = ModelInferRequest {
        model_name: model.to_string(),
        inputs: vec![InferInputTensor {
            name: input.to_string(),
            datatype: "FP32".into(),
            shape: shape.iter().map(|&d| d as i64).collect(),
        }],
        raw_input_contents: vec![values.iter().flat_map(|v| v.to_le_bytes()).collect()],
    };
    frame(&prost::Message::encode_to_vec(&request))
}

/// `message` as one length-prefixed, uncompressed gRPC message.
pub fn frame(message: &[u8]) -> Bytes {
    let len = u32::try_from(message.len()).expect("a message under 4 GiB");
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

/// `grpc-timeout`'s value for `left` (at most 8 digits and a unit): microseconds, or
/// milliseconds beyond what 8 digits of them hold.
pub fn timeout_value(left: Duration) -> String {
    let us = left.as_micros();
    if us < 100_000_000 {
        format!("{us}u")
    } else {
        format!("{}m", left.as_millis().min(99_999_999))
    }
}

/// A status in HTTP's terms for an answer with HTTP status `http` and `grpc-status`
/// `grpc` (see the module's documentation).
pub fn status_of(http: StatusCode, grpc: i32) -> u16 {
    if http != StatusCode::OK {
        return http.as_u16();
    }
    match grpc {
        0 => 200,
        8 => 429,
        4 => 504,
        14 => 503,
        code => GRPC_CODE_BASE.saturating_add(u16::try_from(code).unwrap_or(u16::MAX)),
    }
}

/// The `grpc-status` of `headers`, if they carry one; an unreadable one reads as UNKNOWN.
fn grpc_status(headers: &HeaderMap) -> Option<i32> {
    let value = headers.get("grpc-status")?;
    Some(
        value
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2),
    )
}

pub struct Connection {
    send: h2::client::SendRequest<Bytes>,
    uri: http::Uri,
    /// The connection's task has ended (the server closed it, or it failed), or a call
    /// failed part-way: no further call may use it.
    closed: Arc<AtomicBool>,
}

impl Connection {
    /// A connection to the gRPC listener at `addr`, its HTTP/2 handshake done.
    pub async fn open(addr: SocketAddr) -> io::Result<Connection> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (send, connection) = h2::client::handshake(stream).await.map_err(h2_error)?;
        let closed = Arc::new(AtomicBool::new(false));
        let ended = closed.clone();
        tokio::spawn(async move {
            let _ = connection.await;
            ended.store(true, Ordering::Relaxed);
        });
        let uri = format!("http://{addr}{INFER_PATH}")
            .parse()
            .map_err(|_| invalid("bad address"))?;
        Ok(Connection { send, uri, closed })
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Sends `message` (framed) with what is left of the caller's deadline, if any, and
    /// reads the answer to its trailers. An error leaves the connection closed.
    pub async fn call(&mut self, message: &Bytes, timeout: Option<Duration>) -> io::Result<Reply> {
        if self.is_closed() {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "connection closed",
            ));
        }
        let result = call(&mut self.send, &self.uri, message, timeout).await;
        if result.is_err() {
            self.closed.store(true, Ordering::Relaxed);
        }
        result
    }
}

/// One call on `send`: the request written, the answer read to its trailers.
async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    uri: &http::Uri,
    message: &Bytes,
    timeout: Option<Duration>,
) -> io::Result<Reply> {
    std::future::poll_fn(|cx| send.poll_ready(cx))
        .await
        .map_err(h2_error)?;
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri.clone();
    let headers = request.headers_mut();
    let grpc = HeaderValue::from_static("application/grpc");
    headers.insert(http::header::CONTENT_TYPE, grpc);
    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    if let Some(left) = timeout {
        let value = HeaderValue::try_from(timeout_value(left)).map_err(|_| invalid("timeout"))?;
        headers.insert("grpc-timeout", value);
    }
    let (response, mut body) = send.send_request(request, false).map_err(h2_error)?;
    body.send_data(message.clone(), true).map_err(h2_error)?;
    let (head, mut answer) = response.await.map_err(h2_error)?.into_parts();
    let cache = (head.headers.get("x-tandem-cache")).and_then(|v| Cached::parse(v.as_bytes()));
    let mut body_bytes = 0;
    while let Some(chunk) = answer.data().await {
        let chunk = chunk.map_err(h2_error)?;
        body_bytes += chunk.len();
        let _ = answer.flow_control().release_capacity(chunk.len());
    }
    // A trailers-only answer (an error before any message) has its status in the headers.
    let grpc = match grpc_status(&head.headers) {
        Some(code) => Some(code),
        None => (answer.trailers().await.map_err(h2_error)?)
            .as_ref()
            .and_then(grpc_status),
    };
    let status = match grpc {
        Some(code) => status_of(head.status, code),
        // Only a server that does not speak gRPC answers 200 without a status.
        None if head.status != StatusCode::OK => head.status.as_u16(),
        None => return Err(invalid("an answer without grpc-status")),
    };
    Ok(Reply {
        status,
        body_bytes,
        cache,
    })
}

fn h2_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        e.into_io().expect("an I/O error")
    } else {
        io::Error::other(e)
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests;
