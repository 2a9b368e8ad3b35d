//! The adaptive policy: meet a p99 latency budget at the highest throughput the device
//! allows, instead of hand-tuned "max batch size + max queue delay".
//!
//! When a worker is free it releases at once unless waiting is worth it:
//! - a batch leaves by the time its most urgent request must start to finish in time
//!   (`deadline`: its own timeout, or arrival + the effective budget, minus the predicted
//!   high-quantile batch time);
//! - while requests arrive at under 10–30% of the device's capacity in full batches, and
//!   the server process keeps under 10–30% of its cores busy (with hysteresis), it releases
//!   at once (`idle`): capacity is plentiful and waiting would only add latency;
//! - when it is busier, batch efficiency is what leaves capacity for more requests (on a
//!   CPU, the cores also parse HTTP): a batch waits to grow towards the efficient size (the
//!   knee of cost per row in the latency model), for at most the time a full batch takes to
//!   run uncontended (never more than a tenth of the budget) — or, while the observed p99
//!   stays under a fifth of the budget (back to the short wait above three tenths), for a
//!   tenth of the budget — and only while the arrival rate promises to at least double it
//!   (`timer` when that wait ends, `idle` when growth is not coming);
//! - a full batch goes at once (`full`).
//!
//! Every deadline is brought forward by the recent 95th percentile of the time responses
//! take to leave after their batch ends (handler wake-up, encoding, writing; at most 30% of
//! the effective budget): on busy cores that is milliseconds the device never sees.
//!
//! Admission: a request whose predicted completion — behind the running batch and every
//! row ranked ahead of it, drained in full batches — misses its deadline is refused at the
//! door with the queue's drain time as Retry-After, so the queue never holds more than the
//! budget can serve.
//!
//! Feedback: the effective budget (the share of the p99 budget the queue and the device
//! may use; the rest is HTTP and transport) shrinks whenever the observed p99 — as the
//! handlers answered, from kernel arrival — exceeds 80% of the budget, by 80% of the budget
//! over that p99 (at least 10%, at most 25%), counting only requests that arrived after it
//! last shrank (a spike is evidence once, not for as long as it stays in the window). It
//! grows back by 2% at each look (four a second) while the p99 of the last two seconds (at
//! most the last 4,096 requests: 0.4 s at 10,000 req/s) stays under 50% — or under 70%
//! while `admit` is refusing requests, since then a shrunk budget costs requests and not
//! only latency. (At 90% and 60% for everything, bursts at a 10 ms budget settled at a p99
//! of 10.4–10.6 ms.)

use std::time::Duration;

use tokio::time::Instant;

use super::ReleaseReason;
use super::latency::{LatencyModel, LatencyWindow, RateEstimator};
use super::policy::{BatchPolicy, Decision, PolicyGauges, Shed};
use super::state::QueueView;

/// The longest a batch waits to grow, as a share of the effective budget.
const MAX_WAIT_SHARE: f64 = 0.1;
/// The observed p99, as a share of the budget, below which batches may wait that long
/// (not only as long as a full batch runs), and above which they go back to the short wait.
const UNHURRIED_BELOW: f64 = 0.2;
const HURRIED_ABOVE: f64 = 0.3;
/// A wait shorter than the runtime's timer tick cannot be expressed anyway.
const MIN_PATIENCE: Duration = Duration::from_millis(1);
const HEADROOM_START: f64 = 0.8;
/// Load (arrivals over capacity in full batches) above which batches wait to grow, and
/// below which they stop.
const LOAD_WAIT_ON: f64 = 0.3;
const LOAD_WAIT_OFF: f64 = 0.1;
const HEADROOM_MIN: f64 = 0.3;
const HEADROOM_MAX: f64 = 0.85;
/// The observed p99, as a share of the budget, above which the effective budget shrinks
/// and below which it grows back.
const SHRINK_ABOVE: f64 = 0.8;
const GROW_BELOW: f64 = 0.5;
/// The most and the least one shrink takes off the effective budget (factors).
const SHRINK_MOST: f64 = 0.75;
const SHRINK_LEAST: f64 = 0.9;
/// While requests are being refused, it also grows back below this share: a p99 between
/// half and 80% of the budget would otherwise hold a shrunk effective budget, and its
/// refusals, for good.
const GROW_WHILE_REFUSING_BELOW: f64 = 0.7;
/// How often the feedback loop looks at the observed p99.
const FEEDBACK_EVERY: Duration = Duration::from_millis(250);
/// How often the response margin is recomputed (it sorts its window), and the most of the
/// effective budget it may take.
const MARGIN_EVERY: Duration = Duration::from_millis(50);
const MARGIN_MAX_SHARE: f64 = 0.3;

pub struct AdaptivePolicy {
    budget: Duration,
    max_rows: usize,
    model: LatencyModel,
    arrivals: RateEstimator,
    window: LatencyWindow,
    headroom: f64,
    last_feedback: Option<Instant>,
    /// When the headroom last shrank: only requests that arrived later show whether it
    /// shrank enough.
    shrunk_at: Option<Instant>,
    /// Whether `admit` refused a request since the feedback loop last looked.
    refused: bool,
    /// When the running batch is expected to end (none running: in the past).
    busy_until: Option<Instant>,
    /// Whether batches wait to grow (see the module docs), with hysteresis.
    waiting: bool,
    /// Whether the observed p99 is so far inside the budget that batches may wait up to
    /// `MAX_WAIT_SHARE` of it, with hysteresis.
    unhurried: bool,
    /// The knee of cost per row, from the warm-up shape.
    efficient: usize,
    /// The share of its cores the server process uses (see `cpu_load`).
    cpu_load: f64,
    /// How long responses take to leave after their batch finished, lately.
    response_delays: LatencyWindow,
    /// Its high quantile, refreshed every `MARGIN_EVERY`: every deadline is brought
    /// forward by it, since a request is answered only that long after its batch ends.
    response_margin: Duration,
    last_margin: Option<Instant>,
}

impl AdaptivePolicy {
    pub fn new(budget: Duration, max_rows: usize, model: LatencyModel) -> AdaptivePolicy {
        let efficient = model.efficient_batch(max_rows.max(1));
        AdaptivePolicy {
            waiting: false,
            unhurried: false,
            efficient,
            budget,
            max_rows: max_rows.max(1),
            model,
            arrivals: RateEstimator::new(Duration::from_millis(500)),
            window: LatencyWindow::recent(Duration::from_secs(2), 4096),
            headroom: HEADROOM_START,
            last_feedback: None,
            shrunk_at: None,
            refused: false,
            busy_until: None,
            cpu_load: 0.0,
            response_delays: LatencyWindow::recent(Duration::from_millis(500), 2048),
            response_margin: Duration::ZERO,
            last_margin: None,
        }
    }

    /// The share of the budget the queue and the device may use.
    pub fn effective_budget(&self) -> Duration {
        self.budget.mul_f64(self.headroom)
    }

    /// Time to serve `rows` rows in full batches, the last one at its high quantile.
    fn drain_time(&self, rows: usize) -> Duration {
        if rows == 0 {
            return Duration::ZERO;
        }
        let full = (rows - 1) / self.max_rows;
        let last = rows - full * self.max_rows;
        self.model.predict_mean(self.max_rows) * full as u32 + self.model.predict_high(last)
    }

    fn remaining_busy(&self, now: Instant) -> Duration {
        self.busy_until
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or_default()
    }

    fn feedback(&mut self, now: Instant) {
        if self
            .last_feedback
            .is_some_and(|t| now.saturating_duration_since(t) < FEEDBACK_EVERY)
        {
            return;
        }
        self.last_feedback = Some(now);
        let refused = std::mem::take(&mut self.refused);
        let Some((p99, n)) = self.window.quantile(0.99, now) else {
            return;
        };
        if n < 50 {
            return;
        }
        if p99 < self.budget.mul_f64(UNHURRIED_BELOW) {
            self.unhurried = true;
        } else if p99 > self.budget.mul_f64(HURRIED_ABOVE) {
            self.unhurried = false;
        }
        // Shrink again only on requests that arrived after the last shrink: the window
        // keeps a spike for as long as it spans, and shrinking at every look (four a
        // second) on that same spike counted it several times — a 100 ms spike at 10,000
        // req/s took the headroom from 0.8 to 0.65 (`a_brief_spike_shrinks_the_effective_
        // budget_once`). Where the p99 is mostly the front end's (1,000 connections, a
        // 10 ms budget), shrinking sheds more without lowering it much; growing back while
        // refusing is what undoes that (benches/README.md, "The grids with the new loop").
        let since_shrink = match self.shrunk_at {
            None => Some((p99, n)),
            Some(t) => self.window.quantile_arrived_after(0.99, Some(t), now),
        };
        let shrink_above = self.budget.mul_f64(SHRINK_ABOVE);
        let violation = since_shrink
            .filter(|&(p99, n)| n >= 50 && p99 > shrink_above)
            .map(|(p99, _)| p99);
        if let Some(p99) = violation {
            // In proportion to how far over it is, between 10% and 25%: one look per
            // violation must do what several did when a spike counted at every look.
            let factor =
                (shrink_above.as_secs_f64() / p99.as_secs_f64()).clamp(SHRINK_MOST, SHRINK_LEAST);
            self.headroom = (self.headroom * factor).max(HEADROOM_MIN);
            self.shrunk_at = Some(now);
        } else if p99 < self.budget.mul_f64(GROW_BELOW)
            || (refused && p99 < self.budget.mul_f64(GROW_WHILE_REFUSING_BELOW))
        {
            self.headroom = (self.headroom * 1.02).min(HEADROOM_MAX);
        }
    }
}

impl BatchPolicy for AdaptivePolicy {
    fn max_batch_rows(&self) -> usize {
        self.max_rows
    }

    fn decide(&mut self, queue: &QueueView, now: Instant) -> Decision {
        let Some(oldest) = queue.oldest else {
            return Decision::Wait { until: None };
        };
        let n = queue.head_rows.max(1);
        if queue.rows >= self.max_rows || queue.head_rows < queue.rows {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Full,
            };
        }
        // The most urgent request: the earliest explicit deadline, or the oldest request's
        // share of the budget running out.
        let slo = oldest + self.effective_budget();
        let urgent = queue.earliest_deadline.map_or(slo, |d| d.min(slo));
        let urgent = urgent.checked_sub(self.response_margin).unwrap_or(urgent);
        let rate = self.arrivals.rate(now);
        // Latest start that still finishes in time, for the batch it would be by then.
        let first_guess = urgent
            .checked_sub(self.model.predict_high(n))
            .unwrap_or(now);
        let grown = n + (rate * first_guess.saturating_duration_since(now).as_secs_f64()) as usize;
        let start_by = urgent
            .checked_sub(self.model.predict_high(grown.min(self.max_rows)))
            .unwrap_or(now);
        if now >= start_by {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Deadline,
            };
        }
        let capacity = self.max_rows as f64 / self.model.predict_mean(self.max_rows).as_secs_f64();
        // The device's load, or the cores', whichever is busier: on a CPU the HTTP front
        // end takes the same cores as the model, and batching frees them too.
        let load = (rate / capacity).max(self.cpu_load);
        if self.waiting && load < LOAD_WAIT_OFF {
            self.waiting = false;
        } else if !self.waiting && load > LOAD_WAIT_ON {
            self.waiting = true;
        }
        if !self.waiting || n >= self.efficient || rate <= 0.0 {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Idle,
            };
        }
        // Never longer than a full batch runs when nothing competes with the device, unless
        // the observed p99 is far inside the budget: a request held longer costs throughput
        // as well as latency wherever clients keep a bounded number of requests in flight
        // (Little's law: with 128 connections and a 50 ms budget, waiting up to a tenth of
        // the budget, 4 ms, gave a p99 of 103 ms at 10,000 req/s where the static 0.5 ms
        // policy held 31 ms). Not the drifted prediction: on busy shared cores batches run
        // slower, a longer wait would grow them further, and the loop ends in the same
        // place (p99 77 ms at 10,000 req/s). Far from saturation, though, the short wait
        // leaves batches at the size that arrives while one runs, and bigger ones cost less
        // per row: at half load on two cores, 5.7 rows a batch took 13% more CPU per
        // request than 36 (benches/README.md, "At half load"). So while the p99 is under a
        // fifth of the budget, batches wait up to the tenth of it; the p99 they then add
        // stays far from where the short wait comes back.
        let longest = self.effective_budget().mul_f64(MAX_WAIT_SHARE);
        let patience = if self.unhurried {
            longest
        } else {
            self.model.predict_uncontended(self.max_rows).min(longest)
        }
        .max(MIN_PATIENCE);
        let cap = start_by.min(oldest + patience);
        if now >= cap {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Timer,
            };
        }
        // Wait only if the batch would at least double by the cap.
        let by_cap = n as f64 + rate * cap.saturating_duration_since(now).as_secs_f64();
        if by_cap < 2.0 * n as f64 {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Idle,
            };
        }
        let fill = Duration::from_secs_f64((self.efficient - n) as f64 / rate);
        Decision::Wait {
            until: Some(now.checked_add(fill).map_or(cap, |t| t.min(cap))),
        }
    }

    fn admit(
        &mut self,
        queue: &QueueView,
        ahead: usize,
        rows: usize,
        arrived: Instant,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Result<(), Shed> {
        // Alone in front of an idle device a request is always admitted: refusing it would
        // help nobody, and the batches it makes keep the latency model learning (a policy
        // that shed everything after a slowdown would never see the device recover).
        if queue.rows == 0 && self.remaining_busy(now).is_zero() {
            return Ok(());
        }
        // The budget counts from when the request reached the server, not from now.
        let slo = arrived + self.effective_budget();
        let deadline = deadline.map_or(slo, |d| d.min(slo));
        // It is answered only after its batch ends and its response is written.
        let deadline = deadline
            .checked_sub(self.response_margin)
            .unwrap_or(deadline);
        // It waits behind the rows ranked before it (its own priority or more urgent).
        let finish = now + self.remaining_busy(now) + self.drain_time(ahead + rows);
        if finish <= deadline {
            return Ok(());
        }
        self.refused = true;
        let drain = self.remaining_busy(now) + self.drain_time(queue.rows);
        Err(Shed {
            // Close the door only while a request arriving fresh, with a whole budget,
            // would miss too: for as long as its finish is past its budget. The queue only
            // drains while the door is closed, so one arriving that much later fits. One
            // refused for the time it spent before admission, or for its own short
            // timeout, says nothing about the next: closing the door after such refusals
            // turned away requests that would have made it. (Closing it for the whole
            // drain time answered 3.5–5% fewer requests under 1.4x overload at 1,000
            // connections; benches/README.md, "The door closes only until ...".)
            door_closed_for: finish.saturating_duration_since(now + self.effective_budget()),
            message: format!(
                "over capacity: {} rows are queued ahead, predicted to finish in {:.1} ms, past the {:.1} ms budget; retry after the queue drains (~{:.0} ms)",
                ahead,
                finish.saturating_duration_since(now).as_secs_f64() * 1e3,
                deadline.saturating_duration_since(now).as_secs_f64() * 1e3,
                drain.as_secs_f64() * 1e3
            ),
            retry_after: drain,
        })
    }

    fn observe_arrival(&mut self, rows: usize, now: Instant) {
        self.arrivals.record(rows, now);
    }

    fn on_release(&mut self, rows: usize, now: Instant) {
        self.busy_until = Some(now + self.model.predict_mean(rows));
    }

    fn observe_batch(&mut self, rows: usize, compute: Duration, _now: Instant) {
        self.model.observe(rows, compute);
        self.busy_until = None;
    }

    fn observe_latency(&mut self, latency: Duration, now: Instant) {
        self.window.record(latency, now);
        self.feedback(now);
    }

    fn observe_cpu_load(&mut self, share: f64) {
        self.cpu_load = share;
    }

    fn observe_response_delay(&mut self, delay: Duration, now: Instant) {
        self.response_delays.record(delay, now);
        if self
            .last_margin
            .is_some_and(|t| now.saturating_duration_since(t) < MARGIN_EVERY)
        {
            return;
        }
        self.last_margin = Some(now);
        self.response_margin = match self.response_delays.quantile(0.95, now) {
            Some((d, n)) if n >= 20 => d.min(self.effective_budget().mul_f64(MARGIN_MAX_SHARE)),
            _ => Duration::ZERO,
        };
    }

    // The deadline `admit` plans to: the effective budget after arrival, less the response
    // margin.
    fn admission_horizon(&self) -> Option<Duration> {
        Some(self.effective_budget().saturating_sub(self.response_margin))
    }

    // `admit`'s finish for one row, while requests wait. With none waiting a newcomer's
    // answer hangs on the running batch alone, and a handler cannot see that batch end in
    // time: the worker answers its requests before the batcher hears that it ended, so a
    // client sending one request after another would find the device busy in every reading
    // (and with a budget tighter than a batch, be refused where `admit`, which sees the
    // device idle, takes it).
    fn earliest_answer(&self, queue: &QueueView, ahead: usize, now: Instant) -> Option<Instant> {
        if queue.rows == 0 {
            return None;
        }
        Some(now + self.remaining_busy(now) + self.drain_time(ahead + 1))
    }

    fn gauges(&self) -> PolicyGauges {
        PolicyGauges {
            predicted_batch: Some(self.model.predict_mean(self.efficient)),
            prediction_spread: Some(self.model.spread()),
            effective_budget: Some(self.effective_budget()),
        }
    }
}
