//! What each model version's serving reports about itself, lock-free, for readers that
//! must never wait on it (the trainer coordinator): the budget, the observed p99 of the
//! last two seconds, the queue, and counts of requests offered, completed, admitted late and
//! turned away; and, written by the coordinator, whether a trainer computes beside it.
//! (Admission's own shared state is [`crate::infer::admission::Door`].)

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The instant the atomics count from (they hold nanoseconds after it).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The observed p99 covers two seconds; a value not refreshed for longer describes no
/// recent request.
const STALE_AFTER: Duration = Duration::from_millis(2500);

#[derive(Debug, Default)]
pub struct Signals {
    budget_us: AtomicU64,
    observed_p99_us: AtomicU64,
    /// When the p99 was last set (nanoseconds after `epoch()`): an idle batcher stops
    /// refreshing it, and a reading older than the window means nothing was served.
    observed_at_ns: AtomicU64,
    queue_depth: AtomicU64,
    queue_capacity: AtomicU64,
    /// Requests refused or expired so far (each counted once, by the inference core).
    turned_away: AtomicU64,
    completed: AtomicU64,
    /// Requests that reached this version, whatever became of them: the demand.
    offered: AtomicU64,
    /// Requests admitted though predicted to finish past the budget: serving runs late, and
    /// the trainer must give the device back before anything is refused.
    admitted_late: AtomicU64,
    /// Whether a co-located trainer holds an allowance (set by the coordinator).
    trainer_computing: AtomicBool,
}

/// A consistent-enough reading of [`Signals`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SignalsReading {
    pub budget: Duration,
    pub observed_p99: Option<Duration>,
    pub queue_depth: u64,
    pub queue_capacity: u64,
    pub turned_away: u64,
    pub completed: u64,
    pub offered: u64,
    pub admitted_late: u64,
}

impl Signals {
    pub fn set_budget(&self, budget: Duration) {
        self.budget_us
            .store(budget.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn set_observed_p99(&self, p99: Option<Duration>) {
        self.observed_p99_us
            .store(p99.map_or(0, |d| d.as_micros() as u64), Ordering::Relaxed);
        let now = Instant::now().saturating_duration_since(epoch()).as_nanos() as u64;
        self.observed_at_ns.store(now, Ordering::Relaxed);
    }

    pub fn set_queue(&self, depth: usize, capacity: usize) {
        self.queue_depth.store(depth as u64, Ordering::Relaxed);
        self.queue_capacity
            .store(capacity as u64, Ordering::Relaxed);
    }

    pub fn add_turned_away(&self, n: u64) {
        self.turned_away.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_completed(&self, n: u64) {
        self.completed.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_admitted_late(&self) {
        self.admitted_late.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_trainer_computing(&self, computing: bool) {
        self.trainer_computing.store(computing, Ordering::Relaxed);
    }

    pub fn trainer_computing(&self) -> bool {
        self.trainer_computing.load(Ordering::Relaxed)
    }

    pub fn add_offered(&self) {
        self.offered.fetch_add(1, Ordering::Relaxed);
    }

    pub fn read(&self) -> SignalsReading {
        let now = Instant::now().saturating_duration_since(epoch()).as_nanos() as u64;
        let age = now.saturating_sub(self.observed_at_ns.load(Ordering::Relaxed));
        let p99 = if age > STALE_AFTER.as_nanos() as u64 {
            0
        } else {
            self.observed_p99_us.load(Ordering::Relaxed)
        };
        SignalsReading {
            budget: Duration::from_micros(self.budget_us.load(Ordering::Relaxed)),
            observed_p99: (p99 > 0).then(|| Duration::from_micros(p99)),
            queue_depth: self.queue_depth.load(Ordering::Relaxed),
            queue_capacity: self.queue_capacity.load(Ordering::Relaxed),
            turned_away: self.turned_away.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            offered: self.offered.load(Ordering::Relaxed),
            admitted_late: self.admitted_late.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_p99_not_refreshed_for_a_window_reads_as_none() {
        let h = Signals::default();
        h.set_observed_p99(Some(Duration::from_millis(30)));
        assert_eq!(h.read().observed_p99, Some(Duration::from_millis(30)));
        h.observed_at_ns.store(0, Ordering::Relaxed);
        let _ = epoch();
        std::thread::sleep(STALE_AFTER + Duration::from_millis(10));
        assert_eq!(h.read().observed_p99, None);
    }
}
