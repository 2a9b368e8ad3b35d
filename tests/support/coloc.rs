//! What every co-location test uses: a gateway with a trainer socket (one test at a
//! time), metrics, budgets, and fake trainers.

// Each co-location test binary uses its own part of this.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use super::*;

pub const DIMS: [usize; 3] = [64, 32, 10];

pub struct Setup {
    pub server: Server,
    pub socket: PathBuf,
    pub repo: PathBuf,
    pub _dir: TempDir,
    /// Held for the whole test (and dropped last): see [`SERIAL`].
    pub _serial: std::sync::MutexGuard<'static, ()>,
}

/// These tests run one at a time. Each checks deadlines of a few hundred milliseconds
/// (an ack within `ack_within_ms`) on processes that share two cores; two of them side by
/// side — one driving thousands of requests a second, say — starved the other's Python
/// loop past its deadline now and then. One at a time, they measure what they mean to.
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn start() -> Setup {
    start_with("cpu", "")
}

pub fn start_on(device: &str) -> Setup {
    start_with(device, "")
}

/// A gateway on `device` with `coloc` appended to its `[coloc]` table. Pauses must be
/// acknowledged within a second (the default) unless `coloc` sets `ack_within_ms`: on
/// this noisy two-core VM a Python loop was now and then held up past 400 ms even with
/// nothing else running.
pub fn start_with(device: &str, coloc: &str) -> Setup {
    // A test that failed while holding it poisons it; the next one starts afresh anyway.
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("coloc");
    let repo = dir.path().join("models");
    write_version(&repo, "digits", 1, &DIMS, 1);
    let socket = dir.path().join("run/coloc.sock");
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\nrepository_poll_ms = 200\n[coloc]\nsocket = \"{}\"\n{ack}heartbeat_ms = 200\ntick_ms = 50\n{coloc}\n[cost]\ndevice_hour_usd = 3.6\n",
            repo.display(),
            socket.display(),
            ack = if coloc.contains("ack_within_ms") {
                ""
            } else {
                "ack_within_ms = 1000\n"
            },
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap(), "--device", device]);
    // A gateway starts lending nothing and gives back after a calm second. A trainer that
    // joins before then is told to pause at once and must ack within its deadline — of its own
    // start-up, which on two cores shared by ten of these tests a fresh Python process
    // sometimes overran (SIGSTOP at join). Tests that want a pause make one.
    wait_until("training allowed", Duration::from_secs(15), || {
        metric(&server, "tandem_training_allowance", None).unwrap_or(0.0) > 0.0
    });
    Setup {
        server,
        socket,
        repo,
        _dir: dir,
        _serial: serial,
    }
}

pub fn metric(server: &Server, name: &str, label: Option<&str>) -> Option<f64> {
    let text = server.get("/metrics").text();
    text.lines()
        .filter(|l| l.starts_with(name) && label.is_none_or(|lab| l.contains(lab)))
        .find(|l| l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The sum of every series of `name` whose labels contain `label`.
pub fn metric_sum(server: &Server, name: &str, label: &str) -> f64 {
    let text = server.get("/metrics").text();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn wait_until(what: &str, within: Duration, f: impl FnMut() -> bool) {
    if !poll_until(within, f) {
        panic!("timed out waiting for {what}");
    }
}

/// Waits until the coordinator has stopped process `pid`, keeping requests coming: with
/// none, the coordinator sees no pressure and lifts the pause, and a trainer allowed to run
/// again is not stopped (on a loaded machine that could come before the ack deadline).
/// On a timeout the panic shows the process's /proc status and the server's log.
pub fn wait_for_sigstop(server: &Server, pid: u32) {
    let stopped = poll_until(Duration::from_secs(10), || {
        some_requests(server, 2);
        process_state(pid) == 'T'
    });
    if !stopped {
        panic!(
            "timed out waiting for SIGSTOP of {pid}: /proc/{pid}/stat: {:?}\nserver log:\n{}",
            std::fs::read_to_string(format!("/proc/{pid}/stat")),
            server.log()
        );
    }
}

pub fn set_budget(server: &Server, p99_ms: f64) {
    let r = request(
        server.addr,
        "PUT",
        "/admin/models/digits/slo",
        &[],
        json!({"p99_ms": p99_ms}).to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Sends `n` requests, so the controller has latencies to judge. These run while the budget
/// may be squeezed below anything achievable, where the server is right to refuse some (a
/// request that sat a few milliseconds in its socket under a 1 µs budget is `late`): a 429
/// is the pressure this exists to create and counts as sent. Any other answer fails.
pub fn some_requests(server: &Server, n: usize) {
    for _ in 0..n {
        let r = server.post_json(
            "/v2/models/digits/infer",
            &infer_body(&inputs(DIMS[0], 1), 1),
        );
        assert!(
            matches!(r.status, 200 | 429),
            "digits answered {}: {}",
            r.status,
            r.text()
        );
    }
}

/// Asserts that digits serves again once the budget allows it, within a bounded wait that
/// honours `Retry-After`.
pub fn serves_again(server: &Server) {
    server.assert_serves_within("digits", DIMS[0], Duration::from_secs(10));
}

/// Tightens the budget below any achievable latency and keeps requests coming until the
/// coordinator has cut training to nothing.
pub fn squeeze(server: &Server) {
    set_budget(server, 0.001);
    wait_until("allowance 0", Duration::from_secs(10), || {
        some_requests(server, 20);
        metric(server, "tandem_training_allowance", None) == Some(0.0)
    });
}

/// Gives serving a budget nothing here misses, and waits until a request is answered 200.
pub fn relax(server: &Server) {
    set_budget(server, 1000.0);
    serves_again(server);
}

/// The state letter of a process (R, S, T = stopped, ...), from /proc.
pub fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .and_then(|s| s.trim().chars().next())
        .unwrap_or('?')
}

pub fn fake_trainer(socket: &Path, mode: &str, claimed_pid: Option<u32>) -> Child {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/fake_trainer.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg(socket)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(pid) = claimed_pid {
        cmd.args(["--pid", &pid.to_string()]);
    }
    cmd.spawn().expect("python3")
}

pub fn connected(server: &Server) -> f64 {
    metric(server, "tandem_trainers_connected", None).unwrap_or(0.0)
}

/// Starts `tandem train` on `device` (one thread, 60 s, plus `args`) against the gateway,
/// and waits until it has joined.
pub fn join_real_trainer(s: &Setup, device: &str, args: &[&str]) -> Child {
    let trainer = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "train",
            "--device",
            device,
            "--seconds",
            "60",
            "--threads",
            "1",
        ])
        .args(args)
        .arg("--coloc-socket")
        .arg(&s.socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the trainer to join", Duration::from_secs(20), || {
        connected(&s.server) == 1.0
    });
    trainer
}

/// Squeezes serving, then checks that trainer `pid` acknowledged the pause in time: nothing
/// was escalated and the process is not stopped.
pub fn squeeze_and_expect_a_timely_ack(server: &Server, pid: u32) {
    let escalations = || metric(server, "tandem_trainer_escalations_total", None).unwrap_or(0.0);
    let before = escalations();
    squeeze(server);
    // Past the ack deadline (1 s at most here) with room to spare: a pause not acked by
    // then has been escalated.
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(
        escalations(),
        before,
        "the pause was acknowledged late:\n{}",
        server.log()
    );
    assert_ne!(process_state(pid), 'T');
}

/// Runs `tests/python/SCRIPT SOCKET` (a loop on the Python client) and waits until it
/// has joined.
pub fn join_python_client(s: &Setup, script: &str) -> Child {
    join_python_client_with(s, script, &[])
}

pub fn join_python_client_with(s: &Setup, script: &str, args: &[&str]) -> Child {
    let child = Command::new("python3")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/python")
                .join(script),
        )
        .arg(&s.socket)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the client to join", Duration::from_secs(10), || {
        connected(&s.server) == 1.0
    });
    child
}

/// A raw connection to the trainer socket that says nothing until told to: what a trainer
/// looks like between being accepted and saying hello.
pub struct RawTrainer {
    stream: std::os::unix::net::UnixStream,
}

impl RawTrainer {
    pub fn connect(socket: &Path) -> RawTrainer {
        let stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        RawTrainer { stream }
    }

    /// Says hello; the gateway's first line back (a welcome), or `None` if it closed the
    /// connection instead.
    pub fn hello(&mut self, name: &str) -> Option<serde_json::Value> {
        use std::io::{BufRead, Write};
        let hello = json!({"type": "hello", "version": 1, "name": name, "pid": std::process::id(),
                           "device": "cpu", "max_streams": 1, "memory_bytes": 1 << 20});
        // A write to a connection the gateway already closed fails: that is the answer too.
        if self
            .stream
            .write_all(format!("{hello}\n").as_bytes())
            .is_err()
        {
            return None;
        }
        let mut line = String::new();
        let mut reader = std::io::BufReader::new(&self.stream);
        match reader.read_line(&mut line) {
            Ok(n) if n > 0 => serde_json::from_str(&line).ok(),
            _ => None,
        }
    }
}
