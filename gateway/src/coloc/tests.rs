//! The coordinator's supervision of one trainer, against a real process.

use std::sync::Arc;
use std::time::Duration;

use coloc_protocol::Hello;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::allowance::{AllowanceController, Pressure, Thresholds};
use super::guardian::Guardian;
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
