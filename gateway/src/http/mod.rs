//! The HTTP server: hyper accepts, tower layers bound the body and catch panics, and the
//! routes answer. A semaphore bounds open connections (further clients wait in the listen
//! backlog); a slow client must send its headers, then its body, within the configured
//! times, and a client that stops reading its responses is cut off after a stall of the
//! configured time; on shutdown the listener closes and every connection finishes its
//! in-flight request first.

mod access;
pub(crate) mod admin;
mod arrival;
pub(crate) mod auth;
mod body;
pub(crate) mod cohere;
mod connection;
pub(crate) mod content_coding;
pub(crate) mod count;
pub(crate) mod errors;
mod head;
mod limit;
pub(crate) mod openai;
mod request_id;
mod routes;
mod sending;
pub(crate) mod tei;
pub(crate) mod text_handler;
pub mod tls;
mod trace;
pub(crate) mod v2;
mod write_stall;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::lifecycle::registry::Registry;
use crate::shutdown::Shutdown;

use access::Edge;
use connection::Connection;
pub use limit::BodyLimitLayer;

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
    pub repository: Option<Arc<crate::lifecycle::repository_control::RepositoryControl>>,
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

    /// The longest a request waits for its answer, as configured now.
    pub fn request_timeout(&self) -> std::time::Duration {
        self.config().limits.request_timeout()
    }

    pub fn set_config(&self, config: Arc<Config>) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.draining.load(Ordering::Acquire)
    }
}

/// What a listener serves.
#[derive(Clone)]
pub enum Api {
    /// Every HTTP route.
    Http,
    /// `GET /metrics` alone.
    MetricsOnly,
    /// Calls answered by services of their own (the gRPC API), not by the routes.
    Grpc(Arc<dyn Calls>),
}

/// What answers a listener's calls in place of the HTTP routes: the gRPC services, which
/// depend on this module and so reach its connections only through this trait.
#[async_trait::async_trait]
pub trait Calls: Send + Sync {
    /// The answer to one call from `peer`.
    async fn answer(
        &self,
        req: http::Request<hyper::body::Incoming>,
        peer: std::net::SocketAddr,
    ) -> http::Response<tonic::body::Body>;
}

/// Open connections at most, for the listeners that share them (`limits.max_connections`).
pub fn connection_permits(state: &AppState) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(state.config().limits.max_connections))
}

/// Serves `listener` until shutdown, then lets open connections finish their in-flight
/// requests (within `limits.shutdown_grace_ms`) and returns; a connection takes one of
/// `permits` while it is open.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    mut shutdown: Shutdown,
    api: Api,
    permits: Arc<Semaphore>,
) {
    // Connection-level limits are read once: a reload does not change a bound socket.
    let limits = state.config().limits.clone();
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
            api: api.clone(),
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
