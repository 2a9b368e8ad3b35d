//! What the adaptive policy's admission plans to, apart from what its batching plans to.
//!
//! Batching aims inside the budget (the effective budget, which the feedback loop shrinks
//! at the first sign of a tail) because releasing a batch early costs nothing but a little
//! throughput. Refusing a request costs the client its answer, so admission plans to the
//! budget itself and moves only on evidence that admitting is what breaks it:
//!
//! - its share of the budget shrinks only while it refuses *and* the p99 of the requests
//!   that arrived since it last shrank is over `admit_shrink_above` of the budget (at
//!   overload, the admitted requests' tail is what its plan decides), by as much as the p99
//!   is over, and grows back whenever the p99 is under `admit_grow_below`. A tail from slow
//!   batches or a busy host, with nobody refused, leaves it alone;
//! - the budget is a p99, so 1% of requests may finish past it. While the observed p99 is
//!   under `late_while_below` of the budget, a request predicted to finish past the budget
//!   (but within `late_at_most` of it, and within its own deadline, which is hard) is
//!   admitted on an allowance that earns `late_share` of a request per request admitted on
//!   time, at most `late_share` of the requests the p99 covers saved up (and at least one).
//!   A host that stalls the front end for a moment, a page fault or a neighbour's burst make
//!   a few requests late; the allowance answers them instead of refusing them, and under
//!   lasting overload it runs out at once, having added at most half the 1% a p99 allows;
//! - while a co-located trainer computes, a request predicted late (within the same bounds)
//!   is admitted whatever the allowance: the batcher reports it, and the coordinator takes
//!   the device back from the trainer within a tick. The trainer pays before any request.

use std::time::Duration;

use tokio::time::Instant;

use super::tuning::AdaptiveTuning;

#[derive(Clone, Debug)]
pub struct AdmissionBudget {
    tuning: AdaptiveTuning,
    budget: Duration,
    share: f64,
    /// Requests that may still be admitted though predicted late.
    allowance: f64,
    /// The p99 at the feedback loop's last look (`None`: too few requests to tell).
    p99: Option<Duration>,
    /// The most `allowance` may hold: `late_share` of the requests that p99 covered.
    most: f64,
    /// When the share last shrank: only requests that arrived later show whether it shrank
    /// enough.
    shrunk_at: Option<Instant>,
    /// Whether a co-located trainer computes: the trainer pays first.
    trainer_computing: bool,
}

/// What admission decided about a request predicted to miss its planned deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Late {
    /// Admitted on the allowance.
    Admitted,
    Refused,
}

impl AdmissionBudget {
    pub fn new(budget: Duration, tuning: AdaptiveTuning) -> AdmissionBudget {
        AdmissionBudget {
            tuning,
            budget,
            share: tuning.admit_share_max,
            allowance: 0.0,
            p99: None,
            most: 1.0,
            shrunk_at: None,
            trainer_computing: false,
        }
    }

    /// The share of the budget a request admitted on time is planned to finish within.
    pub fn planned(&self) -> Duration {
        self.budget.mul_f64(self.share)
    }

    /// A request predicted to finish within its plan was admitted.
    pub fn on_time(&mut self) {
        self.allowance = (self.allowance + self.tuning.late_share).min(self.most);
    }

    /// Whether a co-located trainer holds an allowance and computes.
    pub fn set_trainer_computing(&mut self, computing: bool) {
        self.trainer_computing = computing;
    }

    /// A request predicted to finish at `finish`, past its plan: admit it if it finishes
    /// within `late_at_most` of the budget after `arrived`, and within its own `deadline`,
    /// and either a trainer computes (the coordinator, told that serving runs late, takes
    /// the device back from it within a tick: the trainer pays before any request does) or
    /// the p99 has room for it and the allowance holds one.
    pub fn late(&mut self, finish: Instant, arrived: Instant, deadline: Option<Instant>) -> Late {
        let t = self.tuning;
        let bounded = finish <= arrived + self.budget.mul_f64(t.late_at_most);
        let own = deadline.is_none_or(|d| finish <= d);
        if !(bounded && own) {
            return Late::Refused;
        }
        if self.trainer_computing {
            return Late::Admitted;
        }
        if self.room() && self.allowance >= 1.0 {
            self.allowance -= 1.0;
            return Late::Admitted;
        }
        Late::Refused
    }

    /// Whether the p99 leaves room for late requests.
    fn room(&self) -> bool {
        self.p99
            .is_some_and(|p| p <= self.budget.mul_f64(self.tuning.late_while_below))
    }

    /// Whether a request predicted late could be admitted now: the door need not refuse
    /// requests for lateness before they are parsed while it could.
    pub fn lenient(&self) -> bool {
        self.trainer_computing || (self.allowance >= 1.0 && self.room())
    }

    pub fn shrunk_at(&self) -> Option<Instant> {
        self.shrunk_at
    }

    /// The feedback loop's look at `now`: the p99 of the last `n` requests (`None`: too few
    /// requests), the p99 of those that arrived since the share last shrank, and whether any
    /// request was refused since the last look.
    pub fn feedback(&mut self, look: Look, now: Instant) {
        let t = self.tuning;
        self.p99 = look.p99.map(|(p, _)| p);
        let Some((p99, n)) = look.p99 else {
            return;
        };
        self.most = (t.late_share * n as f64).max(1.0);
        self.allowance = self.allowance.min(self.most);
        let over = self.budget.mul_f64(t.admit_shrink_above);
        match look.since_shrink {
            // By as much as the p99 is over: what pushes the admitted requests' tail past
            // the plan at overload (a slow batch, a stall) adds a time, whatever the plan.
            Some(recent) if look.refused && recent > over => {
                let excess = (recent - over).as_secs_f64() / self.budget.as_secs_f64();
                let share = (self.share - excess).clamp(
                    self.share * t.admit_shrink_most,
                    self.share * t.shrink_least,
                );
                self.share = share.max(t.admit_share_min);
                self.shrunk_at = Some(now);
            }
            // Under lasting overload a violation comes back at intervals (a slow batch every
            // second or so) that a window of a few thousand requests forgets between them:
            // growing back the moment it does would undo each shrink before the next.
            _ if p99 < self.budget.mul_f64(t.admit_grow_below)
                && (!look.refused || self.shrunk_at.is_none_or(|at| now - at >= t.admit_hold)) =>
            {
                self.share = (self.share * t.grow_step).min(t.admit_share_max);
            }
            _ => {}
        }
    }
}

/// What the feedback loop saw at one look.
#[derive(Clone, Copy, Debug, Default)]
pub struct Look {
    /// The p99 of the window and how many requests it covers.
    pub p99: Option<(Duration, usize)>,
    /// The p99 of the requests that arrived since the share last shrank, if enough did.
    pub since_shrink: Option<Duration>,
    pub refused: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn admission() -> AdmissionBudget {
        AdmissionBudget::new(10 * MS, AdaptiveTuning::default())
    }

    #[test]
    fn a_tail_without_refusals_leaves_the_plan_alone() {
        let mut a = admission();
        let full = a.planned();
        let now = Instant::now();
        let look = |p99: Duration, refused: bool| Look {
            p99: Some((p99, 1000)),
            since_shrink: Some(p99),
            refused,
        };
        a.feedback(look(12 * MS, false), now);
        assert_eq!(a.planned(), full);
        a.feedback(look(12 * MS, true), now);
        assert!(a.planned() < full, "refusing over the budget shrinks it");
        for _ in 0..100 {
            a.feedback(look(5 * MS, false), now);
        }
        assert_eq!(a.planned(), full, "and a p99 well inside grows it back");
    }

    #[test]
    fn late_requests_are_admitted_on_an_allowance_while_the_p99_has_room() {
        let t = AdaptiveTuning::default();
        let mut a = admission();
        let t0 = Instant::now();
        let late = t0 + 12 * MS;
        assert_eq!(a.late(late, t0, None), Late::Refused, "no p99 seen yet");
        // Earned at `late_share` a request admitted on time, up to that share of the
        // requests the p99 covers.
        let earn = |a: &mut AdmissionBudget, n: usize| (0..n).for_each(|_| a.on_time());
        let calm = |p99: Duration| Look {
            p99: Some((p99, 4000)),
            ..Look::default()
        };
        earn(&mut a, 100_000);
        a.feedback(calm(9 * MS), t0);
        assert_eq!(a.late(late, t0, None), Late::Refused, "p99 without room");
        a.feedback(calm(3 * MS), t0);
        earn(&mut a, 100_000);
        assert!(a.lenient());
        assert_eq!(
            a.late(t0 + 25 * MS, t0, None),
            Late::Refused,
            "far too late"
        );
        assert_eq!(
            a.late(late, t0, Some(t0 + 11 * MS)),
            Late::Refused,
            "own deadline"
        );
        let most = (t.late_share * 4000.0) as usize;
        for i in 0..most {
            assert_eq!(a.late(late, t0, None), Late::Admitted, "{i}");
        }
        assert_eq!(a.late(late, t0, None), Late::Refused, "allowance spent");
        assert!(!a.lenient());
        earn(&mut a, (1.0 / t.late_share).ceil() as usize);
        assert_eq!(a.late(late, t0, None), Late::Admitted);
    }

    #[test]
    fn while_a_trainer_computes_late_requests_are_admitted_whatever_the_allowance() {
        let mut a = admission();
        let t0 = Instant::now();
        assert!(!a.lenient());
        assert_eq!(a.late(t0 + 12 * MS, t0, None), Late::Refused);
        a.set_trainer_computing(true);
        assert!(a.lenient());
        for _ in 0..100 {
            assert_eq!(a.late(t0 + 12 * MS, t0, None), Late::Admitted);
        }
        // Within the same bounds: not hopelessly late, not past its own deadline.
        assert_eq!(a.late(t0 + 25 * MS, t0, None), Late::Refused);
        assert_eq!(a.late(t0 + 12 * MS, t0, Some(t0 + 11 * MS)), Late::Refused);
        a.set_trainer_computing(false);
        assert_eq!(a.late(t0 + 12 * MS, t0, None), Late::Refused);
    }
}
