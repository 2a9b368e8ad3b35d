//! `tandem bench load`: an open-loop load generator. Send times are fixed in advance
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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use super::server::{ServerSide, input_width, scrape_server};
use super::{http1, schedule};
use requests::{Target, targets};

mod requests;
use crate::cli::{LoadArgs, LoadShape};

#[derive(Clone, Debug, Serialize)]
pub struct LoadReport {
    pub url: String,
    pub model: String,
    pub shape: LoadShape,
    pub offered_rps: f64,
    pub duration_s: f64,
    pub rows_per_request: usize,
    pub binary: bool,
    /// Distinct bodies sent in turn.
    pub bodies: u16,
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
    /// `client_overload`.
    pub outcomes: BTreeMap<String, u64>,
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
}

/// Status codes for what never got an HTTP status.
const TRANSPORT_ERROR: u16 = 0;
const CLIENT_OVERLOAD: u16 = 1;

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    let report = runtime.block_on(measure(&args))?;
    print_report(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        super::plot::timeline(&report, &path.with_extension("svg"))?;
    }
    Ok(())
}

/// A request to send: its scheduled time.
struct Job {
    at: Instant,
}

pub async fn measure(args: &LoadArgs) -> anyhow::Result<LoadReport> {
    anyhow::ensure!(
        args.rate > 0.0 && args.duration > 0.0,
        "rate and duration must be positive"
    );
    let uri: http::Uri = args.url.parse().context("--url")?;
    let authority = uri
        .authority()
        .context("--url needs host:port")?
        .to_string();
    let addr = tokio::net::lookup_host(&authority)
        .await?
        .next()
        .context("--url does not resolve")?;
    let width = input_width(addr, &authority, &args.model).await?;
    let targets = Arc::new(targets(args, width, &authority)?);

    let sends = schedule::schedule(args.shape, args.rate, args.duration, args.seed);
    let samples = Arc::new(Mutex::new(Vec::with_capacity(sends.len())));
    // Jobs wait here for a free connection; beyond max_in_flight they are dropped and
    // counted, so a stalled server cannot make the generator's memory grow.
    let (jobs_tx, jobs_rx) = tokio::sync::mpsc::channel::<Job>(args.max_in_flight.max(1));
    let jobs_rx = Arc::new(tokio::sync::Mutex::new(jobs_rx));
    // Every connection is open before the clock starts, as wrk2 does: opening them lazily
    // put a connect and a handshake into each of the first `connections` requests, and
    // made every run's first second look slow.
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..args.connections.max(1) {
        opening.spawn(async move { http1::Connection::open(addr).await.ok() });
    }
    let opened = opening.join_all().await;
    let start = Instant::now();
    let mut connections = tokio::task::JoinSet::new();
    for (i, conn) in opened.into_iter().enumerate() {
        let (jobs, targets, samples) = (jobs_rx.clone(), targets.clone(), samples.clone());
        // Each connection starts at its own body, so that the bodies go out interleaved.
        let first = i % targets.len();
        connections.spawn(connection(addr, conn, jobs, targets, first, samples, start));
    }
    let scraper = tokio::spawn(scrape_server(
        addr,
        authority,
        args.model.clone(),
        start,
        args.duration,
    ));
    // The schedule runs on its own OS thread (see `schedule::pace`).
    let scheduler = {
        let (sends, samples) = (sends.clone(), samples.clone());
        std::thread::spawn(move || {
            schedule::pace(start, &sends, |at| {
                if jobs_tx.try_send(Job { at }).is_err() {
                    samples.lock().expect("samples").push(Sample {
                        at: at.saturating_duration_since(start),
                        latency: Duration::ZERO,
                        status: CLIENT_OVERLOAD,
                    });
                }
            })
        })
    };
    while connections.join_next().await.is_some() {}
    scheduler
        .join()
        .map_err(|_| anyhow::anyhow!("the scheduler thread panicked"))?;
    let server = scraper.await.unwrap_or_default();
    let elapsed = start.elapsed().as_secs_f64().max(args.duration);
    let samples = std::mem::take(&mut *samples.lock().expect("samples"));
    summarize(args, sends.len() as u64, elapsed, &samples, &server)
}

fn summarize(
    args: &LoadArgs,
    sent: u64,
    elapsed: f64,
    samples: &[Sample],
    server: &ServerSide,
) -> anyhow::Result<LoadReport> {
    let budget = Duration::from_secs_f64(args.budget_ms / 1000.0);
    let mut ok = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let seconds = args.duration.ceil() as usize;
    let mut per_second: Vec<(u64, u64, u64, Histogram<u64>)> = (0..seconds)
        .map(|_| Histogram::new_with_bounds(1, 600_000_000, 3).map(|h| (0, 0, 0, h)))
        .collect::<Result<_, _>>()?;
    let mut by_phase: Vec<Histogram<u64>> = (0..1000 / PHASE_MS)
        .map(|_| Histogram::new_with_bounds(1, 600_000_000, 3))
        .collect::<Result<_, _>>()?;
    let mut good = 0u64;
    for s in samples {
        let label = match s.status {
            TRANSPORT_ERROR => "error".to_string(),
            CLIENT_OVERLOAD => "client_overload".to_string(),
            code => code.to_string(),
        };
        *outcomes.entry(label).or_default() += 1;
        let sec = &mut per_second[(s.at.as_secs() as usize).min(seconds - 1)];
        sec.0 += 1;
        if s.status == 200 {
            let us = (s.latency.as_micros() as u64).max(1);
            let _ = ok.record(us);
            let _ = sec.3.record(us);
            let phase = (s.at.subsec_millis() as u64 / PHASE_MS) as usize;
            let _ = by_phase[phase].record(us);
            sec.1 += 1;
            if s.latency <= budget {
                good += 1;
            }
        } else if s.status == 429 {
            sec.2 += 1;
        }
    }
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    Ok(LoadReport {
        url: args.url.clone(),
        model: args.model.clone(),
        shape: args.shape,
        offered_rps: args.rate,
        duration_s: args.duration,
        rows_per_request: args.rows,
        binary: args.binary,
        bodies: args.bodies,
        sent,
        achieved_rps: ok.len() as f64 / elapsed,
        goodput_rps: good as f64 / args.duration,
        budget_ms: args.budget_ms,
        within_budget: if sent == 0 {
            0.0
        } else {
            good as f64 / sent as f64
        },
        p50_ms: ms(&ok, 0.5),
        p90_ms: ms(&ok, 0.9),
        p99_ms: ms(&ok, 0.99),
        p999_ms: ms(&ok, 0.999),
        max_ms: ok.max() as f64 / 1000.0,
        outcomes,
        server_context_switches_per_request: server
            .context_switches
            .filter(|_| sent > 0)
            .map(|n| n / sent as f64),
        server_device_busy: mean(&server.device_busy),
        timeline: per_second
            .iter()
            .enumerate()
            .map(|(t, (sent, ok, shed, h))| Second {
                t: t as u64,
                sent: *sent,
                ok: *ok,
                shed: *shed,
                p99_ms: if h.is_empty() { 0.0 } else { ms(h, 0.99) },
                batch_rows: server.batch_rows.get(t).copied().flatten(),
            })
            .collect(),
        by_phase: by_phase
            .iter()
            .enumerate()
            .map(|(i, h)| Phase {
                from_ms: i as u64 * PHASE_MS,
                ok: h.len(),
                p50_ms: if h.is_empty() { 0.0 } else { ms(h, 0.5) },
                p99_ms: if h.is_empty() { 0.0 } else { ms(h, 0.99) },
            })
            .collect(),
    })
}

/// One keep-alive connection (`conn`, if it opened): takes jobs until the schedule ends,
/// reconnecting after failures (a refused or reset connection counts the request as
/// `error`).
async fn connection(
    addr: std::net::SocketAddr,
    mut conn: Option<http1::Connection>,
    jobs: Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Job>>>,
    targets: Arc<Vec<Target>>,
    first: usize,
    samples: Arc<Mutex<Vec<Sample>>>,
    start: Instant,
) {
    let mut scratch = Vec::new();
    let mut next = first;
    loop {
        let Some(job) = jobs.lock().await.recv().await else {
            return;
        };
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            conn = http1::Connection::open(addr).await.ok();
        }
        let status = match &mut conn {
            None => TRANSPORT_ERROR,
            Some(c) => {
                let target = &targets[next % targets.len()];
                next = next.wrapping_add(1);
                let request = target.request(&mut scratch, job.at);
                // The latency is to the response's last byte, which `exchange` reads.
                c.exchange(request)
                    .await
                    .map_or(TRANSPORT_ERROR, |reply| reply.status)
            }
        };
        let sample = Sample {
            at: job.at.saturating_duration_since(start),
            latency: job.at.elapsed(),
            status,
        };
        samples.lock().expect("samples").push(sample);
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

pub fn print_report(r: &LoadReport) {
    println!(
        "load  {} model {}  {:?} {:.0} req/s x {:.0} s  rows/request {}  {}  bodies {}",
        r.url,
        r.model,
        r.shape,
        r.offered_rps,
        r.duration_s,
        r.rows_per_request,
        if r.binary { "binary" } else { "json" },
        r.bodies
    );
    println!(
        "{:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "sent", "ok/s", "goodput/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    println!(
        "{:>10} {:>10.1} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        r.sent, r.achieved_rps, r.goodput_rps, r.p50_ms, r.p90_ms, r.p99_ms, r.p999_ms, r.max_ms
    );
    let outcomes: Vec<String> = r
        .outcomes
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    println!(
        "outcomes  {}   within {:.0} ms budget: {:.2}%",
        outcomes.join("  "),
        r.budget_ms,
        r.within_budget * 100.0
    );
}

/// Small arguments for the unit tests here and in `requests`.
#[cfg(test)]
fn test_args(shape: LoadShape) -> LoadArgs {
    LoadArgs {
        url: "http://h:1".into(),
        model: "m".into(),
        rate: 4.0,
        duration: 2.0,
        shape,
        rows: 1,
        binary: false,
        budget_ms: 50.0,
        connections: 1,
        propagate_deadline: false,
        max_in_flight: 1,
        threads: 1,
        seed: 1,
        bodies: 1,
        json: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_phase_groups_the_200s_by_where_in_their_second_they_were_sent() {
        let args = test_args(LoadShape::Burst);
        let sample = |at_ms: u64, latency_ms: u64, status: u16| Sample {
            at: Duration::from_millis(at_ms),
            latency: Duration::from_millis(latency_ms),
            status,
        };
        // Two seconds: slow answers early in each, fast ones later, a 429 not counted.
        let samples = [
            sample(10, 30, 200),
            sample(1_020, 20, 200),
            sample(1_030, 1, 429),
            sample(600, 2, 200),
            sample(1_990, 4, 200),
        ];
        let r = summarize(&args, 5, 2.0, &samples, &ServerSide::default()).unwrap();
        assert_eq!(r.by_phase.len(), 20);
        let first = &r.by_phase[0];
        assert_eq!((first.from_ms, first.ok), (0, 2));
        assert!((first.p99_ms - 30.0).abs() < 0.1, "{first:?}");
        assert!((first.p50_ms - 20.0).abs() < 0.1, "{first:?}");
        assert_eq!(r.by_phase[12].ok, 1);
        assert_eq!(r.by_phase[19].ok, 1);
        assert_eq!(r.by_phase.iter().map(|p| p.ok).sum::<u64>(), 4);
    }
}
