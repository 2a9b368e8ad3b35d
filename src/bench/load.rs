//! `tandem bench load`: an open-loop load generator. Send times are fixed in advance
//! (constant spacing or Poisson gaps), each request's latency is measured from its
//! scheduled send time, so time spent queueing anywhere — in the server or in a client
//! that could not keep up — shows in the percentiles (no coordinated omission). Latencies
//! go into HDR histograms.
//!
//! Like wrk2, it keeps a fixed set of keep-alive connections: a scheduled request goes to
//! the next free one and waits for one otherwise. Opening a connection per outstanding
//! request instead would spend the shared CPU on connection churn, not on the server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use models::rng::SplitMix64;
use serde::Serialize;
use tokio::time::Instant;

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
    pub sent: u64,
    pub achieved_rps: f64,
    /// 200s answered within the budget, per second.
    pub goodput_rps: f64,
    pub budget_ms: f64,
    pub within_budget: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// Responses by status code; transport failures as `error`, skipped sends as
    /// `client_overload`.
    pub outcomes: BTreeMap<String, u64>,
}

/// What each finished request reports.
struct Tally {
    ok: Histogram<u64>,
    outcomes: BTreeMap<String, u64>,
    good: u64,
}

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
    }
    Ok(())
}

/// Send offsets from the start, for `rate` requests/s over `duration` seconds.
pub fn schedule(shape: LoadShape, rate: f64, duration: f64, seed: u64) -> Vec<Duration> {
    match shape {
        LoadShape::Constant => (0u64..)
            .map(|i| i as f64 / rate)
            .take_while(|t| *t < duration)
            .map(Duration::from_secs_f64)
            .collect(),
        LoadShape::Poisson => {
            let mut rng = SplitMix64::new(seed);
            let mut t = 0.0;
            let mut out = Vec::new();
            loop {
                t += -(1.0 - rng.next_f64()).ln() / rate;
                if t >= duration {
                    return out;
                }
                out.push(Duration::from_secs_f64(t));
            }
        }
    }
}

/// A request to send: its scheduled time.
struct Job {
    at: Instant,
}

/// The request every job sends.
struct Target {
    authority: String,
    path: String,
    body: Bytes,
    header_len: Option<usize>,
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
    let (body, header_len) = payload(width, args.rows, args.binary, args.seed);
    let target = Arc::new(Target {
        authority,
        path: format!("/v2/models/{}/infer", args.model),
        body,
        header_len,
    });

    let sends = schedule(args.shape, args.rate, args.duration, args.seed);
    let tally = Arc::new(Mutex::new(Tally {
        ok: Histogram::new_with_bounds(1, 120_000_000, 3)?,
        outcomes: BTreeMap::new(),
        good: 0,
    }));
    let budget = Duration::from_secs_f64(args.budget_ms / 1000.0);
    // Jobs wait here for a free connection; beyond max_in_flight they are dropped and
    // counted, so a stalled server cannot make the generator's memory grow.
    let (jobs_tx, jobs_rx) = tokio::sync::mpsc::channel::<Job>(args.max_in_flight.max(1));
    let jobs_rx = Arc::new(tokio::sync::Mutex::new(jobs_rx));
    let mut connections = tokio::task::JoinSet::new();
    for _ in 0..args.connections.max(1) {
        let (jobs, target, tally) = (jobs_rx.clone(), target.clone(), tally.clone());
        connections.spawn(connection(addr, jobs, target, tally, budget));
    }
    // The schedule runs on its own OS thread: tokio's timer wheel has millisecond ticks,
    // which would add up to a millisecond to every latency measured from the schedule.
    let start = Instant::now();
    let scheduler = {
        let (sends, tally) = (sends.clone(), tally.clone());
        std::thread::spawn(move || {
            for offset in sends {
                let at = start + offset;
                let now = Instant::now();
                if at > now {
                    std::thread::sleep(at - now);
                }
                if jobs_tx.try_send(Job { at }).is_err() {
                    *tally
                        .lock()
                        .expect("tally")
                        .outcomes
                        .entry("client_overload".into())
                        .or_default() += 1;
                }
            }
        })
    };
    while connections.join_next().await.is_some() {}
    scheduler
        .join()
        .map_err(|_| anyhow::anyhow!("the scheduler thread panicked"))?;
    let elapsed = start.elapsed().as_secs_f64().max(args.duration);
    let t = tally.lock().expect("tally");
    let ms = |q: f64| t.ok.value_at_quantile(q) as f64 / 1000.0;
    let ok = t.ok.len();
    Ok(LoadReport {
        url: args.url.clone(),
        model: args.model.clone(),
        shape: args.shape,
        offered_rps: args.rate,
        duration_s: args.duration,
        rows_per_request: args.rows,
        binary: args.binary,
        sent: sends.len() as u64,
        achieved_rps: ok as f64 / elapsed,
        goodput_rps: t.good as f64 / args.duration,
        budget_ms: args.budget_ms,
        within_budget: if sends.is_empty() {
            0.0
        } else {
            t.good as f64 / sends.len() as f64
        },
        p50_ms: ms(0.5),
        p90_ms: ms(0.9),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: t.ok.max() as f64 / 1000.0,
        outcomes: t.outcomes.clone(),
    })
}

/// One keep-alive connection: takes jobs until the schedule ends, reconnecting after
/// failures (a refused or reset connection counts the request as `error`).
async fn connection(
    addr: std::net::SocketAddr,
    jobs: Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Job>>>,
    target: Arc<Target>,
    tally: Arc<Mutex<Tally>>,
    budget: Duration,
) {
    let mut sender: Option<http1::SendRequest<Full<Bytes>>> = None;
    loop {
        let Some(job) = jobs.lock().await.recv().await else {
            return;
        };
        if sender.as_ref().is_none_or(|s| s.is_closed()) {
            sender = connect(addr).await;
        }
        let outcome = match &mut sender {
            None => "error".to_string(),
            Some(s) => match send(s, &target).await {
                Ok(status) => status.to_string(),
                Err(_) => {
                    sender = None;
                    "error".to_string()
                }
            },
        };
        let latency = job.at.elapsed();
        let mut t = tally.lock().expect("tally");
        if outcome == "200" {
            let _ = t.ok.record((latency.as_micros() as u64).max(1));
            if latency <= budget {
                t.good += 1;
            }
        }
        *t.outcomes.entry(outcome).or_default() += 1;
    }
}

async fn connect(addr: std::net::SocketAddr) -> Option<http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    Some(sender)
}

async fn send(s: &mut http1::SendRequest<Full<Bytes>>, t: &Target) -> anyhow::Result<u16> {
    s.ready().await?;
    let mut req = http::Request::post(t.path.as_str())
        .header(http::header::HOST, t.authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(n) = t.header_len {
        req = req.header("inference-header-content-length", n);
    }
    let resp = s.send_request(req.body(Full::new(t.body.clone()))?).await?;
    let status = resp.status().as_u16();
    // Read the whole body: the latency is to the last byte.
    resp.into_body().collect().await?;
    Ok(status)
}

async fn input_width(
    addr: std::net::SocketAddr,
    authority: &str,
    model: &str,
) -> anyhow::Result<usize> {
    let mut s = connect(addr)
        .await
        .with_context(|| format!("cannot reach {authority}"))?;
    let req = http::Request::get(format!("/v2/models/{model}"))
        .header(http::header::HOST, authority)
        .body(Full::new(Bytes::new()))?;
    let resp = s.send_request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    anyhow::ensure!(
        status.is_success(),
        "model metadata: {status} {}",
        String::from_utf8_lossy(&body)
    );
    let meta: serde_json::Value = serde_json::from_slice(&body)?;
    meta["inputs"][0]["shape"][1]
        .as_u64()
        .map(|w| w as usize)
        .context("model metadata has no input width")
}

/// One request body, reused for every send: random rows, as JSON or binary.
fn payload(width: usize, rows: usize, binary: bool, seed: u64) -> (Bytes, Option<usize>) {
    let mut rng = SplitMix64::new(seed);
    let values: Vec<f32> = (0..width * rows).map(|_| rng.normal()).collect();
    if binary {
        let header = serde_json::json!({
            "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [rows, width],
                        "parameters": {"binary_data_size": values.len() * 4}}],
            "outputs": [{"name": "output-0", "parameters": {"binary_data": true}}]
        })
        .to_string();
        let mut body = header.clone().into_bytes();
        for v in &values {
            body.extend_from_slice(&v.to_le_bytes());
        }
        (Bytes::from(body), Some(header.len()))
    } else {
        let body = serde_json::json!({
            "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [rows, width], "data": values}]
        });
        (Bytes::from(body.to_string()), None)
    }
}

pub fn print_report(r: &LoadReport) {
    println!(
        "load  {} model {}  {:?} {:.0} req/s x {:.0} s  rows/request {}  {}",
        r.url,
        r.model,
        r.shape,
        r.offered_rps,
        r.duration_s,
        r.rows_per_request,
        if r.binary { "binary" } else { "json" }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_hold_the_rate() {
        let c = schedule(LoadShape::Constant, 100.0, 2.0, 1);
        assert_eq!(c.len(), 200);
        assert_eq!(c[1], Duration::from_millis(10));
        let p = schedule(LoadShape::Poisson, 1000.0, 10.0, 1);
        assert!((9500..10500).contains(&p.len()), "{}", p.len());
        assert!(p.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(
            p,
            schedule(LoadShape::Poisson, 1000.0, 10.0, 1),
            "deterministic in the seed"
        );
    }
}
