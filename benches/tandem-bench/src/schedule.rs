//! When `tandem-bench load` sends: the schedule of send times for each load shape, fixed
//! in advance from a seed, and the thread that paces it.

use std::time::Duration;

use models::rng::SplitMix64;
use tokio::time::Instant;

use crate::cli::LoadShape;

/// How often the pacing thread wakes at most; see `next_wake`.
const SCHEDULER_TICK: Duration = Duration::from_micros(200);

/// When the scheduler thread, last awake at `woke`, next wakes for a send due `at`: sends
/// closer together than `SCHEDULER_TICK` go out together, so it wakes at most once a tick.
/// At 12,000 req/s one sleep per send cost about 4 of the generator's 30 us of CPU per
/// request, taken from the server it shares the cores with. A send is never early, and at
/// most a tick late, which its latency (measured from `at`) includes.
fn next_wake(at: Instant, woke: Instant) -> Instant {
    at.max(woke + SCHEDULER_TICK)
}

/// Calls `send` with each send time of `sends` (offsets from `start`), on the calling
/// thread, when it is due. A plain OS thread, not a tokio timer: tokio's timer wheel has
/// millisecond ticks, which would add up to a millisecond to every latency measured from
/// the schedule.
pub fn pace(start: Instant, sends: &[Duration], mut send: impl FnMut(Instant)) {
    let mut woke = start;
    for offset in sends {
        let at = start + *offset;
        let now = Instant::now();
        if at > now {
            std::thread::sleep(next_wake(at, woke) - now);
            woke = Instant::now();
        }
        send(at);
    }
}

/// The offered rate at time `t` (seconds) for `shape`, mean `rate` over `duration`.
fn rate_at(shape: LoadShape, rate: f64, duration: f64, t: f64) -> f64 {
    match shape {
        LoadShape::Constant | LoadShape::Poisson => rate,
        LoadShape::Step => {
            if t < duration / 2.0 {
                0.5 * rate
            } else {
                1.5 * rate
            }
        }
        LoadShape::Burst => {
            if t.fract() < 0.2 {
                2.5 * rate
            } else {
                0.625 * rate
            }
        }
    }
}

/// Send offsets from the start, for a mean of `rate` requests/s over `duration` seconds.
pub fn schedule(shape: LoadShape, rate: f64, duration: f64, seed: u64) -> Vec<Duration> {
    if shape == LoadShape::Constant {
        return (0u64..)
            .map(|i| i as f64 / rate)
            .take_while(|t| *t < duration)
            .map(Duration::from_secs_f64)
            .collect();
    }
    // A Poisson process at the peak rate, thinned to the rate of each moment.
    let peak = 2.5 * rate;
    let mut rng = SplitMix64::new(seed);
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        t += -(1.0 - rng.next_f64()).ln() / peak;
        if t >= duration {
            return out;
        }
        if rng.next_f64() * peak < rate_at(shape, rate, duration, t) {
            out.push(Duration::from_secs_f64(t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_wakes_at_most_once_a_tick_and_never_early() {
        let woke = Instant::now();
        // Far apart: each send at its own time.
        let far = woke + 5 * SCHEDULER_TICK;
        assert_eq!(next_wake(far, woke), far);
        // Closer than a tick: held until the tick ends, then sent with what else is due.
        let near = woke + SCHEDULER_TICK / 4;
        assert_eq!(next_wake(near, woke), woke + SCHEDULER_TICK);
        assert!(next_wake(near, woke) >= near);
    }

    #[test]
    fn pacing_sends_everything_in_order_and_nothing_early() {
        let sends = schedule(LoadShape::Poisson, 2000.0, 0.05, 7);
        let start = Instant::now();
        let mut sent = Vec::new();
        pace(start, &sends, |at| {
            assert!(Instant::now() >= at, "sent before it was due");
            sent.push(at - start);
        });
        assert_eq!(sent, sends);
    }

    #[test]
    fn schedules_hold_the_mean_rate() {
        let c = schedule(LoadShape::Constant, 100.0, 2.0, 1);
        assert_eq!(c.len(), 200);
        assert_eq!(c[1], Duration::from_millis(10));
        for shape in [LoadShape::Poisson, LoadShape::Step, LoadShape::Burst] {
            let p = schedule(shape, 1000.0, 10.0, 1);
            assert!((9500..10500).contains(&p.len()), "{shape:?}: {}", p.len());
            assert!(p.windows(2).all(|w| w[0] <= w[1]));
            assert_eq!(
                p,
                schedule(shape, 1000.0, 10.0, 1),
                "deterministic in the seed"
            );
        }
    }

    #[test]
    fn step_and_burst_have_their_shape() {
        let s = schedule(LoadShape::Step, 1000.0, 10.0, 2);
        let first = s.iter().filter(|t| t.as_secs_f64() < 5.0).count();
        assert!((2200..2800).contains(&first), "{first}");
        let b = schedule(LoadShape::Burst, 1000.0, 10.0, 3);
        let in_bursts = b.iter().filter(|t| t.as_secs_f64().fract() < 0.2).count();
        assert!((4600..5400).contains(&in_bursts), "{in_bursts}");
    }
}
