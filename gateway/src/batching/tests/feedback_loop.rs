//! The feedback loop alone: latencies fed straight to the adaptive policy, and the
//! effective budget it keeps (see `adaptive.rs`, "Feedback", and docs/batching.md).

use std::time::Duration;

use super::super::adaptive::AdaptivePolicy;
use super::super::policy::{BatchPolicy, Candidate};
use super::super::state::QueueView;
use super::{MS, fast_model};

/// Feeds `policy` a second's worth of latencies per call, one every 100 µs (10,000 req/s),
/// the first `spiked` of them at `spike` and the rest at `usual`; returns the effective
/// budget as a share of `budget` afterwards.
fn headroom_after(
    policy: &mut AdaptivePolicy,
    now: &mut tokio::time::Instant,
    budget: Duration,
    spiked: usize,
    spike: Duration,
    usual: Duration,
) -> f64 {
    for i in 0..10_000 {
        *now += Duration::from_micros(100);
        policy.observe_latency(if i < spiked { spike } else { usual }, *now);
    }
    policy.effective_budget().as_secs_f64() / budget.as_secs_f64()
}

#[tokio::test(start_paused = true)]
async fn a_brief_spike_shrinks_the_effective_budget_once() {
    let budget = 10 * MS;
    let mut policy = AdaptivePolicy::new(budget, 64, fast_model());
    let mut now = tokio::time::Instant::now();
    let start = policy.effective_budget().as_secs_f64() / budget.as_secs_f64();
    // A second at 60% of the budget (between where it grows and where it shrinks).
    let steady = headroom_after(&mut policy, &mut now, budget, 0, MS, 6 * MS);
    assert_eq!(steady, start);
    // 100 ms of latencies at 1.4x the budget, then 60% again for two seconds: the window
    // holds the spike for a while, but the requests after the first shrink are back at
    // 60%, so it shrinks once, by the most one shrink takes — not at every look (four a
    // second) for as long as the spike stays in the window.
    let after = headroom_after(&mut policy, &mut now, budget, 1000, 14 * MS, 6 * MS);
    let later = headroom_after(&mut policy, &mut now, budget, 0, MS, 6 * MS);
    assert!((after - start * 0.75).abs() < 1e-9, "{start} -> {after}");
    assert_eq!(later, after);
}

#[tokio::test(start_paused = true)]
async fn a_shrink_is_in_proportion_to_how_far_the_p99_is_over() {
    let budget = 10 * MS;
    // One look's worth of requests at each p99; the loop aims under 80% of the budget.
    let after_one_look = |latency: Duration| {
        let mut policy = AdaptivePolicy::new(budget, 64, fast_model());
        let start = policy.effective_budget();
        let mut now = tokio::time::Instant::now();
        for _ in 0..3000 {
            now += Duration::from_micros(100);
            policy.observe_latency(latency, now);
        }
        policy.effective_budget().as_secs_f64() / start.as_secs_f64()
    };
    assert_eq!(after_one_look(7 * MS), 1.0, "under 80%: no shrink");
    let slightly = after_one_look(Duration::from_micros(8500));
    assert!(
        (slightly - 0.9).abs() < 1e-9,
        "at least 10% off: {slightly}"
    );
    let more = after_one_look(10 * MS);
    assert!((more - 0.8).abs() < 1e-9, "8/10 of it: {more}");
    let far = after_one_look(20 * MS);
    assert!((far - 0.75).abs() < 1e-9, "at most 25% off: {far}");
}

#[tokio::test(start_paused = true)]
async fn a_lasting_violation_keeps_shrinking_the_effective_budget() {
    let budget = 10 * MS;
    let mut policy = AdaptivePolicy::new(budget, 64, fast_model());
    let mut now = tokio::time::Instant::now();
    // Every request at 1.4x the budget for two seconds: each look (four a second) sees new
    // requests over it, and shrinks again.
    headroom_after(&mut policy, &mut now, budget, 10_000, 14 * MS, 14 * MS);
    let shrunk = headroom_after(&mut policy, &mut now, budget, 10_000, 14 * MS, 14 * MS);
    assert!(shrunk < 0.8 * 0.9_f64.powi(5), "{shrunk}");
    // Then far inside the budget: it grows back.
    let grown = headroom_after(&mut policy, &mut now, budget, 0, MS, 2 * MS);
    let grown = headroom_after(&mut policy, &mut now, budget, 0, MS, 2 * MS).max(grown);
    assert!(grown > shrunk, "{shrunk} -> {grown}");
}

#[tokio::test(start_paused = true)]
async fn while_refusing_a_p99_well_inside_the_budget_grows_the_effective_budget_back() {
    let budget = 10 * MS;
    let refusing = |policy: &mut AdaptivePolicy, now: tokio::time::Instant| {
        let queue = QueueView {
            requests: 10_000,
            rows: 10_000,
            oldest: Some(now),
            earliest_deadline: None,
            head_rows: 1,
            head_at_output_limit: false,
        };
        assert!(
            policy
                .admit(&queue, &Candidate::new(10_000, 1, now), now)
                .is_err()
        );
    };
    for refuse in [false, true] {
        let mut policy = AdaptivePolicy::new(budget, 64, fast_model());
        let mut now = tokio::time::Instant::now();
        // Shrunk by a lasting violation, then a p99 at 60% of the budget: between where it
        // grows and where it shrinks.
        headroom_after(&mut policy, &mut now, budget, 10_000, 14 * MS, 14 * MS);
        let shrunk = headroom_after(&mut policy, &mut now, budget, 0, MS, 6 * MS);
        let mut after = shrunk;
        for _ in 0..12 {
            // Quarter-second steps, refusing (or not) in each.
            for _ in 0..2500 {
                now += Duration::from_micros(100);
                policy.observe_latency(6 * MS, now);
            }
            if refuse {
                refusing(&mut policy, now);
            }
            after = policy.effective_budget().as_secs_f64() / budget.as_secs_f64();
        }
        if refuse {
            assert!(after > shrunk * 1.2, "refusing: {shrunk} -> {after}");
        } else {
            assert_eq!(after, shrunk, "not refusing");
        }
    }
}

#[test]
fn the_tuning_is_data_a_test_can_pin() {
    let tuning = crate::batching::tuning::AdaptiveTuning {
        headroom_start: 0.5,
        ..Default::default()
    };
    let policy = AdaptivePolicy::with_tuning(10 * MS, 64, fast_model(), tuning);
    assert_eq!(policy.effective_budget(), 5 * MS);
    assert_eq!(
        AdaptivePolicy::new(10 * MS, 64, fast_model()).effective_budget(),
        8 * MS
    );
}
