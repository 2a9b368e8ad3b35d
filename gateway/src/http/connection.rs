//! One accepted connection: TLS if configured, then HTTP/1.1 or HTTP/2, and around every
//! request the edge — its id, span, access log line and trace, whatever answers it (the
//! routes, CORS, the body limit, a caught panic) — and a watchdog that closes a connection
//! with nothing in flight for the header timeout, and cuts one with an HTTP/2 response its
//! client has not read for the write-stall timeout (`sending.rs`).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, Response, Version};
use http_body_util::{Either, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tower::{Layer, ServiceBuilder, ServiceExt};
use tracing::Instrument;

use super::access::{self, Edge};
use super::arrival::{ArrivalClock, TimestampedStream};
use super::errors::error_response;
use super::sending::{Sending, Tracked};
use super::write_stall::{WriteStallLimit, is_write_stall};
use super::{AppState, BodyLimitLayer, request_id, routes, trace};
use crate::error::ApiError;
use crate::metrics as names;
use crate::shutdown::Shutdown;

/// One accepted connection and what serving it needs.
pub struct Connection {
    pub state: Arc<AppState>,
    pub limits: crate::config::Limits,
    pub api: super::Api,
    pub peer: std::net::SocketAddr,
    pub shutdown: Shutdown,
    pub edge: Arc<Edge>,
}

/// What the watchdog reads of a connection: requests begun, and requests not yet answered.
#[derive(Default)]
struct Activity {
    begun: AtomicU64,
    in_flight: AtomicUsize,
}

/// A response as the layers around the routes give it.
type Answer = Response<AnswerBody>;
/// The routes' body as their layers give it, or a gRPC call's.
type AnswerBody = Either<RoutesBody, GrpcBody>;
type RoutesBody = tower_http::body::UnsyncBoxBody<Bytes, BoxError>;
type GrpcBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// What a connection sends: the answer, or over HTTP/2 the answer tracked until it is read.
type Sent = Response<Either<AnswerBody, Tracked<AnswerBody>>>;

impl Connection {
    /// Plain text, or TLS once its handshake completes within the header timeout.
    pub async fn serve(self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let clock = Arc::new(ArrivalClock::default());
        let stream = TimestampedStream::new(stream, clock.clone());
        let Some(tls) = self.state.tls.clone() else {
            return self.serve_io(stream, clock).await;
        };
        let handshake = tls.acceptor().accept(stream);
        match tokio::time::timeout(self.limits.header_read_timeout(), handshake).await {
            Ok(Ok(secured)) => {
                // The handshake's bytes are no request's.
                clock.take();
                self.serve_io(secured, clock).await
            }
            Ok(Err(e)) => {
                metrics::counter!(names::TLS_FAILED, "reason" => "handshake").increment(1);
                tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed");
            }
            Err(_) => {
                metrics::counter!(names::TLS_FAILED, "reason" => "timeout").increment(1);
            }
        }
    }

    /// HTTP/1.1 with keep-alive, or HTTP/2 (by ALPN, or by prior knowledge in plain text),
    /// under the write-stall limit; on shutdown, the in-flight requests finish first.
    async fn serve_io<S>(mut self, io: S, clock: Arc<ArrivalClock>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let stream = WriteStallLimit::new(io, self.limits.response_write_timeout());
        let activity = Arc::new(Activity::default());
        let sending = Arc::new(Sending::default());
        let service = self.service(clock, activity.clone(), sending.clone());
        let connections = metrics::gauge!(names::CONNECTIONS);
        connections.increment(1.0);
        let builder = protocols(&self.limits);
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        tokio::pin!(conn);
        let idle = self.limits.header_read_timeout();
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + idle, idle);
        let mut last_seen = 0;
        let mut closing = false;
        let stall = self.limits.response_write_timeout();
        let every = (stall / 4).max(std::time::Duration::from_millis(10));
        let mut stall_tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        count_cut(&*e);
                        tracing::debug!(peer = %self.peer, error = %e, "connection closed");
                    }
                    break;
                }
                _ = tick.tick(), if !closing => {
                    let begun = activity.begun.load(Ordering::Relaxed);
                    let busy = activity.in_flight.load(Ordering::Relaxed) > 0;
                    if busy || begun != last_seen {
                        last_seen = begun;
                        continue;
                    }
                    if begun == 0 {
                        // Not a single request: nothing to finish, nothing to say goodbye to.
                        metrics::counter!(names::CONNECTIONS_CUT, "reason" => "header_timeout")
                            .increment(1);
                        break;
                    }
                    // Idle for a whole timeout: HTTP/2 says GOAWAY, HTTP/1 closes.
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                _ = stall_tick.tick() => {
                    if sending.stalled(stall) {
                        metrics::counter!(names::CONNECTIONS_CUT, "reason" => "write_stall")
                            .increment(1);
                        tracing::debug!(peer = %self.peer, "HTTP/2 response unread; connection cut");
                        break;
                    }
                }
                _ = self.shutdown.wait(), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
        connections.decrement(1.0);
    }

    /// The edge around the routes, the body limit, CORS (not on the admin API) and panics
    /// caught, per request.
    fn service(
        &self,
        clock: Arc<ArrivalClock>,
        activity: Arc<Activity>,
        sending: Arc<Sending>,
    ) -> impl tower::Service<
        Request<Incoming>,
        Response = Sent,
        Error = Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + 'static {
        let metrics_only = matches!(self.api, super::Api::MetricsOnly);
        let grpc = match &self.api {
            super::Api::Grpc(services) => Some(services.clone()),
            _ => None,
        };
        let (state, peer) = (self.state.clone(), self.peer);
        let handler_state = state.clone();
        let handler_clock = clock.clone();
        let routes = ServiceBuilder::new()
            .layer(tower_http::catch_panic::CatchPanicLayer::custom(
                panic_response,
            ))
            .layer(BodyLimitLayer {
                limit: self.limits.max_body_bytes,
            })
            .service_fn(move |req: Request<Limited<Incoming>>| {
                let (state, clock) = (handler_state.clone(), handler_clock.clone());
                async move {
                    // An HTTP/2 connection carries many requests at once: the bytes read
                    // since the last request are not this one's alone, so its handler
                    // keeps its own clock.
                    let arrival = match req.version() {
                        Version::HTTP_2 => &UNSTAMPED,
                        _ => &*clock,
                    };
                    Ok::<_, Infallible>(
                        routes::handle(state, req, metrics_only, peer, arrival).await,
                    )
                }
            });
        let cors = self.edge.cors.clone().map(|c| c.layer(routes.clone()));
        let edge = self.edge.clone();
        tower::service_fn(move |req: Request<Incoming>| {
            activity.begun.fetch_add(1, Ordering::Relaxed);
            activity.in_flight.fetch_add(1, Ordering::Relaxed);
            let (routes, cors, grpc) = (routes.clone(), cors.clone(), grpc.clone());
            let (state, edge, clock, activity) =
                (state.clone(), edge.clone(), clock.clone(), activity.clone());
            let sending = (req.version() == Version::HTTP_2).then(|| sending.clone());
            let held = activity.clone();
            async move {
                let admin = req.uri().path().starts_with("/admin");
                let answered = around(req, &state, &edge, metrics_only, |req| async move {
                    if let Some(grpc) = grpc {
                        return until_sent(grpc.answer(req, peer).await, held);
                    }
                    let answer = match cors {
                        Some(cors) if !admin => cors.oneshot(req).await,
                        _ => routes.oneshot(req).await,
                    };
                    let answer = answer.unwrap_or_else(|never| match never {});
                    answer.map(Either::Left)
                })
                .await;
                // Whatever this request, or a layer that answered it, left unclaimed is not
                // the next one's.
                clock.take();
                activity.in_flight.fetch_sub(1, Ordering::Relaxed);
                // HTTP/2's responses are watched until their clients have read them.
                let sent = match sending {
                    Some(sending) => answered.map(|b| Either::Right(sending.track(b))),
                    None => answered.map(Either::Left),
                };
                Ok(sent)
            }
        })
    }
}

/// A gRPC answer, its call counted in flight until its body (a stream's every message) is
/// sent or dropped: the idle watchdog never closes a connection under an open stream.
fn until_sent(answer: Response<tonic::body::Body>, activity: Arc<Activity>) -> Answer {
    use http_body_util::BodyExt;
    activity.in_flight.fetch_add(1, Ordering::Relaxed);
    let guard = InFlight(activity);
    answer.map(move |body| {
        let held = body.map_frame(move |frame| {
            let _held = &guard;
            frame
        });
        Either::Right(
            held.map_err(|status| Box::new(status) as BoxError)
                .boxed_unsync(),
        )
    })
}

/// One call counted in flight while it lives.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One request with its id, span, trace and access log line around whatever answers it.
async fn around<F, Fut>(
    req: Request<Incoming>,
    state: &AppState,
    edge: &Edge,
    metrics_only: bool,
    answer: F,
) -> Answer
where
    F: FnOnce(Request<Incoming>) -> Fut,
    Fut: std::future::Future<Output = Answer>,
{
    let began = Instant::now();
    let id = request_id::of(req.headers());
    let span = access::span(&req, &id);
    let (head, version) = (req.method() == Method::HEAD, req.version());
    // Scrapes of the metrics listener are not traced.
    let traces = state.traces.clone().filter(|_| !metrics_only);
    let traced = traces.as_ref().map(|_| {
        let target = (req.method().to_string(), req.uri().path().to_string());
        (trace::parent(req.headers()), target)
    });
    let handler = answer(req).instrument(span.clone());
    let (mut response, phases) = crate::infer::phases::recording(traces.is_some(), handler).await;
    if let (Some(traces), Some((parent, (method, path)))) = (&traces, &traced) {
        let answered = trace::Finished {
            method,
            path,
            request_id: id.to_str().unwrap_or_default(),
            status: response.status().as_u16(),
            began,
        };
        trace::export(traces, parent, answered, phases);
    }
    if head && version == Version::HTTP_2 {
        without_body(&mut response);
    }
    response.headers_mut().insert(request_id::HEADER, id);
    if edge.access_log {
        log_answer(&mut response, &span, began);
    }
    response
}

/// The access log line: at once, or for a gRPC call that answers with a body (its status
/// comes in the trailers), once the trailers pass. A call refused or failed before its
/// answer began carries its `grpc-status` in the head.
fn log_answer(response: &mut Answer, span: &tracing::Span, began: Instant) {
    let headers = response.headers();
    let grpc = headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    let in_head = headers.get("grpc-status").and_then(|v| v.to_str().ok());
    if !grpc || in_head.is_some() {
        span.in_scope(|| access::log(response.status(), in_head, began.elapsed()));
        return;
    }
    let body = match std::mem::replace(response.body_mut(), Either::Left(Default::default())) {
        Either::Right(body) => body,
        routes => {
            *response.body_mut() = routes;
            return;
        }
    };
    use http_body_util::BodyExt;
    let (span, status) = (span.clone(), response.status());
    let logged = body.map_frame(move |frame| {
        if let Some(trailers) = frame.trailers_ref() {
            let code = trailers.get("grpc-status").and_then(|v| v.to_str().ok());
            span.in_scope(|| access::log(status, Some(code.unwrap_or("")), began.elapsed()));
        }
        frame
    });
    *response.body_mut() = Either::Right(logged.boxed_unsync());
}

/// A HEAD's answer: GET's headers and length, no body. hyper holds an HTTP/1 body back
/// itself; over HTTP/2 a body would be a protocol error for the client.
fn without_body(response: &mut Answer) {
    let length = hyper::body::Body::size_hint(response.body()).exact();
    *response.body_mut() = Either::Left(Default::default());
    if let Some(length) = length {
        response
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, length.into());
    }
}

/// A clock no stream records into: HTTP/2 handlers fall back to their own.
static UNSTAMPED: ArrivalClock = ArrivalClock::new();

/// HTTP/1.1 and HTTP/2 by prior knowledge, with the limits of `limits`. HTTP/2's defences
/// against stream floods (rapid reset, CVE-2023-44487) and CONTINUATION floods are h2's,
/// 0.4.4 and later; the header list is bounded here.
fn protocols(limits: &crate::config::Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout())
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .max_pending_accept_reset_streams(Some(MAX_PENDING_RESETS))
        .keep_alive_interval(Some(limits.header_read_timeout()))
        .keep_alive_timeout(limits.header_read_timeout());
    builder
}

/// An HTTP/2 request's headers, decoded, at most (HTTP/1's own bound is hyper's buffer).
const MAX_HEADER_LIST_BYTES: u32 = 64 << 10;
/// Streams a client may open and reset before the server has seen them, at most.
const MAX_PENDING_RESETS: usize = 20;

/// Counts a connection the server cut off for a slow client (other errors, such as a
/// client resetting its connection, are the client's own doing and only logged).
fn count_cut(e: &(dyn std::error::Error + 'static)) {
    let hyper_error = e.downcast_ref::<hyper::Error>();
    let reason = if hyper_error.is_some_and(|e| e.is_timeout() && !is_keep_alive_timeout(e)) {
        "header_timeout"
    } else if hyper_error.is_some_and(is_keep_alive_timeout) {
        "ping_timeout"
    } else if is_write_stall(e) {
        "write_stall"
    } else {
        return;
    };
    metrics::counter!(names::CONNECTIONS_CUT, "reason" => reason).increment(1);
}

/// HTTP/2's keep-alive ping went unanswered (hyper reports it as a timeout too).
fn is_keep_alive_timeout(e: &hyper::Error) -> bool {
    e.to_string().contains("keep-alive")
}

/// A handler that panicked answers 500 like any other failure; the connection lives on.
fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response<Full<Bytes>> {
    error_response(&ApiError::Internal(
        "internal error while handling the request".into(),
    ))
}
