//! How far each HTTP/2 response has been sent, for the connection's watchdog. An HTTP/2
//! client whose flow-control window stays shut never reads a response, yet its connection
//! looks alive: the socket takes the server's pings and acknowledgements, so the write-stall
//! limit (`write_stall.rs`) never fires, and hyper buffers the response and waits. Each
//! response body here is handed to the protocol in pieces of at most [`PIECE`] bytes, its
//! last byte a piece of its own: hyper hands a piece to h2 only once the stream's window has
//! room beyond what h2 already holds, so the last byte is asked for only once the window
//! covers the rest, and the end only after that. The time since a body was last asked for
//! is how long its client has not read; a response with nothing asked for within the
//! write-stall timeout cuts its connection. Once the end is asked for, the whole body fits
//! the window, and a socket that does not take it is the write-stall limit's. A body with
//! nothing to give yet (a gRPC stream between answers) waits on the server, not on its
//! client: it is not stalled until it has something and is not asked for it.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};

/// HTTP/2's default (and smallest) frame size: a piece is never more than one frame.
pub const PIECE: usize = 16 * 1024;

/// A body's "last moved" while it waits for the server: never stalled.
const WAITING_ON_SERVER: u64 = u64::MAX;

/// The responses of one connection still being sent, each with when it last moved.
pub struct Sending {
    began: Instant,
    /// Each unfinished body's last move, in milliseconds since `began`; a body's entry goes
    /// when it is dropped.
    bodies: Mutex<Vec<Weak<AtomicU64>>>,
}

impl Default for Sending {
    fn default() -> Self {
        Sending {
            began: Instant::now(),
            bodies: Mutex::new(Vec::new()),
        }
    }
}

impl Sending {
    fn now(&self) -> u64 {
        self.began.elapsed().as_millis() as u64
    }

    /// `body`, tracked until it is sent whole or dropped.
    pub fn track<B>(&self, body: B) -> Tracked<B> {
        let moved = Arc::new(AtomicU64::new(self.now()));
        let mut bodies = self.bodies.lock().unwrap_or_else(|p| p.into_inner());
        bodies.retain(|b| b.strong_count() > 0);
        bodies.push(Arc::downgrade(&moved));
        Tracked {
            body,
            rest: Bytes::new(),
            moved: Some(moved),
            began: self.began,
            polled: false,
        }
    }

    /// Whether a response has not moved for `limit`.
    pub fn stalled(&self, limit: Duration) -> bool {
        let now = self.now();
        let bodies = self.bodies.lock().unwrap_or_else(|p| p.into_inner());
        bodies.iter().filter_map(Weak::upgrade).any(|moved| {
            let moved = moved.load(Ordering::Relaxed);
            moved != WAITING_ON_SERVER && now.saturating_sub(moved) > limit.as_millis() as u64
        })
    }
}

/// A response body in pieces of at most [`PIECE`] bytes, noting when each was asked for.
pub struct Tracked<B> {
    body: B,
    /// What is left of a data frame larger than a piece.
    rest: Bytes,
    /// When it last moved; `None` once the end was given (the body is sent, and its entry
    /// retired).
    moved: Option<Arc<AtomicU64>>,
    began: Instant,
    /// A frame was asked for.
    polled: bool,
}

impl<B: Body> Tracked<B> {
    /// The next piece of `rest`: at most [`PIECE`] bytes, and the body's last byte alone.
    fn piece(&mut self) -> Frame<Bytes> {
        let last = self.body.is_end_stream();
        let n = match self.rest.len().min(PIECE) {
            n if last && n == self.rest.len() && n > 1 => n - 1,
            n => n,
        };
        Frame::data(self.rest.split_to(n))
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        this.polled = true;
        if let Some(moved) = &this.moved {
            moved.store(this.began.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        if this.rest.has_remaining() {
            return Poll::Ready(Some(Ok(this.piece())));
        }
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    this.rest = data;
                    Poll::Ready(Some(Ok(this.piece())))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            Poll::Ready(None) => {
                this.moved = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                // It wakes hyper when it has a frame, and the next ask stamps the time.
                if let Some(moved) = &this.moved {
                    moved.store(WAITING_ON_SERVER, Ordering::Relaxed);
                }
                Poll::Pending
            }
            other => other,
        }
    }

    /// Not at the end until the end was asked for (see the module's doc), except for a
    /// body with nothing in it, which hyper sends with the headers.
    fn is_end_stream(&self) -> bool {
        let sent = self.moved.is_none();
        sent || (!self.polled && self.rest.is_empty() && self.body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint.set_lower(inner.lower() + rest);
        hint
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Full};

    use super::*;

    #[tokio::test]
    async fn a_body_goes_in_pieces_and_is_tracked_until_its_end_is_asked_for() {
        let sending = Sending::default();
        let body = Full::new(Bytes::from(vec![7u8; 2 * PIECE + 100]));
        let mut tracked = sending.track(body);
        assert_eq!(tracked.size_hint().exact(), Some(2 * PIECE as u64 + 100));
        let mut sizes = Vec::new();
        while let Some(frame) = tracked.frame().await {
            sizes.push(frame.unwrap().into_data().unwrap().len());
            std::thread::sleep(Duration::from_millis(3));
            assert!(sending.stalled(Duration::from_millis(1)), "{sizes:?}");
            assert!(!tracked.is_end_stream());
        }
        assert_eq!(sizes, [PIECE, PIECE, 99, 1]);
        assert!(tracked.is_end_stream());
        assert!(!sending.stalled(Duration::ZERO));
    }

    #[tokio::test]
    async fn an_empty_body_ends_with_its_headers_and_a_small_one_holds_its_last_byte() {
        let sending = Sending::default();
        let empty = sending.track(Full::new(Bytes::new()));
        assert!(empty.is_end_stream());
        let mut small = sending.track(Full::new(Bytes::from_static(b"abc")));
        assert!(!small.is_end_stream());
        let mut sizes = Vec::new();
        while let Some(frame) = small.frame().await {
            sizes.push(frame.unwrap().into_data().unwrap().len());
        }
        assert_eq!(sizes, [2, 1]);
    }

    #[test]
    fn a_dropped_body_is_no_longer_watched() {
        let sending = Sending::default();
        let tracked = sending.track(Full::new(Bytes::from_static(b"x")));
        std::thread::sleep(Duration::from_millis(3));
        assert!(sending.stalled(Duration::from_millis(1)));
        drop(tracked);
        assert!(!sending.stalled(Duration::ZERO));
    }

    #[tokio::test]
    async fn a_body_with_nothing_to_give_is_not_stalled_until_it_has_something() {
        let sending = Sending::default();
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(1);
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let mut tracked = sending.track(http_body_util::StreamBody::new(stream));
        // Asked for a frame while the server has none: waiting on the server.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(Pin::new(&mut tracked).poll_frame(&mut cx).is_pending());
        std::thread::sleep(Duration::from_millis(3));
        assert!(!sending.stalled(Duration::from_millis(1)));
        // It has a frame, and is asked again: a client that then stops reading stalls it.
        tx.send(Ok(Frame::data(Bytes::from_static(b"answer"))))
            .await
            .unwrap();
        assert!(tracked.frame().await.is_some());
        std::thread::sleep(Duration::from_millis(3));
        assert!(sending.stalled(Duration::from_millis(1)));
    }
}
