//! How much of the device training may have: a pure controller from serving's latency
//! headroom to an allowance in [0, 1], with hysteresis — cut at once when headroom shrinks,
//! given back slowly while it lasts.

use std::time::Duration;

use tokio::time::Instant;

/// Serving's state across every model on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pressure {
    /// The highest observed p99 / budget of any model (0 when nothing was served lately).
    pub worst_latency_ratio: f64,
    /// Some request was shed, refused or expired since the last reading.
    pub turning_away: bool,
    /// Some request was admitted though predicted to finish past the budget: the next
    /// ones would be refused, so training gives the device back first.
    pub running_late: bool,
    /// The fullest queue, as a share of its capacity.
    pub queue_fill: f64,
}

/// Thresholds of the controller.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// At or above this latency ratio (or when requests are turned away) training stops.
    pub stop: f64,
    /// At or above this ratio the allowance halves.
    pub cut: f64,
    /// Below this ratio, held for `calm_for`, the allowance grows by `step` every `step_every`.
    pub calm: f64,
    pub calm_for: Duration,
    pub step: f64,
    pub step_every: Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            stop: 0.9,
            cut: 0.7,
            calm: 0.5,
            calm_for: Duration::from_secs(1),
            step: 0.1,
            step_every: Duration::from_millis(500),
        }
    }
}

#[derive(Clone, Debug)]
pub struct AllowanceController {
    allowance: f64,
    thresholds: Thresholds,
    calm_since: Option<Instant>,
    last_raise: Option<Instant>,
    /// Why the allowance is what it is, for the directive.
    reason: &'static str,
    /// Nothing has been lent yet and serving has shown no pressure: the allowance is 0 out
    /// of caution, not because serving needs the device.
    starting: bool,
}

impl AllowanceController {
    pub fn new(thresholds: Thresholds) -> AllowanceController {
        AllowanceController {
            allowance: 0.0,
            thresholds,
            calm_since: None,
            last_raise: None,
            reason: "starting",
            starting: true,
        }
    }

    #[cfg(test)]
    pub fn allowance(&self) -> f64 {
        self.allowance
    }

    pub fn reason(&self) -> &'static str {
        self.reason
    }

    /// Whether a pause now is serving's need, to be enforced on a trainer that does not
    /// acknowledge it: false from the start until serving first shows pressure or training
    /// is first lent. Until then the gateway has measured nothing a SIGSTOP would protect,
    /// and a trainer that joins mid-way through a step longer than the ack deadline (every
    /// trainer rejoining a restarted gateway) is not misbehaving.
    pub fn pauses_are_enforced(&self) -> bool {
        !self.starting
    }

    /// Takes a reading; returns the allowance now in force.
    pub fn update(&mut self, p: Pressure, now: Instant) -> f64 {
        let t = self.thresholds;
        if p.turning_away || p.running_late || p.worst_latency_ratio >= t.stop {
            self.starting = false;
            self.allowance = 0.0;
            self.calm_since = None;
            self.reason = if p.turning_away {
                "serving is turning requests away"
            } else if p.running_late {
                "serving is running late"
            } else {
                "p99 near the budget"
            };
        } else if p.worst_latency_ratio >= t.cut || p.queue_fill > 0.5 {
            self.starting = false;
            self.allowance = if self.allowance * 0.5 < 0.1 {
                0.0
            } else {
                self.allowance * 0.5
            };
            self.calm_since = None;
            self.reason = "latency headroom shrinking";
        } else if p.worst_latency_ratio < t.calm && p.queue_fill < 0.1 {
            let since = *self.calm_since.get_or_insert(now);
            let raised_recently = self
                .last_raise
                .is_some_and(|r| now.saturating_duration_since(r) < t.step_every);
            if now.saturating_duration_since(since) >= t.calm_for
                && !raised_recently
                && self.allowance < 1.0
            {
                self.allowance = (self.allowance + t.step).min(1.0);
                self.last_raise = Some(now);
                self.reason = "serving has headroom";
                self.starting = false;
            }
        } else {
            // Between calm and cut: hold what was given, and restart the calm clock.
            self.calm_since = None;
        }
        self.allowance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calm() -> Pressure {
        Pressure {
            worst_latency_ratio: 0.2,
            ..Default::default()
        }
    }

    #[test]
    fn gives_back_slowly_and_cuts_at_once() {
        let t0 = Instant::now();
        let mut c = AllowanceController::new(Thresholds::default());
        // Calm: nothing for the first second, then +0.1 every 500 ms.
        let mut t = t0;
        for _ in 0..10 {
            c.update(calm(), t);
            t += Duration::from_millis(100);
        }
        assert_eq!(c.allowance(), 0.0);
        for _ in 0..100 {
            c.update(calm(), t);
            t += Duration::from_millis(100);
        }
        assert!((c.allowance() - 1.0).abs() < 1e-9, "{}", c.allowance());
        // Headroom shrinking halves it; pressure at the budget stops training at once.
        c.update(
            Pressure {
                worst_latency_ratio: 0.75,
                ..Default::default()
            },
            t,
        );
        assert_eq!(c.allowance(), 0.5);
        c.update(
            Pressure {
                worst_latency_ratio: 0.95,
                ..Default::default()
            },
            t,
        );
        assert_eq!(c.allowance(), 0.0);
        assert_eq!(c.reason(), "p99 near the budget");
        // Shedding stops it regardless of latency.
        let mut c2 = c.clone();
        c2.allowance = 0.8;
        c2.update(
            Pressure {
                turning_away: true,
                ..calm()
            },
            t,
        );
        assert_eq!(c2.allowance(), 0.0);
    }

    #[test]
    fn the_calm_clock_restarts_after_pressure() {
        let t0 = Instant::now();
        let mut c = AllowanceController::new(Thresholds::default());
        c.update(calm(), t0);
        c.update(
            Pressure {
                worst_latency_ratio: 0.6,
                ..Default::default()
            },
            t0 + Duration::from_millis(900),
        );
        c.update(calm(), t0 + Duration::from_millis(1200));
        assert_eq!(c.allowance(), 0.0, "the calm second starts over");
        c.update(calm(), t0 + Duration::from_millis(2300));
        assert!(c.allowance() > 0.0);
    }

    #[test]
    fn pauses_are_enforced_once_serving_has_shown_pressure_or_been_lent_from() {
        let t0 = Instant::now();
        let mut c = AllowanceController::new(Thresholds::default());
        let between = Pressure {
            worst_latency_ratio: 0.6,
            ..Default::default()
        };
        // Calm but not yet a second of it, or between calm and cut: caution, not need.
        c.update(calm(), t0);
        c.update(between, t0 + Duration::from_millis(500));
        assert_eq!(c.allowance(), 0.0);
        assert!(!c.pauses_are_enforced());
        // Pressure: from now on every pause is serving's need.
        let mut pressed = c.clone();
        pressed.update(
            Pressure {
                queue_fill: 0.6,
                ..Default::default()
            },
            t0 + Duration::from_millis(600),
        );
        assert!(pressed.pauses_are_enforced());
        // Lent, then cut back to 0: enforced too.
        let mut t = t0 + Duration::from_millis(600);
        while c.allowance() == 0.0 {
            c.update(calm(), t);
            t += Duration::from_millis(100);
        }
        assert!(c.pauses_are_enforced());
        c.update(
            Pressure {
                worst_latency_ratio: 0.95,
                ..Default::default()
            },
            t,
        );
        assert_eq!(c.allowance(), 0.0);
        assert!(c.pauses_are_enforced());
    }
}
