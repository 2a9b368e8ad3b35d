//! `tandem-bench load`: an open-loop load generator. Send times are fixed in advance
//! (constant spacing, Poisson, a step, or bursts), each request's latency is measured from
//! its scheduled send time, so time spent queueing anywhere — in the server or in a client
//! that could not keep up — shows in the percentiles (no coordinated omission). Latencies
//! go into HDR histograms.
//!
//! Like wrk2, it keeps a fixed set of keep-alive connections: a scheduled request goes to
//! the next free one and waits for one otherwise. Opening a connection per outstanding
//! request instead would spend the shared CPU on connection churn, not on the server.
//! While it runs it scrapes the server's `/metrics` every second for the batch size, so
//! the plot shows latency against the budget with the batches that produced it.
//!
//! Against tandem's response cache (`--zipf`, `--clear-cache`), the report splits the 200s
//! by the `x-tandem-cache` each carried, hits apart from the rest.
//!
//! With `--grpc` the requests go to the server's gRPC listener instead, as `ModelInfer`
//! calls on HTTP/2 connections ([`crate::grpc`]), one at a time on each, as over HTTP/1.1;
//! the model's metadata and `/metrics` still come from `--url`.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use super::grpc;
use super::http1::{self, Cached, Reply};
use super::schedule;
use super::server::{ServerSide, clear_cache, row_shape, scrape_server};
use requests::{Target, targets};

mod picks;
mod print;
pub use print::print_report;
pub mod requests;
use crate::cli::{Api, LoadArgs, LoadShape};

#[derive(Clone, Debug, Serialize)]
pub struct LoadReport {
    pub url: String,
    pub model: String,
    pub shape: LoadShape,
    pub offered_rps: f64,
    pub duration_s: f64,
    pub rows_per_request: usize,
    pub binary: bool,
    /// The gRPC listener the requests went to, where they went over gRPC.
    pub grpc: Option<String>,
    pub api: Api,
    /// Distinct bodies, sent in turn or drawn with `zipf`.
    pub bodies: u32,
    /// The exponent of the Zipf law the bodies were drawn with.
    pub zipf: Option<f64>,
    /// The share of the requests sent whose body had been sent before in the run.
    pub repeated_share: f64,
    pub sent: u64,
    /// 200s per second.
    pub achieved_rps: f64,
    /// 200s answered within the budget, per second.
    pub goodput_rps: f64,
    pub budget_ms: f64,
    /// Share of sent requests answered 200 within the budget.
    pub within_budget: f64,
    /// Latency percentiles of the 200s.
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// Responses by status code; transport failures as `error`, skipped sends as
    /// `client_overload`, requests unanswered within the caller's bound as `timeout`. A
    /// gRPC status counts as the HTTP status it stands for (RESOURCE_EXHAUSTED as 429,
    /// see `crate::grpc`), any other as `grpc-CODE`.
    pub outcomes: BTreeMap<String, u64>,
    /// The 200s by `x-tandem-cache`, where any carried it (a model using tandem's cache).
    pub cache: Option<CacheSplit>,
    /// The server process's context switches during the run per request sent (from
    /// `tandem_process_context_switches_total`; `None` for a server without it).
    pub server_context_switches_per_request: Option<f64>,
    /// The mean of the server's `tandem_device_busy_ratio` over the run's seconds: the share
    /// of the device its models kept busy (`None` for a server without it).
    pub server_device_busy: Option<f64>,
    /// One entry per second of the schedule.
    pub timeline: Vec<Second>,
    /// The 200s by where in its second each was scheduled, in `PHASE_MS` slices: where a
    /// burst (the first 200 ms of every second) hurts, at its onset or all through it.
    pub by_phase: Vec<Phase>,
}

/// The 200s of a run against a model that uses tandem's response cache.
#[derive(Clone, Debug, Serialize)]
pub struct CacheSplit {
    pub hits: u64,
    pub misses: u64,
    /// Requests of several inputs, some of them found.
    pub partial: u64,
    pub hit_p50_ms: f64,
    pub hit_p99_ms: f64,
    /// The other 200s: misses, partial hits, and any without the header.
    pub rest_p50_ms: f64,
    pub rest_p99_ms: f64,
}

/// The slice of a second `by_phase` groups requests by.
const PHASE_MS: u64 = 50;

/// The 200s scheduled in one slice of every second.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub from_ms: u64,
    pub ok: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// What happened to the requests scheduled in one second.
#[derive(Clone, Debug, Serialize)]
pub struct Second {
    pub t: u64,
    pub sent: u64,
    pub ok: u64,
    pub shed: u64,
    pub p99_ms: f64,
    /// Mean rows per batch the server ran in this second (from its /metrics).
    pub batch_rows: Option<f64>,
}

/// One finished request: when it was scheduled, how long it took, what came back.
#[derive(Clone, Copy)]
struct Sample {
    at: Duration,
    latency: Duration,
    status: u16,
    cache: Option<Cached>,
}

/// Status codes for what never got an HTTP status.
const TRANSPORT_ERROR: u16 = 0;
const CLIENT_OVERLOAD: u16 = 1;
const TIMEOUT: u16 = 2;

/// What [`measure_with`] adds to `bench load`'s flags for callers that drive the generator
/// as a library.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// A request not answered within this of being sent is counted as `timeout` and its
    /// connection is dropped; `None` waits as long as the server takes. A caller that must
    /// finish (a soak) needs the bound: one request never answered would hold the run open.
    pub request_timeout: Option<Duration>,
}

/// A run's report and the latencies behind its percentiles, for callers that combine runs.
pub struct Measured {
    pub report: LoadReport,
    /// The 200s' latencies in microseconds, from the scheduled send to the last byte.
    pub ok_latency_us: Histogram<u64>,
}

/// A request to send: its scheduled time and its body (an index into `Shared::targets`).
struct Job {
    at: Instant,
    body: u32,
}

/// What every connection of one run shares with the others and with the scheduler.
struct Shared {
    /// Where requests go: the HTTP server, or its gRPC listener.
    addr: SocketAddr,
    /// The requests are gRPC calls.
    grpc: bool,
    /// Jobs wait here for a free connection; beyond `max_in_flight` they are dropped and
    /// counted, so a stalled server cannot make the generator's memory grow.
    jobs: tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Job>>,
    targets: Vec<Target>,
    samples: Mutex<Vec<Sample>>,
    start: Instant,
    request_timeout: Option<Duration>,
}

impl Shared {
    fn record(&self, at: Instant, latency: Duration, status: u16, cache: Option<Cached>) {
        let at = at.saturating_duration_since(self.start);
        let sample = Sample {
            at,
            latency,
            status,
            cache,
        };
        self.samples.lock().expect("samples").push(sample);
    }
}

pub async fn measure(args: &LoadArgs) -> anyhow::Result<LoadReport> {
    Ok(measure_with(args, &LoadOptions::default()).await?.report)
}

pub async fn measure_with(args: &LoadArgs, options: &LoadOptions) -> anyhow::Result<Measured> {
    anyhow::ensure!(
        args.rate > 0.0 && args.duration > 0.0,
        "rate and duration must be positive"
    );
    let (addr, authority) = resolve(&args.url).await?;
    let target = match &args.grpc {
        Some(grpc) => (tokio::net::lookup_host(grpc).await)
            .with_context(|| format!("--grpc {grpc}"))?
            .next()
            .with_context(|| format!("--grpc {grpc} does not resolve"))?,
        None => addr,
    };
    let grpc = args.grpc.is_some();
    // Texts need no shape; rows are drawn in the shape of the model's input.
    let shape = match &args.texts {
        Some(_) => requests::RowShape::mlp(0),
        None => row_shape(addr, &authority, &args.model).await?,
    };
    let targets = targets(args, &shape, &authority)?;
    let sends = schedule::schedule(args.shape, args.rate, args.duration, args.seed);
    let picks = match (args.zipf, args.repeat_share) {
        (Some(s), Some(share)) => {
            picks::stationary(sends.len(), targets.len(), s, share, args.seed)
        }
        (zipf, _) => picks::picks(sends.len(), targets.len(), zipf, args.seed),
    };
    if args.clear_cache {
        clear_cache(addr, &authority, &args.model).await?;
    }
    let (jobs_tx, jobs_rx) = tokio::sync::mpsc::channel::<Job>(args.max_in_flight.max(1));
    // Every connection is open before the clock starts, as wrk2 does: opening them lazily
    // put a connect and a handshake into each of the first `connections` requests, and
    // made every run's first second look slow.
    let opened = open_connections(target, grpc, args.connections.max(1)).await;
    let shared = Arc::new(Shared {
        addr: target,
        grpc,
        jobs: tokio::sync::Mutex::new(jobs_rx),
        samples: Mutex::new(Vec::with_capacity(sends.len())),
        start: Instant::now(),
        targets,
        request_timeout: options.request_timeout,
    });
    let mut connections = tokio::task::JoinSet::new();
    for conn in opened {
        connections.spawn(connection(shared.clone(), conn));
    }
    let scraper = tokio::spawn(scrape_server(
        addr,
        authority,
        args.model.clone(),
        shared.start,
        args.duration,
    ));
    let scheduler = spawn_scheduler(shared.clone(), sends, picks.clone(), jobs_tx);
    while connections.join_next().await.is_some() {}
    scheduler
        .join()
        .map_err(|_| anyhow::anyhow!("the scheduler thread panicked"))?;
    let server = scraper.await.unwrap_or_default();
    let elapsed = shared.start.elapsed().as_secs_f64().max(args.duration);
    let samples = std::mem::take(&mut *shared.samples.lock().expect("samples"));
    summarize(args, &picks, elapsed, &samples, &server)
}

/// The address and `host:port` of `url`.
async fn resolve(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let uri: http::Uri = url.parse().context("--url")?;
    let authority = uri
        .authority()
        .context("--url needs host:port")?
        .to_string();
    let addr = tokio::net::lookup_host(&authority)
        .await?
        .next()
        .context("--url does not resolve")?;
    Ok((addr, authority))
}

/// `n` connections, opened together; `None` for each that failed (its first job retries).
async fn open_connections(addr: SocketAddr, grpc: bool, n: usize) -> Vec<Option<Connection>> {
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..n {
        opening.spawn(async move { Connection::open(addr, grpc).await.ok() });
    }
    opening.join_all().await
}

/// A connection of the run's protocol.
enum Connection {
    Http1(http1::Connection),
    Grpc(grpc::Connection),
}

impl Connection {
    async fn open(addr: SocketAddr, grpc: bool) -> io::Result<Connection> {
        Ok(match grpc {
            true => Connection::Grpc(grpc::Connection::open(addr).await?),
            false => Connection::Http1(http1::Connection::open(addr).await?),
        })
    }

    fn is_closed(&self) -> bool {
        match self {
            Connection::Http1(c) => c.is_closed(),
            Connection::Grpc(c) => c.is_closed(),
        }
    }

    /// Sends `target` for a job scheduled at `scheduled` and reads the answer to its last
    /// byte.
    async fn exchange(
        &mut self,
        target: &Target,
        scratch: &mut Vec<u8>,
        scheduled: Instant,
    ) -> io::Result<Reply> {
        match self {
            Connection::Http1(c) => c.exchange(target.request(scratch, scheduled)).await,
            Connection::Grpc(c) => {
                let (message, left) = target.call(scheduled);
                c.call(message, left).await
            }
        }
    }
}

/// The schedule runs on its own OS thread (see `schedule::pace`); the channel closes, and
/// the connections finish, when it ends. `picks` holds each send's body, in order.
fn spawn_scheduler(
    shared: Arc<Shared>,
    sends: Vec<Duration>,
    picks: Vec<u32>,
    jobs: tokio::sync::mpsc::Sender<Job>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut bodies = picks.into_iter();
        schedule::pace(shared.start, &sends, |at| {
            // As many picks as sends.
            let body = bodies.next().unwrap_or_default();
            if jobs.try_send(Job { at, body }).is_err() {
                shared.record(at, Duration::ZERO, CLIENT_OVERLOAD, None);
            }
        })
    })
}

/// The samples of one run, counted the ways the report gives them.
struct Tally {
    ok: Histogram<u64>,
    outcomes: BTreeMap<String, u64>,
    per_second: Vec<SecondTally>,
    by_phase: Vec<Histogram<u64>>,
    /// 200s answered within the budget.
    good: u64,
    budget: Duration,
    /// The 200s that were cache hits, and the others.
    hits: Histogram<u64>,
    rest: Histogram<u64>,
    /// The 200s that said they missed, and that were partial hits.
    misses: u64,
    partial: u64,
}

/// The requests scheduled in one second.
struct SecondTally {
    sent: u64,
    ok: u64,
    shed: u64,
    latency_us: Histogram<u64>,
}

/// An empty latency histogram in microseconds, up to ten minutes.
fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64 / 1000.0
    }
}

impl Tally {
    fn new(seconds: usize, budget: Duration) -> anyhow::Result<Tally> {
        let per_second = (0..seconds)
            .map(|_| {
                Ok(SecondTally {
                    sent: 0,
                    ok: 0,
                    shed: 0,
                    latency_us: histogram()?,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Tally {
            ok: histogram()?,
            outcomes: BTreeMap::new(),
            per_second,
            by_phase: (0..1000 / PHASE_MS)
                .map(|_| histogram())
                .collect::<anyhow::Result<_>>()?,
            good: 0,
            budget,
            hits: histogram()?,
            rest: histogram()?,
            misses: 0,
            partial: 0,
        })
    }

    fn record(&mut self, s: &Sample) {
        let label = match s.status {
            TRANSPORT_ERROR => "error".to_string(),
            CLIENT_OVERLOAD => "client_overload".to_string(),
            TIMEOUT => "timeout".to_string(),
            code if code >= grpc::GRPC_CODE_BASE => format!("grpc-{}", code - grpc::GRPC_CODE_BASE),
            code => code.to_string(),
        };
        *self.outcomes.entry(label).or_default() += 1;
        let last = self.per_second.len() - 1;
        let sec = &mut self.per_second[(s.at.as_secs() as usize).min(last)];
        sec.sent += 1;
        if s.status == 200 {
            let us = (s.latency.as_micros() as u64).max(1);
            let _ = self.ok.record(us);
            let _ = sec.latency_us.record(us);
            let phase = (s.at.subsec_millis() as u64 / PHASE_MS) as usize;
            let _ = self.by_phase[phase].record(us);
            sec.ok += 1;
            if s.latency <= self.budget {
                self.good += 1;
            }
            let _ = match s.cache {
                Some(Cached::Hit) => self.hits.record(us),
                Some(Cached::Miss) => {
                    self.misses += 1;
                    self.rest.record(us)
                }
                Some(Cached::Partial) => {
                    self.partial += 1;
                    self.rest.record(us)
                }
                None => self.rest.record(us),
            };
        } else if s.status == 429 {
            sec.shed += 1;
        }
    }

    fn timeline(&self, server: &ServerSide) -> Vec<Second> {
        self.per_second
            .iter()
            .enumerate()
            .map(|(t, s)| Second {
                t: t as u64,
                sent: s.sent,
                ok: s.ok,
                shed: s.shed,
                p99_ms: ms(&s.latency_us, 0.99),
                batch_rows: server.batch_rows.get(t).copied().flatten(),
            })
            .collect()
    }

    /// `None` where no 200 said how the cache answered it.
    fn cache(&self) -> Option<CacheSplit> {
        let hits = self.hits.len();
        (hits + self.misses + self.partial > 0).then(|| CacheSplit {
            hits,
            misses: self.misses,
            partial: self.partial,
            hit_p50_ms: ms(&self.hits, 0.5),
            hit_p99_ms: ms(&self.hits, 0.99),
            rest_p50_ms: ms(&self.rest, 0.5),
            rest_p99_ms: ms(&self.rest, 0.99),
        })
    }

    fn phases(&self) -> Vec<Phase> {
        self.by_phase
            .iter()
            .enumerate()
            .map(|(i, h)| Phase {
                from_ms: i as u64 * PHASE_MS,
                ok: h.len(),
                p50_ms: ms(h, 0.5),
                p99_ms: ms(h, 0.99),
            })
            .collect()
    }
}

/// The report of a run that sent the bodies `picks`, one a scheduled request.
fn summarize(
    args: &LoadArgs,
    picks: &[u32],
    elapsed: f64,
    samples: &[Sample],
    server: &ServerSide,
) -> anyhow::Result<Measured> {
    let budget = Duration::from_secs_f64(args.budget_ms / 1000.0);
    let mut tally = Tally::new((args.duration.ceil() as usize).max(1), budget)?;
    for s in samples {
        tally.record(s);
    }
    let sent = picks.len() as u64;
    let ok = &tally.ok;
    let report = LoadReport {
        url: args.url.clone(),
        model: args.model.clone(),
        shape: args.shape,
        offered_rps: args.rate,
        duration_s: args.duration,
        rows_per_request: args.rows,
        binary: args.binary,
        grpc: args.grpc.clone(),
        api: args.api,
        bodies: args.bodies,
        zipf: args.zipf,
        repeated_share: picks::repeated_share(picks, args.bodies as usize),
        sent,
        achieved_rps: ok.len() as f64 / elapsed,
        goodput_rps: tally.good as f64 / args.duration,
        budget_ms: args.budget_ms,
        within_budget: if sent == 0 {
            0.0
        } else {
            tally.good as f64 / sent as f64
        },
        p50_ms: ms(ok, 0.5),
        p90_ms: ms(ok, 0.9),
        p99_ms: ms(ok, 0.99),
        p999_ms: ms(ok, 0.999),
        max_ms: ok.max() as f64 / 1000.0,
        server_context_switches_per_request: server
            .context_switches
            .filter(|_| sent > 0)
            .map(|n| n / sent as f64),
        server_device_busy: mean(&server.device_busy),
        timeline: tally.timeline(server),
        by_phase: tally.phases(),
        cache: tally.cache(),
        outcomes: std::mem::take(&mut tally.outcomes),
    };
    Ok(Measured {
        report,
        ok_latency_us: tally.ok,
    })
}

/// One keep-alive connection (`conn`, if it opened): takes jobs until the schedule ends,
/// reconnecting after failures (a refused or reset connection counts the request as
/// `error`).
async fn connection(shared: Arc<Shared>, mut conn: Option<Connection>) {
    let mut scratch = Vec::new();
    loop {
        let Some(job) = shared.jobs.lock().await.recv().await else {
            return;
        };
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            conn = Connection::open(shared.addr, shared.grpc).await.ok();
        }
        let (status, cache) = match &mut conn {
            None => (TRANSPORT_ERROR, None),
            Some(c) => {
                let target = &shared.targets[job.body as usize];
                // The latency is to the response's last byte, which `exchange` reads.
                let exchange = c.exchange(target, &mut scratch, job.at);
                let reply = match shared.request_timeout {
                    None => Ok(exchange.await),
                    Some(t) => tokio::time::timeout(t, exchange).await,
                };
                match reply {
                    Ok(Ok(reply)) => (reply.status, reply.cache),
                    Ok(Err(_)) => (TRANSPORT_ERROR, None),
                    Err(_) => {
                        // Part of a request may be on the wire: the connection is spent.
                        conn = None;
                        (TIMEOUT, None)
                    }
                }
            }
        };
        shared.record(job.at, job.at.elapsed(), status, cache);
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

#[cfg(test)]
mod tests;
