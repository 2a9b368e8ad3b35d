//! The client against a real socket whose other end writes scripted bytes, split into small
//! writes so every parse runs on partial input.

use super::*;
use tokio::net::TcpListener;

const REQUEST: &[u8] = b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\nhi";

/// A server that, for each script entry, reads one request (up to its 2-byte body) and
/// answers with the entry's bytes, a few at a time; it closes after the last one.
async fn scripted(responses: Vec<&'static [u8]>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut seen = Vec::new();
        for response in responses {
            while !seen.ends_with(b"hi") {
                let mut b = [0u8; 256];
                let n = socket.read(&mut b).await.expect("read");
                if n == 0 {
                    return;
                }
                seen.extend_from_slice(&b[..n]);
            }
            seen.clear();
            for piece in response.chunks(3) {
                socket.write_all(piece).await.expect("write");
                socket.flush().await.expect("flush");
                tokio::task::yield_now().await;
            }
        }
    });
    addr
}

async fn exchange_all(responses: Vec<&'static [u8]>, n: usize) -> (Vec<io::Result<Reply>>, bool) {
    let addr = scripted(responses).await;
    let mut c = Connection::open(addr).await.expect("connect");
    let mut got = Vec::new();
    for _ in 0..n {
        got.push(c.exchange(REQUEST).await);
    }
    (got, c.is_closed())
}

fn reply(status: u16, body_bytes: usize) -> Reply {
    Reply {
        status,
        body_bytes,
        cache: None,
    }
}

#[tokio::test]
async fn keep_alive_responses_with_a_length_follow_each_other() {
    let (got, closed) = exchange_all(
        vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nfin",
        ],
        4,
    )
    .await;
    let got: Vec<Reply> = got.into_iter().map(|r| r.expect("reply")).collect();
    assert_eq!(
        got,
        vec![reply(200, 5), reply(429, 0), reply(204, 0), reply(200, 3)],
        "an interim 103 is skipped for the response that follows it"
    );
    assert!(!closed);
}

#[tokio::test]
async fn tandem_s_cache_header_is_kept_and_unknown_values_are_not() {
    let (got, _) = exchange_all(
        vec![
            b"HTTP/1.1 200 OK\r\nx-tandem-cache: hit\r\ncontent-length: 1\r\n\r\na",
            b"HTTP/1.1 200 OK\r\nX-Tandem-Cache:  partial \r\ncontent-length: 1\r\n\r\nb",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\nx-tandem-cache: miss\r\n\r\nc",
            b"HTTP/1.1 200 OK\r\nx-tandem-cache: maybe\r\ncontent-length: 1\r\n\r\nd",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\ne",
        ],
        5,
    )
    .await;
    let cache: Vec<Option<Cached>> = got.into_iter().map(|r| r.expect("reply").cache).collect();
    assert_eq!(
        cache,
        [
            Some(Cached::Hit),
            Some(Cached::Partial),
            Some(Cached::Miss),
            None,
            None
        ]
    );
}

#[tokio::test]
async fn chunked_bodies_with_extensions_and_trailers() {
    let (got, closed) = exchange_all(
        vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nwiki\r\nA\r\n0123456789\r\n0\r\nx-trailer: y\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        ],
        2,
    )
    .await;
    let got: Vec<Reply> = got.into_iter().map(|r| r.expect("reply")).collect();
    assert_eq!(got, vec![reply(200, 14), reply(200, 2)]);
    assert!(!closed);
}

#[tokio::test]
async fn connection_close_and_http_1_0_end_the_connection() {
    let (got, closed) = exchange_all(
        vec![b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\ncontent-length: 3\r\n\r\nbye"],
        1,
    )
    .await;
    assert_eq!(got[0].as_ref().expect("reply"), &reply(503, 3));
    assert!(closed, "Connection: close");

    // HTTP/1.0 without a length: the body runs to the end of the stream.
    let (got, closed) = exchange_all(vec![b"HTTP/1.0 200 OK\r\n\r\nuntil the end"], 1).await;
    assert_eq!(got[0].as_ref().expect("reply"), &reply(200, 13));
    assert!(closed);
}

#[tokio::test]
async fn garbage_and_cut_short_responses_are_errors_that_close() {
    let (got, closed) = exchange_all(vec![b"SMTP ready\r\n\r\n"], 1).await;
    assert_eq!(
        got[0].as_ref().map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::InvalidData)
    );
    assert!(closed);

    // The server closes after half the body: an error, and no second request on it.
    let (got, closed) = exchange_all(
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"],
        2,
    )
    .await;
    assert_eq!(
        got[0].as_ref().map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::UnexpectedEof)
    );
    assert_eq!(
        got[1].as_ref().map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::NotConnected)
    );
    assert!(closed);

    let (got, _) = exchange_all(
        vec![b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"],
        1,
    )
    .await;
    assert_eq!(
        got[0].as_ref().map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::InvalidData)
    );
}
