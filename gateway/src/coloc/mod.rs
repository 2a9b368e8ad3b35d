//! The trainer coordinator: lends the device's spare capacity to co-located training
//! processes and takes it back when serving needs it.
//!
//! Trainers connect to a Unix socket (mode 0600, in a private directory) and speak the
//! protocol in `trainer::protocol` (docs/coloc-protocol.md). Every tick the coordinator reads
//! every model's health, turns it into an allowance ([`allowance`]), and sends each trainer a
//! directive when it changes. A pause not acknowledged within `ack_within_ms` is enforced
//! with SIGSTOP — sent only to the process on the other end of the socket as the kernel
//! reports it (SO_PEERCRED), never to a pid a message names — and lifted with SIGCONT when
//! training is allowed again or the trainer disconnects. A trainer that sends garbage,
//! floods, overlong lines or nothing at all is disconnected; serving never waits on one.

pub mod allowance;
mod connection;
pub mod cost;
pub mod guardian;
mod share;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use trainer::protocol::{Directive, Hello};

use crate::config::ColocConfig;
use crate::metrics as names;
use crate::registry::Registry;
use allowance::{AllowanceController, Pressure, Thresholds};
use connection::{Event, Outbound};
use cost::CostLedger;
use guardian::Guardian;
pub use share::ServingShare;

/// A connected trainer, as the coordinator tracks it.
struct TrainerSlot {
    hello: Hello,
    /// From SO_PEERCRED: the only pid ever signalled.
    peer_pid: i32,
    outbound: mpsc::Sender<Outbound>,
    seq: u64,
    /// The last directive sent, and when; `acked` once the trainer said so.
    last: Option<(Directive, Instant)>,
    acked: bool,
    stopped: bool,
    /// A SIGSTOP to it failed (and was logged).
    stop_refused: bool,
    /// The last message from the trainer; long silence (not ours) means it hung.
    last_seen: Instant,
    metrics: SlotMetrics,
    /// Continues the trainer if this gateway dies holding it stopped.
    guardian: Arc<Guardian>,
}

impl TrainerSlot {
    /// A trainer that has just said hello: nothing sent to it yet.
    fn new(
        slot: usize,
        hello: Hello,
        peer_pid: i32,
        outbound: mpsc::Sender<Outbound>,
        guardian: Arc<Guardian>,
        now: Instant,
    ) -> TrainerSlot {
        TrainerSlot {
            hello,
            peer_pid,
            outbound,
            seq: 0,
            last: None,
            acked: false,
            stopped: false,
            stop_refused: false,
            last_seen: now,
            metrics: SlotMetrics::new(slot),
            guardian,
        }
    }
}

struct SlotMetrics {
    directives: Counter,
    escalations: Counter,
    ack_seconds: Histogram,
    samples_per_second: Gauge,
    loss: Gauge,
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

/// The default socket: `$XDG_RUNTIME_DIR/tandem/coloc.sock`, else `/tmp/tandem-<uid>/coloc.sock`.
pub fn default_socket_path() -> PathBuf {
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(|d| PathBuf::from(d).join("tandem"))
        // SAFETY: getuid has no preconditions and cannot fail.
        .unwrap_or_else(|| PathBuf::from(format!("/tmp/tandem-{}", unsafe { libc::getuid() })));
    dir.join("coloc.sock")
}

/// Binds the socket in a private (0700) directory, replacing a stale socket file, and
/// restricts it to its owner (0600).
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("{} is in use by another gateway", path.display()),
        ));
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Runs until `shutdown`; on the way out every stopped trainer is continued.
pub async fn run(
    listener: UnixListener,
    config: ColocConfig,
    max_duty_cycle: f64,
    device_hour_usd: f64,
    registry: Arc<Registry>,
    mut serving_share: ServingShare,
    mut shutdown: watch::Receiver<bool>,
) {
    let guardian = Arc::new(Guardian::start());
    let (events_tx, mut events) = mpsc::channel::<Event>(1024);
    let mut slots: BTreeMap<usize, TrainerSlot> = BTreeMap::new();
    let mut controller = AllowanceController::new(Thresholds::default());
    let mut ledger = CostLedger::new(device_hour_usd);
    let mut last_completed: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_turned_away: u64 = 0;
    let g = CoordinatorMetrics::new();
    let mut tick = tokio::time::interval(Duration::from_millis(config.tick_ms.max(10)));
    let mut last_tick = Instant::now();
    let terms = Terms {
        ack_within: Duration::from_millis(config.ack_within_ms),
        max_duty_cycle,
    };
    // The allowance in force: the controller's, capped by what serving leaves idle.
    let mut lent_allowance = 0.0f64;
    let mut accept_resumes: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = crate::http::signalled(&mut shutdown) => break,
            accepted = listener.accept(), if accept_resumes.is_none_or(|t| Instant::now() >= t) => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: the pending connection stays
                        // in the backlog and a retry would fail at once, so pause accepting
                        // until a later tick instead of spinning.
                        tracing::warn!(error = %e, "accepting a trainer failed; retrying shortly");
                        accept_resumes = Some(Instant::now() + Duration::from_millis(50));
                        continue;
                    }
                };
                let Some(slot) = (0..config.max_trainers).find(|s| !slots.contains_key(s)) else {
                    tracing::warn!("trainer refused: {} already connected", config.max_trainers);
                    continue;
                };
                let peer_pid = match stream.peer_cred().ok().and_then(|c| c.pid()) {
                    Some(p) => p,
                    None => {
                        tracing::warn!("trainer refused: the kernel does not say who it is");
                        continue;
                    }
                };
                tokio::spawn(connection::run(stream, slot, peer_pid, config.clone(), events_tx.clone()));
            }
            event = events.recv() => {
                let Some(event) = event else { break };
                handle_event(event, &guardian, &mut slots, &controller, lent_allowance, terms, &g);
            }
            _ = tick.tick() => {
                let now = Instant::now();
                guardian.check();
                let (pressure, completed, turned_away) = read_pressure(&registry, &last_completed, last_turned_away);
                let before = lent_allowance;
                // Headroom decides whether to lend; what serving uses caps how much.
                let headroom = controller.update(pressure, now);
                let idle = 1.0 - serving_share.sample(now);
                let allowance = (headroom.min(idle) * 10.0).round() / 10.0;
                lent_allowance = allowance;
                g.allowance.set(allowance);
                last_turned_away = turned_away;
                // Cost: the tick's device time, lent in the share training had.
                let active = slots.values().any(|s| !s.stopped && s.last.as_ref().is_some_and(|(d, _)| !d.pause));
                let lent = if active { allowance } else { 0.0 };
                let deltas: BTreeMap<String, u64> = completed
                    .iter()
                    .map(|(m, n)| (m.clone(), n.saturating_sub(*last_completed.get(m).unwrap_or(&0))))
                    .collect();
                ledger.charge(now.duration_since(last_tick).as_secs_f64(), lent, &deltas);
                last_tick = now;
                last_completed = completed;
                g.publish(&ledger);
                let silence = Duration::from_millis(config.heartbeat_ms.saturating_mul(10).max(1000));
                for (slot, t) in slots.iter_mut() {
                    supervise(*slot, t, &controller, allowance, before, terms, now);
                    // A trainer we did not stop and that says nothing has hung.
                    if !t.stopped && now.saturating_duration_since(t.last_seen) > silence {
                        let _ = t.outbound.try_send(Outbound::Close(format!("silent for over {silence:?}")));
                    }
                }
            }
        }
    }
    for t in slots.values_mut() {
        continue_process(t);
    }
}

struct CoordinatorMetrics {
    allowance: Gauge,
    connected: Gauge,
    inference_usd: Gauge,
    training_usd: Gauge,
    harvested: Gauge,
}

impl CoordinatorMetrics {
    fn new() -> CoordinatorMetrics {
        CoordinatorMetrics {
            allowance: metrics::gauge!(names::DEVICE_ALLOWANCE),
            connected: metrics::gauge!(names::TRAINERS_CONNECTED),
            inference_usd: metrics::gauge!(names::COST, "kind" => "inference"),
            training_usd: metrics::gauge!(names::COST, "kind" => "training"),
            harvested: metrics::gauge!(names::HARVESTED_DEVICE_SECONDS),
        }
    }

    fn publish(&self, l: &CostLedger) {
        self.inference_usd.set(l.inference_usd);
        self.training_usd.set(l.training_usd);
        self.harvested.set(l.harvested_seconds);
        for model in l.models.keys() {
            if let Some(c) = l.cost_per_inference(model) {
                metrics::gauge!(names::COST_PER_INFERENCE, "model" => model.clone()).set(c);
            }
        }
    }
}

/// Serving's pressure across every loaded version, with the completion counts per model and
/// the total turned away, for the next reading's deltas.
fn read_pressure(
    registry: &Registry,
    last_completed: &BTreeMap<String, u64>,
    last_turned_away: u64,
) -> (Pressure, BTreeMap<String, u64>, u64) {
    let mut p = Pressure::default();
    let mut completed: BTreeMap<String, u64> = BTreeMap::new();
    let mut turned_away = 0;
    for v in registry.all() {
        let h = v.health.read();
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
        turned_away += h.turned_away;
        *completed.entry(v.name.clone()).or_default() += h.completed;
    }
    // A version unloaded between readings lowers the totals: never read that as pressure.
    p.turning_away = turned_away > last_turned_away && !last_completed.is_empty();
    (p, completed, turned_away)
}

/// What every directive carries besides the allowance.
#[derive(Clone, Copy, Debug)]
struct Terms {
    ack_within: Duration,
    /// The most of its time a trainer may compute (`[coloc] max_duty_cycle`).
    max_duty_cycle: f64,
}

/// The directive for a trainer under allowance `a`: that share of its streams and memory,
/// each stream busy all the time down to half the device, then fewer duty cycles.
fn directive_for(t: &TrainerSlot, c: &AllowanceController, a: f64, terms: Terms) -> Directive {
    Directive {
        seq: t.seq + 1,
        allowance: a,
        max_streams: ((t.hello.max_streams as f64 * a).round() as u32)
            .clamp(1, t.hello.max_streams.max(1)),
        memory_limit_bytes: ((t.hello.memory_bytes as f64 * a) as u64)
            .max(t.hello.memory_bytes / 16),
        duty_cycle: (2.0 * a).clamp(0.05, 1.0).min(terms.max_duty_cycle),
        pause: a <= 0.0,
        ack_within_ms: terms.ack_within.as_millis() as u64,
        reason: c.reason().to_string(),
    }
}

fn send_directive(
    t: &mut TrainerSlot,
    c: &AllowanceController,
    a: f64,
    terms: Terms,
    now: Instant,
) {
    let d = directive_for(t, c, a, terms);
    t.seq = d.seq;
    t.metrics.allowance.set(d.allowance);
    t.metrics.directives.increment(1);
    // A full outbound queue means the trainer is not reading: it will miss its ack deadline
    // and be stopped if this was a pause.
    let _ = t.outbound.try_send(Outbound::Directive(d.clone()));
    t.last = Some((d, now));
    t.acked = false;
}

fn supervise(
    slot: usize,
    t: &mut TrainerSlot,
    c: &AllowanceController,
    allowance: f64,
    before: f64,
    terms: Terms,
    now: Instant,
) {
    if t.stopped && allowance > 0.0 {
        continue_process(t);
        tracing::info!(
            trainer = slot,
            pid = t.peer_pid,
            "training allowed again: SIGCONT"
        );
    }
    if t.last.is_none() || (allowance - before).abs() > 1e-9 {
        send_directive(t, c, allowance, terms, now);
        return;
    }
    // A pause sent before serving was measured is enforced only once serving needs the
    // device; its deadline still runs from when it was sent.
    if let Some((d, sent)) = &t.last
        && d.pause
        && !t.acked
        && !t.stopped
        && c.pauses_are_enforced()
        && now.saturating_duration_since(*sent) > terms.ack_within
    {
        t.guardian.stopping(t.peer_pid);
        // SAFETY: kill(2) with the pid the kernel reported for this socket's peer.
        let rc = unsafe { libc::kill(t.peer_pid, libc::SIGSTOP) };
        let error = std::io::Error::last_os_error();
        if rc == 0 {
            t.stopped = true;
            t.metrics.escalations.increment(1);
            tracing::warn!(
                trainer = slot,
                pid = t.peer_pid,
                "pause not acknowledged in time: SIGSTOP"
            );
        } else {
            t.guardian.continued(t.peer_pid);
            if !t.stop_refused {
                // Tried again every tick; said once.
                t.stop_refused = true;
                tracing::error!(
                    trainer = slot,
                    pid = t.peer_pid,
                    %error,
                    "pause not acknowledged in time, and SIGSTOP was refused"
                );
            }
        }
    }
}

fn continue_process(t: &mut TrainerSlot) {
    if t.stopped {
        // SAFETY: kill(2) with the peer pid we stopped ourselves.
        unsafe {
            libc::kill(t.peer_pid, libc::SIGCONT);
        }
        t.guardian.continued(t.peer_pid);
        t.stopped = false;
    }
}

fn handle_event(
    event: Event,
    guardian: &Arc<Guardian>,
    slots: &mut BTreeMap<usize, TrainerSlot>,
    controller: &AllowanceController,
    allowance: f64,
    terms: Terms,
    g: &CoordinatorMetrics,
) {
    match event {
        Event::Joined {
            slot,
            hello,
            peer_pid,
            outbound,
        } => {
            if hello.pid != peer_pid as i64 {
                tracing::warn!(
                    trainer = slot,
                    claimed = hello.pid,
                    peer = peer_pid,
                    "hello names another pid; only the socket's peer will ever be signalled"
                );
            }
            tracing::info!(trainer = slot, name = %hello.name, pid = peer_pid, device = %hello.device, "trainer joined");
            let mut t = TrainerSlot::new(
                slot,
                hello,
                peer_pid,
                outbound,
                guardian.clone(),
                Instant::now(),
            );
            send_directive(&mut t, controller, allowance, terms, Instant::now());
            slots.insert(slot, t);
            g.connected.set(slots.len() as f64);
        }
        Event::Ack { slot, ack } => {
            if let Some(t) = slots.get_mut(&slot) {
                t.last_seen = Instant::now();
            }
            if let Some(t) = slots.get_mut(&slot)
                && let Some((d, sent)) = &t.last
                && d.seq == ack.seq
                && !t.acked
            {
                t.acked = true;
                t.metrics.ack_seconds.record(sent.elapsed().as_secs_f64());
            }
        }
        Event::Report { slot, report } => {
            if let Some(t) = slots.get_mut(&slot) {
                t.last_seen = Instant::now();
                if report.samples_per_second.is_finite() {
                    t.metrics.samples_per_second.set(report.samples_per_second);
                }
                if report.loss.is_finite() {
                    t.metrics.loss.set(report.loss);
                }
            }
        }
        Event::Left { slot, why } => {
            if let Some(mut t) = slots.remove(&slot) {
                continue_process(&mut t);
                t.metrics.samples_per_second.set(0.0);
                t.metrics.allowance.set(0.0);
                tracing::info!(trainer = slot, pid = t.peer_pid, %why, "trainer left");
            }
            g.connected.set(slots.len() as f64);
        }
    }
}

#[cfg(test)]
mod tests;
