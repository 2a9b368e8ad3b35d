//! The operations kit (deploy/) against the real thing: `tandem serve` started with the
//! configuration the Kubernetes manifests ship, a real Prometheus (Debian's `prometheus`
//! package) scraping it every second with deploy/prometheus's rules loaded, and load from
//! `tandem-bench load`. Prometheus's HTTP API must then give the QPS, the p99 and the cost
//! per inference the load implies, and the KEDA trigger's exact query a value; and
//! deploy/checks/run.py passes with this server's live scrape, so a metric renamed in the
//! gateway fails the build wherever a rule, the dashboard or an autoscaler reads it.
//!
//! In CI `.ci/run` installs Prometheus and scripts/test.sh makes the Python environment;
//! elsewhere a missing tool skips the test with a reason, unless TANDEM_REQUIRE_TOOLS is
//! set.

mod support;

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// The configuration in the tandem-config ConfigMap of deploy/k8s/base.
const K8S_CONFIG: &str = "deploy/k8s/base/tandem.toml";
/// Its `[cost] device_hour_usd`.
const K8S_DEVICE_HOUR_USD: f64 = 0.10;
/// Its `[defaults] p99_ms`, in seconds.
const K8S_BUDGET_S: f64 = 0.050;
/// The other tandem.toml files the images and overlays ship: each must start a server.
const OTHER_CONFIGS: &[&str] = &[
    "deploy/docker/tandem.toml",
    "deploy/k8s/overlays/gpu/tandem.toml",
    "deploy/k8s/kserve/runtime/tandem.toml",
];

const RATE: f64 = 200.0;
const LOAD_SECONDS: f64 = 14.0;

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The Python with deploy/checks' packages: TANDEM_PYTHON (scripts/test.sh sets it), else
/// the repository's .venv.
fn python() -> Option<PathBuf> {
    let p = std::env::var_os("TANDEM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import yaml, jsonschema, kubernetes_validate"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(p)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A real Prometheus scraping one target every second, with the project's rules.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let rules = Path::new(REPO).join("deploy/prometheus/tandem.rules.yml");
        // The labels the PodMonitor gives in a cluster, so that the rules' and the
        // ScaledObject's queries run here exactly as written.
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: tandem\n    static_configs:\n\
             \x20     - targets: ['{target}']\n        labels:\n          namespace: tandem\n          pod: tandem-0\n",
            rules.display()
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { child, addr, dir };
        let ready = poll_until(Duration::from_secs(30), || {
            raw(
                p.addr,
                format!("GET /-/ready HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .is_ok_and(|r| r.status == 200)
        });
        assert!(ready, "prometheus not ready:\n{}", p.log());
        // Prometheus syncs its targets a few seconds after it starts: a rate over a load
        // that began before the first scrape would come out low.
        let scraped = poll_until(Duration::from_secs(30), || {
            !p.query("up == 1", now_s()).is_empty()
        });
        assert!(scraped, "prometheus never scraped {target}:\n{}", p.log());
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query at `at` (unix seconds): the result vector.
    fn query(&self, promql: &str, at: f64) -> Vec<serde_json::Value> {
        let path = format!(
            "/api/v1/query?query={}&time={at:.3}",
            percent_encode(promql)
        );
        let r = get(self.addr, &path);
        assert_eq!(r.status, 200, "{promql}: {}", r.text());
        let body = r.json();
        assert_eq!(body["status"], "success", "{promql}: {body}");
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The one value of a query that must give exactly one series.
    fn scalar(&self, promql: &str, at: f64) -> f64 {
        let result = self.query(promql, at);
        assert_eq!(
            result.len(),
            1,
            "{promql} gave {} series: {result:?}",
            result.len()
        );
        result[0]["value"][1].as_str().unwrap().parse().unwrap()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The query of the ScaledObject's prometheus trigger, as deploy/k8s/base writes it.
fn keda_query() -> String {
    let text =
        std::fs::read_to_string(Path::new(REPO).join("deploy/k8s/base/scaledobject.yaml")).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("query:"))
        .expect("the ScaledObject has a query");
    line.trim_start()["query:".len()..].trim().to_string()
}

fn socket_in(dir: &TempDir, name: &str) -> String {
    dir.path().join(name).to_str().unwrap().to_string()
}

fn repo_path(p: &str) -> String {
    Path::new(REPO).join(p).to_str().unwrap().to_string()
}

#[test]
fn deploy_artifacts_hold_against_a_live_server_and_prometheus() {
    const TEST: &str = "deploy_artifacts_hold_against_a_live_server_and_prometheus";
    if !installed("prometheus") || !installed("promtool") {
        return skip_or_fail(
            TEST,
            "prometheus or promtool not installed (Debian's prometheus package)",
        );
    }
    let Some(python) = python() else {
        return skip_or_fail(
            TEST,
            "no Python with PyYAML, jsonschema and kubernetes-validate (scripts/test.sh)",
        );
    };
    let tmp = TempDir::new("operations");
    let models = repo_path("config/models");

    // Every tandem.toml the deploy kit ships starts a server (the keys are the gateway's).
    for config in OTHER_CONFIGS {
        let s = Server::start(&[
            "--config",
            &repo_path(config),
            "--model-repository",
            &models,
            "--coloc-socket",
            &socket_in(&tmp, "other.sock"),
        ]);
        s.assert_serves("digits", 64);
    }

    // The server as the Deployment runs it, with a trainer beside it.
    let socket = socket_in(&tmp, "coloc.sock");
    let server = Server::start(&[
        "--config",
        &repo_path(K8S_CONFIG),
        "--model-repository",
        &models,
        "--coloc-socket",
        &socket,
    ]);
    // A second after it is ready (the ledger's 250 ms tick), before any request or
    // trainer: every series the rules and dashboard read is already there.
    std::thread::sleep(Duration::from_secs(1));
    let fresh = server.get("/metrics");
    assert_eq!(fresh.status, 200);
    let fresh_file = tmp.path().join("fresh.txt");
    std::fs::write(&fresh_file, fresh.text()).unwrap();
    let mut trainer = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "train",
            "--data",
            "digits",
            "--device",
            "cpu",
            "--threads",
            "1",
        ])
        .args([
            "--seconds",
            "60",
            "--checkpoint-every",
            "100",
            "--coloc-socket",
            &socket,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let prometheus = Prometheus::start(server.addr);

    let report = tmp.path().join("load.json");
    let started = now_s();
    let load = Command::new(support::tandem_bench())
        .args([
            "load",
            "--url",
            &format!("http://{}", server.addr),
            "--model",
            "digits",
        ])
        .args([
            "--rate",
            &RATE.to_string(),
            "--duration",
            &LOAD_SECONDS.to_string(),
        ])
        .args(["--connections", "8", "--budget-ms", "50"])
        .arg("--json")
        .arg(&report)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    let ended = now_s();
    assert!(load.success(), "bench load failed");
    let load: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let achieved = load["achieved_rps"].as_f64().unwrap();
    assert!(
        (achieved - RATE).abs() / RATE < 0.05,
        "the server did not take the load: {load}"
    );
    // Two more scrapes, so the last seconds of the load are in Prometheus.
    std::thread::sleep(Duration::from_millis(2500));

    // The 10 s windows are centred in the run, clear of its start-up and its last
    // requests' answers at either end.
    let at = (started + ended) / 2.0 + 5.0;
    assert!(
        ended - started < LOAD_SECONDS + 4.0,
        "bench load took {:.1} s for {LOAD_SECONDS} s of load: the windows would miss it",
        ended - started
    );
    let qps = prometheus.scalar(r#"sum(rate(tandem_requests_total{code="200"}[10s]))"#, at);
    assert!(
        (qps - RATE).abs() / RATE < 0.10,
        "Prometheus's QPS {qps:.1} is not the offered {RATE}"
    );

    let p99 = prometheus.scalar(
        r#"histogram_quantile(0.99, sum by (le) (rate(tandem_request_duration_seconds_bucket{model="digits"}[10s])))"#,
        at,
    );
    assert!(
        p99.is_finite() && p99 > 0.0 && p99 <= K8S_BUDGET_S,
        "p99 {p99} s: not within the {K8S_BUDGET_S} s budget (bench load said {} ms)",
        load["p99_ms"]
    );

    // The device costs device_hour_usd; the share lent to the trainer is charged to
    // training, the rest split over the requests answered.
    let lent = prometheus.scalar(
        "sum(rate(tandem_training_harvested_device_seconds_total[10s]))",
        at,
    );
    let per_inference = prometheus.scalar(
        r#"sum(rate(tandem_cost_usd_total{kind="inference"}[10s])) / sum(rate(tandem_requests_total{code="200"}[10s]))"#,
        at,
    );
    let implied = K8S_DEVICE_HOUR_USD / 3600.0 * (1.0 - lent) / qps;
    assert!(
        (per_inference - implied).abs() / implied < 0.15,
        "cost per inference {per_inference:e} USD, but the price, the lent share {lent:.2} and \
         {qps:.0} req/s imply {implied:e}"
    );

    // The recording rules run on the live series.
    let recorded = prometheus.query(
        r#"namespace_model_code:tandem_requests:rate1m{namespace="tandem",model="digits",code="200"}"#,
        at,
    );
    assert_eq!(
        recorded.len(),
        1,
        "recording rule: {recorded:?}\n{}",
        prometheus.log()
    );

    // The autoscaler's query, exactly as the ScaledObject sends it.
    let query = keda_query();
    let result = prometheus.query(&query, now_s());
    assert!(
        result.len() == 1
            && result[0]["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(|v| v.is_finite() && v >= 0.0),
        "the ScaledObject's query {query} gave {result:?}: is tandem_load_ratio exported?"
    );

    // Every artifact's checks, with this server's scrape (the trainer still connected, so
    // the co-location families are in it) and this binary's flags.
    let scrape = server.get("/metrics");
    assert_eq!(scrape.status, 200);
    let scrape_file = tmp.path().join("scrape.txt");
    std::fs::File::create(&scrape_file)
        .unwrap()
        .write_all(scrape.text().as_bytes())
        .unwrap();
    let out = Command::new(python)
        .arg(repo_path("deploy/checks/run.py"))
        .arg("--scrape")
        .arg(&scrape_file)
        .arg("--fresh-scrape")
        .arg(&fresh_file)
        .args(["--tandem", env!("CARGO_BIN_EXE_tandem")])
        .output()
        .unwrap();
    let _ = trainer.kill();
    let _ = trainer.wait();
    assert!(
        out.status.success(),
        "deploy/checks/run.py:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The KServe runtime as KServe runs it: the shipped ServingRuntime's own args, with the
/// InferenceService's name for `{{.Name}}` and all-MiniLM-L6-v2's snapshot where the
/// storage initializer mounts it (/mnt/models), answers `/v1/embeddings` under that name.
/// The time from exec to that first answer is the cold start the deploy kit's probes and
/// scale-from-zero wait are checked against (deploy/checks/run.py --cold-start-s), and a
/// cold start far past them is caught.
#[test]
fn kserve_runtime_serves_its_model_within_the_probes() {
    const TEST: &str = "kserve_runtime_serves_its_model_within_the_probes";
    let Some(python) = python() else {
        return skip_or_fail(TEST, "no Python with PyYAML (scripts/test.sh)");
    };
    let Some(minilm) = support::text::minilm() else {
        return skip_or_fail(
            TEST,
            "all-MiniLM-L6-v2 not fetched (scripts/fetch-models.sh)",
        );
    };
    let out = Command::new(&python)
        .arg(repo_path("deploy/checks/kserve.py"))
        .args(["runtime-args", "minilm", minilm.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shipped: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    let tmp = TempDir::new("kserve-runtime");
    let args = local_args(&shipped, socket_in(&tmp, "coloc.sock"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let started = std::time::Instant::now();
    let server = Server::spawn(&args);
    server.wait_ready(Duration::from_secs(60));
    let r = server.post_json(
        "/v1/embeddings",
        &serde_json::json!({"model": "minilm", "input": "a cold start"}),
    );
    let cold_start = started.elapsed().as_secs_f64();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["data"][0]["embedding"].as_array().unwrap().len(),
        384
    );

    let checks = |seconds: f64| {
        Command::new(&python)
            .arg(repo_path("deploy/checks/run.py"))
            .args(["--cold-start-s", &seconds.to_string()])
            .output()
            .unwrap()
    };
    let out = checks(cold_start);
    assert!(
        out.status.success(),
        "deploy/checks/run.py --cold-start-s {cold_start:.2}:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let slow = checks(1000.0);
    let text = String::from_utf8_lossy(&slow.stdout);
    assert!(
        !slow.status.success() && text.contains("startupProbe allows"),
        "a 1000 s cold start passed the probe check:\n{text}"
    );
}

/// The runtime's args for a server on this machine: its own addresses on loopback (port
/// 0), the runtime's tandem.toml where the ConfigMap mounts it, its own trainer socket.
fn local_args(shipped: &[String], socket: String) -> Vec<String> {
    let mut args = Vec::new();
    let mut words = shipped.iter().skip_while(|w| *w == "serve");
    while let Some(w) = words.next() {
        match w.as_str() {
            "--listen" | "--grpc-listen" => {
                words.next();
                args.extend([w.clone(), "127.0.0.1:0".into()]);
            }
            "--config" => {
                words.next();
                args.extend([
                    w.clone(),
                    repo_path("deploy/k8s/kserve/runtime/tandem.toml"),
                ]);
            }
            _ => args.push(w.clone()),
        }
    }
    args.extend(["--coloc-socket".into(), socket]);
    args
}

/// Each configuration the Helm chart renders from its ci/ values files starts a server
/// that serves: the ConfigMap's tandem.toml and the tandem container's own flags, with the
/// pod's paths mapped to this machine's (the bundled repository for any model source, a
/// key file where the chart sets one). TLS flags are left out: serving TLS is tested in
/// tests/api/tls.rs, and the files are the Secret's.
#[test]
fn every_helm_values_file_renders_a_server_that_serves() {
    const TEST: &str = "every_helm_values_file_renders_a_server_that_serves";
    let Some(python) = python() else {
        return skip_or_fail(TEST, "no Python with PyYAML (scripts/test.sh)");
    };
    let tmp = TempDir::new("helm-serve");
    let keys = tmp.path().join("api-keys");
    std::fs::write(&keys, "key-one\n").unwrap();
    let chart_ci = Path::new(REPO).join("deploy/helm/tandem/ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&chart_ci)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no values files in {}",
        chart_ci.display()
    );
    for values in files {
        let out = Command::new(&python)
            .arg(repo_path("deploy/checks/helm.py"))
            .arg("serve-command")
            .arg(&values)
            .output()
            .unwrap();
        let name = values.file_stem().unwrap().to_str().unwrap().to_string();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rendered: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let config = rendered["config"]
            .as_str()
            .unwrap()
            .replace("/etc/tandem/api-keys/api-keys", keys.to_str().unwrap());
        let keyed = config.contains("api_keys_file");
        let config_path = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&config_path, config).unwrap();
        let args: Vec<String> = rendered["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let socket = socket_in(&tmp, &format!("{name}.sock"));
        let args = pod_args_here(&args, &config_path, &socket);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Server::start(&args);
        let body = infer_body(&inputs(64, 1), 1).to_string();
        let auth = [("Authorization", "Bearer key-one".to_string())];
        let r = request(
            server.addr,
            "POST",
            "/v2/models/digits/infer",
            if keyed { &auth[..] } else { &[] },
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{name}: {}\n{}", r.text(), server.log());
        if keyed {
            let r = request(
                server.addr,
                "POST",
                "/v2/models/digits/infer",
                &[],
                body.as_bytes(),
            );
            assert_eq!(r.status, 401, "{name}: served without its API key");
        }
    }
}

/// A pod's `tandem serve` flags for a server here: loopback addresses (port 0), the
/// config and socket given, the bundled repository, the CPU, no TLS.
fn pod_args_here(pod: &[String], config: &Path, socket: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut words = pod.iter().skip_while(|w| *w == "serve");
    while let Some(w) = words.next() {
        let value = words.next().cloned().unwrap_or_default();
        let here = match w.as_str() {
            "--listen" | "--grpc-listen" | "--metrics-listen" => "127.0.0.1:0".to_string(),
            "--config" => config.to_str().unwrap().to_string(),
            "--model-repository" => repo_path("config/models"),
            "--device" => "cpu".to_string(),
            "--coloc-socket" => socket.to_string(),
            "--tls-cert" | "--tls-key" => continue,
            _ => value,
        };
        args.extend([w.clone(), here]);
    }
    args
}
