//! A client that stops reading its responses must not hold its connection for ever.
//!
//! Once the kernel's send buffer and the client's receive buffer are full, every write to
//! the socket pends, and hyper waits on it with no timer of its own: the connection, and
//! one of `max_connections` permits, would be held until shutdown. [`WriteStallLimit`]
//! fails a write that has made no progress for the configured time, so hyper closes the
//! connection. It measures stalls, not whole responses: a slow reader that keeps taking
//! bytes is never cut off, and the timer is armed only once a write pends, so the usual
//! write that completes at once costs a branch.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The error a stalled write fails with, so that the connection's end can be told apart
/// from other I/O errors (see [`is_write_stall`]).
#[derive(Debug)]
pub struct WriteStalled(Duration);

impl std::fmt::Display for WriteStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the client read nothing of its response for {} ms",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for WriteStalled {}

/// Whether `e` (or an error it wraps) is a [`WriteStalled`].
pub fn is_write_stall(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.is::<WriteStalled>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.get_ref().is_some_and(|inner| inner.is::<WriteStalled>())
        {
            return true;
        }
        next = e.source();
    }
    false
}

pub struct WriteStallLimit<S> {
    inner: S,
    limit: Duration,
    /// Kept between stalls so a connection allocates its timer once at most.
    timer: Option<Pin<Box<Sleep>>>,
    /// The timer counts the current stall (a write has pended since the last progress).
    armed: bool,
}

impl<S> WriteStallLimit<S> {
    pub fn new(inner: S, limit: Duration) -> WriteStallLimit<S> {
        WriteStallLimit {
            inner,
            limit,
            timer: None,
            armed: false,
        }
    }

    /// Passes a ready result through (progress: the stall is over); on pending, starts or
    /// checks the stall's timer and fails once it has run out.
    fn guard<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.armed = false;
            return poll;
        }
        // The clock is read only when a stall starts, not at every pending poll.
        let timer = match &mut self.timer {
            Some(timer) => {
                if !self.armed {
                    timer.as_mut().reset(Instant::now() + self.limit);
                }
                timer
            }
            None => self.timer.insert(Box::pin(tokio::time::sleep(self.limit))),
        };
        self.armed = true;
        if timer.as_mut().poll(cx).is_ready() {
            self.armed = false;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                WriteStalled(self.limit),
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStallLimit<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStallLimit<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.guard(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.guard(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.guard(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A pair of connected sockets, the server's side behind the limit, with small buffers
    /// so that writes pend soon.
    async fn pair(
        limit: Duration,
    ) -> (
        WriteStallLimit<tokio::net::TcpStream>,
        tokio::net::TcpStream,
    ) {
        // An accepted socket inherits its listener's buffer sizes.
        let listening = tokio::net::TcpSocket::new_v4().unwrap();
        listening.set_send_buffer_size(4096).unwrap();
        listening.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = listening.listen(4).unwrap();
        let connecting = tokio::net::TcpSocket::new_v4().unwrap();
        connecting.set_recv_buffer_size(4096).unwrap();
        let client = connecting
            .connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (WriteStallLimit::new(server, limit), client)
    }

    #[tokio::test]
    async fn a_write_the_client_never_reads_fails_after_the_limit() {
        let (mut server, _client) = pair(Duration::from_millis(200)).await;
        let chunk = vec![7u8; 64 << 10];
        let started = std::time::Instant::now();
        let err = loop {
            if let Err(e) = server.write_all(&chunk).await {
                break e;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "never stalled");
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("200 ms"), "{err}");
        assert!(is_write_stall(&err));
        assert!(!is_write_stall(&io::Error::from(io::ErrorKind::TimedOut)));
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_is_never_cut_off() {
        let limit = Duration::from_millis(150);
        let (mut server, mut client) = pair(limit).await;
        // 256 KiB to a client that takes what its 4 KiB buffer holds every 50 ms: seconds
        // in all, many times the limit, but no single stall as long as it.
        let total = 256 << 10;
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = vec![0u8; 16 << 10];
            while got < total {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let n = client.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed after {got} bytes");
                got += n;
            }
            got
        });
        server.write_all(&vec![1u8; total]).await.unwrap();
        server.flush().await.unwrap();
        assert_eq!(reader.await.unwrap(), total);
    }
}
