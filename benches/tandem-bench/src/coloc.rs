//! `tandem-bench coloc`: what co-located training costs serving, and what it gets.
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
use super::serve_process::{ServeProcess, cpu_seconds, tandem};
use super::stats::{median, paired_ratio_interval};
use crate::cli::{Api, ColocArgs, LoadArgs};

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

fn start_server(
    args: &ColocArgs,
    dir: &Path,
    socket: &Path,
    split: Option<&CoreSplit>,
) -> anyhow::Result<ServeProcess> {
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
    ServeProcess::start(
        &config,
        &dir.join("server.log"),
        split.map(|s| &s.server[..]),
    )
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

/// Who trains beside serving in a scenario.
#[derive(Clone, Copy)]
enum Neighbour {
    None,
    /// `tandem train --unmanaged`: every core, normal priority, deaf to directives.
    Unmanaged,
    /// `tandem train --coloc-socket`: obeying the gateway.
    Managed,
}

/// The scenarios of a round, in the order they run.
const SCENARIOS: [(&str, Neighbour); 3] = [
    ("a) serving alone", Neighbour::None),
    ("b) unmanaged trainer", Neighbour::Unmanaged),
    ("c) managed trainer", Neighbour::Managed),
];

/// One `bench coloc` run: what its scenarios and rounds share.
struct Bench {
    args: ColocArgs,
    dir: PathBuf,
    socket: PathBuf,
    split: Option<CoreSplit>,
    /// Cores the server and the trainers may use: what CPU shares are shares of.
    cores: f64,
    runtime: tokio::runtime::Runtime,
    server: ServeProcess,
    load: LoadArgs,
}

pub fn run(args: ColocArgs) -> anyhow::Result<()> {
    let bench = Bench::start(args)?;
    println!("trainer alone ...");
    let alone = bench.trainer_alone()?;
    let scenarios = bench.rounds()?;
    let report = bench.report(alone, scenarios);
    print_report(&bench.args, &report);
    if let Some(path) = &bench.args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)?;
    }
    let _ = std::fs::remove_dir_all(&bench.dir);
    Ok(())
}

impl Bench {
    fn start(args: ColocArgs) -> anyhow::Result<Bench> {
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
        let load = LoadArgs {
            url: server.url.clone(),
            model: args.model.clone(),
            rate: args.rate,
            duration: args.duration,
            shape: args.shape,
            rows: 1,
            // Texts in turn, as many as the load generator keeps; one body of rows otherwise.
            bodies: if args.texts.is_some() { 1024 } else { 1 },
            texts: args.texts.clone(),
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
            seed: 1,
            json: None,
        };
        Ok(Bench {
            args,
            dir,
            socket,
            split,
            cores,
            runtime,
            server,
            load,
        })
    }

    fn start_trainer(
        &self,
        tag: &str,
        extra: &[&str],
        seconds: f64,
    ) -> anyhow::Result<(Child, PathBuf)> {
        let json = self.dir.join(format!("trainer-{tag}.json"));
        let dims: Vec<String> = self.args.train_dims.iter().map(|d| d.to_string()).collect();
        let mut cmd = Command::new(tandem());
        // The trainer shares the server's cores: what it may take is what serving leaves.
        if let Some(split) = &self.split {
            cores::pin_child(&mut cmd, &split.server);
        }
        let child = cmd
            .args([
                "train",
                "--data",
                "synthetic",
                "--device",
                &self.args.device,
            ])
            .args(["--checkpoint-every", "3600"])
            .args(["--synthetic-dims", &dims.join(",")])
            .args(["--batch", &self.args.train_batch.to_string()])
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

    /// The trainer's samples/s with the machine to itself: the base of its goal.
    fn trainer_alone(&self) -> anyhow::Result<f64> {
        let (t, json) = self.start_trainer("alone", &["--unmanaged"], self.args.duration)?;
        trainer_rate(t, &json)
    }

    /// Rounds of a, b, c back to back: the medians compare runs that saw the same moments
    /// of a noisy machine. One scenario per scenario, its figures the medians over rounds.
    fn rounds(&self) -> anyhow::Result<Vec<Scenario>> {
        let mut runs: Vec<Vec<Scenario>> = vec![Vec::new(), Vec::new(), Vec::new()];
        for round in 1..=self.args.rounds.max(1) {
            for (k, (name, neighbour)) in SCENARIOS.into_iter().enumerate() {
                println!("round {round}: {name} ...");
                runs[k].push(self.scenario(name, neighbour)?);
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        Ok(runs.into_iter().map(median_scenario).collect())
    }

    /// One run of the load with `neighbour` training beside it.
    fn scenario(&self, name: &'static str, neighbour: Neighbour) -> anyhow::Result<Scenario> {
        let socket = self.socket.display().to_string();
        let extra: Option<Vec<&str>> = match neighbour {
            Neighbour::None => None,
            Neighbour::Unmanaged => Some(vec!["--unmanaged"]),
            Neighbour::Managed => Some(vec!["--coloc-socket", &socket]),
        };
        let trainer = match extra {
            Some(extra) => {
                // Trainers run a little longer than the load so they cover all of it.
                let t = self.start_trainer(&name[..1], &extra, self.args.duration + 2.0)?;
                std::thread::sleep(Duration::from_secs(1));
                Some(t)
            }
            None => None,
        };
        let pid = self.server.child.id();
        let cpu0 = cpu_seconds(pid);
        let started = Instant::now();
        let load = self.runtime.block_on(measure(&self.load))?;
        let cpu = (cpu_seconds(pid) - cpu0) / (started.elapsed().as_secs_f64() * self.cores);
        let trainer_samples_per_second = match trainer {
            Some((t, json)) => Some(trainer_rate(t, &json)?),
            None => None,
        };
        let serving_device_share = if self.args.device == "cpu" {
            cpu
        } else {
            // Without it the idle share, and the trainer goal built on it, would be a
            // guess.
            load.server_device_busy
                .context("the server exported no tandem_device_busy_ratio")?
        };
        Ok(Scenario {
            name,
            p99_ms: load.p99_ms,
            p99_per_round_ms: vec![load.p99_ms],
            p50_ms: load.p50_ms,
            within_budget: load.within_budget,
            trainer_samples_per_second,
            server_cpu_share: cpu,
            serving_device_share,
            load,
        })
    }

    fn report(&self, alone: f64, scenarios: Vec<Scenario>) -> ColocReport {
        let idle = (1.0 - scenarios[0].serving_device_share).clamp(0.0, 1.0);
        let managed = &scenarios[2];
        ColocReport {
            rate: self.args.rate,
            budget_ms: self.args.budget_ms,
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
        }
    }
}

fn print_report(args: &ColocArgs, report: &ColocReport) {
    println!(
        "\ncolocation  {} on {} at {:.0} req/s ({:?}), budget {} ms; trainer alone {:.0} samples/s; serving left {:.0}% of the device idle",
        args.model,
        args.device,
        args.rate,
        args.shape,
        args.budget_ms,
        report.trainer_alone_samples_per_second,
        report.idle_share * 100.0
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
}
