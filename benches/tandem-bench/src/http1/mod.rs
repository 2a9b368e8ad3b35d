//! The load generator's HTTP/1.1 client: one request at a time on a keep-alive connection,
//! written in one `write` and read straight off the socket.
//!
//! The generator shares the machine's cores with the server it measures, so every
//! microsecond it spends is taken from that server. hyper's client runs each connection as
//! two tasks (the caller's and the connection's), with a channel and a oneshot between
//! them and a header map built per request; this does what a benchmark client needs — the
//! same request every time, a status and a body to read to its last byte — in the caller's
//! task. It speaks enough HTTP/1.1 for any server: `Content-Length` and chunked bodies,
//! `Connection: close`, and a body read to end of stream when neither length is given.
//! Of the headers it keeps only tandem's `x-tandem-cache`, how the response cache answered.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response's head may take at most this much; a longer one is refused.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Headers a response may carry at most.
const MAX_HEADERS: usize = 64;
/// The most body bytes a response may carry (ours are a few hundred).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

pub struct Connection {
    stream: TcpStream,
    /// Bytes read and not yet consumed: the response being parsed.
    buf: Vec<u8>,
    /// The server said it closes the connection after the last response, or the last
    /// exchange failed part-way: no further request may use it.
    closed: bool,
}

/// What the generator keeps of a response.
#[derive(Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body_bytes: usize,
    /// `x-tandem-cache`, where the response carries it.
    pub cache: Option<Cached>,
}

/// How tandem's response cache answered a request, as its `x-tandem-cache` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cached {
    /// Every input from the cache.
    Hit,
    Miss,
    /// Some inputs from the cache, the rest computed.
    Partial,
}

impl Cached {
    /// The header's value (tandem writes it in lower case); `None` for one this client
    /// does not know.
    pub(crate) fn parse(value: &[u8]) -> Option<Cached> {
        match value.trim_ascii() {
            b"hit" => Some(Cached::Hit),
            b"miss" => Some(Cached::Miss),
            b"partial" => Some(Cached::Partial),
            _ => None,
        }
    }
}

enum BodyLength {
    Exactly(usize),
    Chunked,
    ToEnd,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> io::Result<Connection> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            buf: Vec::with_capacity(4096),
            closed: false,
        })
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Sends `request` (a whole HTTP/1.1 request: head and body) and reads the response
    /// to its last byte. An error leaves the connection closed.
    pub async fn exchange(&mut self, request: &[u8]) -> io::Result<Reply> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "connection closed",
            ));
        }
        let result = self.exchange_inner(request).await;
        if result.is_err() {
            self.closed = true;
        }
        result
    }

    async fn exchange_inner(&mut self, request: &[u8]) -> io::Result<Reply> {
        self.stream.write_all(request).await?;
        let head = loop {
            match parse_head(&self.buf)? {
                // An interim response (100 Continue, 103 Early Hints): the final one follows.
                Some(head) if (100..200).contains(&head.status) && head.status != 101 => {
                    self.buf.drain(..head.len);
                }
                Some(head) => break head,
                None if self.buf.len() > MAX_HEAD_BYTES => {
                    return Err(invalid("response head too long"));
                }
                None => self.fill().await?,
            }
        };
        self.buf.drain(..head.len);
        let body_bytes = match head.length {
            BodyLength::Exactly(n) => {
                while self.buf.len() < n {
                    self.fill().await?;
                }
                self.buf.drain(..n);
                n
            }
            BodyLength::Chunked => self.read_chunked().await?,
            BodyLength::ToEnd => {
                while self.fill_or_end().await? {
                    if self.buf.len() > MAX_BODY_BYTES {
                        return Err(invalid("response body too long"));
                    }
                }
                self.closed = true;
                std::mem::take(&mut self.buf).len()
            }
        };
        if head.close {
            self.closed = true;
        }
        Ok(Reply {
            status: head.status,
            body_bytes,
            cache: head.cache,
        })
    }

    /// Reads a chunked body (RFC 9112 §7.1) and its trailers; returns its size.
    async fn read_chunked(&mut self) -> io::Result<usize> {
        let mut total = 0usize;
        loop {
            let line = self.read_line().await?;
            let size = line.split(|b| *b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size)
                .ok()
                .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
                .ok_or_else(|| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailer fields, up to the empty line.
                while !self.read_line().await?.is_empty() {}
                return Ok(total);
            }
            total = total
                .checked_add(size)
                .filter(|t| *t <= MAX_BODY_BYTES)
                .ok_or_else(|| invalid("response body too long"))?;
            while self.buf.len() < size + 2 {
                self.fill().await?;
            }
            if &self.buf[size..size + 2] != b"\r\n" {
                return Err(invalid("chunk not followed by CRLF"));
            }
            self.buf.drain(..size + 2);
        }
    }

    /// Takes one CRLF-terminated line off the buffer, without its CRLF.
    async fn read_line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf[..end].to_vec();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(invalid("line too long"));
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes; the end of the stream here is an error.
    async fn fill(&mut self) -> io::Result<()> {
        if self.fill_or_end().await? {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed mid-response",
            ))
        }
    }

    /// Reads more bytes; false at the end of the stream.
    async fn fill_or_end(&mut self) -> io::Result<bool> {
        self.buf.reserve(16 * 1024);
        Ok(self.stream.read_buf(&mut self.buf).await? > 0)
    }
}

/// A response's head, as far as a client reading the body needs it.
struct Head {
    status: u16,
    length: BodyLength,
    /// The server closes the connection after this response.
    close: bool,
    cache: Option<Cached>,
    /// Bytes the head took.
    len: usize,
}

/// Parses a complete response head at the start of `buf`; `None` while incomplete.
fn parse_head(buf: &[u8]) -> io::Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(invalid(&format!("bad response head: {e}"))),
    };
    let status = response.code.unwrap_or_default();
    let mut length = BodyLength::ToEnd;
    // HTTP/1.0 closes unless asked to keep alive; 1.1 keeps alive unless asked to close.
    let mut close = response.version == Some(0);
    let mut cache = None;
    for h in response.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .filter(|n| *n <= MAX_BODY_BYTES)
                .ok_or_else(|| invalid("bad Content-Length"))?;
            if !matches!(length, BodyLength::Chunked) {
                length = BodyLength::Exactly(n);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if h.value.to_ascii_lowercase().ends_with(b"chunked") {
                length = BodyLength::Chunked;
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|b| *b == b',').map(|t| t.trim_ascii()) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    close = false;
                }
            }
        } else if name.eq_ignore_ascii_case("x-tandem-cache") {
            cache = Cached::parse(h.value);
        }
    }
    // No body, whatever the headers say (RFC 9112 §6.3).
    if status == 204 || status == 304 || (100..200).contains(&status) {
        length = BodyLength::Exactly(0);
    }
    Ok(Some(Head {
        status,
        length,
        close,
        cache,
        len,
    }))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests;
