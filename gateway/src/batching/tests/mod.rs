//! The controller against scripted latency curves, under tokio's paused clock: the real
//! batcher task, queue and policies, a simulated device (see `sim`).

mod feedback_loop;
mod outliers;

use std::time::Duration;

use super::ReleaseReason;
use super::adaptive::AdaptivePolicy;
use super::latency::LatencyModel;
use super::policy::{BatchPolicy, Candidate, Decision, StaticPolicy};
use super::sim::{Arrival, Outcome, poisson, simulate, simulate_closed_loop};
use super::state::QueueView;

const MS: Duration = Duration::from_millis(1);
const BUDGET: Duration = Duration::from_millis(100);
const MAX_ROWS: usize = 16;

/// 2 ms + 1 ms per row: 889 rows/s at 16 rows per batch.
fn curve(rows: usize) -> Duration {
    MS * (2 + rows as u32)
}

fn warmup() -> Vec<(usize, Duration)> {
    [1, 2, 4, 8, 16].map(|r| (r, curve(r))).to_vec()
}

fn adaptive() -> Box<dyn BatchPolicy> {
    Box::new(AdaptivePolicy::new(
        BUDGET,
        MAX_ROWS,
        LatencyModel::from_warmup(&warmup()),
    ))
}

fn capacity_rows_per_second() -> f64 {
    MAX_ROWS as f64 / curve(MAX_ROWS).as_secs_f64()
}

#[tokio::test(start_paused = true)]
async fn the_budget_holds_under_poisson_load() {
    let rate = 0.67 * capacity_rows_per_second();
    let arrivals = poisson(rate, Duration::from_secs(10), 1, 1);
    let n = arrivals.len();
    let r = simulate(adaptive(), 4096, arrivals, |rows, _| curve(rows)).await;
    let done = r.count(|o| matches!(o, Outcome::Done(_)));
    eprintln!(
        "poisson: {done} of {n} served, p99 {:?}, p50 {:?}, {} batches",
        r.p99(None),
        r.latencies(None)[done / 2],
        r.batches.len()
    );
    assert!(done as f64 >= 0.99 * n as f64, "{done} of {n} served");
    assert!(r.p99(None) <= BUDGET, "p99 {:?}", r.p99(None));
    // It batched: far fewer batches than requests.
    assert!(
        r.batches.len() * 3 < n,
        "{} batches for {n} requests",
        r.batches.len()
    );
}

/// A client that sends its next request the moment it is answered finds the device idle,
/// where a lone request is always admitted, even when its batch ended well before the
/// policy expected.
#[tokio::test(start_paused = true)]
async fn a_request_sent_on_an_answer_finds_the_device_idle() {
    // Batches alternate between 1 and 39 ms: the latency model predicts about 20 ms with a
    // wide spread, so a policy that had not heard of a fast batch's end would see the device
    // busy for 19 ms more, and this request's finish behind it past the budget.
    let batches = std::sync::atomic::AtomicUsize::new(0);
    let alternating =
        move |_, _| match batches.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2 {
            0 => MS,
            _ => 39 * MS,
        };
    let r = simulate_closed_loop(adaptive(), 200, 1, alternating).await;
    let refused = r.count(|o| matches!(o, Outcome::Shed));
    assert_eq!(refused, 0, "{refused} of 200 refused");
    assert_eq!(r.count(|o| matches!(o, Outcome::Done(_))), 200);
}

#[tokio::test(start_paused = true)]
async fn the_budget_holds_through_a_sudden_2x_slowdown() {
    // 40% of capacity before, 80% after the device halves its speed at t = 5 s.
    let rate = 0.4 * capacity_rows_per_second();
    let arrivals = poisson(rate, Duration::from_secs(10), 2, 1);
    let n = arrivals.len();
    let slow_from = Duration::from_secs(5);
    let r = simulate(adaptive(), 4096, arrivals, move |rows, t| {
        if t >= slow_from {
            curve(rows) * 2
        } else {
            curve(rows)
        }
    })
    .await;
    let done = r.count(|o| matches!(o, Outcome::Done(_)));
    eprintln!(
        "slowdown: {done} of {n} served, p99 {:?}, {} batches",
        r.p99(None),
        r.batches.len()
    );
    assert!(done as f64 >= 0.97 * n as f64, "{done} of {n} served");
    assert!(r.p99(None) <= BUDGET, "p99 {:?}", r.p99(None));
    // Also the p99 of the requests after the slowdown on their own.
    let mut after: Vec<Duration> = r
        .outcomes
        .iter()
        .filter(|(at, _, _)| *at >= slow_from)
        .filter_map(|(_, _, o)| {
            if let Outcome::Done(d) = o {
                Some(*d)
            } else {
                None
            }
        })
        .collect();
    after.sort();
    let p99_after = after[(after.len() as f64 * 0.99) as usize - 1];
    assert!(p99_after <= BUDGET, "p99 after the slowdown {p99_after:?}");
}

#[tokio::test(start_paused = true)]
async fn overload_is_shed_at_the_door_and_admitted_requests_meet_the_budget() {
    let capacity = capacity_rows_per_second();
    let arrivals = poisson(3.0 * capacity, Duration::from_secs(4), 3, 1);
    let n = arrivals.len();
    let r = simulate(adaptive(), 100_000, arrivals.clone(), |rows, _| curve(rows)).await;
    let done = r.count(|o| matches!(o, Outcome::Done(_)));
    let shed = r.count(|o| *o == Outcome::Shed);
    eprintln!(
        "overload: {done} done {shed} shed of {n}, p99 {:?}",
        r.p99(None)
    );
    assert!(shed > n / 2, "{shed} of {n} shed");
    assert!(r.p99(None) <= BUDGET, "p99 of admitted {:?}", r.p99(None));
    // Goodput near the device's capacity.
    assert!(done as f64 >= 0.8 * capacity * 4.0, "{done} served in 4 s");
    // The static baseline queues everything and misses the budget.
    let baseline: Box<dyn BatchPolicy> = Box::new(StaticPolicy {
        max_batch_rows: MAX_ROWS,
        max_queue_delay: 5 * MS,
    });
    let s = simulate(baseline, 100_000, arrivals, |rows, _| curve(rows)).await;
    eprintln!("static overload p99 {:?}", s.p99(None));
    assert!(s.p99(None) > BUDGET * 5, "static p99 {:?}", s.p99(None));
}

#[tokio::test(start_paused = true)]
async fn low_priority_is_not_starved_under_a_fair_load() {
    let rate = 0.6 * capacity_rows_per_second();
    let arrivals = poisson(rate, Duration::from_secs(10), 4, 2);
    let r = simulate(adaptive(), 4096, arrivals, |rows, _| curve(rows)).await;
    for p in [1, 2] {
        let offered = r.outcomes.iter().filter(|(_, q, _)| *q == p).count();
        let done = r.latencies(Some(p)).len();
        assert!(
            done as f64 >= 0.99 * offered as f64,
            "priority {p}: {done} of {offered}"
        );
        assert!(
            r.p99(Some(p)) <= BUDGET,
            "priority {p}: p99 {:?}",
            r.p99(Some(p))
        );
    }
}

#[tokio::test(start_paused = true)]
async fn under_overload_priority_one_is_served_and_priority_two_is_shed() {
    let arrivals = poisson(
        1.6 * capacity_rows_per_second(),
        Duration::from_secs(6),
        7,
        2,
    );
    let r = simulate(adaptive(), 100_000, arrivals, |rows, _| curve(rows)).await;
    let served = |p: u32| {
        let offered = r.outcomes.iter().filter(|(_, q, _)| *q == p).count();
        r.latencies(Some(p)).len() as f64 / offered as f64
    };
    assert!(served(1) >= 0.95, "priority 1 served {:.2}", served(1));
    assert!(served(2) < 0.5, "priority 2 served {:.2}", served(2));
    assert!(
        r.p99(Some(1)) <= BUDGET,
        "priority 1 p99 {:?}",
        r.p99(Some(1))
    );
}

#[tokio::test(start_paused = true)]
async fn expiry_fires_on_time_while_a_long_batch_runs() {
    let arrivals = vec![
        Arrival {
            at: Duration::ZERO,
            rows: 1,
            priority: 1,
            timeout: None,
        },
        Arrival {
            at: MS,
            rows: 1,
            priority: 1,
            timeout: Some(20 * MS),
        },
    ];
    // Every batch takes 300 ms: the second request's deadline passes during the first.
    let r = simulate(adaptive(), 16, arrivals, |_, _| 300 * MS).await;
    assert_eq!(r.outcomes[0].2, Outcome::Done(300 * MS));
    match r.outcomes[1].2 {
        Outcome::Expired(after) => assert!(
            after >= 20 * MS && after <= 22 * MS,
            "answered after {after:?}"
        ),
        ref other => panic!("expected 504, got {other:?}"),
    }
    assert_eq!(
        r.batches.len(),
        1,
        "the expired request never took a batch slot"
    );
}

#[tokio::test(start_paused = true)]
async fn at_low_load_nobody_waits_for_a_batch_that_will_not_come() {
    // One request every 200 ms: the adaptive policy releases each at once.
    let arrivals: Vec<Arrival> = (0..20)
        .map(|i| Arrival {
            at: MS * 200 * i,
            rows: 1,
            priority: 1,
            timeout: None,
        })
        .collect();
    let r = simulate(adaptive(), 16, arrivals, |rows, _| curve(rows)).await;
    assert!(
        r.latencies(None).iter().all(|d| *d == curve(1)),
        "{:?}",
        r.latencies(None)
    );
    assert!(
        r.batches
            .iter()
            .all(|(_, reason, _)| *reason == ReleaseReason::Idle)
    );
}

#[tokio::test(start_paused = true)]
async fn static_policy_waits_its_delay_then_releases() {
    let policy: Box<dyn BatchPolicy> = Box::new(StaticPolicy {
        max_batch_rows: MAX_ROWS,
        max_queue_delay: 10 * MS,
    });
    let arrivals: Vec<Arrival> = (0..10)
        .map(|i| Arrival {
            at: MS * 50 * i,
            rows: 1,
            priority: 1,
            timeout: None,
        })
        .collect();
    let r = simulate(policy, 16, arrivals, |rows, _| curve(rows)).await;
    assert!(
        r.latencies(None).iter().all(|d| *d == 10 * MS + curve(1)),
        "{:?}",
        r.latencies(None)
    );
    assert!(
        r.batches
            .iter()
            .all(|(_, reason, _)| *reason == ReleaseReason::Timer)
    );
}

#[tokio::test(start_paused = true)]
async fn after_an_overload_it_admits_again() {
    // 3x overload for 2 s, then 30% load: the second phase must be served, not shed.
    let capacity = capacity_rows_per_second();
    let mut arrivals = poisson(3.0 * capacity, Duration::from_secs(2), 5, 1);
    arrivals.extend(
        poisson(0.3 * capacity, Duration::from_secs(3), 6, 1)
            .into_iter()
            .map(|mut a| {
                a.at += Duration::from_secs(3);
                a
            }),
    );
    let r = simulate(adaptive(), 100_000, arrivals, |rows, t| {
        // The device is 30x slower during the overload (contention): even one row then
        // takes longer than the budget, and the model learns that. Normal speed after.
        if t < Duration::from_secs(2) {
            curve(rows) * 30
        } else {
            curve(rows)
        }
    })
    .await;
    let late: Vec<&Outcome> = r
        .outcomes
        .iter()
        .filter(|(at, _, _)| *at >= Duration::from_secs(3))
        .map(|(_, _, o)| o)
        .collect();
    let served = late
        .iter()
        .filter(|o| matches!(o, Outcome::Done(_)))
        .count();
    assert!(
        served as f64 >= 0.95 * late.len() as f64,
        "{served} of {} served after the overload",
        late.len()
    );
}

#[tokio::test(start_paused = true)]
async fn the_budget_counts_from_arrival_not_from_admission() {
    use super::state::QueueView;
    let mut policy = adaptive();
    let now = tokio::time::Instant::now() + BUDGET;
    // A queue that drains in about 20 ms: a fresh request fits in the budget, one that
    // already spent 90 ms reaching the batcher does not.
    let queue = QueueView {
        requests: 16,
        rows: 16,
        oldest: Some(now),
        earliest_deadline: None,
        head_rows: 16,
        head_at_output_limit: false,
    };
    assert!(
        policy
            .admit(&queue, &Candidate::new(16, 1, now), now)
            .is_ok()
    );
    let shed = policy
        .admit(&queue, &Candidate::new(16, 1, now - MS * 90), now)
        .expect_err("a request that spent its budget before admission is shed");
    assert!(shed.message.contains("past the"), "{}", shed.message);
    // A fresh request would still fit: that refusal closes the door to nobody.
    assert_eq!(shed.door_closed_for, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_shed_closes_the_door_when_fresh_requests_would_miss_too() {
    use super::state::QueueView;
    let mut policy = adaptive();
    let now = tokio::time::Instant::now();
    // 96 rows queued: six full batches, about 108 ms, past the 95 ms admission plans to.
    let queue = QueueView {
        requests: 96,
        rows: 96,
        oldest: Some(now),
        earliest_deadline: None,
        head_rows: 16,
        head_at_output_limit: false,
    };
    let shed = policy
        .admit(&queue, &Candidate::new(96, 1, now), now)
        .expect_err("past the budget");
    // Closed until a fresh request fits, as the queue drains: for how far past its 95 ms
    // this one would end (behind six full batches, ~112 ms: ~17 ms), not for the whole
    // drain (the Retry-After), after which nothing waits.
    assert_eq!(policy.admission_horizon(), Some(MS * 95));
    assert!(
        shed.door_closed_for > MS * 10 && shed.door_closed_for < MS * 25,
        "closed for {:?}, drain {:?}",
        shed.door_closed_for,
        shed.retry_after
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_refused_for_its_own_size_closes_the_door_to_nobody() {
    let mut policy = adaptive();
    let now = tokio::time::Instant::now();
    // Two rows queued (4 ms): one row more fits, but a 90-row request (a long text in
    // token-units) would take ~108 ms, past the 95 ms admission plans to, on its own.
    let queue = QueueView {
        requests: 2,
        rows: 2,
        oldest: Some(now),
        earliest_deadline: None,
        head_rows: 2,
        head_at_output_limit: false,
    };
    let shed = policy
        .admit(&queue, &Candidate::new(2, 90, now), now)
        .expect_err("a request too big for the budget behind a queue is refused");
    assert_eq!(shed.door_closed_for, Duration::ZERO);
    assert!(
        shed.message.contains("2 rows are queued ahead"),
        "{}",
        shed.message
    );
    assert!(
        policy
            .admit(&queue, &Candidate::new(2, 1, now), now)
            .is_ok()
    );
    // A text model's rows are token-units, and its refusals say so.
    let mut policy = AdaptivePolicy::new(BUDGET, MAX_ROWS, LatencyModel::from_warmup(&warmup()))
        .counting("token-units");
    let shed = policy
        .admit(&queue, &Candidate::new(2, 90, now), now)
        .unwrap_err();
    assert!(
        shed.message.contains("2 token-units are queued ahead"),
        "{}",
        shed.message
    );
}

/// A device fast next to its budget: 2 ms + 1 ms per 16 rows, a full batch of 64 in 6 ms,
/// against a budget of 500 ms.
fn fast_curve(rows: usize) -> Duration {
    MS * (2 + rows as u32 / 16)
}

const FAST_BUDGET: Duration = Duration::from_millis(500);
const FAST_MAX_ROWS: usize = 64;

fn fast_model() -> LatencyModel {
    let warmup = [1, 2, 4, 8, 16, 32, 64].map(|r| (r, fast_curve(r)));
    LatencyModel::from_warmup(&warmup)
}

#[tokio::test(start_paused = true)]
async fn far_inside_the_budget_batches_wait_to_grow_to_the_efficient_size() {
    // 35% of capacity: load enough for batches to wait to grow, 3.7 rows a millisecond.
    // A full batch runs in 6 ms, in which 22 rows arrive; the efficient batch is about
    // twice that, and the p99 stays far inside the budget, so batches may wait for it.
    let efficient = fast_model().efficient_batch(FAST_MAX_ROWS);
    let capacity = FAST_MAX_ROWS as f64 / fast_curve(FAST_MAX_ROWS).as_secs_f64();
    let rate = 0.35 * capacity;
    assert!(
        efficient as f64 > 1.5 * rate * fast_curve(FAST_MAX_ROWS).as_secs_f64(),
        "efficient batch {efficient}: the short wait would reach it too"
    );
    let policy = AdaptivePolicy::new(FAST_BUDGET, FAST_MAX_ROWS, fast_model());
    let arrivals = poisson(rate, Duration::from_secs(6), 9, 1);
    let n = arrivals.len();
    let r = simulate(Box::new(policy), 4096, arrivals, |rows, _| fast_curve(rows)).await;
    assert_eq!(r.count(|o| matches!(o, Outcome::Done(_))), n);
    // Past the first seconds (the p99 of two seconds must be seen first), batches are
    // near the efficient size, not the ~22 rows that arrive during a full batch's run.
    let later: Vec<usize> = r
        .batches
        .iter()
        .filter(|(at, _, _)| *at >= Duration::from_secs(3))
        .map(|(_, _, rows)| *rows)
        .collect();
    let mean = later.iter().sum::<usize>() as f64 / later.len() as f64;
    eprintln!(
        "unhurried: efficient {efficient}, mean batch {mean:.1} rows, p99 {:?}",
        r.p99(None)
    );
    assert!(mean >= 0.8 * efficient as f64, "mean batch {mean:.1} rows");
    // Waits of at most a tenth of the budget: the p99 stays under a fifth of it.
    assert!(r.p99(None) < FAST_BUDGET / 5, "p99 {:?}", r.p99(None));
}

#[tokio::test(start_paused = true)]
async fn a_p99_near_the_budget_brings_back_the_short_wait() {
    let mut policy = AdaptivePolicy::new(FAST_BUDGET, FAST_MAX_ROWS, fast_model());
    let short = fast_curve(FAST_MAX_ROWS);
    // Busy cores and a steady 1,000 rows a second: batches wait to grow.
    policy.observe_cpu_load(0.5);
    let mut now = tokio::time::Instant::now();
    // How long a single queued row, just arrived, is held at most once the latencies of
    // the last second were `latency`; and a tenth of the effective budget then (the
    // feedback loop moves that budget too).
    let mut held_after = |latency: Duration| {
        for _ in 0..1000 {
            now += MS;
            policy.observe_arrival(1, 1, now);
            policy.observe_latency(latency, now);
        }
        let queue = QueueView {
            requests: 1,
            rows: 1,
            oldest: Some(now),
            earliest_deadline: None,
            head_rows: 1,
            head_at_output_limit: false,
        };
        let longest = policy.effective_budget() / 10;
        assert!(longest > 2 * short, "{longest:?}");
        match policy.decide(&queue, now) {
            Decision::Wait { until: Some(t) } => (t - now, longest),
            other => panic!("{other:?}"),
        }
    };
    // Far inside the budget: up to a tenth of it. Then a p99 past three tenths: the short
    // wait, a full batch's run. Back under a fifth: the long wait again.
    let (held, longest) = held_after(10 * MS);
    assert_eq!(held, longest);
    assert_eq!(held_after(200 * MS).0, short);
    assert_eq!(held_after(200 * MS).0, short);
    let (held, _) = held_after(10 * MS);
    assert_eq!(
        held, short,
        "the two-second window still holds a slow second"
    );
    held_after(10 * MS);
    let (held, longest) = held_after(10 * MS);
    assert_eq!(held, longest, "two fast seconds later");
}
