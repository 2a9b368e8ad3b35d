use prost_reflect::{DescriptorPool, DynamicMessage, Value};

use super::*;

/// The server's own proto, compiled here: the message must be what it decodes.
fn server_pool() -> DescriptorPool {
    let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/../../gateway/proto");
    let files = protox::compile(["grpc_service.proto"], [proto]).expect("the server's proto");
    DescriptorPool::decode(prost::Message::encode_to_vec(&files).as_slice()).expect("descriptors")
}

#[test]
fn the_message_is_a_framed_model_infer_request_of_the_server_s_proto() {
    let values = [1.5f32, -2.0, 0.25, 3.0, 0.0, -0.5];
    let framed = infer_message("mlp", "input-0", &[2, 3], &values);
    assert_eq!(framed[0], 0, "not compressed");
    let len = u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize;
    assert_eq!(
        len,
        framed.len() - 5,
        "the prefix gives the message's length"
    );

    let pool = server_pool();
    let descriptor = pool
        .get_message_by_name("inference.ModelInferRequest")
        .expect("ModelInferRequest");
    let message = DynamicMessage::decode(descriptor, &framed[5..]).expect("decodes");
    let field =
        |m: &DynamicMessage, name: &str| m.get_field_by_name(name).expect(name).into_owned();
    assert_eq!(field(&message, "model_name"), Value::String("mlp".into()));
    let Value::List(inputs) = field(&message, "inputs") else {
        panic!("inputs");
    };
    assert_eq!(inputs.len(), 1);
    let input = inputs[0].as_message().expect("a tensor");
    assert_eq!(field(input, "name"), Value::String("input-0".into()));
    assert_eq!(field(input, "datatype"), Value::String("FP32".into()));
    assert_eq!(
        field(input, "shape"),
        Value::List(vec![Value::I64(2), Value::I64(3)])
    );
    let Value::List(raw) = field(&message, "raw_input_contents") else {
        panic!("raw_input_contents");
    };
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(raw, vec![Value::Bytes(bytes.into())]);
}

#[test]
fn grpc_codes_read_as_http_statuses_and_timeouts_fit_eight_digits() {
    let ok = StatusCode::OK;
    assert_eq!(status_of(ok, 0), 200);
    assert_eq!(status_of(ok, 8), 429);
    assert_eq!(status_of(ok, 4), 504);
    assert_eq!(status_of(ok, 14), 503);
    assert_eq!(status_of(ok, 3), GRPC_CODE_BASE + 3);
    assert_eq!(status_of(StatusCode::NOT_FOUND, 0), 404);
    assert_eq!(timeout_value(Duration::from_micros(49_873)), "49873u");
    assert_eq!(timeout_value(Duration::ZERO), "0u");
    assert_eq!(timeout_value(Duration::from_secs(150)), "150000m");
}

/// What the test server saw of one call.
#[derive(Debug)]
struct Seen {
    path: String,
    content_type: Option<String>,
    te: Option<String>,
    timeout: Option<String>,
    body: Vec<u8>,
}

/// A server of one connection that answers its calls in turn: the first with a message
/// and `grpc-status: 0` in the trailers (and `x-tandem-cache: hit`), the second
/// trailers-only with RESOURCE_EXHAUSTED, the third with a 200 and no status at all.
async fn serve_three(listener: tokio::net::TcpListener) -> Vec<Seen> {
    let (stream, _) = listener.accept().await.unwrap();
    let mut conn = h2::server::handshake(stream).await.unwrap();
    let mut seen = Vec::new();
    for i in 0..3 {
        let (request, mut respond) = conn.accept().await.unwrap().unwrap();
        let header = |n: &str| (request.headers().get(n)).map(|v| v.to_str().unwrap().to_string());
        let mut call = Seen {
            path: request.uri().path().to_string(),
            content_type: header("content-type"),
            te: header("te"),
            timeout: header("grpc-timeout"),
            body: Vec::new(),
        };
        let mut body = request.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            call.body.extend_from_slice(&chunk);
        }
        seen.push(call);
        let mut response = http::Response::new(());
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/grpc"));
        match i {
            0 => {
                response
                    .headers_mut()
                    .insert("x-tandem-cache", HeaderValue::from_static("hit"));
                let mut send = respond.send_response(response, false).unwrap();
                send.send_data(frame(b"answer"), false).unwrap();
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                send.send_trailers(trailers).unwrap();
            }
            1 => {
                let headers = response.headers_mut();
                headers.insert("grpc-status", HeaderValue::from_static("8"));
                headers.insert("grpc-message", HeaderValue::from_static("shed"));
                respond.send_response(response, true).unwrap();
            }
            _ => {
                respond.send_response(response, true).unwrap();
            }
        }
    }
    // Keep the connection going until the client is done with it.
    while conn.accept().await.is_some() {}
    seen
}

#[tokio::test]
async fn calls_send_grpc_requests_and_read_the_status_from_trailers_or_headers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_three(listener));
    let mut conn = Connection::open(addr).await.unwrap();
    let message = infer_message("m", "input-0", &[1, 2], &[1.0, 2.0]);

    let first = conn.call(&message, None).await.unwrap();
    assert_eq!(first.status, 200);
    assert_eq!(first.cache, Some(Cached::Hit));
    assert_eq!(first.body_bytes, 5 + b"answer".len());
    let timeout = Some(Duration::from_millis(20));
    let shed = conn.call(&message, timeout).await.unwrap();
    assert_eq!((shed.status, shed.body_bytes, shed.cache), (429, 0, None));
    assert!(!conn.is_closed());
    let e = conn.call(&message, None).await.expect_err("no grpc-status");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(conn.is_closed(), "a failed call closes the connection");
    drop(conn);

    let seen = server.await.unwrap();
    assert_eq!(seen.len(), 3);
    for call in &seen {
        assert_eq!(call.path, INFER_PATH);
        assert_eq!(call.content_type.as_deref(), Some("application/grpc"));
        assert_eq!(call.te.as_deref(), Some("trailers"));
        assert_eq!(call.body, message);
    }
    assert_eq!(seen[0].timeout, None);
    assert_eq!(seen[1].timeout.as_deref(), Some("20000u"));
}
