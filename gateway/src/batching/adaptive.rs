//! The adaptive policy: meet a p99 latency budget at the highest throughput the device
//! allows, instead of hand-tuned "max batch size + max queue delay". Its constants are
//! [`AdaptiveTuning`]; docs/batching.md explains the whole loop.
//!
//! When a worker is free it releases at once unless waiting is worth it:
//! - a batch leaves by the time its most urgent request must start to finish in time
//!   (`deadline`: its own timeout, or arrival + the effective budget, less the predicted
//!   high-quantile batch time and the response margin);
//! - while load is low it releases at once (`idle`): capacity is plentiful;
//! - when busier, a batch waits to grow towards the efficient size (the knee of cost per
//!   row in the latency model) for at most the time a full batch runs uncontended — or, while
//!   the observed p99 is far inside the budget, for a share of the budget — and only while
//!   the arrival rate promises to at least double it (`timer` when that wait ends, `idle`
//!   when growth is not coming); a full batch goes at once (`full`).
//!
//! Admission: a request whose predicted completion — behind the running batch and every row
//! ranked ahead of it, drained in full batches — misses its deadline is refused at the door
//! with the queue's drain time as Retry-After, so the queue never holds more than the budget
//! can serve.
//!
//! Feedback: the effective budget (the share of the p99 budget the queue and the device may
//! use) shrinks when the observed p99 of requests that arrived since it last shrank exceeds
//! `shrink_above` of the budget, in proportion to how far over it is; it grows back while
//! the p99 is under `grow_below` (or `grow_while_refusing_below` while refusing). The p99 it
//! reads covers the last 2 s or the last 4,096 requests, whichever is shorter: at high rates
//! the loop must see a change quickly.

use std::time::Duration;

use tokio::time::Instant;

use super::ReleaseReason;
use super::admission_budget::{AdmissionBudget, Late, Look};
use super::latency::LatencyModel;
use super::policy::{Admitted, BatchPolicy, Candidate, Decision, PolicyGauges, Shed, ShedView};
use super::state::QueueView;
pub use super::tuning::AdaptiveTuning;
use super::window::{LatencyWindow, RateEstimator};

/// Requests the p99 must cover before admission reads it (to admit requests predicted
/// late): fewer than the batching loop needs, since at a low rate the 2-s window holds few,
/// and a p99 of 20 requests is their slowest, which errs towards refusing.
const ADMISSION_MIN_SAMPLES: usize = 20;

/// Priorities whose arrivals are told apart; less urgent ones count as the last.
const MAX_PRIORITY_RATES: usize = 16;

pub struct AdaptivePolicy {
    tuning: AdaptiveTuning,
    budget: Duration,
    max_rows: usize,
    model: LatencyModel,
    arrivals: RateEstimator,
    /// Arrivals by priority (1 first), for what overtakes a less urgent request.
    by_priority: Vec<RateEstimator>,
    window: LatencyWindow,
    headroom: f64,
    last_feedback: Option<Instant>,
    /// When the headroom last shrank: only requests that arrived later show whether it
    /// shrank enough.
    shrunk_at: Option<Instant>,
    /// Whether `admit` refused a request since the feedback loop last looked.
    refused: bool,
    /// What admission plans to (see `admission_budget.rs`).
    admission: AdmissionBudget,
    /// When the running batch is expected to end (none running: in the past).
    busy_until: Option<Instant>,
    /// Whether batches wait to grow (see the module docs), with hysteresis.
    waiting: bool,
    /// Whether the observed p99 is so far inside the budget that batches may wait up to
    /// `max_wait_share` of it, with hysteresis.
    unhurried: bool,
    /// The knee of cost per row, from the warm-up shape.
    efficient: usize,
    /// The share of its cores the server process uses (see `cpu_load`).
    cpu_load: f64,
    /// How long responses take to leave after their batch finished, lately.
    response_delays: LatencyWindow,
    /// Its high quantile, refreshed every `margin_every`: every deadline is brought
    /// forward by it, since a request is answered only that long after its batch ends.
    response_margin: Duration,
    last_margin: Option<Instant>,
    /// What its rows are, in refusals' messages.
    unit: &'static str,
}

impl AdaptivePolicy {
    pub fn new(budget: Duration, max_rows: usize, model: LatencyModel) -> AdaptivePolicy {
        AdaptivePolicy::with_tuning(budget, max_rows, model, AdaptiveTuning::default())
    }

    pub fn with_tuning(
        budget: Duration,
        max_rows: usize,
        model: LatencyModel,
        tuning: AdaptiveTuning,
    ) -> AdaptivePolicy {
        let efficient = model.efficient_batch(max_rows.max(1));
        AdaptivePolicy {
            tuning,
            waiting: false,
            unhurried: false,
            efficient,
            budget,
            max_rows: max_rows.max(1),
            model,
            arrivals: RateEstimator::new(tuning.arrival_tau),
            by_priority: Vec::new(),
            window: LatencyWindow::recent(Duration::from_secs(2), 4096),
            headroom: tuning.headroom_start,
            last_feedback: None,
            shrunk_at: None,
            refused: false,
            admission: AdmissionBudget::new(budget, tuning),
            busy_until: None,
            cpu_load: 0.0,
            response_delays: LatencyWindow::recent(Duration::from_millis(500), 2048),
            response_margin: Duration::ZERO,
            last_margin: None,
            unit: "rows",
        }
    }

    /// Names its rows `unit` in refusals' messages (a text model's are token-units).
    pub fn counting(mut self, unit: &'static str) -> AdaptivePolicy {
        self.unit = unit;
        self
    }

    /// The share of the budget the queue and the device may use.
    pub fn effective_budget(&self) -> Duration {
        self.budget.mul_f64(self.headroom)
    }

    /// When `rows` rows queued now would be served: after the running batch, in full
    /// batches, the last one at its high quantile. Under load the last batch does not leave with only
    /// what is queued now: rows arriving until it starts join it (at the arrival rate, up to
    /// a full batch), and it runs as long as its size.
    fn finish(&self, rows: usize, now: Instant) -> Instant {
        let busy = self.remaining_busy(now);
        if rows == 0 {
            return now + busy;
        }
        let full = (rows - 1) / self.max_rows;
        let before_last = busy + self.model.predict_mean(self.max_rows) * full as u32;
        let last = rows - full * self.max_rows;
        let joining = (self.arrivals.rate(now) * before_last.as_secs_f64()) as usize;
        let last = (last + joining).min(self.max_rows);
        now + before_last + self.model.predict_high(last)
    }

    /// Rows of more urgent priorities expected to arrive, and go before a request of
    /// `priority`, while the `rows` ranked up to it are served: a low-priority request
    /// admitted on the queue it sees alone would be overtaken, and late.
    fn overtaking(&self, rows: usize, priority: u32, now: Instant) -> usize {
        let urgent = (priority.max(1) as usize - 1).min(self.by_priority.len());
        let rate: f64 = self.by_priority[..urgent].iter().map(|r| r.rate(now)).sum();
        if rate <= 0.0 {
            return 0;
        }
        let wait = self.finish(rows, now).saturating_duration_since(now);
        (rate * wait.as_secs_f64()) as usize
    }

    fn remaining_busy(&self, now: Instant) -> Duration {
        self.busy_until
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or_default()
    }

    /// The refusal of a request of `rows` behind `ahead`, answered at `answered` against
    /// `deadline`. The door closes only while a request arriving fresh, with a whole budget
    /// and a single row, would miss too: for as long as its finish is past its plan. The
    /// queue only drains while the door is closed, so one arriving that much later fits.
    /// One refused for the time it spent before admission, for its own short timeout, or
    /// for its own size (a long text) says nothing about the next.
    fn shed(
        &self,
        ahead: usize,
        rows: usize,
        arrived: Instant,
        answered: Instant,
        deadline: Instant,
        now: Instant,
    ) -> Shed {
        let drain = self.finish(ahead, now).saturating_duration_since(now);
        let fresh = self.finish(ahead + 1, now) + self.response_margin;
        let plan = self.admission.planned();
        let seen = ShedView {
            waited: now.saturating_duration_since(arrived),
            ahead,
            rows,
            busy: self.remaining_busy(now),
            finish: answered.saturating_duration_since(now),
            deadline: deadline.saturating_duration_since(now),
            horizon: plan,
            full_batch: self.model.predict_mean(self.max_rows),
            spread: self.model.spread(),
        };
        Shed {
            door_closed_for: fresh.saturating_duration_since(now + plan),
            message: format!(
                "over capacity: {} {} are queued ahead, predicted to be answered in {:.1} ms, past the {:.1} ms left of its budget; retry after the queue drains (~{:.0} ms)",
                ahead,
                self.unit,
                seen.finish.as_secs_f64() * 1e3,
                seen.deadline.as_secs_f64() * 1e3,
                drain.as_secs_f64() * 1e3
            ),
            retry_after: drain,
            seen: Box::new(seen),
        }
    }

    /// Looks at the p99 every `feedback_every`: shrinks or grows the effective budget, and
    /// switches between the short and the long wait.
    fn feedback(&mut self, now: Instant) {
        let t = self.tuning;
        if self
            .last_feedback
            .is_some_and(|last| now.saturating_duration_since(last) < t.feedback_every)
        {
            return;
        }
        self.last_feedback = Some(now);
        let refused = std::mem::take(&mut self.refused);
        let seen = self.window.quantile(0.99, now);
        let since_shrink = self
            .window
            .quantile_arrived_after(0.99, self.admission.shrunk_at(), now)
            .filter(|&(_, n)| n >= t.feedback_min_samples);
        let look = Look {
            p99: seen.filter(|&(_, n)| n >= ADMISSION_MIN_SAMPLES),
            since_shrink: since_shrink.map(|(p99, _)| p99),
            refused,
        };
        self.admission.feedback(look, now);
        let Some((p99, n)) = seen else {
            return;
        };
        if n < t.feedback_min_samples {
            return;
        }
        if p99 < self.budget.mul_f64(t.unhurried_below) {
            self.unhurried = true;
        } else if p99 > self.budget.mul_f64(t.hurried_above) {
            self.unhurried = false;
        }
        if let Some(over) = self.violation(now) {
            // In proportion to how far over it is: one look per violation must do what
            // several looks at the same spike would (a_brief_spike_shrinks_the_effective_
            // budget_once).
            let shrink_above = self.budget.mul_f64(t.shrink_above);
            let factor = (shrink_above.as_secs_f64() / over.as_secs_f64())
                .clamp(t.shrink_most, t.shrink_least);
            self.headroom = (self.headroom * factor).max(t.headroom_min);
            self.shrunk_at = Some(now);
        } else if p99 < self.budget.mul_f64(t.grow_below)
            || (refused && p99 < self.budget.mul_f64(t.grow_while_refusing_below))
        {
            self.headroom = (self.headroom * t.grow_step).min(t.headroom_max);
        }
    }

    /// The p99 of the requests that arrived since the last shrink, if it is over
    /// `shrink_above` of the budget: the window keeps a spike for as long as it spans, and
    /// only requests after the shrink show whether it shrank enough.
    fn violation(&mut self, now: Instant) -> Option<Duration> {
        let t = self.tuning;
        let since_shrink = match self.shrunk_at {
            None => self.window.quantile(0.99, now),
            Some(at) => self.window.quantile_arrived_after(0.99, Some(at), now),
        };
        let shrink_above = self.budget.mul_f64(t.shrink_above);
        since_shrink
            .filter(|&(p99, n)| n >= t.feedback_min_samples && p99 > shrink_above)
            .map(|(p99, _)| p99)
    }

    /// The latest a batch of the `n` rows at the head (and those arriving at `rate` until
    /// then) may start to finish by `urgent`.
    fn start_by(&self, urgent: Instant, n: usize, rate: f64, now: Instant) -> Instant {
        let first_guess = urgent
            .checked_sub(self.model.predict_high(n))
            .unwrap_or(now);
        let grown = n + (rate * first_guess.saturating_duration_since(now).as_secs_f64()) as usize;
        urgent
            .checked_sub(self.model.predict_high(grown.min(self.max_rows)))
            .unwrap_or(now)
    }

    /// Whether batches wait to grow: the device's load or the cores', whichever is busier
    /// (on a CPU the HTTP front end takes the same cores, and batching frees them too), with
    /// hysteresis.
    fn update_waiting(&mut self, rate: f64) {
        let capacity = self.max_rows as f64 / self.model.predict_mean(self.max_rows).as_secs_f64();
        let load = (rate / capacity).max(self.cpu_load);
        if self.waiting && load < self.tuning.load_wait_off {
            self.waiting = false;
        } else if !self.waiting && load > self.tuning.load_wait_on {
            self.waiting = true;
        }
    }

    /// How long a batch may wait to grow: as long as a full batch runs uncontended, or —
    /// while the p99 is far inside the budget — `max_wait_share` of the effective budget. A
    /// request held longer costs throughput as well as latency where clients keep a bounded
    /// number of requests in flight (Little's law); the drifted prediction is not used, as
    /// on busy shared cores it would grow batches, and the wait, further still.
    fn patience(&self) -> Duration {
        let longest = self.effective_budget().mul_f64(self.tuning.max_wait_share);
        let wait = if self.unhurried {
            longest
        } else {
            self.model.predict_uncontended(self.max_rows).min(longest)
        };
        wait.max(self.tuning.min_patience)
    }
}

fn release(reason: ReleaseReason, max_rows: usize) -> Decision {
    Decision::Release { max_rows, reason }
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
        if queue.head_is_full(self.max_rows) {
            return release(ReleaseReason::Full, self.max_rows);
        }
        // The most urgent request: the earliest explicit deadline, or the oldest request's
        // share of the budget running out; answered only a response margin after its batch.
        let slo = oldest + self.effective_budget();
        let urgent = queue.earliest_deadline.map_or(slo, |d| d.min(slo));
        let urgent = urgent.checked_sub(self.response_margin).unwrap_or(urgent);
        let rate = self.arrivals.rate(now);
        let start_by = self.start_by(urgent, n, rate, now);
        if now >= start_by {
            return release(ReleaseReason::Deadline, self.max_rows);
        }
        self.update_waiting(rate);
        if !self.waiting || n >= self.efficient || rate <= 0.0 {
            return release(ReleaseReason::Idle, self.max_rows);
        }
        let cap = start_by.min(oldest + self.patience());
        if now >= cap {
            return release(ReleaseReason::Timer, self.max_rows);
        }
        // Wait only if the batch would at least double by the cap.
        let by_cap = n as f64 + rate * cap.saturating_duration_since(now).as_secs_f64();
        if by_cap < 2.0 * n as f64 {
            return release(ReleaseReason::Idle, self.max_rows);
        }
        let fill = Duration::from_secs_f64((self.efficient - n) as f64 / rate);
        Decision::Wait {
            until: Some(now.checked_add(fill).map_or(cap, |t| t.min(cap))),
        }
    }

    fn admit(
        &mut self,
        queue: &QueueView,
        request: &Candidate,
        now: Instant,
    ) -> Result<Admitted, Shed> {
        let Candidate {
            ahead,
            rows,
            priority,
            arrived,
            deadline,
        } = *request;
        // Alone in front of an idle device a request is always admitted: refusing it would
        // help nobody, and the batches it makes keep the latency model learning (a policy
        // that shed everything after a slowdown would never see the device recover).
        if queue.rows == 0 && self.remaining_busy(now).is_zero() {
            return Ok(Admitted::OnTime);
        }
        // It waits behind the rows ranked before it (its own priority or more urgent), and
        // is answered only after its batch ends and its response is written.
        let ahead = ahead + self.overtaking(ahead + rows, priority, now);
        let answered = self.finish(ahead + rows, now) + self.response_margin;
        // The budget counts from when the request reached the server, not from now.
        let planned = arrived + self.admission.planned();
        let due = deadline.map_or(planned, |d| d.min(planned));
        if answered <= due {
            self.admission.on_time();
            return Ok(Admitted::OnTime);
        }
        if self.admission.late(answered, arrived, deadline) == Late::Admitted {
            return Ok(Admitted::Late);
        }
        self.refused = true;
        Err(self.shed(ahead, rows, arrived, answered, due, now))
    }

    fn observe_trainer(&mut self, computing: bool) {
        self.admission.set_trainer_computing(computing);
    }

    fn observe_arrival(&mut self, rows: usize, priority: u32, now: Instant) {
        self.arrivals.record(rows, now);
        let level = (priority.max(1) as usize - 1).min(MAX_PRIORITY_RATES - 1);
        if self.by_priority.len() <= level {
            let tau = self.tuning.arrival_tau;
            self.by_priority
                .resize_with(level + 1, || RateEstimator::new(tau));
        }
        self.by_priority[level].record(rows, now);
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
            .is_some_and(|t| now.saturating_duration_since(t) < self.tuning.margin_every)
        {
            return;
        }
        self.last_margin = Some(now);
        let t = self.tuning;
        self.response_margin = match self.response_delays.quantile(t.margin_quantile, now) {
            Some((d, n)) if n >= 20 => d.min(self.effective_budget().mul_f64(t.margin_max_share)),
            _ => Duration::ZERO,
        };
    }

    // The deadline `admit` plans to, less the response margin; none while `admit` may take
    // a request predicted late on its allowance (it decides, once the request is parsed).
    fn admission_horizon(&self) -> Option<Duration> {
        (!self.admission.lenient()).then(|| {
            self.admission
                .planned()
                .saturating_sub(self.response_margin)
        })
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
        Some(self.finish(ahead + 1, now))
    }

    fn gauges(&self) -> PolicyGauges {
        PolicyGauges {
            predicted_batch: Some(self.model.predict_mean(self.efficient)),
            prediction_spread: Some(self.model.spread()),
            effective_budget: Some(self.effective_budget()),
        }
    }
}
