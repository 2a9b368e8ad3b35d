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

/// How long a request must have sat unread before the front end counts as behind, whatever
/// the budget: under a budget tighter than the runtime's own scheduling delays (the trainer
/// tests squeeze it to a microsecond), a request a few microseconds unread says nothing of
/// the front end, and alone in front of an idle device it is served.
const FRONT_END_BEHIND: Duration = Duration::from_millis(2);

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
    /// The policy's admission horizon in microseconds (0: none), and the earliest a
    /// request could be answered (nanoseconds after `epoch()`; 0: whenever it arrived): one
    /// that would be answered later than the horizon after its arrival is refused before
    /// it is parsed.
    horizon_us: AtomicU64,
    earliest_answer_ns: AtomicU64,
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

    pub fn set_admission_horizon(&self, horizon: Option<Duration>) {
        // A zero horizon is stored as one microsecond: 0 means "none".
        let us = horizon.map_or(0, |h| (h.as_micros() as u64).max(1));
        self.horizon_us.store(us, Ordering::Relaxed);
    }

    /// The earliest a request arriving now could be answered; `None` when now.
    pub fn set_earliest_answer(&self, at: Option<Instant>) {
        let ns = at.map_or(0, |t| {
            (t.saturating_duration_since(epoch()).as_nanos() as u64).max(1)
        });
        self.earliest_answer_ns.store(ns, Ordering::Relaxed);
    }

    /// If a request that arrived at `arrived`, and whose handler started reading it at
    /// `read_from`, cannot be answered within the admission horizon of its arrival: the
    /// earliest it could be, counted from its arrival. Two ways: the queue ahead of it ends
    /// past the horizon (the batcher would refuse it whatever its body), or it sat unread
    /// in its socket past the horizon and [`FRONT_END_BEHIND`]. The second holds even where
    /// the batcher would take it (alone in front of an idle device): the front end is
    /// behind, and refusing such requests unparsed is what lets it catch up. (A slow upload
    /// is not "unread": its handler starts with its headers.)
    pub fn too_late(&self, arrived: Instant, read_from: Instant) -> Option<Duration> {
        let horizon = Duration::from_micros(self.horizon_us.load(Ordering::Relaxed));
        if horizon.is_zero() {
            return None;
        }
        let now = Instant::now();
        let earliest = match self.earliest_answer_ns.load(Ordering::Relaxed) {
            0 => now,
            ns => now.max(epoch() + Duration::from_nanos(ns)),
        };
        let answer = earliest.saturating_duration_since(arrived);
        let unread = read_from.saturating_duration_since(arrived);
        let behind = unread > horizon.max(FRONT_END_BEHIND);
        (behind || answer > horizon && earliest > now).then_some(answer)
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

    #[test]
    fn a_request_is_too_late_only_when_answered_past_the_horizon() {
        let h = Health::default();
        let ms = Duration::from_millis;
        let now = Instant::now;
        let long_ago = now() - ms(40);
        assert_eq!(
            h.too_late(long_ago, now()),
            None,
            "no horizon: nothing is late"
        );
        h.set_admission_horizon(Some(ms(100)));
        assert_eq!(h.too_late(long_ago, now()), None);
        h.set_admission_horizon(Some(ms(30)));
        // Nothing queued: only a request that sat unread past the horizon is late, not a
        // slow upload (read at once) nor one just read.
        assert!(
            h.too_late(long_ago, now())
                .is_some_and(|after| after >= ms(40))
        );
        assert_eq!(h.too_late(long_ago, long_ago + ms(1)), None);
        assert_eq!(h.too_late(now(), now()), None);
        // Queued: the queue ahead ends past the horizon, however fresh the request.
        h.set_earliest_answer(Some(now() + ms(35)));
        assert!(h.too_late(now(), now()).is_some_and(|after| after > ms(30)));
        h.set_earliest_answer(Some(now() + ms(20)));
        assert_eq!(h.too_late(now(), now()), None);
        assert!(h.too_late(now() - ms(15), now() - ms(15)).is_some());
        // A reading already past counts as "now".
        h.set_earliest_answer(Some(now() - ms(5)));
        assert_eq!(h.too_late(long_ago, long_ago), None);
        h.set_earliest_answer(None);
        // A horizon tighter than the front end's own delays: unread for less than
        // FRONT_END_BEHIND is not late, with nothing queued; a zero horizon is not "none".
        h.set_admission_horizon(Some(Duration::ZERO));
        assert_eq!(h.too_late(now() - ms(1), now()), None);
        assert!(h.too_late(now() - ms(3), now()).is_some());
        h.set_earliest_answer(Some(now() + ms(1)));
        assert!(h.too_late(now(), now()).is_some());
        h.set_earliest_answer(None);
        h.set_admission_horizon(None);
        assert_eq!(h.too_late(long_ago, now()), None);
    }
}
