//! What the server says of itself over the soak: its answers by status, its version
//! loads, its SIGHUP reloads as its log shows them, and whether it is still there.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use super::{MODEL_LOADS_TOTAL, REQUESTS_TOTAL, Target, metrics_by_label, scrape_blocking};
use crate::serve_process::ServeProcess;

/// What the server said of itself: its own count of answers by status over the run, its
/// version loads, and whether it was still there at the end.
#[derive(Debug, Default, Serialize)]
pub(super) struct ServerSide {
    pub(super) requests_by_code: BTreeMap<String, f64>,
    pub(super) version_loads: BTreeMap<String, f64>,
    /// The SIGHUP reloads its log shows (a server this command started).
    pub(super) reloads_logged: Option<ReloadsLogged>,
    /// How its process ended, if it did.
    pub(super) exited: Option<String>,
    pub(super) ready_at_end: bool,
}

/// SIGHUPs the server's log says it received, and what came of them.
#[derive(Debug, Serialize)]
pub(super) struct ReloadsLogged {
    pub(super) received: u64,
    pub(super) applied: u64,
    /// Files it refused, keeping the running configuration: every invalid one, no other.
    pub(super) rejected: u64,
}

impl ReloadsLogged {
    pub(super) fn from_log(log: &str) -> ReloadsLogged {
        let count = |s: &str| log.matches(s).count() as u64;
        ReloadsLogged {
            received: count("SIGHUP: reloading the configuration"),
            applied: count("configuration reloaded"),
            // The binary refuses a file it cannot read or validate; the gateway one it
            // cannot apply.
            rejected: count("config reload failed") + count("config reload rejected"),
        }
    }
}

/// The counters `ServerSide` reports as changes over the run.
#[derive(Default)]
pub(super) struct Counters {
    requests: BTreeMap<String, f64>,
    loads: BTreeMap<String, f64>,
}

pub(super) fn counters(addr: SocketAddr) -> Counters {
    let text = scrape_blocking(addr).unwrap_or_default();
    Counters {
        requests: metrics_by_label(&text, REQUESTS_TOTAL, "code"),
        loads: metrics_by_label(&text, MODEL_LOADS_TOTAL, "outcome"),
    }
}

fn delta(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

pub(super) fn server_side(target: &mut Target, before: &Counters) -> ServerSide {
    let after = counters(target.addr);
    let reloads_logged = target.log().as_deref().map(ReloadsLogged::from_log);
    let exited = target.process.as_mut().and_then(ServeProcess::exited);
    let ready = std::net::TcpStream::connect_timeout(&target.addr, Duration::from_secs(5))
        .and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            write!(
                s,
                "GET /v2/health/ready HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                target.addr
            )?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf)?;
            Ok(buf.starts_with(b"HTTP/1.1 200"))
        })
        .unwrap_or(false);
    ServerSide {
        requests_by_code: delta(&after.requests, &before.requests),
        version_loads: delta(&after.loads, &before.loads),
        reloads_logged,
        exited,
        ready_at_end: ready,
    }
}
