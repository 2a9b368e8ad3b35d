//! Every refusal is counted once, under its reason: what clients were told (429s, 504s)
//! and what `tandem_requests_rejected_total{reason}` says add up, for each kind a client
//! can drive — shed by the adaptive policy, refused unparsed as late, the queue full, the
//! deadline passed (propagated and the request's own), and a client that left (abandoned).

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

/// Batches that stream ~75 MB of weights: tens of milliseconds each on two cores.
const DIMS: [usize; 4] = [512, 4096, 4096, 10];
/// The static model's scenes (a request queued behind two batches, its client gone before
/// its turn) need batches much longer than the few milliseconds a client takes to be
/// queued and leave: ~300 MB of weights, some tens of milliseconds a batch, however fast
/// the memory is that hour.
const STATIC_DIMS: [usize; 4] = [512, 8192, 8192, 10];

fn rejected(server: &Server, model: &str, reason: &str) -> u64 {
    let labels = [format!("model=\"{model}\""), format!("reason=\"{reason}\"")];
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    server.series("tandem_requests_rejected_total", &labels) as u64
}

fn start() -> (Server, TempDir) {
    let repo = TempDir::new("refusals");
    write_version(repo.path(), "adaptive", 1, &DIMS, 1);
    write_version(repo.path(), "static", 1, &STATIC_DIMS, 2);
    std::fs::write(
        repo.path().join("adaptive/config.toml"),
        "policy = \"adaptive\"\np99_ms = 20\nmax_batch_size = 4\n",
    )
    .unwrap();
    std::fs::write(
        repo.path().join("static/config.toml"),
        "policy = \"static\"\nmax_batch_size = 1\nmax_queue_delay_us = 0\nqueue_capacity = 2\n",
    )
    .unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    (server, repo)
}

/// `clients` closed-loop clients on `model` for `seconds`: (200s, 429s, 504s).
fn flood(server: &Server, model: &str, clients: usize, seconds: u64) -> (u64, u64, u64) {
    let body = infer_body(&inputs(DIMS[0], 3), 1);
    let until = Instant::now() + Duration::from_secs(seconds);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    let mut seen = (0, 0, 0);
                    while Instant::now() < until {
                        let r = server.post_json(&format!("/v2/models/{model}/infer"), &body);
                        match r.status {
                            200 => seen.0 += 1,
                            429 => seen.1 += 1,
                            504 => seen.2 += 1,
                            other => panic!("{other}: {}", r.text()),
                        }
                    }
                    seen
                })
            })
            .collect();
        handles.into_iter().fold((0, 0, 0), |a, h| {
            let b = h.join().unwrap();
            (a.0 + b.0, a.1 + b.1, a.2 + b.2)
        })
    })
}

#[test]
fn each_refusal_is_counted_once_under_its_reason() {
    let (server, _repo) = start();

    // The adaptive policy, overloaded: shed (then refused at the closed door, and, when
    // the front end falls behind, late or unread before parsing).
    let (ok, too_many, _) = flood(&server, "adaptive", 32, 4);
    let [shed, door_closed, late, unread, queue_full] =
        ["shed", "door_closed", "late", "unread", "queue_full"]
            .map(|reason| rejected(&server, "adaptive", reason));
    eprintln!(
        "adaptive: {ok} answered, {too_many} refused: shed {shed}, door_closed {door_closed}, \
         late {late}, unread {unread}, queue_full {queue_full}"
    );
    assert!(shed > 0, "nothing shed");
    assert_eq!(shed + door_closed + late + unread + queue_full, too_many);

    // The static policy with room for two: the queue is full.
    let (_, full, timed_out) = flood(&server, "static", 8, 2);
    assert!(full > 0, "the queue never filled");
    assert_eq!(rejected(&server, "static", "queue_full"), full);
    assert_eq!(timed_out, 0);

    // Deadlines: one propagated with nothing left (refused before parsing), one of the
    // request's own that passes in the queue behind a batch.
    let expired_before = rejected(&server, "static", "expired");
    let passed_before = rejected(&server, "static", "deadline_passed");
    let body = infer_body(&inputs(DIMS[0], 3), 1);
    let r = request(
        server.addr,
        "POST",
        "/v2/models/static/infer",
        &[("tandem-timeout-us", "0".into())],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 504, "{}", r.text());
    let mut own = body.clone();
    own["parameters"] = json!({"timeout": 1});
    let addr = server.addr;
    let blocker = {
        let body = body.clone();
        std::thread::spawn(move || post_json(addr, "/v2/models/static/infer", &body))
    };
    std::thread::sleep(Duration::from_millis(5));
    let r = server.post_json("/v2/models/static/infer", &own);
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(blocker.join().unwrap().status, 200);
    assert_eq!(
        rejected(&server, "static", "deadline_passed"),
        passed_before + 1
    );
    assert_eq!(rejected(&server, "static", "expired"), expired_before + 1);

    // A client that leaves while its request waits behind two others: dropped before it
    // costs compute. The two must be queued first, which on busy cores a short sleep does
    // not guarantee, so the scene is played again (at most five times) until it was.
    let abandoned = (0..5).any(|_| {
        leave_while_queued(addr, &body);
        poll_until(Duration::from_secs(2), || {
            rejected(&server, "static", "abandoned") >= 1
        })
    });
    assert!(abandoned, "the abandoned request was not counted");
    server.assert_serves_within("static", DIMS[0], Duration::from_secs(10));
}

/// Two requests that keep the static model busy, then one whose client leaves while it
/// waits behind them.
fn leave_while_queued(addr: std::net::SocketAddr, body: &serde_json::Value) {
    let blockers: Vec<_> = (0..2)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || post_json(addr, "/v2/models/static/infer", &body))
        })
        .collect();
    // Each blocker's batch streams the model's weights once (milliseconds): the blockers
    // have a moment to arrive first, and the request that leaves is queued well within
    // their batches.
    std::thread::sleep(Duration::from_millis(2));
    let text = body.to_string();
    let mut gone = TcpStream::connect(addr).unwrap();
    write!(
        gone,
        "POST /v2/models/static/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    )
    .unwrap();
    // Gone once the request is queued (a client that leaves while its request is still
    // being read is never enqueued, and so never counted), with a reset: a FIN alone is
    // a half-close, after which a client may still read its answer.
    std::thread::sleep(Duration::from_millis(3));
    reset_on_close(&gone);
    drop(gone);
    for b in blockers {
        let status = b.join().unwrap().status;
        assert!(matches!(status, 200 | 429), "{status}");
    }
}

/// Makes closing `stream` send a reset (SO_LINGER with a zero timeout).
fn reset_on_close(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a pointer to a `linger` of the size given.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
}
