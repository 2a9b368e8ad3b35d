//! The coordinator's state and its three inputs: a connection accepted, an event from a
//! connection, a tick. Each tick it reads every model's signals, turns it into an allowance,
//! reads the GPU's free memory (see [`super::memory`] for the rule that asks trainers for
//! memory back), and supervises every trainer against both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use metrics::Gauge;
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::allowance::{AllowanceController, Pressure, Thresholds};
use super::connection::{self, Event};
use super::guardian::Guardian;
use super::memory::{MemoryGuard, Squeeze};
use super::share::ServingShare;
use super::slots::{Slots, Tag};
use super::trainer_slot::Outbound;
use super::trainer_slot::{Lending, Terms, TrainerSlot};
use crate::config::ColocConfig;
use crate::cost::LentTime;
use crate::lifecycle::registry::Registry;
use crate::metrics as names;

/// What the coordinator is given to run with.
pub struct Context {
    pub config: ColocConfig,
    /// `[coloc] max_duty_cycle`, resolved for the device.
    pub max_duty_cycle: f64,
    /// Where the lent device time goes, for the cost ledger.
    pub lent_time: Arc<LentTime>,
    pub registry: Arc<Registry>,
    pub serving_share: ServingShare,
}

impl Context {
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.config.tick_ms.max(10))
    }
}

pub struct Coordinator {
    context: Context,
    events: mpsc::Sender<Event>,
    guardian: Arc<Guardian>,
    slots: Slots,
    controller: AllowanceController,
    terms: Terms,
    /// The allowance in force: the controller's, capped by what serving leaves idle.
    allowance: f64,
    /// Memory serving needs back, as the last reading of the GPU decided.
    memory: MemoryGuard,
    squeeze: Squeeze,
    /// A failed memory reading was logged (once: the driver's answer does not change).
    memory_error_logged: bool,
    last_tick: Instant,
    /// Serving's totals at the last tick: completions per model, and requests turned away.
    last_completed: BTreeMap<String, u64>,
    last_strain: Strain,
    allowance_gauge: Gauge,
    connected_gauge: Gauge,
}

impl Coordinator {
    pub fn new(context: Context, events: mpsc::Sender<Event>) -> Coordinator {
        let terms = Terms {
            ack_within: Duration::from_millis(context.config.ack_within_ms),
            max_duty_cycle: context.max_duty_cycle,
        };
        Coordinator {
            slots: Slots::new(context.config.max_trainers),
            context,
            events,
            guardian: Arc::new(Guardian::start()),
            controller: AllowanceController::new(Thresholds::default()),
            terms,
            allowance: 0.0,
            memory: MemoryGuard::new(),
            squeeze: Squeeze::None,
            memory_error_logged: false,
            last_tick: Instant::now(),
            last_completed: BTreeMap::new(),
            last_strain: Strain::default(),
            allowance_gauge: metrics::gauge!(names::DEVICE_ALLOWANCE),
            connected_gauge: metrics::gauge!(names::TRAINERS_CONNECTED),
        }
    }

    fn lending(&self, before: f64) -> Lending<'_> {
        Lending {
            controller: &self.controller,
            allowance: self.allowance,
            before,
            terms: self.terms,
            squeeze: self.squeeze,
            all_held: self.slots.joined().map(|t| t.held).sum(),
        }
    }

    /// A new connection takes a slot now, before its hello, or is closed when all are
    /// taken.
    pub fn accept(&mut self, stream: UnixStream) {
        let Some(peer_pid) = stream.peer_cred().ok().and_then(|c| c.pid()) else {
            tracing::warn!("trainer refused: the kernel does not say who it is");
            return;
        };
        let Some(tag) = self.slots.reserve() else {
            tracing::warn!(
                pid = peer_pid,
                "trainer refused: {} already connected",
                self.context.config.max_trainers
            );
            return;
        };
        let config = self.context.config.clone();
        tokio::spawn(connection::run(
            stream,
            tag,
            peer_pid,
            config,
            self.events.clone(),
        ));
    }

    pub fn handle(&mut self, event: Event, now: Instant) {
        match event {
            Event::Joined {
                tag,
                hello,
                peer_pid,
                outbound,
            } => self.join(tag, hello, peer_pid, outbound, now),
            Event::Ack { tag, ack } => {
                if let Some(t) = self.slots.get_mut(tag) {
                    t.acknowledged(&ack, now);
                }
            }
            Event::Report { tag, report } => {
                if let Some(t) = self.slots.get_mut(tag) {
                    t.last_seen = now;
                    if report.samples_per_second.is_finite() {
                        t.metrics.samples_per_second.set(report.samples_per_second);
                    }
                    if report.loss.is_finite() {
                        t.metrics.loss.set(report.loss);
                    }
                }
            }
            Event::Left { tag, why } => {
                // Dropping the record continues the process if this gateway stopped it.
                if let Some(t) = self.slots.remove(tag) {
                    tracing::info!(trainer = tag.slot, pid = t.peer_pid, %why, "trainer left");
                }
                self.connected_gauge.set(self.slots.joined_count() as f64);
            }
        }
    }

    fn join(
        &mut self,
        tag: Tag,
        hello: coloc_protocol::Hello,
        peer_pid: i32,
        outbound: mpsc::Sender<Outbound>,
        now: Instant,
    ) {
        if hello.pid != peer_pid as i64 {
            tracing::warn!(
                trainer = tag.slot,
                claimed = hello.pid,
                peer = peer_pid,
                "hello names another pid; only the socket's peer will ever be signalled"
            );
        }
        tracing::info!(trainer = tag.slot, name = %hello.name, pid = peer_pid, device = %hello.device, "trainer joined");
        let guardian = self.guardian.clone();
        let mut t = TrainerSlot::new(tag.slot, hello, peer_pid, outbound, guardian, now);
        let mut lending = self.lending(self.allowance);
        lending.all_held += t.held;
        t.send_directive(&lending, now);
        if !self.slots.join(tag, t) {
            tracing::warn!(
                trainer = tag.slot,
                "a hello from a connection that holds no slot"
            );
        }
        self.connected_gauge.set(self.slots.joined_count() as f64);
    }

    pub fn tick(&mut self, now: Instant) {
        self.guardian.check();
        let before = self.allowance;
        self.allowance = self.next_allowance(now);
        self.squeeze = self.next_squeeze();
        self.allowance_gauge.set(self.allowance);
        // The tick's device time, lent in the share an active trainer had.
        let training = self.slots.joined().any(TrainerSlot::is_training);
        let lent = if training { self.allowance } else { 0.0 };
        for v in self.context.registry.all() {
            v.core.signals.set_trainer_computing(lent > 0.0);
        }
        let elapsed = now.saturating_duration_since(self.last_tick);
        self.context.lent_time.add(elapsed.mul_f64(lent));
        self.last_tick = now;
        let silence = Duration::from_millis(
            self.context
                .config
                .heartbeat_ms
                .saturating_mul(10)
                .max(1000),
        );
        let lending = Lending {
            controller: &self.controller,
            allowance: self.allowance,
            before,
            terms: self.terms,
            squeeze: self.squeeze,
            all_held: self.slots.joined().map(|t| t.held).sum(),
        };
        for t in self.slots.joined_mut() {
            t.supervise(&lending, now);
            // A trainer we did not stop and that says nothing has hung.
            if !t.stopped && now.saturating_duration_since(t.last_seen) > silence {
                let _ = t
                    .outbound
                    .try_send(Outbound::Close(format!("silent for over {silence:?}")));
            }
        }
    }

    /// Serving's headroom decides whether to lend; what serving uses caps how much.
    fn next_allowance(&mut self, now: Instant) -> f64 {
        let (pressure, completed, strain) = read_pressure(
            &self.context.registry,
            &self.last_completed,
            self.last_strain,
        );
        self.last_completed = completed;
        self.last_strain = strain;
        let headroom = self.controller.update(pressure, now);
        let idle = 1.0 - self.context.serving_share.sample(now);
        (headroom.min(idle) * 10.0).round() / 10.0
    }

    /// The GPU's free memory, read now, through the reserve rule; nothing on a CPU. The
    /// reading is one driver query, cheap enough for the tick.
    fn next_squeeze(&mut self) -> Squeeze {
        match self.context.serving_share.memory() {
            None => Squeeze::None,
            Some(Ok(m)) => self
                .memory
                .update(m.free_bytes as u64, m.total_bytes as u64),
            Some(Err(e)) => {
                if !self.memory_error_logged {
                    self.memory_error_logged = true;
                    tracing::warn!(error = %e, "cannot read the GPU's free memory; trainers are lent memory by the allowance alone");
                }
                Squeeze::None
            }
        }
    }

    /// Shutting down: every record goes, and every stopped trainer is continued.
    pub fn stop(&mut self) {
        self.slots.clear();
    }
}

/// Requests turned away, and admitted though predicted late, across every version so far.
#[derive(Clone, Copy, Debug, Default)]
struct Strain {
    turned_away: u64,
    admitted_late: u64,
}

/// Serving's pressure across every loaded version, with the completion counts per model and
/// the strain totals, for the next reading's deltas.
fn read_pressure(
    registry: &Registry,
    last_completed: &BTreeMap<String, u64>,
    last: Strain,
) -> (Pressure, BTreeMap<String, u64>, Strain) {
    let mut p = Pressure::default();
    let mut completed: BTreeMap<String, u64> = BTreeMap::new();
    let mut strain = Strain::default();
    for v in registry.all() {
        let h = v.core.signals.read();
        if let (Some(p99), false) = (h.observed_p99, h.budget.is_zero()) {
            p.worst_latency_ratio = p
                .worst_latency_ratio
                .max(p99.as_secs_f64() / h.budget.as_secs_f64());
        }
        if h.queue_capacity > 0 {
            p.queue_fill = p
                .queue_fill
                .max(h.queue_depth as f64 / h.queue_capacity as f64);
        }
        strain.turned_away += h.turned_away;
        strain.admitted_late += h.admitted_late;
        *completed.entry(v.name.clone()).or_default() += h.completed;
    }
    // A version unloaded between readings lowers the totals: never read that as pressure.
    let counted = !last_completed.is_empty();
    p.turning_away = strain.turned_away > last.turned_away && counted;
    p.running_late = strain.admitted_late > last.admitted_late && counted;
    (p, completed, strain)
}
