//! Percentiles over recorded samples, and how far a ratio of medians over a few rounds
//! can be trusted.

/// The `q`-quantile (0..=1) of `sorted`, by the nearest-rank method.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `values` (the upper one of an even count, as the reports take it).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A central `level` (e.g. 0.9) percentile-bootstrap interval of `median(top) / median(bottom)`
/// where round `i` gave `top[i]` and `bottom[i]`: rounds are drawn with replacement, in
/// pairs, since the two figures of one round saw the same moment of the machine. On a noisy
/// shared host the p99 of the same build moves by tens of percent between rounds; this says
/// how much of a ratio of medians is that movement. Deterministic for a given `seed`.
pub fn paired_ratio_interval(
    top: &[f64],
    bottom: &[f64],
    level: f64,
    resamples: usize,
    seed: u64,
) -> (f64, f64) {
    let n = top.len().min(bottom.len());
    if n == 0 || resamples == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = SplitMix64(seed);
    let mut ratios = Vec::with_capacity(resamples);
    let (mut t, mut b) = (vec![0.0; n], vec![0.0; n]);
    for _ in 0..resamples {
        for slot in 0..n {
            let i = (rng.next() % n as u64) as usize;
            t[slot] = top[i];
            b[slot] = bottom[i];
        }
        ratios.push(median(&t) / median(&b));
    }
    ratios.sort_by(f64::total_cmp);
    let tail = (1.0 - level.clamp(0.0, 1.0)) / 2.0;
    (quantile(&ratios, tail), quantile(&ratios, 1.0 - tail))
}

/// A small, well-mixed generator (Steele, Lea and Flood's SplitMix64): enough for
/// resampling, and no dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::{median, paired_ratio_interval, quantile};

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn median_takes_the_upper_middle() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn a_ratio_that_holds_in_every_round_has_no_spread() {
        let bottom = [2.0, 5.0, 3.1, 9.0, 4.4];
        let top: Vec<f64> = bottom.iter().map(|v| v * 1.5).collect();
        let (lo, hi) = paired_ratio_interval(&top, &bottom, 0.9, 2000, 7);
        assert!(
            (lo - 1.5).abs() < 1e-12 && (hi - 1.5).abs() < 1e-12,
            "{lo} {hi}"
        );
    }

    #[test]
    fn noisy_rounds_give_an_interval_around_the_ratio_of_medians() {
        // Nine rounds of one real run (benches/README.md: constant 6,500 req/s, serving
        // alone below, beside the managed trainer above): 1.29x of medians.
        let bottom = [1.8, 3.2, 3.8, 2.2, 2.1, 4.4, 2.9, 2.7, 2.8];
        let top = [2.2, 2.0, 2.4, 5.2, 2.4, 6.5, 4.1, 4.0, 3.6];
        let point = median(&top) / median(&bottom);
        let (lo, hi) = paired_ratio_interval(&top, &bottom, 0.9, 4000, 7);
        assert!(lo < point && point < hi, "{lo} {point} {hi}");
        assert!(
            lo < 1.0 && hi > 1.4,
            "nine such rounds cannot pin the ratio down: {lo} {hi}"
        );
        // A wider level gives a wider interval, and the same seed the same one.
        let (lo99, hi99) = paired_ratio_interval(&top, &bottom, 0.99, 4000, 7);
        assert!(lo99 <= lo && hi99 >= hi);
        assert_eq!(paired_ratio_interval(&top, &bottom, 0.9, 4000, 7), (lo, hi));
    }
}
