//! The adaptive policy's tuning, as data: every constant it decides by, with its reason.
//! [`AdaptiveTuning::default`] is what the server runs; tests may pin other values. The
//! benchmarks that support the defaults are named in docs/batching.md and
//! docs/performance.md ("Batching policies", "Overload", "Feedback").

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveTuning {
    /// Waiting to grow a batch: at most this share of the effective budget, and never
    /// shorter than the runtime's timer tick.
    pub max_wait_share: f64,
    pub min_patience: Duration,
    /// The observed p99, as a share of the budget, below which batches may wait
    /// `max_wait_share` (not only as long as a full batch runs uncontended), and above which
    /// they go back to the short wait: far from saturation bigger batches cost less CPU per
    /// request, and the p99 they add stays far from the budget.
    pub unhurried_below: f64,
    pub hurried_above: f64,
    /// Load (arrivals over capacity in full batches, or the cores' share, whichever is
    /// higher) above which batches wait to grow, and below which they stop: with capacity
    /// plentiful waiting only adds latency.
    pub load_wait_on: f64,
    pub load_wait_off: f64,
    /// The effective budget starts at this share of the p99 budget (the rest is HTTP and
    /// transport) and moves between the bounds below.
    pub headroom_start: f64,
    pub headroom_min: f64,
    pub headroom_max: f64,
    /// The observed p99, as a share of the budget, above which the effective budget shrinks
    /// and below which it grows back.
    pub shrink_above: f64,
    pub grow_below: f64,
    /// While requests are being refused it grows back below this share too: a p99 between
    /// `grow_below` and `shrink_above` would otherwise hold a shrunk budget, and its
    /// refusals, for good.
    pub grow_while_refusing_below: f64,
    /// One shrink takes the effective budget to at least `shrink_most` and at most
    /// `shrink_least` of itself, in proportion to how far over the p99 is; one growth step
    /// multiplies it by `grow_step`.
    pub shrink_most: f64,
    pub shrink_least: f64,
    pub grow_step: f64,
    /// How often the feedback loop looks at the p99, and how many requests it needs to.
    pub feedback_every: Duration,
    pub feedback_min_samples: usize,
    /// Responses leave some time after their batch ends (handler wake-up, encoding,
    /// writing): every deadline is brought forward by the recent `margin_quantile` of that,
    /// refreshed every `margin_every`, at most `margin_max_share` of the effective budget.
    pub margin_quantile: f64,
    pub margin_every: Duration,
    pub margin_max_share: f64,
    /// Admission (see `admission_budget.rs`): the share of the budget it plans to, between
    /// these bounds; at a look that finds requests refused and the p99 over
    /// `admit_shrink_above` of the budget it shrinks by as much as the p99 is over (to at
    /// most `admit_shrink_most` and at least `shrink_least` of itself), and grows by
    /// `grow_step` at a look
    /// that finds the p99 under `admit_grow_below` of it, while nothing is refused or
    /// `admit_hold` after it last shrank.
    pub admit_share_max: f64,
    pub admit_share_min: f64,
    pub admit_shrink_above: f64,
    pub admit_grow_below: f64,
    pub admit_shrink_most: f64,
    pub admit_hold: Duration,
    /// Requests predicted to finish past the budget, but within `late_at_most` of it, are
    /// admitted while the p99 is under `late_while_below` of the budget, on an allowance of
    /// `late_share` of a request per request admitted on time, at most that share of the
    /// requests the p99 covers saved up: half the 1% a p99 leaves, so that the late ones
    /// cannot push it over.
    pub late_while_below: f64,
    pub late_at_most: f64,
    pub late_share: f64,
    /// The arrival rate's time constant: a burst shows within a fraction of a second.
    pub arrival_tau: Duration,
}

impl Default for AdaptiveTuning {
    fn default() -> AdaptiveTuning {
        AdaptiveTuning {
            max_wait_share: 0.1,
            min_patience: Duration::from_millis(1),
            unhurried_below: 0.2,
            hurried_above: 0.3,
            load_wait_on: 0.3,
            load_wait_off: 0.1,
            headroom_start: 0.8,
            headroom_min: 0.3,
            headroom_max: 0.85,
            shrink_above: 0.8,
            grow_below: 0.5,
            grow_while_refusing_below: 0.7,
            shrink_most: 0.75,
            shrink_least: 0.9,
            grow_step: 1.02,
            feedback_every: Duration::from_millis(250),
            feedback_min_samples: 50,
            margin_quantile: 0.95,
            margin_every: Duration::from_millis(50),
            margin_max_share: 0.3,
            admit_share_max: 0.95,
            admit_share_min: 0.2,
            admit_shrink_above: 0.95,
            admit_grow_below: 0.8,
            admit_shrink_most: 0.5,
            admit_hold: Duration::from_secs(3),
            late_while_below: 0.8,
            late_at_most: 2.0,
            late_share: 0.005,
            arrival_tau: Duration::from_millis(500),
        }
    }
}
