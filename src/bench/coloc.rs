//! `tandem bench coloc`: what co-located training costs serving, and what it gets.
//!
//! Starts `tandem serve` on the repository, then runs the same load (a) alone, (b) beside
//! an unmanaged trainer (normal priority, every core, deaf to directives) and (c) beside a
//! managed one (`tandem train --coloc-socket`: lowest CPU priority, obeying directives),
//! and measures the trainer alone for reference. Reports p99, the share of requests within
//! the budget, trainer samples/s, and the checks: p99(c) ≤ 1.07 × p99(a), and trainer(c) ≥
//! 0.8 × trainer alone × the share of the CPU serving left idle in (a). The three scenarios
//! run in rounds (a, b, c, a, b, c, ...) and the report gives the medians. With `--pin`
//! the load generator runs on the first core and the server and trainers on the rest; the
//! idle share is then of the server's cores.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::cores::{self, CoreSplit};
use super::load::{LoadReport, measure};
use super::stats::{median, paired_ratio_interval};
use crate::cli::{ColocArgs, LoadArgs};

#[derive(Debug, Serialize)]
struct Scenario {
    name: &'static str,
    p99_ms: f64,
    /// Every round's p99, in the order run (one entry for a single round).
    p99_per_round_ms: Vec<f64>,
    p50_ms: f64,
    within_budget: f64,
    trainer_samples_per_second: Option<f64>,
    /// Share of the machine's CPU time the server used during the load.
    server_cpu_share: f64,
    /// Share of the device serving used: the CPU share on the CPU, the time its models kept
    /// the GPU busy on a GPU.
    serving_device_share: f64,
    load: LoadReport,
}

#[derive(Debug, Serialize)]
struct ColocReport {
    rate: f64,
    budget_ms: f64,
    trainer_alone_samples_per_second: f64,
    idle_share: f64,
    scenarios: Vec<Scenario>,
    p99_ratio_managed: f64,
    /// A 90% bootstrap interval of `p99_ratio_managed` over the rounds (see
    /// [`paired_ratio_interval`]): how much of the ratio is the host's round-to-round noise.
    p99_ratio_managed_interval: (f64, f64),
    trainer_ratio_managed: f64,
}

/// The p99 ratio's interval: its level, resamples, and a fixed seed so a report can be
/// recomputed from its JSON.
const RATIO_INTERVAL_LEVEL: f64 = 0.9;
const RATIO_INTERVAL_RESAMPLES: usize = 4000;
const RATIO_INTERVAL_SEED: u64 = 7;

fn tandem() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("tandem"))
}

/// CPU seconds (user + system) a process has used, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // Fields after the name: state is [0], utime [11], stime [12] (in clock ticks).
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(
    args: &ColocArgs,
    dir: &Path,
    socket: &Path,
    split: Option<&CoreSplit>,
) -> anyhow::Result<Server> {
    let config = dir.join("tandem.toml");
    let repo = std::fs::canonicalize(&args.model_repository)
        .with_context(|| format!("{}", args.model_repository.display()))?;
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\ndevice = \"{}\"\n[defaults]\np99_ms = {}\n[coloc]\nsocket = \"{}\"\n{}",
            repo.display(),
            args.device,
            args.budget_ms,
            socket.display(),
            args.max_duty_cycle
                .map(|d| format!("max_duty_cycle = {d}\n"))
                .unwrap_or_default()
        ),
    )?;
    let log = dir.join("server.log");
    let mut cmd = Command::new(tandem());
    if let Some(split) = split {
        cores::pin_child(&mut cmd, &split.server);
    }
    let child = cmd
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .stderr(std::fs::File::create(&log)?)
        .stdout(Stdio::null())
        .spawn()
        .context("starting tandem serve")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let addr = text
            .split("listening addr=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next());
        if let (Some(addr), true) = (addr, text.contains("serving ready=true")) {
            return Ok(Server {
                child,
                url: format!("http://{addr}"),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!("the server did not become ready; see {}", log.display())
}

fn start_trainer(
    args: &ColocArgs,
    dir: &Path,
    tag: &str,
    extra: &[&str],
    seconds: f64,
    split: Option<&CoreSplit>,
) -> anyhow::Result<(Child, PathBuf)> {
    let json = dir.join(format!("trainer-{tag}.json"));
    let dims: Vec<String> = args.train_dims.iter().map(|d| d.to_string()).collect();
    let mut cmd = Command::new(tandem());
    // The trainer shares the server's cores: what it may take is what serving leaves.
    if let Some(split) = split {
        cores::pin_child(&mut cmd, &split.server);
    }
    let child = cmd
        .args([
            "train",
            "--data",
            "synthetic",
            "--device",
            &args.device,
            "--checkpoint-every",
            "3600",
        ])
        .args(["--synthetic-dims", &dims.join(",")])
        .args(["--batch", &args.train_batch.to_string()])
        .args(["--seconds", &seconds.to_string()])
        .arg("--json")
        .arg(&json)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting tandem train")?;
    Ok((child, json))
}

/// The median of each figure over rounds; the load report is the median-p99 round's.
fn median_scenario(mut rounds: Vec<Scenario>) -> Scenario {
    let p99s: Vec<f64> = rounds.iter().map(|s| s.p99_ms).collect();
    let over_rounds = |f: fn(&Scenario) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    let p50 = over_rounds(|s| s.p50_ms);
    let within = over_rounds(|s| s.within_budget);
    let cpu = over_rounds(|s| s.server_cpu_share);
    let device = over_rounds(|s| s.serving_device_share);
    let trainer = rounds
        .iter()
        .map(|s| s.trainer_samples_per_second)
        .collect::<Option<Vec<f64>>>()
        .map(|v| median(&v));
    let p99 = median(&p99s);
    println!("{}: p99 per round {p99s:?} ms", rounds[0].name);
    let i = rounds.iter().position(|s| s.p99_ms == p99).unwrap_or(0);
    let mut s = rounds.swap_remove(i);
    s.p99_per_round_ms = p99s;
    s.p50_ms = p50;
    s.within_budget = within;
    s.server_cpu_share = cpu;
    s.serving_device_share = device;
    s.trainer_samples_per_second = trainer;
    s
}

fn trainer_rate(mut child: Child, json: &Path) -> anyhow::Result<f64> {
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "the trainer failed ({status})");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json)?)?;
    Ok(v["samples_per_second"].as_f64().unwrap_or(0.0))
}

pub fn run(args: ColocArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("tandem-bench-coloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join("run/coloc.sock");
    let split = cores::split(args.pin);
    if let Some(split) = &split {
        // Before the runtime starts, so its threads (the load generator) inherit it.
        cores::pin_this_thread(&split.client)?;
        println!(
            "server and trainers on cores {:?}, load generator on {:?}",
            split.server, split.client
        );
    }
    let cores = match &split {
        Some(split) => split.server.len(),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    } as f64;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let server = start_server(&args, &dir, &socket, split.as_ref())?;
    let load_args = LoadArgs {
        url: server.url.clone(),
        model: args.model.clone(),
        rate: args.rate,
        duration: args.duration,
        shape: args.shape,
        rows: 1,
        binary: false,
        budget_ms: args.budget_ms,
        connections: args.connections,
        propagate_deadline: false,
        max_in_flight: 10_000,
        threads: 1,
        seed: 1,
        bodies: 1,
        json: None,
    };
    // Trainers run a little longer than the load so they cover all of it.
    let trainer_seconds = args.duration + 2.0;
    let settle = Duration::from_secs_f64(1.0);

    println!("trainer alone ...");
    let (t, json) = start_trainer(
        &args,
        &dir,
        "alone",
        &["--unmanaged"],
        args.duration,
        split.as_ref(),
    )?;
    let alone = trainer_rate(t, &json)?;

    // Rounds of a, b, c back to back: the medians compare runs that saw the same moments
    // of a noisy machine.
    let mut runs: Vec<Vec<Scenario>> = vec![Vec::new(), Vec::new(), Vec::new()];
    for round in 1..=args.rounds.max(1) {
        for (k, (name, extra)) in [
            ("a) serving alone", None),
            (
                "b) unmanaged trainer",
                Some(vec!["--unmanaged".to_string()]),
            ),
            (
                "c) managed trainer",
                Some(vec![
                    "--coloc-socket".to_string(),
                    socket.display().to_string(),
                ]),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            println!("round {round}: {name} ...");
            let trainer = match &extra {
                Some(e) => {
                    let e: Vec<&str> = e.iter().map(String::as_str).collect();
                    let t = start_trainer(
                        &args,
                        &dir,
                        &name[..1],
                        &e,
                        trainer_seconds,
                        split.as_ref(),
                    )?;
                    std::thread::sleep(settle);
                    Some(t)
                }
                None => None,
            };
            let cpu0 = cpu_seconds(server.child.id());
            let started = Instant::now();
            let load = runtime.block_on(measure(&load_args))?;
            let cpu =
                (cpu_seconds(server.child.id()) - cpu0) / (started.elapsed().as_secs_f64() * cores);
            let trainer_sps = match trainer {
                Some((t, json)) => Some(trainer_rate(t, &json)?),
                None => None,
            };
            let device_share = if args.device == "cpu" {
                cpu
            } else {
                // Without it the idle share, and the trainer goal built on it, would be a
                // guess.
                load.server_device_busy
                    .context("the server exported no tandem_device_busy_ratio")?
            };
            runs[k].push(Scenario {
                name,
                p99_ms: load.p99_ms,
                p99_per_round_ms: vec![load.p99_ms],
                p50_ms: load.p50_ms,
                within_budget: load.within_budget,
                trainer_samples_per_second: trainer_sps,
                server_cpu_share: cpu,
                serving_device_share: device_share,
                load,
            });
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let scenarios: Vec<Scenario> = runs.into_iter().map(median_scenario).collect();
    let idle = (1.0 - scenarios[0].serving_device_share).clamp(0.0, 1.0);
    let managed = &scenarios[2];
    let report = ColocReport {
        rate: args.rate,
        budget_ms: args.budget_ms,
        trainer_alone_samples_per_second: alone,
        idle_share: idle,
        p99_ratio_managed: managed.p99_ms / scenarios[0].p99_ms,
        p99_ratio_managed_interval: paired_ratio_interval(
            &managed.p99_per_round_ms,
            &scenarios[0].p99_per_round_ms,
            RATIO_INTERVAL_LEVEL,
            RATIO_INTERVAL_RESAMPLES,
            RATIO_INTERVAL_SEED,
        ),
        trainer_ratio_managed: managed.trainer_samples_per_second.unwrap_or(0.0)
            / (alone * idle).max(1e-9),
        scenarios,
    };
    println!(
        "\ncolocation  {} on {} at {:.0} req/s ({:?}), budget {} ms; trainer alone {:.0} samples/s; serving left {:.0}% of the device idle",
        args.model,
        args.device,
        args.rate,
        args.shape,
        args.budget_ms,
        alone,
        idle * 100.0
    );
    println!(
        "{:<24} {:>9} {:>9} {:>14} {:>18} {:>12} {:>12}",
        "scenario",
        "p50 ms",
        "p99 ms",
        "within budget",
        "trainer samples/s",
        "server CPU",
        "device used"
    );
    for s in &report.scenarios {
        println!(
            "{:<24} {:>9.2} {:>9.2} {:>13.2}% {:>18} {:>11.0}% {:>11.0}%",
            s.name,
            s.p50_ms,
            s.p99_ms,
            s.within_budget * 100.0,
            s.trainer_samples_per_second
                .map_or("-".into(), |v| format!("{v:.0}")),
            s.server_cpu_share * 100.0,
            s.serving_device_share * 100.0
        );
    }
    let (lo, hi) = report.p99_ratio_managed_interval;
    println!(
        "managed: p99 {:.3}x of serving alone (goal <= 1.07; {:.0}% bootstrap interval over {} rounds {lo:.2}-{hi:.2}x); trainer {:.2}x of (alone x idle share) (goal >= 0.8)",
        report.p99_ratio_managed,
        RATIO_INTERVAL_LEVEL * 100.0,
        report.scenarios[2].p99_per_round_ms.len(),
        report.trainer_ratio_managed
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
