//! Co-located training with real processes: the reference trainer and misbehaving fake
//! trainers (tests/python/fake_trainer.py) against the real gateway. Budgets are tightened
//! and relaxed through the admin API while requests flow, which is the signal the
//! coordinator acts on.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::coloc::*;
use support::*;

#[test]
fn the_real_trainer_steps_aside_when_budgets_tighten_and_returns_after() {
    the_real_trainer_steps_aside_on("cpu");
}

/// The same with the server and the trainer on the GPU (the trainer on its low-priority
/// stream).
#[test]
fn the_real_trainer_steps_aside_on_cuda() {
    let test = "the_real_trainer_steps_aside_on_cuda";
    if kernels::cuda::device_for_test(test).is_some() {
        the_real_trainer_steps_aside_on("cuda:0");
    }
}

fn the_real_trainer_steps_aside_on(device: &str) {
    let s = start_on(device);
    let mut trainer = join_real_trainer(
        &s,
        device,
        &[
            "--checkpoint-every",
            "0.5",
            "--repository",
            s.repo.to_str().unwrap(),
        ],
    );
    // Serving is idle: the allowance is given back step by step, and training runs.
    wait_until("allowance 1", Duration::from_secs(15), || {
        metric(&s.server, "tandem_training_allowance", None) == Some(1.0)
    });
    wait_until("training throughput", Duration::from_secs(10), || {
        metric(&s.server, "tandem_trainer_samples_per_second", None).unwrap_or(0.0) > 100.0
    });
    // Its checkpoints become served versions.
    wait_until("a trained version serving", Duration::from_secs(20), || {
        s.server.get("/v2/models/digits").json()["versions"]
            .as_array()
            .is_some_and(|v| v.len() >= 2)
    });

    squeeze(&s.server);
    // It acknowledged the pause in time (no SIGSTOP) and reports no throughput.
    wait_until(
        "the trainer to stop training",
        Duration::from_secs(10),
        || metric(&s.server, "tandem_trainer_samples_per_second", None) == Some(0.0),
    );
    assert_eq!(
        metric(&s.server, "tandem_trainer_escalations_total", None).unwrap_or(0.0),
        0.0
    );
    assert!(
        metric(&s.server, "tandem_trainer_ack_duration_seconds_count", None).unwrap_or(0.0) >= 2.0
    );
    assert_ne!(process_state(trainer.id()), 'T');

    relax(&s.server);
    wait_until("training to resume", Duration::from_secs(15), || {
        some_requests(&s.server, 2);
        metric(&s.server, "tandem_trainer_samples_per_second", None).unwrap_or(0.0) > 100.0
    });
    // Cost: training was charged for what it was lent.
    assert!(
        metric(
            &s.server,
            "tandem_cost_usd_total",
            Some("kind=\"training\"")
        )
        .unwrap_or(0.0)
            > 0.0
    );
    assert!(
        metric(
            &s.server,
            "tandem_cost_per_inference_usd",
            Some("model=\"digits\"")
        )
        .unwrap_or(0.0)
            > 0.0
    );
    assert!(
        metric(
            &s.server,
            "tandem_training_harvested_device_seconds_total",
            None
        )
        .unwrap_or(0.0)
            > 0.0
    );
    trainer.kill().unwrap();
    trainer.wait().unwrap();
    // The trained classifier serves: the bundled example request is a zero.
    let body: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/example-request.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let r = s.server.post_json("/v2/models/digits/infer", &body);
    let out = r.output_values();
    let best = out
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0;
    assert_eq!(best, 0, "{out:?}");
}

#[test]
fn a_trainer_that_never_acks_is_stopped_then_continued() {
    let s = start();
    let mut fake = fake_trainer(&s.socket, "never-ack", None);
    wait_until("the fake trainer to join", Duration::from_secs(10), || {
        connected(&s.server) == 1.0
    });
    squeeze(&s.server);
    wait_for_sigstop(&s.server, fake.id());
    assert_eq!(
        metric(&s.server, "tandem_trainer_escalations_total", None),
        Some(1.0)
    );
    some_requests(&s.server, 20);
    relax(&s.server);
    wait_until("SIGCONT", Duration::from_secs(10), || {
        some_requests(&s.server, 2);
        process_state(fake.id()) != 'T'
    });
    fake.kill().unwrap();
    fake.wait().unwrap();
    wait_until("cleanup", Duration::from_secs(10), || {
        connected(&s.server) == 0.0
    });
    serves_again(&s.server);
}

#[test]
fn garbage_floods_are_disconnected_and_serving_goes_on() {
    let s = start();
    let mut fake = fake_trainer(&s.socket, "garbage", None);
    let out = BufReader::new(fake.stdout.take().unwrap());
    let lines: Vec<String> = out.lines().map_while(Result::ok).collect();
    assert!(lines.iter().any(|l| l == "disconnected"), "{lines:?}");
    fake.wait().unwrap();
    assert!(
        s.server.log().contains("trainer left"),
        "{}",
        s.server.log()
    );
    assert_eq!(connected(&s.server), 0.0);
    some_requests(&s.server, 20);
    serves_again(&s.server);
    // A well-behaved trainer can join after it.
    let mut good = fake_trainer(&s.socket, "well-behaved", None);
    wait_until("a new trainer", Duration::from_secs(10), || {
        connected(&s.server) == 1.0
    });
    good.kill().unwrap();
    good.wait().unwrap();
}

#[test]
fn a_hello_naming_another_pid_never_gets_that_process_signalled() {
    let s = start();
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let mut fake = fake_trainer(&s.socket, "never-ack", Some(victim.id()));
    wait_until("the fake trainer to join", Duration::from_secs(10), || {
        connected(&s.server) == 1.0
    });
    squeeze(&s.server);
    // The escalation hits the socket's peer — the liar itself — and nobody else.
    wait_for_sigstop(&s.server, fake.id());
    assert_ne!(
        process_state(victim.id()),
        'T',
        "the named process was signalled"
    );
    assert!(s.server.log().contains("hello names another pid"));
    relax(&s.server);
    fake.kill().unwrap();
    fake.wait().unwrap();
    victim.kill().unwrap();
    victim.wait().unwrap();
    serves_again(&s.server);
}

#[test]
fn kill_9_of_a_trainer_is_cleaned_up() {
    let s = start();
    let mut fake = fake_trainer(&s.socket, "well-behaved", None);
    wait_until("the trainer to join", Duration::from_secs(10), || {
        connected(&s.server) == 1.0
    });
    fake.kill().unwrap(); // SIGKILL
    fake.wait().unwrap();
    wait_until("cleanup", Duration::from_secs(10), || {
        connected(&s.server) == 0.0
    });
    some_requests(&s.server, 20);
    serves_again(&s.server);
    assert_eq!(s.server.get("/v2/health/ready").status, 200);
}

#[test]
fn the_python_client_pauses_and_resumes_its_loop() {
    python_client_pauses_and_resumes(start());
}

/// With a duty cycle of 1%, each ~20 ms step of the client's loop is followed by about 2 s
/// of idle, twice the ack deadline. A pause that arrives during the idle must cut it
/// short and be acknowledged in time, not after it (which escalated to SIGSTOP).
#[test]
fn a_pause_is_acknowledged_in_time_during_a_long_duty_cycle_idle() {
    python_client_pauses_and_resumes(start_with("cpu", "max_duty_cycle = 0.01"));
}

/// The same for the reference trainer: its synthetic steps of a few milliseconds at a 1%
/// duty cycle leave idles of about a second after each (before the fix, 99 times its slow
/// first step: it went silent for longer than this test waits for it to train).
#[test]
fn the_real_trainer_acknowledges_a_pause_during_a_long_duty_cycle_idle() {
    // Its idles are about a second: only a deadline well under that tells an idle cut
    // short from one sat out.
    let s = start_with("cpu", "max_duty_cycle = 0.01\nack_within_ms = 400");
    let synthetic = [
        "--data",
        "synthetic",
        "--synthetic-dims",
        "784,1024,1024,10",
    ];
    let mut trainer = join_real_trainer(&s, "cpu", &synthetic);
    wait_until("training", Duration::from_secs(20), || {
        metric(&s.server, "tandem_trainer_samples_per_second", None).unwrap_or(0.0) > 0.0
    });
    squeeze_and_expect_a_timely_ack(&s.server, trainer.id());
    trainer.kill().unwrap();
    trainer.wait().unwrap();
}

fn python_client_pauses_and_resumes(s: Setup) {
    let child = join_python_client(&s, "coloc_client_check.py");
    // The process runs on, blocked in step().
    squeeze_and_expect_a_timely_ack(&s.server, child.id());
    relax(&s.server);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("\"resumed\"") && stdout.contains("\"running\""),
        "{stdout}"
    );
    assert!(
        metric(&s.server, "tandem_trainer_ack_duration_seconds_count", None).unwrap_or(0.0) >= 2.0
    );
}

/// A second, heavy model with a tight budget: real load, not a budget change, is what
/// pushes it past its budget. One row a batch, each streaming 75 MB of weights (more than
/// any cache here): a few hundred rows a second, so 3,000 req/s is far past it. Its
/// settings go in before its weights: the repository is polled, and a version found first
/// would load with the defaults (64 rows a batch, easily served).
fn add_heavy_model(s: &Setup) {
    std::fs::create_dir_all(s.repo.join("heavy")).unwrap();
    std::fs::write(
        s.repo.join("heavy/config.toml"),
        "p99_ms = 20\nmax_batch_size = 1\n",
    )
    .unwrap();
    write_version(&s.repo, "heavy", 1, &[512, 4096, 4096, 10], 2);
    wait_until("the heavy model to load", Duration::from_secs(30), || {
        s.server.get("/v2/models/heavy/ready").status == 200
    });
    assert_eq!(
        s.server.get("/v2/models/heavy/config").json()["max_batch_size"],
        1
    );
}

/// The trainer pays first: under load rising step by step from idle to far past capacity,
/// the real trainer is stopped before serving refuses anything, so that no refusal is
/// counted while it computes (`tandem_requests_rejected_beside_trainer_total`), though
/// past capacity requests are refused.
#[test]
fn under_rising_load_the_trainer_stops_before_the_first_refusal() {
    let s = start();
    add_heavy_model(&s);
    let mut trainer = join_real_trainer(&s, "cpu", &[]);
    wait_until("the trainer to compute", Duration::from_secs(15), || {
        some_requests(&s.server, 2);
        metric(&s.server, "tandem_trainer_samples_per_second", None).unwrap_or(0.0) > 0.0
    });
    let url = format!("http://{}", s.server.addr);
    for rate in [25, 50, 100, 200, 400, 800, 1600, 3200] {
        let status = Command::new(support::tandem_bench())
            .args(["load", "--url", &url, "--model", "heavy"])
            .args(["--rate", &rate.to_string(), "--duration", "2"])
            .args(["--connections", "64", "--shape", "poisson"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }
    let heavy = "model=\"heavy\"";
    let refused = metric_sum(&s.server, "tandem_requests_rejected_total", heavy);
    let beside = metric_sum(
        &s.server,
        "tandem_requests_rejected_beside_trainer_total",
        heavy,
    );
    eprintln!("refused {refused}, of them beside a computing trainer {beside}");
    assert!(refused > 0.0, "the load never went past capacity");
    assert_eq!(
        beside,
        0.0,
        "refused while the trainer computed:\n{}",
        s.server.log()
    );
    trainer.kill().unwrap();
    trainer.wait().unwrap();
}

#[test]
fn rising_load_pauses_the_trainer_and_falling_load_lets_it_run_again() {
    let s = start();
    add_heavy_model(&s);
    let mut fake = fake_trainer(&s.socket, "well-behaved", None);
    let out = BufReader::new(fake.stdout.take().unwrap());
    let directives = std::sync::Arc::new(std::sync::Mutex::new(Vec::<serde_json::Value>::new()));
    let sink = directives.clone();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                sink.lock().unwrap().push(v);
            }
        }
    });
    // Waited for as the trainer reads it: a directive lending half the device or more.
    let lent_half = || {
        directives
            .lock()
            .unwrap()
            .iter()
            .any(|d| d["type"] == "directive" && d["allowance"].as_f64().unwrap_or(0.0) >= 0.5)
    };
    if !poll_until(Duration::from_secs(20), lent_half) {
        panic!(
            "no directive lent half the device while idle: {:?}\nserver log:\n{}",
            directives.lock().unwrap(),
            s.server.log()
        );
    }
    // Rising load: far more than the heavy model can serve.
    let before_load = directives.lock().unwrap().len();
    let mut load = Command::new(support::tandem_bench())
        .args([
            "load",
            "--url",
            &format!("http://{}", s.server.addr),
            "--model",
            "heavy",
        ])
        .args(["--rate", "3000", "--duration", "6", "--connections", "64"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // A pause sent after the load began (the one at join, before anything was measured,
    // does not count).
    let paused = poll_until(Duration::from_secs(8), || {
        directives
            .lock()
            .unwrap()
            .iter()
            .skip(before_load)
            .any(|d| d["pause"] == true)
    });
    if !paused {
        let _ = load.kill();
        let codes: Vec<String> = s
            .server
            .get("/metrics")
            .text()
            .lines()
            .filter(|l| l.starts_with("tandem_requests_total") && l.contains("heavy"))
            .map(str::to_string)
            .collect();
        panic!(
            "no pause directive under load\ndirectives: {:?}\nheavy's answers: {codes:?}\nserver log:\n{}",
            directives.lock().unwrap(),
            s.server.log()
        );
    }
    assert!(load.wait().unwrap().success());
    // Falling load: the allowance comes back, and with it directives that lift the pause.
    // (Waited for as the trainer reads them: the allowance gauge is set a moment before the
    // directive reaches the trainer, and on a loaded host that moment was seen.)
    let last_directive = || {
        directives
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|d| d["type"] == "directive")
            .cloned()
    };
    wait_until(
        "a directive that lets training run again",
        Duration::from_secs(15),
        || last_directive().is_some_and(|d| d["pause"] == false),
    );
    assert!(metric(&s.server, "tandem_training_allowance", None).unwrap_or(0.0) > 0.0);
    let last = last_directive().unwrap();
    assert!(last["max_streams"].as_u64().unwrap() >= 1, "{last}");
    // On the CPU a trainer never computes all the time, however idle serving is: it leaves
    // gaps ([coloc] max_duty_cycle, 0.9 by default there).
    let seen = directives.lock().unwrap();
    let duties: Vec<f64> = seen
        .iter()
        .filter(|d| d["type"] == "directive")
        .map(|d| d["duty_cycle"].as_f64().unwrap())
        .collect();
    assert!(duties.iter().all(|&d| d > 0.0 && d <= 0.9), "{duties:?}");
    // Allowance 0.5 or more was lent before the load: that is the cap itself.
    assert!(duties.contains(&0.9), "{duties:?}");
    drop(seen);
    // Every directive was acknowledged in time: nothing escalated.
    assert_eq!(
        metric(&s.server, "tandem_trainer_escalations_total", None).unwrap_or(0.0),
        0.0
    );
    fake.kill().unwrap();
    fake.wait().unwrap();
    serves_again(&s.server);
}

/// A slot is taken when a connection is accepted, not when it says hello: `max_trainers`
/// holds before any hello, and two connections accepted together never share a slot (they
/// used to, and the second hello replaced the first trainer's record).
#[test]
fn connections_take_their_own_slots_when_accepted_and_the_limit_holds_before_hello() {
    let s = start_with("cpu", "max_trainers = 2");
    let mut conns: Vec<RawTrainer> = (0..4).map(|_| RawTrainer::connect(&s.socket)).collect();
    // Let the gateway accept all four before anyone says hello.
    std::thread::sleep(Duration::from_millis(300));
    let welcomes: Vec<Option<serde_json::Value>> = conns
        .iter_mut()
        .enumerate()
        .map(|(i, c)| c.hello(&format!("raw-{i}")))
        .collect();
    let ids: Vec<String> = welcomes
        .iter()
        .flatten()
        .map(|w| w["trainer_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "welcomed: {welcomes:?}");
    assert_ne!(ids[0], ids[1], "two trainers share a slot: {ids:?}");
    assert!(
        welcomes[0].is_some() && welcomes[1].is_some(),
        "{welcomes:?}"
    );
    wait_until("two trainers connected", Duration::from_secs(5), || {
        connected(&s.server) == 2.0
    });
    drop(conns);
    wait_until("cleanup", Duration::from_secs(10), || {
        connected(&s.server) == 0.0
    });
}

/// A trainer the gateway stopped is continued however its record goes: another
/// connection's hello can no longer take its slot, and relaxing the budget continues it.
#[test]
fn a_stopped_trainer_stays_in_its_slot_when_another_connection_says_hello() {
    let s = start();
    // Accepted first, silent: under the old slot choice it was given the same slot as the
    // trainer accepted after it.
    let mut early = RawTrainer::connect(&s.socket);
    std::thread::sleep(Duration::from_millis(200));
    let mut fake = fake_trainer(&s.socket, "never-ack", None);
    wait_until("the fake trainer to join", Duration::from_secs(10), || {
        connected(&s.server) == 1.0
    });
    squeeze(&s.server);
    wait_for_sigstop(&s.server, fake.id());
    assert!(
        early.hello("late").is_some(),
        "the early connection was refused"
    );
    wait_until("both connected", Duration::from_secs(5), || {
        connected(&s.server) == 2.0
    });
    relax(&s.server);
    wait_until(
        "SIGCONT of the stopped trainer",
        Duration::from_secs(10),
        || {
            some_requests(&s.server, 2);
            process_state(fake.id()) != 'T'
        },
    );
    fake.kill().unwrap();
    fake.wait().unwrap();
    serves_again(&s.server);
}

/// The trainer socket's folder must be ours and writable by no one else: under /tmp another
/// user could make it first and put their own socket in it for our trainers to talk to.
#[test]
fn a_socket_folder_others_may_write_to_or_own_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("coloc-perms");
    write_version(&dir.path().join("models"), "digits", 1, &DIMS, 1);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let refused = |socket_dir: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["serve", "--listen", "127.0.0.1:0", "--device", "cpu"])
            .args(["--grpc-listen", "127.0.0.1:0"])
            .arg("--model-repository")
            .arg(dir.path().join("models"))
            .arg("--coloc-socket")
            .arg(socket_dir.join("coloc.sock"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "it started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let log = refused(&shared);
    assert!(
        log.contains("refusing the trainer socket directory"),
        "{log}"
    );
    assert!(log.contains("write"), "{log}");
    // Another owner (only root can hand a folder to someone else).
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        let c = std::ffi::CString::new(theirs.to_str().unwrap()).unwrap();
        // SAFETY: chown(2) on a NUL-terminated path we made.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        let log = refused(&theirs);
        assert!(log.contains("owned by uid 65534"), "{log}");
    }
}
