//! The HTTP server: hyper accepts, tower layers bound the body and catch panics, and the
//! routes answer. A semaphore bounds open connections (further clients wait in the listen
//! backlog); a slow client must send its headers, then its body, within the configured
//! times, and a client that stops reading its responses is cut off after a stall of the
//! configured time; on shutdown the listener closes and every connection finishes its
//! in-flight request first.

mod access;
pub(crate) mod admin;
mod arrival;
mod auth;
mod body;
pub(crate) mod classify;
pub(crate) mod cohere;
pub(crate) mod cohere_embed;
pub(crate) mod content_coding;
pub(crate) mod embeddings;
mod infer;
mod inputs;
mod limit;
mod matryoshka;
mod models;
mod openai_models;
mod repository;
mod request_id;
mod routes;
mod similarity;
pub(crate) mod tei;
pub(crate) mod text;
pub(crate) mod text_common;
mod text_request;
pub mod tls;
mod tokens;
mod trace;
mod write_stall;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceBuilder;
use tracing::Instrument;

use crate::config::Config;
use crate::error::ApiError;
use crate::metrics as names;
use crate::registry::Registry;
use crate::shutdown::Shutdown;

use access::Edge;
use arrival::{ArrivalClock, TimestampedStream};
pub use limit::BodyLimitLayer;
use write_stall::{WriteStallLimit, is_write_stall};

/// What every request handler can reach.
pub struct AppState {
    pub registry: Arc<Registry>,
    /// Replaced whole on SIGHUP.
    pub config: std::sync::RwLock<Arc<Config>>,
    pub metrics: PrometheusHandle,
    /// Every configured model is loaded and warmed up.
    pub ready: AtomicBool,
    /// Shutdown has begun: readiness answers 503.
    pub draining: AtomicBool,
    /// The repository's index, load and unload (`None` without a model repository).
    pub repository: Option<Arc<crate::repository_control::RepositoryControl>>,
    /// TLS on the listeners (`None`: plain text).
    pub tls: Option<Arc<tls::Tls>>,
    /// Traces exported over OTLP (`None`: off).
    pub traces: Option<Arc<crate::otlp::Traces>>,
}

impl AppState {
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_config(&self, config: Arc<Config>) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.draining.load(Ordering::Acquire)
    }
}

/// `{"error": ...}` with the status (and `Retry-After`, `Allow`) the error maps to.
pub fn error_response(e: &ApiError) -> Response<Full<Bytes>> {
    let mut resp = json_response(e.status(), e.body());
    if let Some(secs) = e.retry_after_secs() {
        resp.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    if let Some(allow) = e.allow() {
        resp.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static(allow));
    }
    if matches!(e, ApiError::UnsupportedEncoding(_)) {
        resp.headers_mut().insert(
            header::ACCEPT_ENCODING,
            header::HeaderValue::from_static(content_coding::ACCEPTED),
        );
    }
    if e.closes_connection() {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    resp
}

pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Serves `listener` until shutdown, then lets open connections finish their in-flight
/// requests (within `limits.shutdown_grace_ms`) and returns. With `metrics_only`, answers
/// only `GET /metrics`.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    mut shutdown: Shutdown,
    metrics_only: bool,
) {
    // Connection-level limits are read once: a reload does not change a bound socket.
    let limits = state.config().limits.clone();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let edge = Arc::new(Edge::new(&state.config()));
    let mut tasks = tokio::task::JoinSet::new();
    let mut accepts = Accepts::default();
    loop {
        // Wait for room before accepting: beyond the limit, clients queue in the backlog.
        let permit = tokio::select! {
            // The semaphore is ours and never closed; were it, stop accepting.
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.wait() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = accepts.next(&listener) => accepted,
            _ = shutdown.wait() => break,
        };
        let connection = Connection {
            state: state.clone(),
            limits: limits.clone(),
            metrics_only,
            peer,
            shutdown: shutdown.clone(),
            edge: edge.clone(),
        };
        tasks.spawn(async move {
            connection.serve(stream).await;
            drop(permit);
        });
        // Reap finished connection tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    drop(listener);
    drain(tasks, limits.shutdown_grace()).await;
}

/// Accepts connections, backing off while accepting fails.
#[derive(Default)]
struct Accepts {
    /// Accepts that failed in a row.
    failing: u64,
}

impl Accepts {
    async fn next(&mut self, listener: &TcpListener) -> (TcpStream, std::net::SocketAddr) {
        loop {
            match listener.accept().await {
                Ok(accepted) => {
                    if self.failing > 0 {
                        tracing::info!(failed = self.failing, "accepting connections again");
                        self.failing = 0;
                    }
                    return accepted;
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning,
                    // and say so once a streak, not twenty times a second.
                    if self.failing == 0 {
                        tracing::warn!(error = %e, "accept failed; retrying every 50 ms");
                    }
                    self.failing += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// One accepted connection and what serving it needs.
struct Connection {
    state: Arc<AppState>,
    limits: crate::config::Limits,
    metrics_only: bool,
    peer: std::net::SocketAddr,
    shutdown: Shutdown,
    edge: Arc<Edge>,
}

impl Connection {
    /// Plain text, or TLS once its handshake completes within the header timeout.
    async fn serve(self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let clock = Arc::new(ArrivalClock::default());
        let stream = TimestampedStream::new(stream, clock.clone());
        let Some(tls) = self.state.tls.clone() else {
            return self.serve_io(stream, clock).await;
        };
        let handshake = tls.acceptor().accept(stream);
        match tokio::time::timeout(self.limits.header_read_timeout(), handshake).await {
            Ok(Ok(secured)) => self.serve_io(secured, clock).await,
            Ok(Err(e)) => {
                metrics::counter!(names::TLS_FAILED, "reason" => "handshake").increment(1);
                tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed");
            }
            Err(_) => {
                metrics::counter!(names::TLS_FAILED, "reason" => "timeout").increment(1);
            }
        }
    }

    /// HTTP/1.1 with keep-alive, or HTTP/2 (by ALPN, or by prior knowledge in plain text):
    /// the header timeout, the write-stall limit, the body limit, CORS and panics caught per
    /// request; on shutdown, the in-flight requests finish first.
    async fn serve_io<S>(mut self, io: S, clock: Arc<ArrivalClock>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let stream = WriteStallLimit::new(io, self.limits.response_write_timeout());
        let started = Arc::new(AtomicBool::new(false));
        let (state, edge) = (self.state.clone(), self.edge.clone());
        let context = (clock, edge.clone(), self.metrics_only, self.peer);
        let first = started.clone();
        let service = ServiceBuilder::new()
            .layer(tower_http::catch_panic::CatchPanicLayer::custom(
                panic_response,
            ))
            .option_layer(edge.cors.clone())
            .layer(BodyLimitLayer {
                limit: self.limits.max_body_bytes,
            })
            .service_fn(move |req| {
                first.store(true, Ordering::Relaxed);
                let answer = Self::answer(req, state.clone(), context.clone());
                async move { Ok::<_, Infallible>(answer.await) }
            });
        let connections = metrics::gauge!(names::CONNECTIONS);
        connections.increment(1.0);
        let builder = protocols(&self.limits);
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        tokio::pin!(conn);
        // HTTP/1's header timeout starts once the protocol is known; a client that sends
        // nothing at all is cut off here.
        let silent = tokio::time::sleep(self.limits.header_read_timeout());
        tokio::pin!(silent);
        let mut watching = true;
        loop {
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        count_cut(&*e);
                        tracing::debug!(peer = %self.peer, error = %e, "connection closed");
                    }
                    break;
                }
                _ = silent.as_mut(), if watching => {
                    watching = false;
                    if started.load(Ordering::Relaxed) {
                        continue;
                    }
                    metrics::counter!(names::CONNECTIONS_CUT, "reason" => "header_timeout")
                        .increment(1);
                    break;
                }
                _ = self.shutdown.wait() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.as_mut().await;
                    break;
                }
            }
        }
        connections.decrement(1.0);
    }

    /// One request: its id and span, the routes, the access log line.
    async fn answer(
        req: http::Request<Limited<Incoming>>,
        state: Arc<AppState>,
        context: (Arc<ArrivalClock>, Arc<Edge>, bool, std::net::SocketAddr),
    ) -> Response<Full<Bytes>> {
        let (clock, edge, metrics_only, peer) = context;
        let id = request_id::of(req.headers());
        let span = access::span(&req, &id);
        let began = std::time::Instant::now();
        // Scrapes of the metrics listener are not traced.
        let traces = state.traces.clone().filter(|_| !metrics_only);
        let traced = traces.as_ref().map(|_| {
            let target = (req.method().to_string(), req.uri().path().to_string());
            (trace::parent(req.headers()), target)
        });
        // An HTTP/2 connection carries many requests at once: the bytes read since the
        // last request are not this one's alone, so its handler keeps its own clock.
        let arrival = match req.version() {
            http::Version::HTTP_2 => &UNSTAMPED,
            _ => &*clock,
        };
        let handler =
            routes::handle(state, req, metrics_only, peer, arrival).instrument(span.clone());
        let (mut response, phases) = trace::recording(traces.is_some(), handler).await;
        // Whatever this request left unclaimed is not the next one's.
        arrival.take();
        if let (Some(traces), Some((parent, (method, path)))) = (&traces, &traced) {
            let answered = trace::Answered {
                method,
                path,
                request_id: id.to_str().unwrap_or_default(),
                status: response.status().as_u16(),
                began,
            };
            trace::export(traces, parent, answered, phases);
        }
        response.headers_mut().insert(request_id::HEADER, id);
        if edge.access_log {
            span.in_scope(|| access::log(response.status(), began.elapsed()));
        }
        response
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

/// Waits for open connections to finish, at most `grace`; then closes the rest.
async fn drain(mut tasks: tokio::task::JoinSet<()>, grace: std::time::Duration) {
    if tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        tracing::warn!(
            remaining = tasks.len(),
            "connections still open after the shutdown grace period; closing them"
        );
        tasks.abort_all();
    }
}

/// Counts a connection the server cut off for a slow client (other errors, such as a
/// client resetting its connection, are the client's own doing and only logged).
fn count_cut(e: &(dyn std::error::Error + 'static)) {
    let timed_out = e
        .downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_timeout);
    let reason = if timed_out {
        "header_timeout"
    } else if is_write_stall(e) {
        "write_stall"
    } else {
        return;
    };
    metrics::counter!(names::CONNECTIONS_CUT, "reason" => reason).increment(1);
}

/// A handler that panicked answers 500 like any other failure; the connection lives on.
fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response<Full<Bytes>> {
    error_response(&ApiError::Internal(
        "internal error while handling the request".into(),
    ))
}
