//! `tandem bench load`: an open-loop load generator. Send times are fixed in advance
//! (constant spacing or Poisson gaps), each request's latency is measured from its
//! scheduled send time, so time spent queueing anywhere — in the server or in a client
//! that could not keep up — shows in the percentiles. Latencies go into HDR histograms.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use models::rng::SplitMix64;
use serde::Serialize;
use tokio::time::Instant;

use crate::cli::{LoadArgs, LoadShape};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

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

pub async fn measure(args: &LoadArgs) -> anyhow::Result<LoadReport> {
    anyhow::ensure!(
        args.rate > 0.0 && args.duration > 0.0,
        "rate and duration must be positive"
    );
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(args.max_in_flight)
        .build_http();
    let base = args.url.trim_end_matches('/').to_string();
    let width = input_width(&client, &base, &args.model).await?;
    let (body, header_len) = payload(width, args.rows, args.binary, args.seed);
    let uri: http::Uri = format!("{base}/v2/models/{}/infer", args.model).parse()?;

    let sends = schedule(args.shape, args.rate, args.duration, args.seed);
    let tally = Arc::new(Mutex::new(Tally {
        ok: Histogram::new_with_bounds(1, 120_000_000, 3)?,
        outcomes: BTreeMap::new(),
        good: 0,
    }));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(args.max_in_flight));
    let budget = Duration::from_secs_f64(args.budget_ms / 1000.0);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for offset in &sends {
        let at = start + *offset;
        tokio::time::sleep_until(at).await;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            *tally
                .lock()
                .expect("tally")
                .outcomes
                .entry("client_overload".into())
                .or_default() += 1;
            continue;
        };
        let (client, uri, body, tally) = (client.clone(), uri.clone(), body.clone(), tally.clone());
        tasks.spawn(async move {
            let mut req = http::Request::post(uri).header("content-type", "application/json");
            if let Some(n) = header_len {
                req = req.header("inference-header-content-length", n);
            }
            let req = req.body(Full::new(body)).expect("valid request");
            let outcome = match client.request(req).await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    // Read the whole body: the latency is to the last byte.
                    match resp.into_body().collect().await {
                        Ok(_) => status.to_string(),
                        Err(_) => "error".to_string(),
                    }
                }
                Err(_) => "error".to_string(),
            };
            let latency = at.elapsed();
            let mut t = tally.lock().expect("tally");
            if outcome == "200" {
                let _ = t.ok.record((latency.as_micros() as u64).max(1));
                if latency <= budget {
                    t.good += 1;
                }
            }
            *t.outcomes.entry(outcome).or_default() += 1;
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
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

async fn input_width(client: &HttpClient, base: &str, model: &str) -> anyhow::Result<usize> {
    let uri: http::Uri = format!("{base}/v2/models/{model}").parse()?;
    let resp = client
        .get(uri)
        .await
        .with_context(|| format!("cannot reach {base}"))?;
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
