//! One joined trainer as the coordinator tracks it, and what the coordinator does to it:
//! the directive for an allowance (and for the memory serving needs back), supervision of
//! its acknowledgement (SIGSTOP when a pause is late, SIGCONT when training is allowed
//! again), and continuing it when its record goes. A trainer inside the gateway's own
//! process is never signalled: it obeys at its step boundaries.

use std::sync::Arc;
use std::time::Duration;

use coloc_protocol::{Ack, Directive, Hello};
use metrics::{Counter, Gauge, Histogram};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::allowance::AllowanceController;
use super::guardian::Guardian;
use super::memory::{self, Squeeze};
use crate::metrics as names;

/// What the coordinator sends a trainer, through its slot's channel to its connection.
pub enum Outbound {
    Directive(Directive),
    /// Disconnect, for the reason given.
    Close(String),
}

/// What every directive carries besides the allowance.
#[derive(Clone, Copy, Debug)]
pub struct Terms {
    pub ack_within: Duration,
    /// The most of its time a trainer may compute (`[coloc] max_duty_cycle`).
    pub max_duty_cycle: f64,
}

/// The allowance in force and the one before it, with what decided it, and the memory
/// serving needs back: what supervising a trainer reads at a tick.
#[derive(Clone, Copy)]
pub struct Lending<'a> {
    pub controller: &'a AllowanceController,
    pub allowance: f64,
    pub before: f64,
    pub terms: Terms,
    pub squeeze: Squeeze,
    /// What every trainer holds, as they last acked it.
    pub all_held: u64,
}

/// A connected trainer that said hello.
pub struct TrainerSlot {
    pub slot: usize,
    pub hello: Hello,
    /// From SO_PEERCRED: the only pid ever signalled.
    pub peer_pid: i32,
    pub outbound: mpsc::Sender<Outbound>,
    seq: u64,
    /// The last directive sent, and when; `acked` once the trainer said so.
    pub last: Option<(Directive, Instant)>,
    acked: bool,
    pub stopped: bool,
    /// A SIGSTOP to it failed (and was logged).
    stop_refused: bool,
    /// The last message from the trainer; long silence (not ours) means it hung.
    pub last_seen: Instant,
    /// Device memory it holds, as its last ack said (its hello's figure until then).
    pub held: u64,
    /// It runs inside this process: never signalled.
    in_process: bool,
    /// A late pause of an in-process trainer was logged.
    late_logged: bool,
    pub metrics: SlotMetrics,
    /// Continues the trainer if this gateway dies holding it stopped.
    guardian: Arc<Guardian>,
}

pub struct SlotMetrics {
    directives: Counter,
    escalations: Counter,
    ack_seconds: Histogram,
    pub samples_per_second: Gauge,
    pub loss: Gauge,
    allowance: Gauge,
}

impl SlotMetrics {
    fn new(slot: usize) -> SlotMetrics {
        let s = slot.to_string();
        SlotMetrics {
            directives: metrics::counter!(names::TRAINER_DIRECTIVES, "trainer" => s.clone()),
            escalations: metrics::counter!(names::TRAINER_ESCALATIONS, "trainer" => s.clone()),
            ack_seconds: metrics::histogram!(names::TRAINER_ACK_DURATION, "trainer" => s.clone()),
            samples_per_second: metrics::gauge!(names::TRAINER_SAMPLES_PER_SECOND, "trainer" => s.clone()),
            loss: metrics::gauge!(names::TRAINER_LOSS, "trainer" => s.clone()),
            allowance: metrics::gauge!(names::TRAINER_ALLOWANCE, "trainer" => s),
        }
    }
}

impl TrainerSlot {
    /// A trainer that has just said hello: nothing sent to it yet.
    pub fn new(
        slot: usize,
        hello: Hello,
        peer_pid: i32,
        outbound: mpsc::Sender<Outbound>,
        guardian: Arc<Guardian>,
        now: Instant,
    ) -> TrainerSlot {
        TrainerSlot {
            slot,
            peer_pid,
            outbound,
            seq: 0,
            last: None,
            acked: false,
            stopped: false,
            stop_refused: false,
            last_seen: now,
            held: hello.memory_bytes,
            in_process: peer_pid as u32 == std::process::id(),
            late_logged: false,
            metrics: SlotMetrics::new(slot),
            guardian,
            hello,
        }
    }

    /// Whether it is computing now: told to run and not stopped.
    pub fn is_training(&self) -> bool {
        !self.stopped && self.last.as_ref().is_some_and(|(d, _)| !d.pause)
    }

    /// The memory lent under allowance `a`: its least, and that share of the rest (at
    /// least a sixteenth of it).
    fn lent_memory(&self, a: f64) -> u64 {
        let most = self.hello.memory_bytes;
        let least = self.hello.min_memory_bytes.min(most);
        let room = most - least;
        least + ((room as f64 * a) as u64).max(room / 16)
    }

    /// The memory limit under `lending`: what the allowance lends, capped while serving
    /// needs memory back.
    fn memory_limit(&self, lending: &Lending<'_>) -> u64 {
        let lent = self.lent_memory(lending.allowance);
        memory::cap(lending.squeeze, self.held, lending.all_held).map_or(lent, |c| lent.min(c))
    }

    /// The directive under `lending`: the allowance's share of its streams and memory
    /// (less what serving needs back), each stream busy all the time down to half the
    /// device, then fewer duty cycles.
    fn directive(&self, lending: &Lending<'_>) -> Directive {
        let (a, terms) = (lending.allowance, lending.terms);
        Directive {
            seq: self.seq + 1,
            allowance: a,
            max_streams: ((self.hello.max_streams as f64 * a).round() as u32)
                .clamp(1, self.hello.max_streams.max(1)),
            memory_limit_bytes: self.memory_limit(lending),
            duty_cycle: (2.0 * a).clamp(0.05, 1.0).min(terms.max_duty_cycle),
            pause: a <= 0.0,
            ack_within_ms: terms.ack_within.as_millis() as u64,
            reason: lending.controller.reason().to_string(),
        }
    }

    /// Whether the memory limit in force is off from what `lending` says by more than a
    /// sixty-fourth of the trainer's memory (and 1 MiB): worth a new directive.
    fn memory_moved(&self, lending: &Lending<'_>) -> bool {
        let Some((last, _)) = &self.last else {
            return false;
        };
        let slack = (self.hello.memory_bytes / 64).max(1 << 20);
        last.memory_limit_bytes.abs_diff(self.memory_limit(lending)) > slack
    }

    pub fn send_directive(&mut self, lending: &Lending<'_>, now: Instant) {
        let d = self.directive(lending);
        self.seq = d.seq;
        self.metrics.allowance.set(d.allowance);
        self.metrics.directives.increment(1);
        // A full outbound queue means the trainer is not reading: it will miss its ack
        // deadline and be stopped if this was a pause.
        let _ = self.outbound.try_send(Outbound::Directive(d.clone()));
        self.last = Some((d, now));
        self.acked = false;
    }

    /// An ack: what the trainer holds now, and, for the last directive, that it obeyed.
    pub fn acknowledged(&mut self, ack: &Ack, now: Instant) {
        self.last_seen = now;
        self.held = ack.memory_bytes;
        if let Some((d, sent)) = &self.last
            && d.seq == ack.seq
            && !self.acked
        {
            self.acked = true;
            self.metrics
                .ack_seconds
                .record(now.saturating_duration_since(*sent).as_secs_f64());
        }
    }

    /// At a tick: continues it if training is allowed again, sends a directive when the
    /// allowance changed, and stops it if a pause serving needs went unacknowledged.
    pub fn supervise(&mut self, lending: &Lending<'_>, now: Instant) {
        if self.stopped && lending.allowance > 0.0 {
            self.continue_process();
            tracing::info!(
                trainer = self.slot,
                pid = self.peer_pid,
                "training allowed again: SIGCONT"
            );
        }
        if self.last.is_none()
            || (lending.allowance - lending.before).abs() > 1e-9
            || self.memory_moved(lending)
        {
            self.send_directive(lending, now);
            return;
        }
        if self.pause_overdue(lending, now) {
            self.stop_process();
        }
    }

    /// A pause sent before serving was measured is enforced only once serving needs the
    /// device; its deadline still runs from when it was sent.
    fn pause_overdue(&self, lending: &Lending<'_>, now: Instant) -> bool {
        self.last.as_ref().is_some_and(|(d, sent)| {
            d.pause
                && !self.acked
                && !self.stopped
                && lending.controller.pauses_are_enforced()
                && now.saturating_duration_since(*sent) > lending.terms.ack_within
        })
    }

    fn stop_process(&mut self) {
        if self.in_process {
            // Stopping it would stop serving too; it pauses at its next step boundary.
            if !self.late_logged {
                self.late_logged = true;
                tracing::warn!(
                    trainer = self.slot,
                    "the in-process trainer has not acknowledged a pause in time; it is never signalled and pauses at its next step boundary"
                );
            }
            return;
        }
        self.guardian.stopping(self.peer_pid);
        // SAFETY: kill(2) with the pid the kernel reported for this socket's peer.
        let rc = unsafe { libc::kill(self.peer_pid, libc::SIGSTOP) };
        let error = std::io::Error::last_os_error();
        if rc == 0 {
            self.stopped = true;
            self.metrics.escalations.increment(1);
            tracing::warn!(
                trainer = self.slot,
                pid = self.peer_pid,
                "pause not acknowledged in time: SIGSTOP"
            );
            return;
        }
        self.guardian.continued(self.peer_pid);
        if !self.stop_refused {
            // Tried again every tick; said once.
            self.stop_refused = true;
            tracing::error!(
                trainer = self.slot,
                pid = self.peer_pid,
                %error,
                "pause not acknowledged in time, and SIGSTOP was refused"
            );
        }
    }

    pub fn continue_process(&mut self) {
        if self.stopped {
            // SAFETY: kill(2) with the peer pid we stopped ourselves.
            unsafe {
                libc::kill(self.peer_pid, libc::SIGCONT);
            }
            self.guardian.continued(self.peer_pid);
            self.stopped = false;
        }
    }
}

/// Whatever ends a trainer's record (it left, it was replaced, the gateway stops), a
/// process this gateway stopped is continued and its gauges cleared.
impl Drop for TrainerSlot {
    fn drop(&mut self) {
        self.continue_process();
        self.metrics.samples_per_second.set(0.0);
        self.metrics.allowance.set(0.0);
    }
}
