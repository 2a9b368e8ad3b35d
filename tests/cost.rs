//! Cost per inference, as an operator reads it: with a device price set, the ledger runs
//! whether or not the trainer coordinator does, and `tandem_cost_per_inference_usd` agrees
//! with what Prometheus computes from the counters —
//! `increase(tandem_cost_usd_total{kind="inference"}[w]) / increase(tandem_requests_total{code="200"}[w])`
//! over the gauge's window `w` — under steady load, with the coordinator off, and on with a
//! trainer borrowing the device.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::*;

const DIMS: [usize; 3] = [64, 128, 10];
const WINDOW_S: u64 = 16;

fn scrape(server: &Server) -> String {
    server.get("/metrics").text()
}

/// The sum of the samples of `name` whose labels contain every one of `labels`.
fn value(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn start(coloc: bool) -> (Server, TempDir) {
    let dir = TempDir::new("cost");
    write_version(&dir.path().join("models"), "m", 1, &DIMS, 1);
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n[coloc]\nenabled = {coloc}\nsocket = \"{}\"\n[cost]\ndevice_hour_usd = 3.6\nwindow_s = {WINDOW_S}\n",
            dir.path().join("models").display(),
            dir.path().join("run/coloc.sock").display(),
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    (server, dir)
}

fn load(server: &Server, seconds: u64) -> Child {
    Command::new(support::tandem_bench())
        .args(["load", "--url", &format!("http://{}", server.addr)])
        .args(["--model", "m", "--rate", "200", "--connections", "8"])
        .args(["--duration", &seconds.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Under steady load for longer than the window: the gauge against the counters' ratio
/// over its last window, at each of several scrapes a second apart. The gauge's window
/// ends at the ledger's last tick (every 250 ms) and its requests are read at ticks, while
/// the counters are read when scraped: a pair can be a tick out at each end, a few percent
/// of the window, more while a trainer's share moves. So the median of the pairs is judged.
fn the_gauge_agrees_with_the_counters(server: &Server) {
    const PAIRS: u64 = 6;
    let mut load = load(server, WINDOW_S + PAIRS + 12);
    std::thread::sleep(Duration::from_secs(3));
    let mut scrapes = Vec::new();
    for _ in 0..WINDOW_S + PAIRS {
        scrapes.push(scrape(server));
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(load.wait().unwrap().success());
    let mut ratios: Vec<f64> = (0..PAIRS as usize)
        .map(|k| ratio(&scrapes[k], &scrapes[k + WINDOW_S as usize]))
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median = (ratios[ratios.len() / 2 - 1] + ratios[ratios.len() / 2]) / 2.0;
    eprintln!("gauge / counters, per pair: {ratios:?}");
    assert!((median - 1.0).abs() < 0.05, "median {median}: {ratios:?}");
}

/// The gauge at `after` over the counters' cost per request between the two scrapes.
fn ratio(before: &str, after: &str) -> f64 {
    let delta =
        |name: &str, labels: &[&str]| value(after, name, labels) - value(before, name, labels);
    let cost = delta("tandem_cost_usd_total", &["kind=\"inference\""]);
    let answered = delta("tandem_requests_total", &["model=\"m\"", "code=\"200\""]);
    assert!(answered > 100.0, "only {answered} answered");
    let gauge = value(after, "tandem_cost_per_inference_usd", &["model=\"m\""]);
    gauge / (cost / answered)
}

#[test]
fn without_the_coordinator_the_ledger_runs_and_agrees_with_the_counters() {
    let (server, _dir) = start(false);
    the_gauge_agrees_with_the_counters(&server);
    let text = scrape(&server);
    // All of it is inference: nothing was lent.
    assert_eq!(
        value(&text, "tandem_cost_usd_total", &["kind=\"training\""]),
        0.0
    );
    assert!(value(&text, "tandem_cost_usd_total", &["kind=\"inference\""]) > 0.0);
}

#[test]
fn with_a_trainer_lent_the_device_the_ledger_still_agrees_with_the_counters() {
    let (server, dir) = start(true);
    let mut trainer = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "train",
            "--device",
            "cpu",
            "--seconds",
            "60",
            "--threads",
            "1",
        ])
        .arg("--coloc-socket")
        .arg(dir.path().join("run/coloc.sock"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(poll_until(Duration::from_secs(20), || {
        value(&scrape(&server), "tandem_trainers_connected", &[]) == 1.0
    }));
    the_gauge_agrees_with_the_counters(&server);
    let text = scrape(&server);
    assert!(
        value(&text, "tandem_cost_usd_total", &["kind=\"training\""]) > 0.0,
        "nothing was charged to training"
    );
    trainer.kill().unwrap();
    trainer.wait().unwrap();
}
