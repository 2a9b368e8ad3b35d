//! How long a batch of `b` rows takes on this device, and how much that varies: the
//! controller's latency model. Pure, driven by the times it is given. How fast requests
//! arrive and the latencies they saw are in [`super::window`].

use std::time::Duration;

/// Batch latency as a function of rows: a shape measured at warm-up (piecewise linear over
/// the batch-size buckets), times a scale that follows every observed batch, plus a spread.
///
/// The scale absorbs drift that hits every batch size alike — a co-located trainer, a
/// throttled clock — within a few dozen batches; the spread (mean absolute deviation,
/// relative to the prediction) turns the mean into a high quantile.
///
/// The spread is kept per band of predicted duration as well as over all batches: much of
/// the noise on a shared host comes in absolute amounts (another thread preempting the
/// batch for a slice), which is a large share of a short batch and a small one of a long
/// batch. A text encoder's batches range from a few milliseconds to tens, and the overall
/// spread, set by the many short ones, would make a long text's high quantile far larger
/// than long batches ever run, and refuse it where it fits (`benches/compare_text_peers.py`
/// against its own encoder). A band's own spread counts once it has seen
/// [`BAND_MIN_OBSERVATIONS`] batches, and for as long as it keeps seeing some; a duration
/// whose band does not count takes the nearest shorter band's that does (a shorter batch's
/// relative noise is no smaller), else the overall spread.
#[derive(Clone, Debug)]
pub struct LatencyModel {
    /// (rows, seconds) at warm-up, sorted by rows, strictly increasing.
    shape: Vec<(usize, f64)>,
    scale: f64,
    /// Mean absolute relative deviation of observations from the prediction, overall.
    spread: f64,
    /// The same per band of predicted duration ([`band`]).
    bands: [Band; BANDS],
    observations: u64,
    /// `time ≈ fixed + per_row × rows`, fitted to the warm-up (`fit_line`): what
    /// batching saves (the fixed part, shared by the rows of a batch) against what it
    /// cannot (the per-row part). Seconds.
    fixed: f64,
    per_row: f64,
}

/// Weight of one new batch in the scale and spread averages.
const ALPHA: f64 = 0.05;
/// High quantile ≈ mean + K × mean absolute deviation (≈ p99 for roughly normal noise).
const K_HIGH: f64 = 3.0;
/// How far from its prediction one batch may move the model (see `observe`).
const OUTLIER: f64 = 2.0;
/// A batch is efficient once its cost per row is within this factor of a full batch's.
const EFFICIENT_WITHIN: f64 = 1.1;
/// Bands of predicted duration, each twice as long as the one before: below 125 µs, then
/// up to 250 µs, ..., and from 128 ms up.
const BANDS: usize = 12;
const FIRST_BAND_END: f64 = 125e-6;
/// Batches a band must have seen before its own spread counts.
const BAND_MIN_OBSERVATIONS: u64 = 10;
/// A band that has seen none of the last this many batches no longer counts: its spread
/// may be from before the host got busier (a trainer started), which the overall spread,
/// following every batch, has seen.
const BAND_STALE_AFTER: u64 = 1000;

/// The spread of the batches predicted to take a band's durations.
#[derive(Clone, Copy, Debug, Default)]
struct Band {
    spread: f64,
    observations: u64,
    /// The model's count of batches when this band last saw one.
    last_seen: u64,
}

impl Band {
    fn observe(&mut self, deviation: f64, count: u64) {
        let alpha = ALPHA.max(1.0 / (self.observations as f64 + 1.0));
        self.spread += alpha * (deviation - self.spread);
        self.observations += 1;
        self.last_seen = count;
    }

    /// Whether its spread counts, when the model has seen `count` batches.
    fn known(&self, count: u64) -> bool {
        self.observations >= BAND_MIN_OBSERVATIONS
            && count.saturating_sub(self.last_seen) <= BAND_STALE_AFTER
    }
}

/// The band of a batch predicted to take `seconds`.
fn band(seconds: f64) -> usize {
    let doublings = (seconds / FIRST_BAND_END).log2();
    if doublings.is_finite() && doublings >= 0.0 {
        (doublings as usize + 1).min(BANDS - 1)
    } else {
        0
    }
}

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
        let (fixed, per_row) = fit_line(&shape);
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
            bands: [Band::default(); BANDS],
            observations: 0,
            fixed,
            per_row,
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

    /// A batch of `rows` as warm-up measured it, before any drift: what the device takes
    /// when nothing competes with it.
    pub fn predict_uncontended(&self, rows: usize) -> Duration {
        Duration::from_secs_f64(self.base(rows))
    }

    /// Expected duration of a batch of `rows`.
    pub fn predict_mean(&self, rows: usize) -> Duration {
        Duration::from_secs_f64(self.base(rows) * self.scale)
    }

    /// A duration a batch of `rows` rarely exceeds (≈ its p99).
    pub fn predict_high(&self, rows: usize) -> Duration {
        let mean = self.base(rows) * self.scale;
        Duration::from_secs_f64(mean * (1.0 + K_HIGH * self.spread_at(mean)))
    }

    /// The relative spread of a batch predicted to take `seconds`: its band's, the nearest
    /// shorter known band's, or the overall one.
    fn spread_at(&self, seconds: f64) -> f64 {
        let band = band(seconds);
        (self.bands[..=band].iter().rev())
            .find(|b| b.known(self.observations))
            .map_or(self.spread, |b| b.spread)
    }

    pub fn observe(&mut self, rows: usize, took: Duration) {
        if rows == 0 {
            return;
        }
        let base = self.base(rows);
        let predicted = base * self.scale;
        // A batch beyond OUTLIER times its prediction (either way) counts as if it were
        // exactly that: a lasting slowdown still shows within a few dozen batches, while one
        // slow batch (a page fault, a neighbour's burst) does not inflate every prediction
        // after it, and with them the queue admission sees ahead of each request.
        let ratio = (took.as_secs_f64() / base).clamp(self.scale / OUTLIER, self.scale * OUTLIER);
        // The first observations replace the warm-up guess quickly.
        let alpha = ALPHA.max(1.0 / (self.observations as f64 + 2.0));
        let deviation = ((ratio - self.scale) / self.scale).abs();
        self.scale += alpha * (ratio - self.scale);
        self.spread += alpha * (deviation - self.spread);
        self.observations += 1;
        self.bands[band(predicted)].observe(deviation, self.observations);
    }

    /// The smallest batch whose cost per row is within 10% of that of a full batch
    /// (`max_rows`): beyond it, waiting for more rows buys little throughput.
    ///
    /// Read off the fitted line, not off the warm-up buckets one by one: where the cost per
    /// row is nearly flat (a CPU from 8 rows up), which bucket first came within 10% of the
    /// best was decided by a few percent of warm-up noise, and fourteen starts of the same
    /// server chose 8, 16 or 64 rows — a batch waiting for 64 rows instead of 8 holds every
    /// request longer for a gain under 10%. On the line the size moves only as much as the
    /// fit does. With cost per row `fixed / b + per_row`, the condition is
    /// `fixed / b + per_row <= 1.1 × (fixed / max_rows + per_row)`.
    pub fn efficient_batch(&self, max_rows: usize) -> usize {
        let max_rows = max_rows.max(1);
        if self.fixed <= 0.0 {
            return 1; // nothing shared between rows: batching gains nothing
        }
        if self.per_row <= 0.0 {
            return max_rows; // every row added makes the others cheaper
        }
        let full = self.fixed / max_rows as f64 + self.per_row;
        let rows = self.fixed / (EFFICIENT_WITHIN * full - self.per_row);
        (rows.ceil() as usize).clamp(1, max_rows)
    }

    /// Mean absolute deviation of recent batches from the prediction, relative to it, over
    /// batches of every duration.
    pub fn spread(&self) -> f64 {
        self.spread
    }
}

/// The line `seconds = fixed + per_row × rows` through the warm-up points, by Theil–Sen:
/// the median of the slopes between every pair of points, then the median intercept that
/// slope leaves. A warm-up round during which the host slowed down bends one or two points
/// well off the line; the medians ignore them where least squares followed them (30 starts
/// on this project's two-core machine: efficient batches of 6–24 rows, against 1–27 for
/// least squares, whose 1 came from a 64-row batch timed at twice its share). One point:
/// all of it per row.
fn fit_line(points: &[(usize, f64)]) -> (f64, f64) {
    let mut slopes = Vec::with_capacity(points.len() * points.len() / 2);
    for (i, (r0, t0)) in points.iter().enumerate() {
        for (r1, t1) in &points[i + 1..] {
            if r1 != r0 {
                slopes.push((t1 - t0) / (*r1 as f64 - *r0 as f64));
            }
        }
    }
    let Some(per_row) = median(&mut slopes) else {
        let (rows, time) = points[0];
        return (0.0, time / rows as f64);
    };
    let mut intercepts: Vec<f64> = points
        .iter()
        .map(|(r, t)| t - per_row * *r as f64)
        .collect();
    (median(&mut intercepts).unwrap_or(0.0), per_row)
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
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

    /// Noise of a fixed size, as a shared host adds it: `±jitter` around the mean,
    /// alternating.
    fn observe_jittered(m: &mut LatencyModel, rows: usize, jitter: u64, times: usize) {
        let mean = m.predict_mean(rows).as_micros() as u64;
        for i in 0..times {
            let took = if i % 2 == 0 {
                mean + jitter
            } else {
                mean - jitter
            };
            m.observe(rows, us(took));
        }
    }

    #[test]
    fn a_long_batch_is_given_the_spread_of_long_batches() {
        let mut m = model();
        // ±100 µs: half of a 210 µs batch, a twentieth of a 2,610 µs one.
        for _ in 0..20 {
            observe_jittered(&mut m, 8, 100, 10);
            observe_jittered(&mut m, 128, 100, 2);
        }
        let relative = |rows| {
            let (mean, high) = (m.predict_mean(rows), m.predict_high(rows));
            (high.as_secs_f64() / mean.as_secs_f64() - 1.0) / K_HIGH
        };
        let (short, long) = (relative(8), relative(128));
        assert!(short > 0.35 && long < 0.1, "short {short}, long {long}");
        // The overall spread, which the gauge shows, is mostly the short batches'.
        assert!(m.spread() > 0.3, "{}", m.spread());
    }

    #[test]
    fn an_unseen_duration_takes_the_nearest_shorter_known_spread() {
        let mut m = model();
        // Short batches noisy, 32-row ones (690 µs) quiet; none of 128 rows seen.
        observe_jittered(&mut m, 8, 100, 40);
        observe_jittered(&mut m, 32, 7, 40);
        let high = m.predict_high(128).as_secs_f64() / m.predict_mean(128).as_secs_f64();
        assert!(high < 1.05, "{high}");
        // Shorter than every known band: the overall spread.
        let mut fresh = model();
        observe_jittered(&mut fresh, 32, 69, 40);
        let high = fresh.predict_high(1).as_secs_f64() / fresh.predict_mean(1).as_secs_f64();
        let overall = 1.0 + K_HIGH * fresh.spread();
        assert!((high - overall).abs() < 1e-4, "{high} vs {overall}");
    }

    #[test]
    fn a_band_counts_only_once_it_has_seen_enough_batches() {
        let mut m = model();
        observe_jittered(&mut m, 8, 100, 40);
        // A few quiet long batches do not yet outweigh what the short ones showed.
        observe_jittered(&mut m, 128, 1, BAND_MIN_OBSERVATIONS as usize - 1);
        let before = m.predict_high(128);
        observe_jittered(&mut m, 128, 1, 1);
        assert!(
            m.predict_high(128) < before,
            "{:?} vs {before:?}",
            m.predict_high(128)
        );
    }

    #[test]
    fn a_band_unseen_for_long_no_longer_counts() {
        let mut m = model();
        let ratio = |m: &LatencyModel, rows| {
            m.predict_high(rows).as_secs_f64() / m.predict_mean(rows).as_secs_f64()
        };
        let high_over_mean = |m: &LatencyModel| ratio(m, 128);
        // Quiet long batches, then a long stretch of noisy short ones only.
        observe_jittered(&mut m, 128, 1, 20);
        let quiet = high_over_mean(&m);
        observe_jittered(&mut m, 8, 100, BAND_STALE_AFTER as usize);
        assert!((high_over_mean(&m) - quiet).abs() < 1e-4, "still recent");
        observe_jittered(&mut m, 8, 100, 2);
        // The short batches' band, the nearest shorter one that counts, takes over.
        let (stale, short) = (high_over_mean(&m), ratio(&m, 8));
        assert!(
            short > quiet + 0.5 && (stale - short).abs() < 1e-4,
            "{stale} vs {short}"
        );
    }

    #[test]
    fn bands_double_in_duration() {
        assert_eq!(band(0.0), 0);
        assert_eq!(band(100e-6), 0);
        assert_eq!(band(125e-6), 1);
        assert_eq!(band(300e-6), 2);
        assert_eq!(band(31e-3), 8);
        assert_eq!(band(10.0), BANDS - 1);
        assert_eq!(band(f64::NAN), 0);
    }

    #[test]
    fn the_efficient_batch_is_the_knee_of_cost_per_row() {
        // Per row 50/b + 20 µs against 20.8 for a full batch of 64: within 10% from 18 rows.
        assert_eq!(model().efficient_batch(64), 18);
        assert_eq!(model().efficient_batch(4), 4);
        // A flat cost per row (no batching gain): every size is efficient.
        let flat = LatencyModel::from_warmup(&[(1, us(100)), (2, us(200)), (4, us(400))]);
        assert_eq!(flat.efficient_batch(4), 1);
        // Nearly all of it fixed, as on a GPU: only a full batch is efficient enough.
        let gpu = warmup_curve([30, 30, 31, 32, 35, 40, 50]);
        assert!(gpu.efficient_batch(64) > 48, "{}", gpu.efficient_batch(64));
    }

    fn warmup_curve(micros: [u64; 7]) -> LatencyModel {
        let samples: Vec<(usize, Duration)> = [1, 2, 4, 8, 16, 32, 64]
            .into_iter()
            .zip(micros.map(us))
            .collect();
        LatencyModel::from_warmup(&samples)
    }

    #[test]
    fn the_efficient_batch_does_not_jump_on_a_nearly_flat_cost_per_row() {
        // Warm-ups of the 784→1024→1024→10 MLP on this project's two-core machine: from
        // 8 rows up the cost per row is within 10% of the best. Comparing buckets one by
        // one, 5% of noise at 16 and 32 rows moved the knee from 8 rows to 64; on the
        // fitted line it moves by a few rows.
        let quiet = warmup_curve([57, 56, 100, 166, 315, 620, 1234]).efficient_batch(64);
        let noisy = warmup_curve([57, 56, 100, 180, 350, 700, 1270]).efficient_batch(64);
        assert!((8..=16).contains(&quiet), "{quiet}");
        assert!((8..=16).contains(&noisy), "{noisy}");
        // The host slowed down while the 64-row batches were timed (twice the 32-row
        // time would be ~2,060 µs): least squares followed that point to a fixed cost under
        // zero and an efficient batch of 1 row; the medians leave it out.
        let slowed = warmup_curve([140, 87, 161, 259, 449, 1028, 2789]).efficient_batch(64);
        assert!((6..=24).contains(&slowed), "{slowed}");
    }
}
