//! What the adaptive controller knows about time: how long a batch of `b` rows takes on
//! this device (and how much that varies), how fast requests arrive, and the latencies
//! requests actually saw. All pure, all driven by the times they are given.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Batch latency as a function of rows: a shape measured at warm-up (piecewise linear over
/// the batch-size buckets), times a scale that follows every observed batch, plus a spread.
///
/// The scale absorbs drift that hits every batch size alike — a co-located trainer, a
/// throttled clock — within a few dozen batches; the spread (mean absolute deviation,
/// relative to the prediction) turns the mean into a high quantile.
#[derive(Clone, Debug)]
pub struct LatencyModel {
    /// (rows, seconds) at warm-up, sorted by rows, strictly increasing.
    shape: Vec<(usize, f64)>,
    scale: f64,
    /// Mean absolute relative deviation of observations from the prediction.
    spread: f64,
    observations: u64,
}

/// Weight of one new batch in the scale and spread averages.
const ALPHA: f64 = 0.05;
/// High quantile ≈ mean + K × mean absolute deviation (≈ p99 for roughly normal noise).
const K_HIGH: f64 = 3.0;

impl LatencyModel {
    /// From warm-up timings; needs at least one sample.
    pub fn from_warmup(samples: &[(usize, Duration)]) -> LatencyModel {
        let mut shape: Vec<(usize, f64)> = samples
            .iter()
            .filter(|(r, _)| *r > 0)
            .map(|(r, d)| (*r, d.as_secs_f64().max(1e-7)))
            .collect();
        shape.sort_by_key(|(r, _)| *r);
        shape.dedup_by_key(|(r, _)| *r);
        if shape.is_empty() {
            shape.push((1, 1e-3));
        }
        // Larger batches never take less time than smaller ones: smooth out warm-up noise.
        for i in 1..shape.len() {
            if shape[i].1 < shape[i - 1].1 {
                shape[i].1 = shape[i - 1].1;
            }
        }
        LatencyModel {
            shape,
            scale: 1.0,
            spread: 0.1,
            observations: 0,
        }
    }

    /// The warm-up shape at `rows`, interpolated (and extrapolated linearly beyond it).
    fn base(&self, rows: usize) -> f64 {
        let rows = rows.max(1) as f64;
        let s = &self.shape;
        if s.len() == 1 {
            return s[0].1 * rows / s[0].0 as f64;
        }
        let i = s
            .windows(2)
            .position(|w| rows <= w[1].0 as f64)
            .unwrap_or(s.len() - 2);
        let ((r0, t0), (r1, t1)) = (s[i], s[i + 1]);
        let slope = (t1 - t0) / (r1 - r0) as f64;
        (t0 + slope * (rows - r0 as f64)).max(s[0].1 * 0.5)
    }

    /// Expected duration of a batch of `rows`.
    /// A batch of `rows` as warm-up measured it, before any drift: what the device takes
    /// when nothing competes with it.
    pub fn predict_uncontended(&self, rows: usize) -> Duration {
        Duration::from_secs_f64(self.base(rows))
    }

    pub fn predict_mean(&self, rows: usize) -> Duration {
        Duration::from_secs_f64(self.base(rows) * self.scale)
    }

    /// A duration a batch of `rows` rarely exceeds (≈ its p99).
    pub fn predict_high(&self, rows: usize) -> Duration {
        Duration::from_secs_f64(self.base(rows) * self.scale * (1.0 + K_HIGH * self.spread))
    }

    pub fn observe(&mut self, rows: usize, took: Duration) {
        if rows == 0 {
            return;
        }
        let ratio = took.as_secs_f64() / self.base(rows);
        // The first observations replace the warm-up guess quickly.
        let alpha = ALPHA.max(1.0 / (self.observations as f64 + 2.0));
        let deviation = ((ratio - self.scale) / self.scale).abs();
        self.scale += alpha * (ratio - self.scale);
        self.spread += alpha * (deviation.min(2.0) - self.spread);
        self.observations += 1;
    }

    /// The smallest batch whose cost per row is within 10% of the best the model knows up
    /// to `max_rows`: beyond it, waiting for more rows buys little throughput.
    pub fn efficient_batch(&self, max_rows: usize) -> usize {
        let max_rows = max_rows.max(1);
        let mut candidates: Vec<usize> = self
            .shape
            .iter()
            .map(|(r, _)| *r)
            .filter(|r| *r <= max_rows)
            .collect();
        candidates.push(max_rows);
        let per_row = |r: usize| self.base(r) / r as f64;
        let best = candidates
            .iter()
            .map(|r| per_row(*r))
            .fold(f64::INFINITY, f64::min);
        candidates
            .into_iter()
            .filter(|r| per_row(*r) <= best * 1.1)
            .min()
            .unwrap_or(max_rows)
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }
}

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

/// Latencies of requests completed in the last `span`, for the observed p99.
#[derive(Clone, Debug)]
pub struct LatencyWindow {
    span: Duration,
    capacity: usize,
    samples: VecDeque<(Instant, Duration)>,
}

impl LatencyWindow {
    pub fn new(span: Duration, capacity: usize) -> LatencyWindow {
        LatencyWindow {
            span,
            capacity,
            samples: VecDeque::with_capacity(capacity),
        }
    }

    pub fn record(&mut self, latency: Duration, now: Instant) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back((now, latency));
    }

    fn trim(&mut self, now: Instant) {
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > self.span)
        {
            self.samples.pop_front();
        }
    }

    /// The `q` quantile of the window and how many samples it holds.
    pub fn quantile(&mut self, q: f64, now: Instant) -> Option<(Duration, usize)> {
        self.trim(now);
        if self.samples.is_empty() {
            return None;
        }
        let mut v: Vec<Duration> = self.samples.iter().map(|(_, d)| *d).collect();
        v.sort_unstable();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some((v[rank - 1], v.len()))
    }

    /// Completions per second over the window.
    pub fn throughput(&mut self, now: Instant) -> f64 {
        self.trim(now);
        self.samples.len() as f64 / self.span.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn model() -> LatencyModel {
        // 50 µs + 20 µs per row, like the 784→1024→1024→10 MLP on two cores.
        LatencyModel::from_warmup(&[1, 2, 4, 8, 16, 32, 64].map(|r| (r, us(50 + 20 * r as u64))))
    }

    #[test]
    fn interpolates_and_extrapolates_the_warmup_shape() {
        let m = model();
        assert_eq!(m.predict_mean(8), us(210));
        let mid = m.predict_mean(24).as_secs_f64() * 1e6;
        assert!((mid - 530.0).abs() < 1.0, "{mid}");
        let beyond = m.predict_mean(128).as_secs_f64() * 1e6;
        assert!((beyond - 2610.0).abs() < 1.0, "{beyond}");
        assert!(m.predict_high(8) > m.predict_mean(8));
    }

    #[test]
    fn follows_a_sudden_slowdown_within_a_few_dozen_batches() {
        let mut m = model();
        for _ in 0..60 {
            m.observe(8, us(420)); // 2x slower than warm-up
        }
        let p = m.predict_mean(8).as_secs_f64() * 1e6;
        assert!((p - 420.0).abs() / 420.0 < 0.05, "{p}");
        // The same factor applies to sizes not observed.
        let p64 = m.predict_mean(64).as_secs_f64() * 1e6;
        assert!((p64 - 2660.0).abs() / 2660.0 < 0.05, "{p64}");
    }

    #[test]
    fn spread_grows_with_noisy_observations() {
        let mut quiet = model();
        let mut noisy = model();
        for i in 0..200 {
            quiet.observe(8, us(210));
            noisy.observe(8, us(if i % 2 == 0 { 110 } else { 310 }));
        }
        assert!(noisy.predict_high(8) > quiet.predict_high(8) + us(100));
    }

    #[test]
    fn the_efficient_batch_is_the_knee_of_cost_per_row() {
        // Per row: 70, 45, 32.5, 26.25, 23.1, 21.6, 20.8 µs: within 10% of 20.8 from 32.
        assert_eq!(model().efficient_batch(64), 32);
        assert_eq!(model().efficient_batch(4), 4);
        // A flat cost per row (no batching gain): every size is efficient.
        let flat = LatencyModel::from_warmup(&[(1, us(100)), (2, us(200)), (4, us(400))]);
        assert_eq!(flat.efficient_batch(4), 1);
    }

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
        let mut w = LatencyWindow::new(Duration::from_secs(1), 1000);
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
}
