//! Which body each scheduled request of `tandem-bench load` sends: the bodies in turn, or
//! Zipf-distributed draws over them (`--zipf`), fixed in advance like the send times; and
//! how many of the requests repeat a body sent earlier in the run, which is what a response
//! cache that starts empty could answer.

use models::rng::SplitMix64;

/// Mixed into `--seed` so that the draws are not the send times' uniforms over again.
const ZIPF_STREAM: u64 = 0x5a1f_d1a7_c0ff_ee01;

/// The body index of each of `sends` requests over `bodies` bodies: in turn, or with
/// `zipf` = Some(s) drawn from a Zipf(s) law (body `k - 1` has rank `k`).
pub(super) fn picks(sends: usize, bodies: usize, zipf: Option<f64>, seed: u64) -> Vec<u32> {
    let bodies = bodies.max(1);
    match zipf {
        None => (0..sends).map(|i| (i % bodies) as u32).collect(),
        Some(s) => {
            let zipf = Zipf::new(bodies, s);
            let mut rng = SplitMix64::new(seed ^ ZIPF_STREAM);
            (0..sends).map(|_| zipf.draw(&mut rng)).collect()
        }
    }
}

/// The body index of each of `sends` requests, repeating an earlier one with probability
/// `share` (the earlier ones ranked by first appearance, drawn by a Zipf(s) law over them)
/// and otherwise taking the next body not yet sent (in turn again once all were).
pub(super) fn stationary(sends: usize, bodies: usize, s: f64, share: f64, seed: u64) -> Vec<u32> {
    let bodies = bodies.max(1);
    let mut rng = SplitMix64::new(seed ^ ZIPF_STREAM);
    let mut sent = 0usize;
    let mut picks = Vec::with_capacity(sends);
    for _ in 0..sends {
        let body = match sent > 0 && rng.next_f64() < share {
            true => zipf_rank(sent.min(bodies), s, rng.next_f64()) - 1,
            false => {
                sent += 1;
                (sent - 1) % bodies
            }
        };
        picks.push(body as u32);
    }
    picks
}

/// A rank in `1..=n` of a Zipf(s) law for the uniform `u`, by inverting the cumulative
/// distribution of its continuous approximation (the density 1 / x^s over [1, n + 1]):
/// within a few percent of the discrete law's frequencies, for any `n`, without a table.
fn zipf_rank(n: usize, s: f64, u: f64) -> usize {
    let top = (n + 1) as f64;
    let x = if (s - 1.0).abs() < 1e-9 {
        top.powf(u)
    } else {
        let e = 1.0 - s;
        ((top.powf(e) - 1.0) * u + 1.0).powf(1.0 / e)
    };
    (x.floor() as usize).clamp(1, n)
}

/// The share of `picks` whose body appeared earlier in it.
pub(super) fn repeated_share(picks: &[u32], bodies: usize) -> f64 {
    if picks.is_empty() {
        return 0.0;
    }
    let mut seen = vec![false; bodies.max(1)];
    let repeats = picks
        .iter()
        .filter(|&&b| std::mem::replace(&mut seen[b as usize], true))
        .count();
    repeats as f64 / picks.len() as f64
}

/// Zipf's law over ranks `1..=n`: P(k) proportional to 1 / k^s, drawn by inverting its
/// cumulative distribution (a binary search in a table of `n` sums).
struct Zipf {
    /// `cumulative[k]`: the weight of ranks 1 to k + 1.
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let cumulative = (1..=n)
            .scan(0.0, |sum, k| {
                *sum += (k as f64).powf(-s);
                Some(*sum)
            })
            .collect();
        Zipf { cumulative }
    }

    /// A rank less one: a body index.
    fn draw(&self, rng: &mut SplitMix64) -> u32 {
        let total = self.cumulative.last().copied().unwrap_or_default();
        let u = rng.next_f64() * total;
        let i = self.cumulative.partition_point(|&c| c <= u);
        i.min(self.cumulative.len() - 1) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_zipf_the_bodies_go_in_turn() {
        assert_eq!(picks(7, 3, None, 1), [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(picks(3, 1, None, 1), [0, 0, 0]);
    }

    #[test]
    fn zipf_ranks_come_up_as_often_as_one_over_k_to_the_s() {
        let (n, s, draws) = (1000, 1.1, 200_000);
        let got = picks(draws, n, Some(s), 7);
        assert_eq!(
            got,
            picks(draws, n, Some(s), 7),
            "deterministic in the seed"
        );
        assert_ne!(got, picks(draws, n, Some(s), 8));
        let mut counts = vec![0usize; n];
        for &b in &got {
            counts[b as usize] += 1;
        }
        let total: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
        for k in [1, 2, 3, 5, 10, 20] {
            let expected = draws as f64 * (k as f64).powf(-s) / total;
            let ratio = counts[k - 1] as f64 / expected;
            assert!((0.9..1.1).contains(&ratio), "rank {k}: {ratio:.3} of 1/k^s");
        }
        // The tail: ranks 501-1000 together, a few percent of the draws.
        let tail: usize = counts[500..].iter().sum();
        let expected: f64 = (501..=n).map(|k| (k as f64).powf(-s)).sum::<f64>() / total;
        let ratio = tail as f64 / (draws as f64 * expected);
        assert!((0.95..1.05).contains(&ratio), "tail: {ratio:.3}");
    }

    #[test]
    fn a_stationary_stream_repeats_its_share_throughout_mostly_the_first_sent() {
        let (sends, bodies) = (20_000, 50_000);
        let got = stationary(sends, bodies, 0.8, 0.5, 3);
        assert_eq!(got, stationary(sends, bodies, 0.8, 0.5, 3));
        // Each quarter of the run repeats the share, the first as the last.
        let mut seen = vec![false; bodies];
        for part in got.chunks(sends / 4) {
            let repeats = (part.iter())
                .filter(|&&b| std::mem::replace(&mut seen[b as usize], true))
                .count();
            let share = repeats as f64 / part.len() as f64;
            assert!((0.47..0.53).contains(&share), "{share}");
        }
        let share = repeated_share(&got, bodies);
        assert!((0.48..0.52).contains(&share), "{share}");
        // The first body sent is repeated most.
        let mut counts = vec![0usize; bodies];
        for &b in &got {
            counts[b as usize] += 1;
        }
        assert!(
            counts[0] > counts[1] && counts[1] > counts[100],
            "{:?}",
            &counts[..3]
        );
        for n in [1, 2, 10, 1000] {
            for u in [0.0, 0.3, 0.999_999] {
                assert!((1..=n).contains(&zipf_rank(n, 0.8, u)));
                assert!((1..=n).contains(&zipf_rank(n, 1.0, u)));
            }
        }
    }

    #[test]
    fn a_repeat_is_a_body_sent_before_in_the_run() {
        assert_eq!(repeated_share(&[0, 1, 0, 2, 1], 3), 0.4);
        assert_eq!(repeated_share(&picks(7, 3, None, 1), 3), 4.0 / 7.0);
        assert_eq!(repeated_share(&[2, 1, 0], 3), 0.0);
        assert_eq!(repeated_share(&[], 3), 0.0);
        // A steeper law over the same bodies repeats more.
        let flat = repeated_share(&picks(5000, 10_000, Some(0.5), 1), 10_000);
        let steep = repeated_share(&picks(5000, 10_000, Some(1.5), 1), 10_000);
        assert!(flat < steep, "{flat} {steep}");
    }
}
