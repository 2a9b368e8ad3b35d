//! Lifecycle under load: hot-loading new versions fails no request, a corrupt version is
//! ignored while the previous one keeps serving, and SIGTERM loses no in-flight request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;

const DIMS: [usize; 3] = [16, 32, 6];

fn config(repo: &TempDir, extra: &str) -> String {
    let path = repo.path().join("tandem.toml");
    std::fs::write(
        &path,
        format!(
            "model_repository = \"{}\"\nrepository_poll_ms = 100\n{extra}",
            repo.path().join("models").display()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn new_versions_hot_load_under_load_and_a_corrupt_one_is_ignored() {
    let repo = TempDir::new("hotload");
    let models_dir = repo.path().join("models");
    let mut versions = vec![write_version(&models_dir, "m", 1, &DIMS, 1)];
    // A budget nothing here misses: what this test checks is that loading and unloading
    // versions fails no request, not how an overloaded host sheds.
    let server = Server::start(&[
        "--config",
        &config(&repo, "keep_versions = 2\n[defaults]\np99_ms = 2000.0\n"),
    ]);
    let addr = server.addr;
    // The warm-up's timings, one per batch-size bucket, are in the log for operators.
    // (Ready means warmed up; the log's reader thread may still be a line behind.)
    let warmed = |log: &str| {
        log.lines()
            .find(|l| l.contains("warmed up") && l.contains("model=m"))
            .map(str::to_owned)
    };
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let line = loop {
        let log = server.log();
        match warmed(&log) {
            Some(line) => break line,
            None if std::time::Instant::now() > give_up => panic!("no warm-up line in:\n{log}"),
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    let timings = line.split("warmup_us=").nth(1).unwrap_or_default();
    let first = timings.split([',', ' ']).next().unwrap_or_default();
    assert!(
        first.starts_with("1:") && first[2..].parse::<u64>().is_ok(),
        "{line}"
    );
    // So is the batch size adaptive batches wait to grow towards.
    let efficient = line.split("efficient_batch=").nth(1).unwrap_or_default();
    let efficient = efficient.split(' ').next().unwrap_or_default();
    assert!(
        efficient.parse::<usize>().is_ok_and(|rows| rows >= 1),
        "{line}"
    );
    let x = inputs(DIMS[0], 3);
    let body = infer_body(&x, 1);

    let stop = Arc::new(AtomicBool::new(false));
    // (version that answered, its output) for every response.
    type Seen = std::sync::Mutex<Vec<(u64, Vec<f32>)>>;
    let seen: Arc<Seen> = Default::default();
    let failures = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, seen, failures, body) =
                (stop.clone(), seen.clone(), failures.clone(), body.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = post_json(addr, "/v2/models/m/infer", &body);
                    if r.status != 200 {
                        failures.fetch_add(1, Ordering::Relaxed);
                        eprintln!("failed: {} {}", r.status, r.text());
                        continue;
                    }
                    let v: u64 = r.json()["model_version"].as_str().unwrap().parse().unwrap();
                    seen.lock().unwrap().push((v, r.output_values()));
                }
            })
        })
        .collect();
    let wait_for_version = |v: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if seen.lock().unwrap().iter().any(|(s, _)| *s == v) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("version {v} never served:\n{}", server.log());
    };
    wait_for_version(1);
    versions.push(write_version(&models_dir, "m", 2, &DIMS, 2));
    wait_for_version(2);

    // A corrupt version 3: logged, ignored; version 2 keeps serving.
    let v3 = models_dir.join("m/3");
    std::fs::create_dir_all(&v3).unwrap();
    std::fs::write(
        v3.join("model.safetensors"),
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert!(server.log().contains("failed to load"), "{}", server.log());
    assert_eq!(server.get("/v2/health/ready").status, 200);

    // Version 4 replaces it; with keep_versions = 2, version 1 is unloaded.
    versions.push(write_version(&models_dir, "m", 4, &DIMS, 4));
    wait_for_version(4);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }

    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "requests failed during hot loads"
    );
    let seen = seen.lock().unwrap();
    assert!(seen.len() > 20, "only {} requests", seen.len());
    for (v, out) in seen.iter() {
        assert_ne!(*v, 3, "the corrupt version served");
        let ckpt = match v {
            1 => &versions[0],
            2 => &versions[1],
            4 => &versions[2],
            other => panic!("unexpected version {other}"),
        };
        assert_close(out, &reference(ckpt, &x, 1));
    }
    let meta = server.get("/v2/models/m").json();
    assert_eq!(meta["versions"], serde_json::json!(["2", "4"]));
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits() {
    let repo = TempDir::new("sigterm");
    let models_dir = repo.path().join("models");
    let ckpt = write_version(&models_dir, "m", 1, &DIMS, 1);
    // Requests wait 400 ms in the queue, so SIGTERM arrives while they are in flight.
    let mut server = Server::start(&[
        "--config",
        &config(
            &repo,
            "[defaults]\npolicy = \"static\"\nmax_queue_delay_us = 400000\nmax_batch_size = 64\n[limits]\nshutdown_drain_ms = 300\nshutdown_grace_ms = 5000\n",
        ),
    ]);
    let addr = server.addr;
    let x = inputs(DIMS[0], 8);
    let want = reference(&ckpt, &x, 1);
    let in_flight: Vec<_> = (0..16)
        .map(|_| {
            let body = infer_body(&x, 1);
            std::thread::spawn(move || post_json(addr, "/v2/models/m/infer", &body))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let signalled = Instant::now();
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(50));
    // Draining: not ready, but still serving.
    assert_eq!(server.get("/v2/health/ready").status, 503);
    assert_eq!(server.get("/v2/health/live").status, 200);
    for t in in_flight {
        let r = t.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_close(&r.output_values(), &want);
    }
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("exited after SIGTERM");
    assert!(status.success(), "exit status {status:?}\n{}", server.log());
    assert!(signalled.elapsed() < Duration::from_secs(6));
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still accepting after exit"
    );
}

/// Starts the server with its open-file limit at `soft`/`hard`.
fn with_open_files(command: &mut std::process::Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only, between fork and exec; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// The soft and hard open-file limits of a running process.
fn open_file_limits(pid: i32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let mut numbers = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[test]
fn the_open_file_limit_is_raised_to_what_max_connections_needs() {
    let repo = TempDir::new("nofile");
    write_version(repo.path(), "m", 1, &[8, 8, 3], 1);
    let args = ["--model-repository", repo.path().to_str().unwrap()];
    // A soft limit of 256 under a hard one of 4,096: raised to the default
    // max_connections (1,024) and room besides.
    let server = Server::start_with(&args, |c| with_open_files(c, 256, 4096));
    let (soft, hard) = open_file_limits(server.pid());
    assert!((1024 + 128..=hard).contains(&soft), "soft limit {soft}");
    assert_eq!(hard, 4096);
    server.assert_serves("m", 8);
    // A hard limit below that: raised as far as it goes, said in the log, still serving.
    let server = Server::start_with(&args, |c| with_open_files(c, 256, 512));
    assert_eq!(open_file_limits(server.pid()), (512, 512));
    assert!(
        server.log().contains("open-file limit (hard) is below"),
        "{}",
        server.log()
    );
    server.assert_serves("m", 8);
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: state is field 3, utime and stime 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn out_of_file_descriptors_the_server_waits_instead_of_spinning_and_recovers() {
    use std::io::{BufRead, Write};
    let repo = TempDir::new("emfile");
    write_version(repo.path(), "m", 1, &[8, 8, 3], 1);
    let socket = repo.path().join("coloc.sock");
    let server = Server::start_with(
        &[
            "--model-repository",
            repo.path().to_str().unwrap(),
            "--coloc-socket",
            socket.to_str().unwrap(),
        ],
        // About 15 descriptors serve an idle server: room for a couple of dozen clients.
        |c| with_open_files(c, 40, 40),
    );
    // More clients than descriptors: the last ones wait in the listen backlog, and so
    // does a trainer, since every accept fails until descriptors come back.
    let clients: Vec<_> = (0..60)
        .map(|_| std::net::TcpStream::connect(server.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut trainer = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_seconds(server.pid());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_seconds(server.pid()) - before;
    assert!(
        used < 0.3,
        "{used:.2} s of CPU in a second with nothing to do"
    );
    assert!(
        server.log().contains("accepting a trainer failed"),
        "{}",
        server.log()
    );

    // Descriptors come back: the trainer is welcomed and requests are served.
    drop(clients);
    let hello = format!(
        "{{\"type\":\"hello\",\"version\":1,\"name\":\"t\",\"pid\":{},\"device\":\"cpu\",\"max_streams\":1,\"memory_bytes\":0}}\n",
        std::process::id()
    );
    trainer.write_all(hello.as_bytes()).unwrap();
    trainer
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut welcome = String::new();
    std::io::BufReader::new(&trainer)
        .read_line(&mut welcome)
        .unwrap();
    assert!(welcome.contains("\"welcome\""), "{welcome}");
    // The dead clients still in the backlog are accepted and closed as the limit allows, so
    // accepting may fail and pause again for a moment; a request that waits through such a
    // pause arrives late for its budget and is refused with a Retry-After, which the
    // client honours.
    server.assert_serves_within("m", 8, Duration::from_secs(10));
    // Said once a streak, not at every retry.
    let log = server.log();
    assert!(log.matches("accept failed").count() <= 3, "{log}");
    assert!(log.contains("accepting connections again"), "{log}");
}

/// The cores each thread of a running process may run on, by thread name (Linux's 15
/// characters), from `/proc/PID/task/*/status`.
fn thread_cores(pid: i32) -> Vec<(String, Vec<usize>)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|task| {
            let status = std::fs::read_to_string(task.ok()?.path().join("status")).ok()?;
            let field = |key: &str| {
                let line = status.lines().find(|l| l.starts_with(key))?;
                Some(line[key.len()..].trim().to_string())
            };
            Some((field("Name:")?, core_list(&field("Cpus_allowed_list:")?)))
        })
        .collect()
}

/// "0-2,5" → [0, 1, 2, 5].
fn core_list(list: &str) -> Vec<usize> {
    let range = |part: &str| -> Vec<usize> {
        match part.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect(),
            None => vec![part.parse().unwrap()],
        }
    };
    list.split(',').flat_map(range).collect()
}

#[test]
fn a_text_encoders_compute_threads_are_pinned_one_per_core() {
    let (server, _repo) = crate::support::text::start_synthetic();
    let threads = thread_cores(server.pid());
    let all = &threads
        .iter()
        .find(|(name, _)| name == "tandem-http")
        .unwrap()
        .1;
    // The pool's threads are named worker-MODEL-REPLICA/INDEX; the thread that started it,
    // without the index, floats.
    let mut pinned: Vec<usize> = Vec::new();
    for (name, cores) in &threads {
        if name.starts_with("worker-enc-0/") {
            if all.len() > 1 {
                assert_eq!(cores.len(), 1, "{name} may run on {cores:?}");
            }
            pinned.extend(cores);
        } else {
            assert_eq!(cores, all, "{name} should float");
        }
    }
    pinned.sort_unstable();
    assert_eq!(&pinned, all, "one compute thread per core: {threads:?}");
    // It serves as before.
    let r = server.post_json(
        "/v1/embeddings",
        &serde_json::json!({"model": "enc", "input": "a"}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}
