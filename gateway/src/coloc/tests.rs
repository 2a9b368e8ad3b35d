//! The coordinator's supervision of one trainer, against a real process.

use std::sync::Arc;
use std::time::Duration;

use coloc_protocol::Hello;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::allowance::{AllowanceController, Pressure, Thresholds};
use super::guardian::Guardian;
use super::memory::Squeeze;
use super::trainer_slot::{Lending, Terms, TrainerSlot};

fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .and_then(|s| s.trim().chars().next())
        .unwrap_or('?')
}

/// A child process, continued and killed however the test ends.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        // SAFETY: kill(2) with our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real process (`sleep`) stands in for a trainer that never acknowledges: what the
/// coordinator does to it is what the kernel shows.
#[test]
fn a_pause_sent_before_serving_was_measured_is_enforced_only_once_serving_needs_it() {
    use std::process::{Command, Stdio};
    let child = Sleeper(
        Command::new("sleep")
            .arg("30")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (outbound, _directives) = mpsc::channel(8);
    let t0 = Instant::now();
    let hello = Hello {
        version: 1,
        name: "long steps".into(),
        pid: child.id() as i64,
        device: "cpu".into(),
        max_streams: 2,
        memory_bytes: 1 << 20,
        min_memory_bytes: 0,
    };
    let guardian = Arc::new(Guardian::disabled());
    let mut t = TrainerSlot::new(0, hello, child.id() as i32, outbound, guardian, t0);
    let terms = Terms {
        ack_within: Duration::from_secs(1),
        max_duty_cycle: 1.0,
    };
    let mut c = AllowanceController::new(Thresholds::default());
    let calm = Pressure {
        worst_latency_ratio: 0.2,
        ..Default::default()
    };
    fn lending(c: &AllowanceController, a: f64, terms: Terms) -> Lending<'_> {
        Lending {
            controller: c,
            allowance: a,
            before: a,
            terms,
            squeeze: Squeeze::None,
            all_held: 1 << 20,
        }
    }
    let a = c.update(calm, t0);
    t.supervise(&lending(&c, a, terms), t0);
    assert!(t.last.as_ref().is_some_and(|(d, _)| d.pause));
    // Long past the deadline, unacknowledged, but serving has shown no need.
    let later = t0 + Duration::from_millis(900);
    let a = c.update(calm, later);
    t.supervise(&lending(&c, a, terms), later + Duration::from_secs(4));
    assert!(!t.stopped);
    assert_ne!(state(child.id()), 'T');
    // Pressure: the pause is now serving's need, and its deadline has long passed.
    let pressed = later + Duration::from_secs(5);
    let a = c.update(
        Pressure {
            worst_latency_ratio: 0.95,
            ..Default::default()
        },
        pressed,
    );
    t.supervise(&lending(&c, a, terms), pressed);
    let stopped = t.stopped;
    // The kernel stops it when it next handles the signal, a moment later.
    let mut seen = state(child.id());
    for _ in 0..200 {
        if seen == 'T' {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        seen = state(child.id());
    }
    t.continue_process();
    assert!(stopped);
    assert_eq!(seen, 'T');
}

fn hello(pid: u32, memory_bytes: u64, min_memory_bytes: u64) -> Hello {
    Hello {
        version: 1,
        name: "t".into(),
        pid: pid as i64,
        device: "cuda:0".into(),
        max_streams: 1,
        memory_bytes,
        min_memory_bytes,
    }
}

fn last_limit(t: &TrainerSlot) -> u64 {
    t.last.as_ref().unwrap().0.memory_limit_bytes
}

/// Serving short of memory: the directive asks the trainer for its part of the shortfall,
/// holds it there while memory recovers, and lends by the allowance again once it has.
#[test]
fn a_memory_squeeze_lowers_the_limit_until_memory_recovers() {
    const GIB: u64 = 1 << 30;
    let (outbound, mut directives) = mpsc::channel(8);
    let t0 = Instant::now();
    let guardian = Arc::new(Guardian::disabled());
    // Its own pid stands in for a peer: nothing here signals.
    let pid = std::process::id();
    let mut t = TrainerSlot::new(
        0,
        hello(pid, 8 * GIB, 2 * GIB),
        pid as i32,
        outbound,
        guardian,
        t0,
    );
    let c = AllowanceController::new(Thresholds::default());
    let terms = Terms {
        ack_within: Duration::from_secs(1),
        max_duty_cycle: 1.0,
    };
    let lending = |squeeze, all_held| Lending {
        controller: &c,
        allowance: 0.5,
        before: 0.5,
        terms,
        squeeze,
        all_held,
    };
    // Half the allowance: its least and half the rest.
    t.supervise(&lending(Squeeze::None, 8 * GIB), t0);
    assert_eq!(last_limit(&t), 5 * GIB);
    let ack = |seq, memory_bytes| coloc_protocol::Ack {
        seq,
        streams: 1,
        memory_bytes,
    };
    t.acknowledged(&ack(1, 5 * GIB), t0);
    assert_eq!(t.held, 5 * GIB);
    // 3 GiB short, a second trainer holding as much: this one gives half of it.
    t.supervise(&lending(Squeeze::Take(3 * GIB), 10 * GIB), t0);
    assert_eq!(last_limit(&t), 5 * GIB - 3 * GIB / 2);
    t.acknowledged(&ack(2, 3 * GIB + GIB / 2), t0);
    // Recovering: held where it is, no new directive.
    t.supervise(&lending(Squeeze::Take(0), 7 * GIB), t0);
    assert_eq!(t.last.as_ref().unwrap().0.seq, 2);
    // Recovered: lent by the allowance again.
    t.supervise(&lending(Squeeze::None, 7 * GIB), t0);
    assert_eq!(last_limit(&t), 5 * GIB);
    let mut seen = Vec::new();
    while let Ok(super::trainer_slot::Outbound::Directive(d)) = directives.try_recv() {
        seen.push(d.memory_limit_bytes);
    }
    assert_eq!(seen, [5 * GIB, 5 * GIB - 3 * GIB / 2, 5 * GIB]);
}

/// A trainer inside the gateway's own process is never stopped by a signal, however late
/// its pause: stopping it would stop serving.
#[test]
fn an_in_process_trainer_is_never_signalled() {
    let (outbound, _directives) = mpsc::channel(8);
    let t0 = Instant::now();
    let pid = std::process::id();
    let guardian = Arc::new(Guardian::disabled());
    let mut t = TrainerSlot::new(
        0,
        hello(pid, 1 << 20, 0),
        pid as i32,
        outbound,
        guardian,
        t0,
    );
    let mut c = AllowanceController::new(Thresholds::default());
    let terms = Terms {
        ack_within: Duration::from_millis(10),
        max_duty_cycle: 1.0,
    };
    let a = c.update(
        Pressure {
            worst_latency_ratio: 0.95,
            ..Default::default()
        },
        t0,
    );
    assert!(c.pauses_are_enforced());
    let lending = Lending {
        controller: &c,
        allowance: a,
        before: a,
        terms,
        squeeze: Squeeze::None,
        all_held: 1 << 20,
    };
    t.supervise(&lending, t0);
    assert!(t.last.as_ref().is_some_and(|(d, _)| d.pause));
    t.supervise(&lending, t0 + Duration::from_secs(5));
    assert!(!t.stopped);
    assert_ne!(state(pid), 'T');
}
