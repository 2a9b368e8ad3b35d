//! `tandem-bench soak`: a server at about 70% of its capacity for a long time while things
//! go wrong around it, and the checks that its clients never noticed and that nothing in
//! it grows.
//!
//! The steps: start `tandem serve` on a model repository in a temporary folder (or target
//! one at `--url`); measure the model's capacity with a short `bench sweep`; then, for
//! `--duration`, run `bench load` at a share of it in back-to-back segments (`segments`)
//! while the faults of `faults` (hot-swapped versions, a trainer killed and restarted,
//! SIGHUP reloads) and the clients of `clients` (slow, garbage) run on their own schedules,
//! and `resources` samples the server once a second; at the end, `server_side` reads what
//! the server counted and logged. The verdict (`verdict`): no 5xx anywhere, no request
//! lost (every request sent got an answer within `--request-timeout-s`), the p99 of the
//! 200s within the limit, few refusals, and every resource flat after warm-up. Any
//! violation makes the command fail after the report is printed and written.
//! docs/soak.md has the figures of a full run and the reasons for each tolerance.

mod clients;
mod faults;
mod resources;
mod segments;
mod server_side;
mod verdict;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::serve_process::ServeProcess;
use crate::cli::{Api, LoadArgs, LoadShape, SoakArgs, SweepArgs};
use faults::{ConfigFile, FaultReport, Variant};
use resources::{Flatness, Sample};
use segments::{LoadTotals, drive};
use server_side::{ServerSide, counters, server_side};
use verdict::{flatness, print_report, violations};

/// The gateway's metric names this reads (its metrics module is private to it).
const REQUESTS_TOTAL: &str = "tandem_requests_total";
const MODEL_LOADS_TOTAL: &str = "tandem_model_loads_total";

/// Set once, when the soak's time is up; every fault and client stops on it.
#[derive(Clone)]
pub struct Stop(std::sync::Arc<watch::Sender<bool>>);

impl Stop {
    fn new() -> Stop {
        Stop(std::sync::Arc::new(watch::channel(false).0))
    }

    fn set(&self) {
        self.0.send_replace(true);
    }

    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the stop is set.
    pub async fn stopped(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Sleeps `d` on this (OS) thread unless the stop comes first; whether it did not.
    pub fn sleep(&self, d: Duration) -> bool {
        let deadline = std::time::Instant::now() + d;
        while !self.is_set() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        false
    }
}

/// The value of the first sample of `name` (with `label` in its labels, if given).
pub fn metrics_value(text: &str, name: &str, label: Option<&str>) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .find(|l| label.is_none_or(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The sum of `name`'s samples by the value of their label `label`.
fn metrics_by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let key = format!("{label}=\"");
    let mut sums = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
    {
        let value = line.split(&key).nth(1).and_then(|r| r.split('"').next());
        let n = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(value), Some(n)) = (value, n) {
            *sums.entry(value.to_string()).or_default() += n;
        }
    }
    sums
}

/// `/metrics`, blocking, over a fresh connection: for the fault threads, which run outside
/// the runtime. `Connection: close`, so the body is what precedes the end of the stream.
pub fn scrape_blocking(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => Err(std::io::Error::other("/metrics did not answer 200")),
    }
}

/// The server under soak: one this command started in a temporary folder, or one at
/// `--url`.
struct Target {
    url: String,
    addr: SocketAddr,
    pid: Option<u32>,
    /// The model input width, for the garbage clients' near-valid requests.
    width: usize,
    process: Option<ServeProcess>,
    /// The temporary folder of a server this command started; removed at the end unless
    /// `keep` (a failed soak keeps the server's log and repository to look at).
    dir: Option<PathBuf>,
    keep: bool,
}

impl Target {
    /// Starts `tandem serve` on a repository holding version 1 of the model; returns the
    /// faults' plan for it too.
    fn start(args: &SoakArgs) -> anyhow::Result<(Target, faults::Plan)> {
        let dir = std::env::temp_dir().join(format!("tandem-soak-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repository = dir.join("models");
        let model_dir = repository.join(&args.model);
        faults::write_version(&model_dir, 1, &args.dims, args.seed, false)?;
        let config = ConfigFile {
            path: dir.join("tandem.toml"),
            repository,
            socket: dir.join("run/coloc.sock"),
            device: args.device.clone(),
            budget_ms: args.budget_ms,
        };
        config.write(Variant::A)?;
        let process = ServeProcess::start(&config.path, &dir.join("server.log"), None)?;
        let pid = process.child.id();
        let addr = addr_of(&process.url)?;
        let plan = plan(
            args,
            addr,
            Some(pid),
            Some(model_dir),
            vec![1],
            Some(config),
        );
        let target = Target {
            url: process.url.clone(),
            addr,
            pid: Some(pid),
            width: args.dims[0],
            process: Some(process),
            dir: Some(dir),
            keep: false,
        };
        Ok((target, plan))
    }

    /// A server someone else started, at `--url`.
    fn at(args: &SoakArgs, url: &str) -> anyhow::Result<(Target, faults::Plan)> {
        let addr = addr_of(url)?;
        let model_dir = args.model_repository.as_ref().map(|r| r.join(&args.model));
        let plan = plan(args, addr, args.pid, model_dir, Vec::new(), None);
        let target = Target {
            url: url.to_string(),
            addr,
            pid: args.pid,
            width: args.dims[0],
            process: None,
            dir: None,
            keep: false,
        };
        Ok((target, plan))
    }

    fn log(&self) -> Option<String> {
        let process = self.process.as_ref()?;
        std::fs::read_to_string(&process.log).ok()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.process.take());
        if let Some(dir) = self.dir.as_ref().filter(|_| !self.keep) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn addr_of(url: &str) -> anyhow::Result<SocketAddr> {
    let uri: http::Uri = url.parse().context("--url")?;
    let authority = uri.authority().context("--url needs host:port")?;
    std::net::ToSocketAddrs::to_socket_addrs(authority.as_str())?
        .next()
        .context("--url does not resolve")
}

fn plan(
    args: &SoakArgs,
    addr: SocketAddr,
    pid: Option<u32>,
    model_dir: Option<PathBuf>,
    written: Vec<u64>,
    config: Option<ConfigFile>,
) -> faults::Plan {
    let socket = match &config {
        Some(c) => Some(c.socket.clone()),
        None => args.coloc_socket.clone(),
    };
    faults::Plan {
        addr,
        pid,
        model_dir,
        written,
        dims: args.dims.clone(),
        swap_every: args.swap_every,
        keep_versions: args.keep_versions,
        corrupt_every: args.corrupt_every,
        socket,
        device: args.device.clone(),
        trainer_kill_every: args.trainer_kill_every,
        config,
        sighup_every: args.sighup_every,
        seed: args.seed,
    }
}

/// `bench load`'s flags for one run of the soak's load.
fn load_args(args: &SoakArgs, url: &str, rate: f64, duration: f64, seed: u64) -> LoadArgs {
    LoadArgs {
        url: url.to_string(),
        model: args.model.clone(),
        rate,
        duration,
        shape: LoadShape::Poisson,
        rows: 1,
        texts: None,
        api: Api::V2,
        zipf: None,
        repeat_share: None,
        clear_cache: false,
        binary: false,
        grpc: None,
        budget_ms: args.budget_ms,
        connections: args.connections,
        propagate_deadline: false,
        max_in_flight: 10_000,
        threads: 1,
        seed,
        bodies: 16,
        json: None,
    }
}

/// The model's capacity: the most 200s per second within the budget of a passing `bench
/// sweep` run (2 s per rate, 10% precision, failures confirmed once).
async fn capacity(args: &SoakArgs, url: &str) -> anyhow::Result<f64> {
    let sweep = SweepArgs {
        load: load_args(args, url, args.min_rate, 2.0, args.seed),
        min_rate: args.min_rate,
        max_rate: args.max_rate,
        precision: 0.1,
        cooldown: 1.0,
        min_within_budget: 0.0,
        confirm_failures: 1,
    };
    let report = super::sweep::search(&sweep).await?;
    report
        .best_goodput_rps
        .with_context(|| format!("no rate passed, even {} req/s", args.min_rate))
}

#[derive(Debug, Serialize)]
struct Settings {
    url: String,
    started_server: bool,
    model: String,
    dims: Vec<usize>,
    duration_s: f64,
    warmup_s: f64,
    budget_ms: f64,
    p99_limit_ms: f64,
    max_refused_share: f64,
    capacity_rps: Option<f64>,
    load_fraction: f64,
    rate_rps: f64,
    segment_s: f64,
    connections: usize,
    request_timeout_s: f64,
    swap_every_s: f64,
    trainer_kill_every_s: f64,
    sighup_every_s: f64,
    slow_clients: usize,
    garbage_rate: f64,
}

#[derive(Debug, Serialize)]
struct SoakReport {
    passed: bool,
    violations: Vec<String>,
    settings: Settings,
    load: LoadTotals,
    faults: FaultReport,
    slow_clients: clients::Tally,
    garbage_clients: clients::Tally,
    server: ServerSide,
    flatness: Vec<Flatness>,
    samples: Vec<Sample>,
}

pub fn run(args: SoakArgs) -> anyhow::Result<()> {
    check(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (mut target, plan) = match &args.url {
        Some(url) => Target::at(&args, url)?,
        None => Target::start(&args)?,
    };
    let capacity = match args.rate {
        Some(_) => None,
        None => Some(runtime.block_on(capacity(&args, &target.url))?),
    };
    let rate = args
        .rate
        .unwrap_or_else(|| capacity.unwrap_or(0.0) * args.load_fraction);
    println!(
        "soak {} for {:.0} s at {rate:.0} req/s{}",
        target.url,
        args.duration,
        capacity.map_or(String::new(), |c| format!(
            " ({:.0}% of the {c:.0} req/s measured)",
            args.load_fraction * 100.0
        ))
    );
    let report = soak(&args, &runtime, &mut target, plan, rate, capacity)?;
    print_report(&report);
    if let Some(dir) = target.dir.as_ref().filter(|_| !report.passed) {
        target.keep = true;
        println!(
            "the server's config, log and repository are kept in {}",
            dir.display()
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(
        report.passed,
        "the soak failed: {} violation(s): {}",
        report.violations.len(),
        report.violations.join("; ")
    );
    Ok(())
}

fn check(args: &SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.duration >= 10.0, "--duration must be at least 10 s");
    anyhow::ensure!(
        args.warmup_share > 0.0 && args.warmup_share < 1.0,
        "--warmup-share must be in (0, 1)"
    );
    anyhow::ensure!(
        args.dims.len() >= 2,
        "--dims needs an input and an output width"
    );
    anyhow::ensure!(args.segment >= 1.0, "--segment must be at least 1 s");
    anyhow::ensure!(
        args.keep_versions >= 1,
        "--keep-versions must be at least 1"
    );
    anyhow::ensure!(
        args.request_timeout_s > 0.0,
        "--request-timeout-s must be positive"
    );
    anyhow::ensure!(args.rate.is_none_or(|r| r > 0.0), "--rate must be positive");
    Ok(())
}

/// The soak proper: faults, clients and the sampler around the load, then the verdict.
fn soak(
    args: &SoakArgs,
    runtime: &tokio::runtime::Runtime,
    target: &mut Target,
    plan: faults::Plan,
    rate: f64,
    capacity: Option<f64>,
) -> anyhow::Result<SoakReport> {
    let before = counters(target.addr);
    let stop = Stop::new();
    let start = Instant::now();
    let faults = faults::start(plan, stop.clone());
    let limits = slow_limits(target);
    let slow = runtime.spawn(clients::slow(
        target.addr,
        args.model.clone(),
        args.slow_clients,
        limits,
        stop.clone(),
    ));
    let garbage = runtime.spawn(clients::garbage_clients(
        target.addr,
        args.model.clone(),
        target.width,
        args.garbage_rate,
        args.seed,
        stop.clone(),
    ));
    let sampler = runtime.spawn(resources::sample(
        target.addr,
        target.pid,
        start,
        stop.clone(),
    ));
    let load = runtime.block_on(drive(args, &target.url, rate, target.pid));
    stop.set();
    let faults = faults.join();
    let slow_clients = runtime.block_on(slow)?;
    let garbage_clients = runtime.block_on(garbage)?;
    let samples = runtime.block_on(sampler)?;
    // Time for the server to log what the last SIGHUP did before its log is read.
    std::thread::sleep(Duration::from_secs(1));
    let server = server_side(target, &before);
    let mut report = SoakReport {
        passed: false,
        violations: Vec::new(),
        settings: settings(args, target, rate, capacity),
        load: load?,
        faults,
        slow_clients,
        garbage_clients,
        server,
        flatness: flatness(args, &samples),
        samples,
    };
    report.violations = violations(&report);
    report.passed = report.violations.is_empty();
    Ok(report)
}

/// The limits the slow clients pace themselves by: those the soak configured on its own
/// server, or the documented defaults for one at `--url` (whose outcomes are then judged
/// only for 5xx and answers that never come).
fn slow_limits(target: &Target) -> clients::Limits {
    match target.process {
        Some(_) => clients::Limits {
            header_timeout: ConfigFile::HEADER_TIMEOUT,
            body_timeout: ConfigFile::BODY_TIMEOUT,
            known: true,
        },
        None => clients::Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            known: false,
        },
    }
}

fn settings(args: &SoakArgs, target: &Target, rate: f64, capacity: Option<f64>) -> Settings {
    Settings {
        url: target.url.clone(),
        started_server: target.process.is_some(),
        model: args.model.clone(),
        dims: args.dims.clone(),
        duration_s: args.duration,
        warmup_s: args.duration * args.warmup_share,
        budget_ms: args.budget_ms,
        p99_limit_ms: p99_limit(args),
        max_refused_share: args.max_refused_share,
        capacity_rps: capacity,
        load_fraction: args.load_fraction,
        rate_rps: rate,
        segment_s: args.segment,
        connections: args.connections,
        request_timeout_s: args.request_timeout_s,
        swap_every_s: args.swap_every,
        trainer_kill_every_s: args.trainer_kill_every,
        sighup_every_s: args.sighup_every,
        slow_clients: args.slow_clients,
        garbage_rate: args.garbage_rate,
    }
}

fn p99_limit(args: &SoakArgs) -> f64 {
    args.p99_limit_ms.unwrap_or(args.budget_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_read_by_name_and_summed_by_label() {
        let text = "# HELP tandem_requests_total x\n\
            tandem_requests_total{model=\"m\",code=\"200\"} 10\n\
            tandem_requests_total{model=\"n\",code=\"200\"} 5\n\
            tandem_requests_total{model=\"m\",code=\"503\"} 1\n\
            tandem_requests_totally 7\n\
            tandem_trainers_connected 1\n";
        let by_code = metrics_by_label(text, REQUESTS_TOTAL, "code");
        assert_eq!(by_code.get("200"), Some(&15.0));
        assert_eq!(by_code.get("503"), Some(&1.0));
        assert_eq!(by_code.len(), 2);
        assert_eq!(
            metrics_value(text, "tandem_trainers_connected", None),
            Some(1.0)
        );
        assert_eq!(
            metrics_value(text, "tandem_requests_total", Some("model=\"n\"")),
            Some(5.0)
        );
        assert_eq!(metrics_value(text, "tandem_requests", None), None);
    }
}
