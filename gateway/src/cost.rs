//! What the device costs, and who it is charged to. Serving owns the ledger: it always
//! runs, counting the device time lent to training, and charges dollars whenever
//! `[cost] device_hour_usd` is set, with or without co-located training.
//!
//! Every second of the device costs `device_hour_usd / 3600`. The share lent to an active
//! trainer ([`LentTime`], written by the trainer coordinator) is charged to training; the
//! rest to inference. A tick's inference cost is split among models by the device time
//! their batches took in it, so a request to a large model costs more than one to a small
//! model on the same device; a tick in which no batch ran carries its cost to the next
//! batches. `tandem_cost_per_inference_usd{model}` is the inference cost charged to a model
//! over the last `[cost] window_s` seconds divided by the requests it answered (200) in
//! them; a model that answered none in that window keeps its last value.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::lifecycle::registry::Registry;
use crate::metrics::{self as names, FloatCounter};
use crate::shutdown::Shutdown;

/// Device time lent to training so far, in nanoseconds: the coordinator adds each tick's
/// duration times the share an active trainer had.
#[derive(Debug, Default)]
pub struct LentTime(AtomicU64);

impl LentTime {
    pub fn add(&self, lent: Duration) {
        let ns = u64::try_from(lent.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// What one model used in a tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Seconds its batches kept the device busy.
    pub device_seconds: f64,
    /// Requests it answered 200.
    pub answered: u64,
    /// Tokens of those requests (a text model's).
    pub tokens: u64,
}

/// One tick's charge to a model.
#[derive(Clone, Copy, Debug)]
struct Charge {
    at: Instant,
    usd: f64,
    answered: u64,
    tokens: u64,
}

/// A model's charges over the window.
#[derive(Clone, Debug, Default)]
struct ModelCharges {
    ticks: VecDeque<Charge>,
    /// The last cost per inference and per 1,000 tokens, kept while the model answers
    /// nothing.
    last: Option<f64>,
    last_per_1k_tokens: Option<f64>,
}

#[derive(Clone, Debug)]
pub struct CostLedger {
    price_per_second: f64,
    window: Duration,
    pub inference_usd: f64,
    pub training_usd: f64,
    /// Device-seconds lent to training.
    pub harvested_seconds: f64,
    /// Inference cost of ticks in which no batch ran, not yet charged to a model.
    unallocated_usd: f64,
    models: BTreeMap<String, ModelCharges>,
}

impl CostLedger {
    pub fn new(device_hour_usd: f64, window: Duration) -> CostLedger {
        CostLedger {
            price_per_second: device_hour_usd.max(0.0) / 3600.0,
            window,
            inference_usd: 0.0,
            training_usd: 0.0,
            harvested_seconds: 0.0,
            unallocated_usd: 0.0,
            models: BTreeMap::new(),
        }
    }

    /// Charges `seconds` of device time ending at `now`, the share `lent` of it to
    /// training, and splits the inference part by each model's device time.
    pub fn charge(
        &mut self,
        seconds: f64,
        lent: f64,
        usage: &BTreeMap<String, Usage>,
        now: Instant,
    ) {
        let lent = lent.clamp(0.0, 1.0);
        let cost = seconds.max(0.0) * self.price_per_second;
        self.training_usd += cost * lent;
        self.harvested_seconds += seconds * lent;
        let inference = cost * (1.0 - lent);
        self.inference_usd += inference;
        self.unallocated_usd += inference;
        let busy: f64 = usage.values().map(|u| u.device_seconds).sum();
        let answered: u64 = usage.values().map(|u| u.answered).sum();
        for (model, u) in usage {
            // By device time; a tick whose batches took no measurable time (or whose
            // requests were answered from batches timed in an earlier tick) by requests.
            let share = if busy > 0.0 {
                u.device_seconds / busy
            } else if answered > 0 {
                u.answered as f64 / answered as f64
            } else {
                0.0
            };
            let charges = self.models.entry(model.clone()).or_default();
            charges.ticks.push_back(Charge {
                at: now,
                usd: self.unallocated_usd * share,
                answered: u.answered,
                tokens: u.tokens,
            });
        }
        if busy > 0.0 || answered > 0 {
            self.unallocated_usd = 0.0;
        }
        self.forget_before(now);
    }

    fn forget_before(&mut self, now: Instant) {
        for charges in self.models.values_mut() {
            while charges
                .ticks
                .front()
                .is_some_and(|c| now.saturating_duration_since(c.at) >= self.window)
            {
                charges.ticks.pop_front();
            }
        }
    }

    /// The model's inference cost over the window divided by the requests it answered in
    /// it; its last such value while it answers none, 0 before its first answer (so the
    /// series exists from the model's load).
    pub fn cost_per_inference(&mut self, model: &str) -> Option<f64> {
        let charges = self.models.get_mut(model)?;
        let usd: f64 = charges.ticks.iter().map(|c| c.usd).sum();
        let answered: u64 = charges.ticks.iter().map(|c| c.answered).sum();
        if answered > 0 {
            charges.last = Some(usd / answered as f64);
        }
        Some(charges.last.unwrap_or(0.0))
    }

    /// The same per 1,000 tokens, for a text model.
    pub fn cost_per_1k_tokens(&mut self, model: &str) -> Option<f64> {
        let charges = self.models.get_mut(model)?;
        let usd: f64 = charges.ticks.iter().map(|c| c.usd).sum();
        let tokens: u64 = charges.ticks.iter().map(|c| c.tokens).sum();
        if tokens > 0 {
            charges.last_per_1k_tokens = Some(1000.0 * usd / tokens as f64);
        }
        charges.last_per_1k_tokens
    }

    /// Whether the device has a price (`[cost] device_hour_usd` > 0).
    pub fn priced(&self) -> bool {
        self.price_per_second > 0.0
    }

    pub fn models(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }
}

/// How often the ledger charges the device time that passed.
const TICK: Duration = Duration::from_millis(250);

/// The ledger's running totals as counters: made at 0 when the ledger starts, so alerts
/// and panels never see an absent series. Costs only where the device has a price.
struct Totals {
    /// Inference's and training's dollars.
    usd: Option<[Arc<FloatCounter>; 2]>,
    harvested_seconds: Arc<FloatCounter>,
}

impl Totals {
    fn new(priced: bool) -> Totals {
        let cost = |kind| names::float_counter(names::COST, &[("kind", kind)]);
        Totals {
            usd: priced.then(|| [cost("inference"), cost("training")]),
            harvested_seconds: names::float_counter(names::HARVESTED_DEVICE_SECONDS, &[]),
        }
    }
}

/// Charges the device's time every tick until shutdown, and publishes the totals and,
/// where the device has a price, the cost gauges.
pub async fn run(
    ledger: CostLedger,
    registry: Arc<Registry>,
    lent: Arc<LentTime>,
    mut shutdown: Shutdown,
) {
    let mut ledger = ledger;
    let totals = Totals::new(ledger.priced());
    let mut readings = UsageReadings::default();
    let mut tick = tokio::time::interval(TICK);
    let mut last = (Instant::now(), lent.total());
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tick.tick() => {}
        }
        let now = (Instant::now(), lent.total());
        let wall = now.0.saturating_duration_since(last.0).as_secs_f64();
        if wall <= 0.0 {
            continue;
        }
        let share = now.1.saturating_sub(last.1).as_secs_f64() / wall;
        let usage = readings.since_last(&registry);
        ledger.charge(wall, share, &usage, now.0);
        last = now;
        publish(&mut ledger, &totals);
    }
}

fn publish(ledger: &mut CostLedger, totals: &Totals) {
    totals
        .harvested_seconds
        .advance_to(ledger.harvested_seconds);
    let Some([inference, training]) = &totals.usd else {
        return;
    };
    inference.advance_to(ledger.inference_usd);
    training.advance_to(ledger.training_usd);
    for model in ledger.models() {
        if let Some(c) = ledger.cost_per_inference(&model) {
            metrics::gauge!(names::COST_PER_INFERENCE, "model" => model.clone()).set(c);
        }
        if let Some(c) = ledger.cost_per_1k_tokens(&model) {
            metrics::gauge!(names::COST_PER_1K_TOKENS, "model" => model).set(c);
        }
    }
}

/// Each loaded version's cumulative (device time, answered) at the last reading, so a tick
/// charges what happened since. A version loaded since counts from zero; one unloaded
/// drops out.
#[derive(Default)]
struct UsageReadings {
    last: BTreeMap<(String, u64), (Duration, u64, u64)>,
}

impl UsageReadings {
    fn since_last(&mut self, registry: &Registry) -> BTreeMap<String, Usage> {
        let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
        let mut now = BTreeMap::new();
        for v in registry.all() {
            let reading = (v.stats.device_time(), v.stats.answered(), v.stats.tokens());
            let key = (v.name.clone(), v.version);
            let (busy, answered, tokens) = self.last.get(&key).copied().unwrap_or_default();
            let u = usage.entry(v.name.clone()).or_default();
            u.device_seconds += reading.0.saturating_sub(busy).as_secs_f64();
            u.answered += reading.1.saturating_sub(answered);
            u.tokens += reading.2.saturating_sub(tokens);
            now.insert(key, reading);
        }
        self.last = now;
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(list: &[(&str, f64, u64)]) -> BTreeMap<String, Usage> {
        list.iter()
            .map(|&(m, device_seconds, answered)| {
                (
                    m.to_string(),
                    Usage {
                        device_seconds,
                        answered,
                        tokens: 20 * answered,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn lending_lowers_the_cost_per_inference() {
        let t0 = Instant::now();
        let reqs = usage(&[("m", 0.1, 100)]);
        let minute = Duration::from_secs(60);
        let mut alone = CostLedger::new(3.6, minute); // $0.001 per second
        let mut shared = CostLedger::new(3.6, minute);
        for i in 0..10 {
            let now = t0 + Duration::from_secs(i + 1);
            alone.charge(1.0, 0.0, &reqs, now);
            shared.charge(1.0, 0.6, &reqs, now);
        }
        assert!((alone.cost_per_inference("m").unwrap() - 1e-5).abs() < 1e-12);
        assert!((shared.cost_per_inference("m").unwrap() - 4e-6).abs() < 1e-12);
        assert!((shared.training_usd - 0.006).abs() < 1e-12);
        assert!((shared.harvested_seconds - 6.0).abs() < 1e-9);
        assert!((shared.training_usd + shared.inference_usd - alone.inference_usd).abs() < 1e-12);
    }

    #[test]
    fn models_pay_for_the_device_time_their_batches_took() {
        let t0 = Instant::now();
        let mut l = CostLedger::new(3.6, Duration::from_secs(60));
        // The same number of requests; the encoder's batches took 9 times as long.
        l.charge(
            1.0,
            0.0,
            &usage(&[("small", 0.05, 100), ("big", 0.45, 100)]),
            t0,
        );
        let small = l.cost_per_inference("small").unwrap();
        let big = l.cost_per_inference("big").unwrap();
        assert!((big / small - 9.0).abs() < 1e-9, "{big} vs {small}");
        // 20 tokens a request: per 1,000 tokens, 50 requests' worth.
        let per_1k = l.cost_per_1k_tokens("big").unwrap();
        assert!((per_1k - 50.0 * big).abs() < 1e-12, "{per_1k}");
        assert!((small * 100.0 + big * 100.0 - 0.001).abs() < 1e-12);
    }

    #[test]
    fn idle_cost_is_carried_to_the_next_batches() {
        let t0 = Instant::now();
        let mut l = CostLedger::new(3.6, Duration::from_secs(60));
        l.charge(1.0, 0.0, &BTreeMap::new(), t0);
        l.charge(1.0, 0.0, &usage(&[("a", 0.1, 1), ("b", 0.3, 3)]), t0);
        assert!((l.cost_per_inference("a").unwrap() - 0.0005).abs() < 1e-12);
        assert!((l.cost_per_inference("b").unwrap() - 0.0015 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_figure_covers_the_window_and_holds_while_idle() {
        let t0 = Instant::now();
        let window = Duration::from_secs(10);
        let mut l = CostLedger::new(3.6, window);
        // 20 s at 10 requests a second, then 20 s at 100: the window sees only the latter.
        for s in 1..=40u64 {
            let n = if s <= 20 { 10 } else { 100 };
            l.charge(
                1.0,
                0.0,
                &usage(&[("m", 0.5, n)]),
                t0 + Duration::from_secs(s),
            );
        }
        let per = l.cost_per_inference("m").unwrap();
        assert!((per - 1e-5).abs() < 1e-12, "{per}");
        // Idle: nothing answered for longer than the window; the last value holds.
        for s in 41..=60u64 {
            l.charge(
                1.0,
                0.0,
                &usage(&[("m", 0.0, 0)]),
                t0 + Duration::from_secs(s),
            );
        }
        assert_eq!(l.cost_per_inference("m"), Some(per));
    }
}
