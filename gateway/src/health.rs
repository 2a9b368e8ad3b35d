//! What each model version's batcher reports about its latency, for the trainer
//! coordinator to read without locks: the budget, the observed p99 of the last two seconds,
//! the queue, and counts of what was shed or expired.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The instant shedding windows are measured from (atomics hold nanoseconds after it).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The observed p99 covers two seconds; a value not refreshed for longer describes no
/// recent request.
const STALE_AFTER: Duration = Duration::from_millis(2500);

#[derive(Debug, Default)]
pub struct Health {
    budget_us: AtomicU64,
    observed_p99_us: AtomicU64,
    /// When the p99 was last set (nanoseconds after `epoch()`): an idle batcher stops
    /// refreshing it, and a reading older than the window means nothing was served.
    observed_at_ns: AtomicU64,
    queue_depth: AtomicU64,
    queue_capacity: AtomicU64,
    /// Requests refused or expired so far (shed, queue full, deadline).
    turned_away: AtomicU64,
    completed: AtomicU64,
    /// While the batcher sheds, requests are refused before their body is parsed, until
    /// this time (nanoseconds after `epoch()`), with this Retry-After.
    shed_until_ns: AtomicU64,
    shed_retry_ms: AtomicU64,
}

/// A consistent-enough reading of [`Health`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HealthReading {
    pub budget: Duration,
    pub observed_p99: Option<Duration>,
    pub queue_depth: u64,
    pub queue_capacity: u64,
    pub turned_away: u64,
    pub completed: u64,
}

impl Health {
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

    /// The batcher shed a request: refuse new ones at the door for `window`.
    pub fn shed_for(&self, window: Duration, retry_after: Duration) {
        let until = (Instant::now() + window).saturating_duration_since(epoch());
        self.shed_until_ns
            .store(until.as_nanos() as u64, Ordering::Relaxed);
        self.shed_retry_ms
            .store(retry_after.as_millis() as u64, Ordering::Relaxed);
    }

    /// If the door is closed now, the Retry-After to give.
    pub fn shedding(&self) -> Option<Duration> {
        let now = Instant::now().saturating_duration_since(epoch()).as_nanos() as u64;
        (now < self.shed_until_ns.load(Ordering::Relaxed))
            .then(|| Duration::from_millis(self.shed_retry_ms.load(Ordering::Relaxed)))
    }

    pub fn read(&self) -> HealthReading {
        let now = Instant::now().saturating_duration_since(epoch()).as_nanos() as u64;
        let age = now.saturating_sub(self.observed_at_ns.load(Ordering::Relaxed));
        let p99 = if age > STALE_AFTER.as_nanos() as u64 {
            0
        } else {
            self.observed_p99_us.load(Ordering::Relaxed)
        };
        HealthReading {
            budget: Duration::from_micros(self.budget_us.load(Ordering::Relaxed)),
            observed_p99: (p99 > 0).then(|| Duration::from_micros(p99)),
            queue_depth: self.queue_depth.load(Ordering::Relaxed),
            queue_capacity: self.queue_capacity.load(Ordering::Relaxed),
            turned_away: self.turned_away.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_p99_not_refreshed_for_a_window_reads_as_none() {
        let h = Health::default();
        h.set_observed_p99(Some(Duration::from_millis(30)));
        assert_eq!(h.read().observed_p99, Some(Duration::from_millis(30)));
        h.observed_at_ns.store(0, Ordering::Relaxed);
        let _ = epoch();
        std::thread::sleep(STALE_AFTER + Duration::from_millis(10));
        assert_eq!(h.read().observed_p99, None);
        h.shed_for(Duration::from_millis(50), Duration::from_secs(2));
        assert_eq!(h.shedding(), Some(Duration::from_secs(2)));
    }
}
