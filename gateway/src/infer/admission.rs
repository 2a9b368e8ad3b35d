//! Admission before parsing: what the inference core can decide about a request from its
//! arrival alone, before its body is decompressed or decoded. Parsing a body only to refuse
//! it takes the cores the admitted requests need; under overload that is how a front end
//! stops serving altogether (docs/batching.md, "Admission").
//!
//! The batcher publishes, lock-free, into a [`Door`]: a window after a shed during which
//! requests are refused at once, the policy's admission horizon, and the earliest a
//! request arriving now could be answered. [`Door::check`] reads them against one
//! request's [`Arrival`]. Everything here takes the time as an argument, so its tests are
//! exact.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::infer::outcome::Refusal;

/// The instant the door's atomics count from (nanoseconds after it).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos_since_epoch(t: Instant) -> u64 {
    t.saturating_duration_since(epoch()).as_nanos() as u64
}

/// How long a request must have sat unread before the front end counts as behind, whatever
/// the budget: under a budget tighter than the runtime's own scheduling delays (the trainer
/// tests squeeze it to a microsecond), a request a few microseconds unread says nothing of
/// the front end, and alone in front of an idle device it is served.
pub const FRONT_END_BEHIND: Duration = Duration::from_millis(2);

/// What a request refused for lateness is told to wait: the server cannot tell how long its
/// backlog of unread requests takes to drain (the header's resolution is a second).
pub const LATE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// When a request reached the server, as far as admission is concerned.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    /// When the kernel received its first bytes (or the handler started, if earlier).
    pub arrived: Instant,
    /// When its handler started reading it: the time between is time it sat unread.
    pub read_from: Instant,
    /// The caller's own deadline, propagated in a header, counted from `arrived`.
    pub deadline: Option<Instant>,
    /// What it lets the response cache do.
    pub cache: crate::cache::Policy,
}

/// The batcher's side of admission, read by every handler of its version.
#[derive(Debug, Default)]
pub struct Door {
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

impl Door {
    /// The batcher shed a request: refuse new ones at the door for `window` from `now`.
    pub fn shed_for(&self, window: Duration, retry_after: Duration, now: Instant) {
        self.shed_until_ns
            .store(nanos_since_epoch(now + window), Ordering::Relaxed);
        self.shed_retry_ms
            .store(retry_after.as_millis() as u64, Ordering::Relaxed);
    }

    /// If the door is closed at `now`, the Retry-After to give.
    pub fn shedding(&self, now: Instant) -> Option<Duration> {
        (nanos_since_epoch(now) < self.shed_until_ns.load(Ordering::Relaxed))
            .then(|| Duration::from_millis(self.shed_retry_ms.load(Ordering::Relaxed)))
    }

    pub fn set_horizon(&self, horizon: Option<Duration>) {
        // A zero horizon is stored as one microsecond: 0 means "none".
        let us = horizon.map_or(0, |h| (h.as_micros() as u64).max(1));
        self.horizon_us.store(us, Ordering::Relaxed);
    }

    /// The earliest a request arriving now could be answered; `None` when at once.
    pub fn set_earliest_answer(&self, at: Option<Instant>) {
        let ns = at.map_or(0, |t| nanos_since_epoch(t).max(1));
        self.earliest_answer_ns.store(ns, Ordering::Relaxed);
    }

    /// If a request cannot be answered within the admission horizon of its arrival, why. Two
    /// ways: it sat unread in its socket past the horizon and [`FRONT_END_BEHIND`]
    /// ([`Lateness::Unread`], with the time unread), or the queue ahead of it ends past the
    /// horizon ([`Lateness::Queued`], with the earliest answer counted from its arrival: the
    /// batcher would refuse it whatever its body). The second holds even where the
    /// batcher would take it (alone in front of an idle device): the front end is behind,
    /// and refusing such requests unparsed is what lets it catch up. (A slow upload is not
    /// "unread": its handler starts with its headers.)
    pub fn too_late(&self, arrival: &Arrival, now: Instant) -> Option<Lateness> {
        let horizon = Duration::from_micros(self.horizon_us.load(Ordering::Relaxed));
        if horizon.is_zero() {
            return None;
        }
        let earliest = match self.earliest_answer_ns.load(Ordering::Relaxed) {
            0 => now,
            ns => now.max(epoch() + Duration::from_nanos(ns)),
        };
        let answer = earliest.saturating_duration_since(arrival.arrived);
        let unread = arrival.read_from.saturating_duration_since(arrival.arrived);
        if unread > horizon.max(FRONT_END_BEHIND) {
            Some(Lateness::Unread(unread))
        } else {
            (answer > horizon && earliest > now).then_some(Lateness::Queued(answer))
        }
    }

    /// What can be decided before parsing, in order: the caller's deadline has passed; the
    /// door is closed after a shed; the request is too late for its budget.
    pub fn check(&self, model: &str, arrival: &Arrival, now: Instant) -> Result<(), Refusal> {
        if arrival.deadline.is_some_and(|d| d <= now) {
            return Err(Refusal::DeadlinePassed {
                waited_ms: now.saturating_duration_since(arrival.arrived).as_millis() as u64,
            });
        }
        if let Some(retry_after) = self.shedding(now) {
            return Err(Refusal::DoorClosed {
                message: format!(
                    "over capacity: model {model:?} is shedding load; retry after the queue drains"
                ),
                retry_after,
            });
        }
        match self.too_late(arrival, now) {
            Some(late @ Lateness::Unread(_)) => Err(Refusal::Unread {
                message: late.message(model),
                retry_after: LATE_RETRY_AFTER,
            }),
            Some(late @ Lateness::Queued(_)) => Err(Refusal::Late {
                message: late.message(model),
                retry_after: LATE_RETRY_AFTER,
            }),
            None => Ok(()),
        }
    }
}

/// Why a request cannot be answered within its budget, told before it is parsed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lateness {
    /// It sat this long in its socket before a handler read it: the front end is behind.
    Unread(Duration),
    /// The queue ahead of it ends this long after its arrival.
    Queued(Duration),
}

impl Lateness {
    fn message(self, model: &str) -> String {
        match self {
            Lateness::Unread(unread) => format!(
                "over capacity: this request to model {model:?} sat {:.1} ms unread, past its \
                 budget: the server is behind; retry when the load eases",
                unread.as_secs_f64() * 1e3
            ),
            Lateness::Queued(answer) => format!(
                "over capacity: model {model:?} could answer this request {:.1} ms after it \
                 arrived at the earliest, past its budget; retry when the load eases",
                answer.as_secs_f64() * 1e3
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn arrival(arrived: Instant, read_from: Instant) -> Arrival {
        Arrival {
            arrived,
            read_from,
            deadline: None,
            cache: Default::default(),
        }
    }

    #[test]
    fn a_request_is_too_late_only_when_answered_past_the_horizon() {
        let d = Door::default();
        let now = epoch() + Duration::from_secs(10);
        let long_ago = now - ms(40);
        let at = |a: Instant, r: Instant| d.too_late(&arrival(a, r), now);
        assert_eq!(at(long_ago, now), None, "no horizon: nothing is late");
        d.set_horizon(Some(ms(100)));
        assert_eq!(at(long_ago, now), None);
        d.set_horizon(Some(ms(30)));
        // Nothing queued: only a request that sat unread past the horizon is late, not a
        // slow upload (read at once) nor one just read.
        assert_eq!(at(long_ago, now), Some(Lateness::Unread(ms(40))));
        assert_eq!(at(long_ago, long_ago + ms(1)), None);
        assert_eq!(at(now, now), None);
        // Queued: the queue ahead ends past the horizon, however fresh the request.
        d.set_earliest_answer(Some(now + ms(35)));
        assert_eq!(at(now, now), Some(Lateness::Queued(ms(35))));
        d.set_earliest_answer(Some(now + ms(20)));
        assert_eq!(at(now, now), None);
        assert_eq!(
            at(now - ms(15), now - ms(15)),
            Some(Lateness::Queued(ms(35)))
        );
        // A reading already past counts as "now".
        d.set_earliest_answer(Some(now - ms(5)));
        assert_eq!(at(long_ago, long_ago), None);
        d.set_earliest_answer(None);
        // A horizon tighter than the front end's own delays: unread for less than
        // FRONT_END_BEHIND is not late, with nothing queued; a zero horizon is not "none".
        d.set_horizon(Some(Duration::ZERO));
        assert_eq!(at(now - ms(1), now), None);
        assert_eq!(at(now - ms(3), now), Some(Lateness::Unread(ms(3))));
        d.set_earliest_answer(Some(now + ms(1)));
        assert_eq!(at(now, now), Some(Lateness::Queued(ms(1))));
        d.set_earliest_answer(None);
        d.set_horizon(None);
        assert_eq!(at(long_ago, now), None);
    }

    #[test]
    fn the_checks_come_in_order_and_the_door_closes_for_its_window() {
        let d = Door::default();
        let now = epoch() + Duration::from_secs(10);
        let fresh = arrival(now, now);
        assert_eq!(d.check("m", &fresh, now), Ok(()));
        d.shed_for(ms(5), ms(300), now);
        let shed = d.check("m", &fresh, now + ms(4)).unwrap_err();
        assert_eq!(shed.reason(), "door_closed");
        assert_eq!(shed.retry_after(), Some(ms(300)));
        assert_eq!(d.check("m", &fresh, now + ms(6)), Ok(()));
        // A passed deadline wins over everything.
        let expired = Arrival {
            deadline: Some(now - ms(1)),
            ..fresh
        };
        d.shed_for(ms(5), ms(300), now);
        assert_eq!(
            d.check("m", &expired, now).unwrap_err().reason(),
            "deadline_passed"
        );
        d.shed_for(Duration::ZERO, ms(300), now);
        d.set_horizon(Some(ms(10)));
        let unread = arrival(now - ms(20), now);
        let late = d.check("m", &unread, now).unwrap_err();
        assert_eq!(late.reason(), "unread");
        assert_eq!(late.retry_after(), Some(LATE_RETRY_AFTER));
        assert!(late.to_string().contains("sat 20.0 ms unread"), "{late}");
        d.set_earliest_answer(Some(now + ms(12)));
        let queued = d.check("m", &fresh, now).unwrap_err();
        assert_eq!(queued.reason(), "late");
        assert!(
            queued.to_string().contains("12.0 ms after it arrived"),
            "{queued}"
        );
    }
}
