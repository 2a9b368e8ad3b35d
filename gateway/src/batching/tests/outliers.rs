//! Admission beside slow batches: a device that now and then runs a batch five times
//! slower (a neighbour's burst, a page fault, a scheduler hiccup). Below capacity nothing
//! is refused while the p99 is within the budget; past it, the refusals cover the excess
//! and, once the feedback loop has seen the slow batches in the queue's tail (it cannot
//! know of them before the first), the admitted requests meet the budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::super::adaptive::AdaptivePolicy;
use super::super::latency::LatencyModel;
use super::super::sim::{Outcome, SimResult, poisson, simulate};
use super::MS;

const BUDGET: Duration = Duration::from_millis(100);
const MAX_ROWS: usize = 64;
const SPAN: Duration = Duration::from_secs(8);
/// How long the feedback loop is given at the start of an overload: its p99 covers 2 s.
const SETTLE: Duration = Duration::from_secs(3);

/// 1 ms + 1 ms per 16 rows: a full batch of 64 in 5 ms, a tenth of the budget, as a small
/// model's on a CPU against a 50 ms budget.
fn curve(rows: usize) -> Duration {
    MS + MS * (rows as u32).div_ceil(16)
}

fn capacity() -> f64 {
    MAX_ROWS as f64 / curve(MAX_ROWS).as_secs_f64()
}

/// One batch in 100 runs `factor` times slower, in bursts of `burst` in a row (the last
/// `burst` of every `100 × burst`).
fn slow_batches(burst: usize, factor: u32) -> impl Fn(usize, Duration) -> Duration + Send {
    let batches = Arc::new(AtomicUsize::new(0));
    move |rows, _| {
        let i = batches.fetch_add(1, Ordering::Relaxed);
        let slow = i % (100 * burst) >= 99 * burst;
        curve(rows) * if slow { factor } else { 1 }
    }
}

async fn run(load: f64, burst: usize, seed: u64) -> (SimResult, usize) {
    let warmup: Vec<_> = [1, 2, 4, 8, 16, 32, 64].map(|r| (r, curve(r))).to_vec();
    let policy = AdaptivePolicy::new(BUDGET, MAX_ROWS, LatencyModel::from_warmup(&warmup));
    let arrivals = poisson(load * capacity(), SPAN, seed, 1);
    let n = arrivals.len();
    let r = simulate(Box::new(policy), 100_000, arrivals, slow_batches(burst, 5)).await;
    (r, n)
}

/// The p99 of the requests answered that arrived after `settle`.
fn p99_after(r: &SimResult, settle: Duration) -> Duration {
    let mut v: Vec<Duration> = (r.outcomes.iter())
        .filter(|(at, _, _)| *at >= settle)
        .filter_map(|(_, _, o)| match o {
            Outcome::Done(d) => Some(*d),
            _ => None,
        })
        .collect();
    v.sort();
    v[(v.len() * 99).div_ceil(100) - 1]
}

fn refused(r: &SimResult) -> usize {
    r.count(|o| matches!(o, Outcome::Shed | Outcome::Expired(_)))
}

#[tokio::test(start_paused = true)]
async fn below_capacity_slow_batches_refuse_nobody_while_the_p99_holds() {
    for burst in [1, 3] {
        for load in [0.1, 0.5, 0.8] {
            let (r, n) = run(load, burst, 7).await;
            eprintln!(
                "burst {burst}, load {load}: {n} requests, p99 {:?}, refused {}, admitted late {}",
                r.p99(None),
                refused(&r),
                r.admitted_late
            );
            assert!(r.p99(None) <= BUDGET, "p99 {:?}", r.p99(None));
            assert_eq!(refused(&r), 0, "burst {burst}, load {load}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn past_capacity_the_refusals_cover_the_excess_and_the_budget_holds() {
    for burst in [1, 3] {
        let (r, n) = run(1.2, burst, 11).await;
        let refused = refused(&r);
        let done = r.count(|o| matches!(o, Outcome::Done(_)));
        eprintln!(
            "burst {burst}, load 1.2: {n} requests, {done} answered, p99 {:?} ({:?} after {SETTLE:?}), refused {refused}, admitted late {}",
            r.p99(None),
            p99_after(&r, SETTLE),
            r.admitted_late
        );
        let settled = p99_after(&r, SETTLE);
        assert!(
            settled <= BUDGET,
            "p99 of the admitted after {SETTLE:?}: {settled:?}"
        );
        // The excess is a sixth of what arrives; slow batches take a few percent more.
        let excess = n as f64 / 6.0;
        assert!(refused as f64 >= 0.8 * excess, "{refused} refused of {n}");
        assert!(refused as f64 <= 1.6 * excess, "{refused} refused of {n}");
    }
}
