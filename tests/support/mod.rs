//! Shared helpers for the end-to-end tests: start the real `tandem` binary on 127.0.0.1:0,
//! talk HTTP/1.1 to it over plain sockets (so that malformed requests can be sent as
//! bytes), and compute the float64 reference of a checkpoint.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kernels::DType;
use models::Checkpoint;

pub mod classify;
pub mod coloc;
pub mod text;

/// `tandem-bench`, the benchmarks' binary, which cargo builds beside `tandem` when the
/// workspace's tests run (its own package's test asks for it).
pub fn tandem_bench() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_tandem")).with_file_name("tandem-bench");
    assert!(
        path.is_file(),
        "{} is not built: run the workspace's tests (scripts/test.sh), or cargo build -p tandem-bench",
        path.display()
    );
    path
}

/// A temporary folder removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tandem-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `DIR/<model>/<version>/model.safetensors` and returns the checkpoint.
pub fn write_version(
    repo: &Path,
    model: &str,
    version: u64,
    dims: &[usize],
    seed: u64,
) -> Checkpoint {
    let ckpt = Checkpoint::random(dims, DType::F32, seed);
    ckpt.write_atomic(
        &repo
            .join(model)
            .join(version.to_string())
            .join("model.safetensors"),
    )
    .unwrap();
    ckpt
}

/// The float64 forward pass on the stored (possibly 16-bit) weights.
pub fn reference(ckpt: &Checkpoint, input: &[f32], rows: usize) -> Vec<f64> {
    ckpt.forward_f64(input, rows)
}

pub fn assert_close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "output length");
    let scale = want.iter().fold(1e-6f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            ((*g as f64) - w).abs() / scale <= 1e-5,
            "element {i}: {g} vs {w}"
        );
    }
}

/// Calls `f` every 50 ms until it holds (true) or `within` has passed (false).
pub fn poll_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Deterministic inputs.
pub fn inputs(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = models::rng::SplitMix64::new(seed);
    (0..n).map(|_| rng.normal()).collect()
}

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `output-0` values of a JSON inference response.
    pub fn output_values(&self) -> Vec<f32> {
        self.json()["outputs"][0]["data"]
            .as_array()
            .expect("data array")
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect()
    }
}

/// Sends raw bytes and reads the response (the request should say `Connection: close`).
pub fn raw(addr: SocketAddr, request: &[u8]) -> std::io::Result<HttpResponse> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.write_all(request)?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    parse_response(&buf)
}

fn parse_response(buf: &[u8]) -> std::io::Result<HttpResponse> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| bad("headers not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| bad("empty response"))?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(HttpResponse {
        status,
        headers,
        body: buf[end + 4..].to_vec(),
    })
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> HttpResponse {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(addr, &bytes).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

pub fn get(addr: SocketAddr, path: &str) -> HttpResponse {
    request(addr, "GET", path, &[], b"")
}

pub fn post_json(addr: SocketAddr, path: &str, body: &serde_json::Value) -> HttpResponse {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json".into())],
        body.to_string().as_bytes(),
    )
}

/// A JSON inference request body for `rows` rows of `input`.
pub fn infer_body(input: &[f32], rows: usize) -> serde_json::Value {
    serde_json::json!({
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [rows, input.len() / rows], "data": input}]
    })
}

/// Runs `tandem serve --listen 127.0.0.1:0 --device cpu ARGS`, which must fail to start
/// with an error that says each of `says`.
pub fn assert_start_fails<S: AsRef<std::ffi::OsStr>>(args: &[S], says: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--listen", "127.0.0.1:0", "--device", "cpu"])
        .args(["--grpc-listen", "127.0.0.1:0"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    assert!(!out.status.success(), "{shown:?} started");
    for s in says {
        assert!(stderr.contains(s), "{shown:?}: no {s:?} in {stderr}");
    }
}

/// The bound address in the `listening` line, logged as text or as JSON.
fn listening_on(line: &str) -> Option<String> {
    if let Some(rest) = line.split("listening addr=").nth(1) {
        return Some(rest.trim().to_string());
    }
    let json: serde_json::Value = serde_json::from_str(line).ok()?;
    (json["message"] == "listening").then(|| json["addr"].as_str().map(str::to_string))?
}

/// The bound gRPC address in the `gRPC listening` line, as text or JSON.
fn grpc_listening_on(line: &str) -> Option<SocketAddr> {
    if let Some(rest) = line.split("gRPC listening grpc_addr=").nth(1) {
        return rest.trim().parse().ok();
    }
    let json: serde_json::Value = serde_json::from_str(line).ok()?;
    if json["message"] != "gRPC listening" {
        return None;
    }
    json["grpc_addr"].as_str()?.parse().ok()
}

/// The real `tandem serve`, on a free port, with its log collected.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
    grpc: Arc<Mutex<Option<SocketAddr>>>,
    /// The folder of this server's own trainer socket, removed on drop.
    socket_dir: Option<PathBuf>,
}

impl Server {
    /// Starts `tandem serve --listen 127.0.0.1:0 --device cpu ARGS...` (ARGS may name
    /// another device or address) and waits until it is ready.
    pub fn start(args: &[&str]) -> Server {
        let server = Server::spawn(args);
        server.wait_ready(Duration::from_secs(60));
        server
    }

    /// As [`Server::start`], with `setup` applied to the command before it runs.
    pub fn start_with(args: &[&str], setup: impl FnOnce(&mut Command)) -> Server {
        let server = Server::spawn_with(args, setup);
        server.wait_ready(Duration::from_secs(60));
        server
    }

    /// Starts it without waiting for readiness.
    pub fn spawn(args: &[&str]) -> Server {
        Server::spawn_with(args, |_| {})
    }

    pub fn spawn_with(args: &[&str], setup: impl FnOnce(&mut Command)) -> Server {
        // Each server gets its own trainer socket, unless its config file names one.
        static N: AtomicUsize = AtomicUsize::new(0);
        let socket = std::env::temp_dir().join(format!(
            "tandem-test-{}-{}/coloc.sock",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let mut command = Command::new(env!("CARGO_BIN_EXE_tandem"));
        command.arg("serve");
        if !args.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        if !args.contains(&"--device") {
            command.args(["--device", "cpu"]);
        }
        if !args.contains(&"--grpc-listen") {
            command.args(["--grpc-listen", "127.0.0.1:0"]);
        }
        let own_socket = !args.contains(&"--config") && !args.contains(&"--coloc-socket");
        if own_socket {
            command.arg("--coloc-socket").arg(&socket);
        }
        command.args(args);
        setup(&mut command);
        let mut child = command
            .env("TANDEM_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tandem");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        let grpc = Arc::new(Mutex::new(None));
        let grpc_seen = grpc.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = listening_on(&line) {
                    let _ = tx.send(addr);
                }
                if let Some(addr) = grpc_listening_on(&line) {
                    *grpc_seen.lock().unwrap() = Some(addr);
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a.parse().expect("bound address"),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "tandem did not report its address:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        Server {
            child,
            addr,
            log,
            grpc,
            socket_dir: own_socket.then(|| socket.parent().unwrap().to_path_buf()),
        }
    }

    pub fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(r) = raw(
                self.addr,
                format!(
                    "GET /v2/health/ready HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                    self.addr
                )
                .as_bytes(),
            ) && r.status == 200
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server not ready within {within:?}:\n{}", self.log());
    }

    /// The gRPC listener's address (logged as it binds, before readiness).
    pub fn grpc_addr(&self) -> SocketAddr {
        let mut found = None;
        let seen = poll_until(Duration::from_secs(10), || {
            found = *self.grpc.lock().unwrap();
            found.is_some()
        });
        assert!(seen, "no gRPC listener logged:\n{}", self.log());
        found.unwrap()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits up to `within` for `text` in the server's log; fails the test with the log if
    /// it does not come.
    pub fn assert_logs_within(&self, within: Duration, text: &str) {
        assert!(
            poll_until(within, || self.log().contains(text)),
            "{text:?} not logged within {within:?}:\n{}",
            self.log()
        );
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// Waits for the process to exit; its status, or None if it is still running.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        get(self.addr, path)
    }

    pub fn post_json(&self, path: &str, body: &serde_json::Value) -> HttpResponse {
        post_json(self.addr, path, body)
    }

    /// The value of the series `name{labels...}` in a scrape now (0 where there is none
    /// yet, as for a counter not yet incremented); `labels` are `key="value"` pairs.
    pub fn series(&self, name: &str, labels: &[&str]) -> f64 {
        self.get("/metrics")
            .text()
            .lines()
            .find(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{'))
                    && labels.iter().all(|label| l.contains(label))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    }

    /// Asserts that a single-row infer on `model` is answered 200 within `within`, where a
    /// 429 (the server still draining an overload, or a budget just relaxed) is retried
    /// after its `Retry-After` (capped by what is left of `within`). Any other answer fails.
    pub fn assert_serves_within(&self, model: &str, width: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let r = self.post_json(
                &format!("/v2/models/{model}/infer"),
                &infer_body(&inputs(width, 1), 1),
            );
            let left = deadline.saturating_duration_since(Instant::now());
            match r.status {
                200 => return,
                429 if !left.is_zero() => {
                    let wait = r
                        .header("retry-after")
                        .and_then(|s| s.parse::<u64>().ok())
                        .map_or(Duration::from_millis(100), Duration::from_secs);
                    std::thread::sleep(wait.min(left));
                }
                other => panic!(
                    "{model} is not served within {within:?}: {other} {}",
                    r.text()
                ),
            }
        }
    }

    /// Asserts that one single-row infer on `model` (input width `width`) answers 200: the
    /// server is still serving.
    pub fn assert_serves(&self, model: &str, width: usize) {
        let r = self.post_json(
            &format!("/v2/models/{model}/infer"),
            &infer_body(&inputs(width, 1), 1),
        );
        assert_eq!(r.status, 200, "{model} is not served: {}", r.text());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(d) = &self.socket_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A test that needs a tool this run lacks: SKIPPED, or failed where CI requires every
/// tool (`TANDEM_REQUIRE_TOOLS`).
pub fn skip_or_fail(test: &str, reason: &str) {
    assert!(
        std::env::var_os("TANDEM_REQUIRE_TOOLS").is_none(),
        "{test}: {reason} (TANDEM_REQUIRE_TOOLS is set)"
    );
    kernels::cuda::report_skip(test, reason);
}

/// Runs tests/python/`script` with `args` under `python`: whether it succeeded, and its
/// output.
pub fn run_python(python: &str, script: &str, args: &[&str]) -> (bool, String) {
    let path = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python).arg(path).args(args).output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), report)
}
