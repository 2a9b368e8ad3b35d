//! When a request really arrived: the kernel's receive timestamp of its bytes.
//!
//! A handler's clock starts when the runtime gets round to the connection and hyper has
//! parsed the headers. Under load that is late: requests wait in socket buffers while the
//! runtime's threads serve other connections, and a latency budget counted from the handler
//! misses that wait, which a client sees in full. The kernel stamps every received segment
//! (`SO_TIMESTAMPNS`); reading with `recvmsg` hands us that stamp, so a request's budget,
//! its queueing and the controller's p99 all count from when its bytes reached the machine.
//! The connection hands its clock to the handler by reference: nothing is allocated per
//! request.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Linux's `SO_TIMESTAMPNS` (`SO_TIMESTAMPNS_OLD`: the stamp comes as the platform's own
/// `struct timespec`), and the control message type that carries it.
const SO_TIMESTAMPNS: libc::c_int = 35;
const SCM_TIMESTAMPNS: libc::c_int = SO_TIMESTAMPNS;

/// A stamp older than this is not believed (the wall clock was set back or forward).
const MAX_AGE: Duration = Duration::from_secs(10);

/// The earliest receive time of the bytes read since the last [`ArrivalClock::take`].
#[derive(Debug, Default)]
pub struct ArrivalClock(Mutex<Option<Instant>>);

impl ArrivalClock {
    pub const fn new() -> ArrivalClock {
        ArrivalClock(Mutex::new(None))
    }

    fn record(&self, at: Instant) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(slot.map_or(at, |t| t.min(at)));
    }

    /// When the bytes read since the last call arrived, and starts afresh. A handler calls
    /// it once the request's body is read; HTTP/1.1 clients send the next request only
    /// after this one's response, so nothing of it is mixed in.
    pub fn take(&self) -> Option<Instant> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// A TCP stream that records its kernel receive timestamps in an [`ArrivalClock`].
pub struct TimestampedStream {
    inner: TcpStream,
    clock: Arc<ArrivalClock>,
    stamped: bool,
}

impl TimestampedStream {
    /// Turns the kernel's timestamps on; where it refuses, reads are plain and the clock
    /// stays empty (handlers then fall back to their own clock).
    pub fn new(inner: TcpStream, clock: Arc<ArrivalClock>) -> TimestampedStream {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket fd and a pointer to a c_int with its size.
        let stamped = unsafe {
            libc::setsockopt(
                inner.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        };
        TimestampedStream {
            inner,
            clock,
            stamped,
        }
    }

    /// One `recvmsg` into `buf`: the byte count and the kernel's stamp, if it gave one.
    fn recv(
        &self,
        buf: &mut [std::mem::MaybeUninit<u8>],
    ) -> io::Result<(usize, Option<SystemTime>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // u64s keep the control buffer aligned for cmsghdr.
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain data; zeroed is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: the iovec points at `buf`'s writable memory of its length and the control
        // buffer at `control`, both alive for the call; the kernel writes at most that much.
        let n = unsafe { libc::recvmsg(self.inner.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut stamp = None;
        // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, within
        // msg_controllen; a SCM_TIMESTAMPNS message carries one timespec (read unaligned).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SCM_TIMESTAMPNS {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    stamp = SystemTime::UNIX_EPOCH
                        .checked_add(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok((n as usize, stamp))
    }
}

/// The monotonic instant of a wall-clock stamp taken `age` ago.
fn instant_of(stamp: SystemTime) -> Option<Instant> {
    let age = SystemTime::now().duration_since(stamp).unwrap_or_default();
    // Checked: `Instant - Duration` panics below the clock's origin.
    (age <= MAX_AGE)
        .then(|| Instant::now().checked_sub(age))
        .flatten()
}

impl AsyncRead for TimestampedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.stamped {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        loop {
            ready!(this.inner.poll_read_ready(cx))?;
            // SAFETY: `recv` only writes initialised bytes into the unfilled part, and we
            // mark as filled exactly the count it reports.
            let unfilled = unsafe { buf.unfilled_mut() };
            let room = unfilled.len();
            let mut read = None;
            // A read that did not fill the buffer emptied the socket: the closure then
            // reports WouldBlock after all, which makes tokio forget the readiness (as its
            // own TcpStream does), so the next poll waits for the kernel's next edge instead
            // of asking with a `recvmsg` that can only fail — one syscall less per request.
            // The readiness is forgotten only if no new edge came meanwhile (tokio checks
            // the event's tick), so no data is left unread.
            let result = this.inner.try_io(Interest::READABLE, || {
                let (n, stamp) = this.recv(unfilled)?;
                read = Some((n, stamp));
                if n > 0 && n < room {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(())
                }
            });
            if let Some((n, stamp)) = read {
                if n > 0
                    && let Some(at) = stamp.and_then(instant_of)
                {
                    this.clock.record(at);
                }
                // SAFETY: the kernel initialised the first n bytes.
                unsafe { buf.assume_init(n) };
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            match result {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Poll::Ready(Err(e)),
                _ => continue, // not ready after all: wait for the next edge
            }
        }
    }
}

impl AsyncWrite for TimestampedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client connected to a stamped server side over loopback.
    async fn connected(clock: Arc<ArrivalClock>) -> (TcpStream, TimestampedStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, TimestampedStream::new(server, clock))
    }

    #[tokio::test]
    async fn reads_carry_the_kernels_receive_time() {
        let clock = Arc::new(ArrivalClock::default());
        let (mut client, mut stream) = connected(clock.clone()).await;
        assert!(stream.stamped, "SO_TIMESTAMPNS refused");
        let mut buf = [0u8; 16];
        // The kernel turns receive stamping on for the whole stack a moment after the
        // first socket asks (a deferred static-key switch): until then reads carry none.
        let mut warm = false;
        for _ in 0..200 {
            client.write_all(b"warm").await.unwrap();
            let n = stream.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"warm");
            if clock.take().is_some() {
                warm = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(warm, "no receive stamps within 2 s");

        client.write_all(b"first").await.unwrap();
        let sent = Instant::now();
        // The bytes wait in the socket while the "runtime is busy".
        std::thread::sleep(Duration::from_millis(30));
        let n = stream.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"first");
        let arrived = clock.take().expect("a stamp");
        let read_at = Instant::now();
        assert!(
            read_at - arrived >= Duration::from_millis(25),
            "stamped {:?} before the read",
            read_at - arrived
        );
        assert!(
            arrived <= sent + Duration::from_millis(5),
            "stamped {:?} after the send",
            arrived.saturating_duration_since(sent)
        );
        assert!(clock.take().is_none(), "take starts afresh");

        // Writes pass through untouched.
        stream.write_all(b"reply").await.unwrap();
        let n = client.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"reply");
    }

    /// A read that fills the buffer leaves the readiness set (more may be waiting); one
    /// that does not clears it, and the next send wakes the reader again.
    #[tokio::test]
    async fn reads_get_every_byte_whether_or_not_they_fill_the_buffer() {
        let (mut client, mut stream) = connected(Arc::new(ArrivalClock::default())).await;
        let sent: Vec<u8> = (0..40).collect();
        client.write_all(&sent).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while got.len() < sent.len() {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("bytes already in the socket were not read")
                .unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, sent);
        // The last read was short, so the readiness is gone: a later send must wake it.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let n = stream.read(&mut buf).await.unwrap();
            buf[..n].to_vec()
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        client.write_all(b"later").await.unwrap();
        let later = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("a send after a short read did not wake the reader")
            .unwrap();
        assert_eq!(later, b"later");
    }
}
