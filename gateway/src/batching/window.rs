//! What the adaptive controller knows of requests over time: how fast they arrive, the
//! latencies they saw, and counts of events within a span. All pure, all driven by the times
//! they are given.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Arrival rate in rows per second: an exponentially decaying count with time constant
/// `tau`, so a burst shows within a fraction of a second.
#[derive(Clone, Debug)]
pub struct RateEstimator {
    tau: f64,
    rate: f64,
    last: Option<Instant>,
}

impl RateEstimator {
    pub fn new(tau: Duration) -> RateEstimator {
        RateEstimator {
            tau: tau.as_secs_f64(),
            rate: 0.0,
            last: None,
        }
    }

    fn decay(&self, now: Instant) -> f64 {
        match self.last {
            Some(last) => {
                self.rate * (-now.saturating_duration_since(last).as_secs_f64() / self.tau).exp()
            }
            None => 0.0,
        }
    }

    pub fn record(&mut self, rows: usize, now: Instant) {
        self.rate = self.decay(now) + rows as f64 / self.tau;
        self.last = Some(now);
    }

    /// Rows per second, as of `now`.
    pub fn rate(&self, now: Instant) -> f64 {
        self.decay(now)
    }
}

/// Latencies of the requests completed in the last `span`: their quantiles, and how many
/// completed. The count is exact at any rate. The latencies are kept whole while at most
/// `capacity` complete within a span. Beyond that, two choices:
/// - [`LatencyWindow::sampled`]: when it is full, every other latency is dropped and the one
///   kept stands for both (its weight doubles), and new completions are kept one in
///   `stride`, so a quantile still covers the whole span — what a gauge that names its
///   window must mean;
/// - [`LatencyWindow::recent`]: the oldest is dropped, so a quantile covers the last
///   `capacity` requests when they came faster than that — what a feedback loop that must
///   see a change quickly at high rates reads.
#[derive(Clone, Debug)]
pub struct LatencyWindow {
    span: Duration,
    capacity: usize,
    samples: VecDeque<Sample>,
    /// Keep one completion in this many (a power of two).
    stride: u32,
    /// Completions not yet represented by a kept sample.
    pending: u32,
    /// Which of each pair a thinning keeps, alternated so neither is favoured.
    keep_second: bool,
    /// Thin when full (`sampled`) rather than drop the oldest (`recent`).
    thin_when_full: bool,
    completions: EventCount,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    latency: Duration,
    /// How many completions this sample stands for.
    weight: u32,
}

impl LatencyWindow {
    /// Quantiles over the whole span, from a weighted sample when more complete.
    pub fn sampled(span: Duration, capacity: usize) -> LatencyWindow {
        LatencyWindow::new(span, capacity, true)
    }

    /// Quantiles over the span or its last `capacity` requests, whichever is shorter.
    pub fn recent(span: Duration, capacity: usize) -> LatencyWindow {
        LatencyWindow::new(span, capacity, false)
    }

    fn new(span: Duration, capacity: usize, thin_when_full: bool) -> LatencyWindow {
        let capacity = capacity.max(2);
        LatencyWindow {
            span,
            capacity,
            samples: VecDeque::with_capacity(capacity),
            stride: 1,
            pending: 0,
            keep_second: false,
            thin_when_full,
            completions: EventCount::new(span),
        }
    }

    pub fn record(&mut self, latency: Duration, now: Instant) {
        self.completions.add(1, now);
        self.pending += 1;
        if self.pending < self.stride {
            return;
        }
        self.trim(now);
        if self.samples.len() == self.capacity {
            if self.thin_when_full {
                self.thin();
            } else {
                self.samples.pop_front();
            }
        }
        self.samples.push_back(Sample {
            at: now,
            latency,
            weight: std::mem::take(&mut self.pending),
        });
    }

    /// Halves the sample: of each pair of neighbours one is kept with both weights, and
    /// from now on one completion in twice as many is kept.
    fn thin(&mut self) {
        let keep_second = self.keep_second;
        self.keep_second = !keep_second;
        let old = std::mem::take(&mut self.samples);
        let mut pairs = old.into_iter();
        while let Some(a) = pairs.next() {
            let kept = match pairs.next() {
                Some(b) => {
                    let mut kept = if keep_second { b } else { a };
                    kept.weight = a.weight.saturating_add(b.weight);
                    kept
                }
                None => a,
            };
            self.samples.push_back(kept);
        }
        self.stride = self.stride.saturating_mul(2);
    }

    fn trim(&mut self, now: Instant) {
        while self
            .samples
            .front()
            .is_some_and(|s| now.saturating_duration_since(s.at) > self.span)
        {
            self.samples.pop_front();
        }
        // The rate fell: keep more of what comes.
        while self.stride > 1 && self.samples.len() < self.capacity / 4 {
            self.stride /= 2;
        }
    }

    /// The `q` quantile of the window and how many completions it stands for.
    pub fn quantile(&mut self, q: f64, now: Instant) -> Option<(Duration, usize)> {
        self.quantile_arrived_after(q, None, now)
    }

    /// The `q` quantile of the requests in the window that arrived after `after` (a sample
    /// recorded at `t` with latency `d` arrived at `t - d`), and how many there are.
    pub fn quantile_arrived_after(
        &mut self,
        q: f64,
        after: Option<Instant>,
        now: Instant,
    ) -> Option<(Duration, usize)> {
        self.trim(now);
        let mut v: Vec<(Duration, u32)> = self
            .samples
            .iter()
            .filter(|s| {
                after.is_none_or(|a| {
                    s.at.checked_sub(s.latency)
                        .is_some_and(|arrived| arrived > a)
                })
            })
            .map(|s| (s.latency, s.weight))
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let total: u64 = v.iter().map(|(_, w)| *w as u64).sum();
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        let at = v
            .iter()
            .find(|(_, w)| {
                seen += *w as u64;
                seen >= rank
            })
            .map_or(v[v.len() - 1].0, |(d, _)| *d);
        Some((at, total as usize))
    }

    /// Completions per second over the window: exact, whatever the rate.
    pub fn throughput(&mut self, now: Instant) -> f64 {
        self.completions.count(now) / self.span.as_secs_f64()
    }
}

/// How many events happened in the last `span`, at any rate, in bounded memory: counts per
/// slice of a fortieth of the span, the oldest slice counted for the part of it still
/// inside the span.
#[derive(Clone, Debug)]
pub struct EventCount {
    span: Duration,
    slice: Duration,
    /// (slice start, events in it), oldest first.
    slices: VecDeque<(Instant, u64)>,
}

const SLICES: u32 = 40;

impl EventCount {
    pub fn new(span: Duration) -> EventCount {
        let span = span.max(Duration::from_millis(1));
        EventCount {
            span,
            slice: span / SLICES,
            slices: VecDeque::with_capacity(SLICES as usize + 2),
        }
    }

    pub fn add(&mut self, n: u64, now: Instant) {
        match self.slices.back_mut() {
            Some((start, count)) if now.saturating_duration_since(*start) < self.slice => {
                *count += n;
            }
            _ => self.slices.push_back((now, n)),
        }
        self.trim(now);
    }

    fn trim(&mut self, now: Instant) {
        while self.slices.front().is_some_and(|(start, _)| {
            now.saturating_duration_since(*start) > self.span + self.slice
        }) {
            self.slices.pop_front();
        }
    }

    /// Events in `(now - span, now]`; a slice that straddles the start counts for the
    /// share of it inside.
    pub fn count(&self, now: Instant) -> f64 {
        let from = now.checked_sub(self.span);
        self.slices
            .iter()
            .map(|&(start, n)| match from {
                Some(from) if start < from => {
                    let end = start + self.slice;
                    let inside = end.saturating_duration_since(from).as_secs_f64();
                    n as f64 * (inside / self.slice.as_secs_f64()).min(1.0)
                }
                _ => n as f64,
            })
            .sum()
    }

    /// Events per second over the span.
    pub fn rate(&self, now: Instant) -> f64 {
        self.count(now) / self.span.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_estimator_tracks_and_decays() {
        let t0 = Instant::now();
        let mut r = RateEstimator::new(Duration::from_millis(500));
        for i in 0..2000u64 {
            r.record(1, t0 + Duration::from_micros(i * 1000)); // 1000 rows/s
        }
        let at = t0 + Duration::from_secs(2);
        assert!((r.rate(at) - 1000.0).abs() < 50.0, "{}", r.rate(at));
        assert!(r.rate(at + Duration::from_secs(2)) < 20.0);
    }

    #[test]
    fn window_quantiles_forget_old_samples() {
        let t0 = Instant::now();
        let mut w = LatencyWindow::sampled(Duration::from_secs(1), 1000);
        for i in 0..100 {
            w.record(Duration::from_millis(i), t0);
        }
        assert_eq!(w.quantile(0.99, t0).unwrap().0, Duration::from_millis(98));
        w.record(Duration::from_millis(1), t0 + Duration::from_secs(2));
        assert_eq!(
            w.quantile(0.99, t0 + Duration::from_secs(2)).unwrap(),
            (Duration::from_millis(1), 1)
        );
    }

    #[test]
    fn throughput_and_p99_cover_the_whole_window_at_any_rate() {
        // 20,000 completions a second for 3 s, five times what the sample holds in 2 s:
        // the count stays exact, and the p99 is that of the last 2 s, not of their last
        // 4,096 requests (the first half of each second takes 1 ms, the second half 9 ms
        // — p99 of the window 9 ms; of the last fifth of a second alone, 9 ms or 1 ms).
        let t0 = Instant::now();
        let mut w = LatencyWindow::sampled(Duration::from_secs(2), 4096);
        let mut now = t0;
        for i in 0..60_000u64 {
            now = t0 + Duration::from_micros(i * 50);
            let slow = (i / 10_000) % 2 == 1;
            w.record(Duration::from_millis(if slow { 9 } else { 1 }), now);
        }
        let rate = w.throughput(now);
        assert!((rate - 20_000.0).abs() / 20_000.0 < 0.01, "{rate}");
        let (p99, n) = w.quantile(0.99, now).unwrap();
        assert_eq!(p99, Duration::from_millis(9));
        assert!((n as f64 - 40_000.0).abs() < 0.05 * 40_000.0, "{n}");
        // p50: half of the window was fast, half slow.
        let (p40, _) = w.quantile(0.40, now).unwrap();
        assert_eq!(p40, Duration::from_millis(1));
        assert!(w.samples.len() <= 4096);
    }

    #[test]
    fn event_counts_forget_what_left_the_span() {
        let t0 = Instant::now();
        let mut c = EventCount::new(Duration::from_secs(1));
        for i in 0..1000u64 {
            c.add(1, t0 + Duration::from_millis(i));
        }
        let at = t0 + Duration::from_millis(999);
        assert!((c.count(at) - 1000.0).abs() <= 26.0, "{}", c.count(at));
        // Half a second later, half of them are still inside.
        let later = t0 + Duration::from_millis(1499);
        assert!((c.count(later) - 500.0).abs() <= 26.0, "{}", c.count(later));
        assert_eq!(c.count(t0 + Duration::from_secs(3)), 0.0);
    }
}
