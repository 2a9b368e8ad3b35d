//! The soak's misbehaving clients, beside the measured load: slow ones that trickle a
//! request a byte at a time (slowloris), and garbage ones that send random bytes or
//! requests the server must refuse. What the server owes them: never a 5xx, an answer to
//! every well-formed request (a 4xx is an answer), and its limits applied — a head that
//! takes longer than the header timeout is cut, a body slower than the body timeout gets
//! 408.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use models::rng::SplitMix64;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Stop;

/// What came back to one sort of client, by kind of request and outcome: an HTTP status,
/// `cut` (the server closed the connection without an answer) or `no_answer` (neither
/// within the client's wait).
#[derive(Debug, Default, Serialize)]
pub struct Tally {
    pub connections: u64,
    pub outcomes: BTreeMap<String, u64>,
    /// What the server did that it must not, with the request that drew it.
    pub violations: Vec<String>,
}

impl Tally {
    fn add(&mut self, kind: &str, outcome: &Outcome) {
        self.connections += 1;
        let key = format!("{kind}: {}", outcome.label());
        *self.outcomes.entry(key).or_default() += 1;
    }

    /// Records a violation; the first few are kept word for word, the rest counted.
    fn violation(&mut self, what: String) {
        const KEPT: usize = 20;
        if self.violations.len() < KEPT {
            self.violations.push(what);
        } else if self.violations.len() == KEPT {
            self.violations
                .push("(further violations of this kind not listed)".into());
        }
    }

    fn merge(&mut self, other: Tally) {
        self.connections += other.connections;
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        for v in other.violations {
            self.violation(v);
        }
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Status(u16),
    Cut,
    NoAnswer,
}

impl Outcome {
    fn label(&self) -> String {
        match self {
            Outcome::Status(s) => s.to_string(),
            Outcome::Cut => "cut".into(),
            Outcome::NoAnswer => "no_answer".into(),
        }
    }

    fn is_5xx(&self) -> bool {
        matches!(self, Outcome::Status(s) if *s >= 500)
    }
}

/// The status of the response at the start of `bytes`, if one is there.
fn status_of(bytes: &[u8]) -> Option<u16> {
    let line = bytes.strip_prefix(b"HTTP/1.")?.get(2..5)?;
    std::str::from_utf8(line).ok()?.parse().ok()
}

/// Sends `pieces`, `gap` apart, while reading whatever comes back, and ends when the server
/// has closed the connection or `wait` has passed. Every request here says `Connection:
/// close`, so an answer ends with the stream. With `half_close` the client shuts its side
/// after the last piece, as a client with nothing more to say does; a well-formed request
/// must not (hyper closes a connection that ends mid-request without answering it).
async fn exchange(
    addr: SocketAddr,
    pieces: Vec<Vec<u8>>,
    gap: Duration,
    half_close: bool,
    wait: Duration,
) -> Outcome {
    let Ok(stream) = TcpStream::connect(addr).await else {
        return Outcome::Cut;
    };
    let (mut rd, mut wr) = stream.into_split();
    let send = async move {
        for piece in pieces {
            if wr.write_all(&piece).await.is_err() {
                break;
            }
            tokio::time::sleep(gap).await;
        }
        if half_close {
            let _ = wr.shutdown().await;
        }
        // Dropping the write half would shut it: it is kept until the answer is read.
        std::future::pending::<Vec<u8>>().await
    };
    let receive = async move {
        let mut head = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => return head,
                // Only the head matters; the rest is read and dropped.
                Ok(n) if head.len() < 4096 => head.extend_from_slice(&chunk[..n]),
                Ok(_) => {}
            }
        }
    };
    let outcome = tokio::time::timeout(wait, async {
        tokio::select! {
            head = receive => head,
            never = send => never,
        }
    })
    .await;
    match outcome {
        Err(_) => Outcome::NoAnswer,
        Ok(head) => status_of(&head).map_or(Outcome::Cut, Outcome::Status),
    }
}

/// How one slow client misbehaves this time round.
#[derive(Clone, Copy, Debug)]
enum Slow {
    /// A head trickled slower than the header timeout allows: the server must cut it.
    Head,
    /// A whole head, then a body slower than the body timeout allows: 408.
    Body,
    /// A head trickled just fast enough: the server must answer it.
    InTime,
}

/// The server's slow-client limits, which the slow clients' pace is set from.
pub struct Limits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    /// Whether these are the server's own (a server the soak started) or the documented
    /// defaults assumed for one at `--url`, whose outcomes are then not judged by kind.
    pub known: bool,
}

impl Slow {
    /// The request, one byte per piece, and the gap between pieces.
    fn request(self, addr: SocketAddr, model: &str, limits: &Limits) -> (Vec<Vec<u8>>, Duration) {
        let head = |method: &str, path: &str, extra: &str| {
            format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n{extra}\r\n")
        };
        let bytes = |s: &[u8]| s.iter().map(|b| vec![*b]).collect::<Vec<_>>();
        match self {
            Slow::Head => {
                let h = head("GET", "/v2/health/live", "");
                // The whole head takes twice the header timeout.
                let gap = limits.header_timeout * 2 / h.len() as u32;
                (bytes(h.as_bytes()), gap)
            }
            Slow::Body => {
                let body = br#"{"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 1], "data": [0]}]}"#;
                let h = head(
                    "POST",
                    &format!("/v2/models/{model}/infer"),
                    &format!(
                        "content-type: application/json\r\ncontent-length: {}\r\n",
                        body.len()
                    ),
                );
                let mut pieces = vec![h.into_bytes()];
                pieces.extend(bytes(body));
                // The body takes twice the body timeout.
                (pieces, limits.body_timeout * 2 / body.len() as u32)
            }
            Slow::InTime => {
                let h = head("GET", "/v2/health/ready", "");
                // Half the header timeout: slow, and in time.
                (
                    bytes(h.as_bytes()),
                    limits.header_timeout / 2 / h.len() as u32,
                )
            }
        }
    }

    /// Whether `outcome` is what the server owes this client.
    fn expected(self, outcome: &Outcome) -> bool {
        match self {
            // hyper closes a connection whose head is late; an answer (408) would do too.
            Slow::Head => matches!(outcome, Outcome::Cut | Outcome::Status(408)),
            Slow::Body => *outcome == Outcome::Status(408),
            // Readiness may be 503 only while the server starts or drains, neither of which
            // happens during a soak.
            Slow::InTime => *outcome == Outcome::Status(200),
        }
    }
}

/// `n` slow clients, each connecting again as soon as its last connection ended, in turn
/// through the kinds of slowness, until `stop` (which abandons the connections still open).
pub async fn slow(addr: SocketAddr, model: String, n: usize, limits: Limits, stop: Stop) -> Tally {
    let model = Arc::new(model);
    let limits = Arc::new(limits);
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..n {
        let (model, limits, stop) = (model.clone(), limits.clone(), stop.clone());
        clients.spawn(async move {
            let mut tally = Tally::default();
            let kinds = [Slow::Head, Slow::Body, Slow::InTime];
            for turn in i.. {
                let kind = kinds[turn % kinds.len()];
                let (pieces, gap) = kind.request(addr, &model, &limits);
                // Long enough for the slowest kind to be cut or answered, with room to spare.
                let wait = (limits.header_timeout + limits.body_timeout) * 2;
                let outcome = tokio::select! {
                    outcome = exchange(addr, pieces, gap, false, wait) => outcome,
                    _ = stop.stopped() => break,
                };
                let name = format!("{kind:?}");
                tally.add(&name, &outcome);
                let owed = !limits.known || kind.expected(&outcome);
                if outcome.is_5xx() || outcome == Outcome::NoAnswer || !owed {
                    tally.violation(format!("slow client ({name}): {}", outcome.label()));
                }
            }
            tally
        });
    }
    let mut total = Tally::default();
    for tally in clients.join_all().await {
        total.merge(tally);
    }
    total
}

/// A garbage request: its bytes, and whether it is well-formed HTTP (which the server must
/// answer) or not (which it may answer or cut).
struct Garbage {
    kind: &'static str,
    bytes: Vec<u8>,
    well_formed: bool,
}

/// One garbage request of kind `n % 7`, for model `model` of input width `width`.
fn garbage(n: u64, rng: &mut SplitMix64, addr: SocketAddr, model: &str, width: usize) -> Garbage {
    let random = |rng: &mut SplitMix64, len: usize| -> Vec<u8> {
        (0..len).map(|_| rng.next_u64() as u8).collect()
    };
    let post = |extra: &str, body: &[u8]| -> Vec<u8> {
        let mut r = format!(
            "POST /v2/models/{model}/infer HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let valid = serde_json::json!({"inputs": [{"name": "input-0", "datatype": "FP32",
        "shape": [1, width], "data": vec![0.5f32; width]}]})
    .to_string();
    let len = 16 + rng.below(2048);
    let (kind, bytes, well_formed) = match n % 7 {
        0 => ("random bytes", random(rng, len), false),
        1 => {
            // A valid body cut short: JSON that ends mid-value.
            let cut = rng.below(valid.len() - 1) + 1;
            ("truncated JSON", post("", &valid.as_bytes()[..cut]), true)
        }
        2 => ("random body", post("", &random(rng, len)), true),
        3 => {
            let body = serde_json::json!({"inputs": [{"name": "input-0", "datatype": "FP32",
                "shape": [1, width + 1], "data": vec![0.5f32; width + 1]}]});
            ("wrong shape", post("", body.to_string().as_bytes()), true)
        }
        4 => {
            let extra = format!("inference-header-content-length: {}\r\n", valid.len() * 2);
            (
                "binary header longer than the body",
                post(&extra, valid.as_bytes()),
                true,
            )
        }
        5 => (
            "gzip that is not",
            post("content-encoding: gzip\r\n", &random(rng, len)),
            true,
        ),
        _ => {
            // A head that promises more body than comes: the connection ends mid-body.
            let mut r = post("", valid.as_bytes());
            r.truncate(r.len() - valid.len() / 2);
            ("body cut short", r, false)
        }
    };
    Garbage {
        kind,
        bytes,
        well_formed,
    }
}

/// Garbage requests at `rate` per second until `stop`, each on its own connection; at most
/// `CONCURRENCY` at once (a send that finds none free is skipped, so a stalled server
/// cannot make this grow).
pub async fn garbage_clients(
    addr: SocketAddr,
    model: String,
    width: usize,
    rate: f64,
    seed: u64,
    stop: Stop,
) -> Tally {
    const CONCURRENCY: usize = 16;
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut rng = SplitMix64::new(seed ^ 0x6761_7262_6167_6500);
    let mut sent = tokio::task::JoinSet::new();
    let mut tally = Tally::default();
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.01)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.stopped() => break,
        }
        while let Some(Ok(done)) = sent.try_join_next() {
            settle(&mut tally, done);
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            continue;
        };
        let g = garbage(n, &mut rng, addr, &model, width);
        sent.spawn(async move {
            let _permit = permit;
            let wait = Duration::from_secs(30);
            let outcome = exchange(addr, vec![g.bytes], Duration::ZERO, !g.well_formed, wait).await;
            (g.kind, g.well_formed, outcome)
        });
    }
    // The ones still out end within their own bound.
    for done in sent.join_all().await {
        settle(&mut tally, done);
    }
    tally
}

/// Counts one garbage request's outcome: a 5xx is a violation, and so is a well-formed
/// request left without an answer.
fn settle(tally: &mut Tally, (kind, well_formed, outcome): (&'static str, bool, Outcome)) {
    tally.add(kind, &outcome);
    let answered = matches!(outcome, Outcome::Status(_));
    if outcome.is_5xx() || (well_formed && !answered) {
        tally.violation(format!("garbage ({kind}): {}", outcome.label()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_read_from_a_response_head_and_nothing_else() {
        assert_eq!(status_of(b"HTTP/1.1 400 Bad Request\r\n"), Some(400));
        assert_eq!(status_of(b"HTTP/1.0 408 Request Timeout\r\n"), Some(408));
        assert_eq!(status_of(b"HTTP/1.1 4"), None);
        assert_eq!(status_of(b""), None);
        assert_eq!(status_of(b"garbage"), None);
    }
}
