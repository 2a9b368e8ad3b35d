//! The HTTP server: hyper accepts, tower layers bound the body and catch panics, and the
//! routes answer. A semaphore bounds open connections (further clients wait in the listen
//! backlog); a slow client must send its headers, then its body, within the configured
//! times, and a client that stops reading its responses is cut off after a stall of the
//! configured time; on shutdown the listener closes and every connection finishes its
//! in-flight request first.

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
mod routes;
mod similarity;
pub(crate) mod tei;
pub(crate) mod text;
pub(crate) mod text_common;
mod text_request;
mod tokens;
mod write_stall;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceBuilder;

use crate::config::Config;
use crate::error::ApiError;
use crate::metrics as names;
use crate::registry::Registry;
use crate::shutdown::Shutdown;

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
}

impl Connection {
    /// HTTP/1.1 with keep-alive: the header timeout, the write-stall limit, the body limit
    /// and panics caught per request; on shutdown, the in-flight request finishes first.
    async fn serve(mut self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let clock = Arc::new(ArrivalClock::default());
        let stream = WriteStallLimit::new(
            TimestampedStream::new(stream, clock.clone()),
            self.limits.response_write_timeout(),
        );
        let (state, metrics_only, peer) = (self.state.clone(), self.metrics_only, self.peer);
        let service = ServiceBuilder::new()
            .layer(tower_http::catch_panic::CatchPanicLayer::custom(
                panic_response,
            ))
            .layer(BodyLimitLayer {
                limit: self.limits.max_body_bytes,
            })
            .service_fn(move |req| {
                let (state, clock) = (state.clone(), clock.clone());
                async move {
                    let response = routes::handle(state, req, metrics_only, peer, &clock).await;
                    // Whatever this request left unclaimed is not the next one's.
                    clock.take();
                    Ok::<_, Infallible>(response)
                }
            });
        let connections = metrics::gauge!(names::CONNECTIONS);
        connections.increment(1.0);
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout())
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        tokio::pin!(conn);
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    count_cut(&e);
                    tracing::debug!(peer = %self.peer, error = %e, "connection closed");
                }
            }
            _ = self.shutdown.wait() => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.as_mut().await;
            }
        }
        connections.decrement(1.0);
    }
}

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
fn count_cut(e: &hyper::Error) {
    let reason = if e.is_timeout() {
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
