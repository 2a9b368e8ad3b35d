//! The autoscaling signal under a step of load: `tandem_load_ratio{model}` reads well under
//! 1 at 0.3x of what the model serves within its budget, at least 1.5 within 10 s of a step
//! to 2x, and under 1 within 30 s of the step ending — what a KEDA trigger at 1 needs.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// A model whose batches stream ~75 MB of weights: a few hundred rows a second on two
/// cores, so that twice that is within the load generator's reach.
const DIMS: [usize; 4] = [512, 4096, 4096, 10];

fn ratio(server: &Server) -> f64 {
    server
        .get("/metrics")
        .text()
        .lines()
        .find(|l| l.starts_with("tandem_load_ratio{") && l.contains("model=\"big\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

fn offer(server: &Server, rate: f64, seconds: u64) -> Child {
    Command::new(support::tandem_bench())
        .args(["load", "--url", &format!("http://{}", server.addr)])
        .args(["--model", "big", "--rate", &format!("{rate:.0}")])
        .args(["--duration", &seconds.to_string(), "--connections", "128"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Requests a second 8 closed-loop clients get answered: every batch full.
fn capacity(server: &Server) -> f64 {
    let x = inputs(DIMS[0], 2);
    let started = Instant::now();
    let done: usize = std::thread::scope(|s| {
        let clients: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while started.elapsed() < Duration::from_secs(3) {
                        let r = server.post_json("/v2/models/big/infer", &infer_body(&x, 1));
                        match r.status {
                            200 => n += 1,
                            429 => std::thread::sleep(Duration::from_millis(10)),
                            other => panic!("{other}: {}", r.text()),
                        }
                    }
                    n
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).sum()
    });
    done as f64 / started.elapsed().as_secs_f64()
}

/// Polls the gauge until `holds`, at most `within`; when it held.
fn first_time(server: &Server, within: Duration, holds: impl Fn(f64) -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if holds(ratio(server)) {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

#[test]
fn the_load_ratio_follows_a_step_of_demand() {
    let repo = TempDir::new("load-ratio");
    write_version(repo.path(), "big", 1, &DIMS, 1);
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n[defaults]\np99_ms = 50\nmax_batch_size = 4\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let c = capacity(&server);
    eprintln!("capacity {c:.0} req/s");

    let mut low = offer(&server, 0.3 * c, 8);
    std::thread::sleep(Duration::from_secs(7));
    let at_low = ratio(&server);
    assert!(low.wait().unwrap().success());
    eprintln!("at 0.3x: {at_low:.2}");
    assert!(at_low > 0.05 && at_low < 0.8, "at 0.3x it read {at_low}");

    let mut high = offer(&server, 2.0 * c, 15);
    let rose = first_time(&server, Duration::from_secs(10), |r| r >= 1.5);
    let peak = ratio(&server);
    assert!(high.wait().unwrap().success());
    eprintln!("at 2x: {peak:.2}, reached 1.5 after {rose:?}");
    assert!(
        rose.is_some(),
        "not 1.5 within 10 s of the step (read {peak})"
    );

    let fell = first_time(&server, Duration::from_secs(30), |r| r < 1.0);
    eprintln!("under 1 again after {fell:?}");
    assert!(
        fell.is_some(),
        "still {} 30 s after the step",
        ratio(&server)
    );
}
