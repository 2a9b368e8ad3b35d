//! Unit tests of the load generator's bookkeeping, and the arguments they share with
//! `requests`' tests.

use super::*;

/// Small arguments for the unit tests here and in `requests`.
pub(super) fn test_args(shape: LoadShape) -> LoadArgs {
    LoadArgs {
        url: "http://h:1".into(),
        model: "m".into(),
        rate: 4.0,
        duration: 2.0,
        shape,
        rows: 1,
        texts: None,
        api: Api::V2,
        binary: false,
        grpc: None,
        budget_ms: 50.0,
        connections: 1,
        propagate_deadline: false,
        max_in_flight: 1,
        threads: 1,
        seed: 1,
        bodies: 1,
        zipf: None,
        repeat_share: None,
        clear_cache: false,
        json: None,
    }
}

#[test]
fn by_phase_groups_the_200s_by_where_in_their_second_they_were_sent() {
    let args = test_args(LoadShape::Burst);
    let sample = |at_ms: u64, latency_ms: u64, status: u16| Sample {
        at: Duration::from_millis(at_ms),
        latency: Duration::from_millis(latency_ms),
        status,
        cache: None,
    };
    // Two seconds: slow answers early in each, fast ones later, a 429 not counted.
    let samples = [
        sample(10, 30, 200),
        sample(1_020, 20, 200),
        sample(1_030, 1, 429),
        sample(600, 2, 200),
        sample(1_990, 4, 200),
    ];
    let r = summarize(&args, &[0; 5], 2.0, &samples, &ServerSide::default())
        .unwrap()
        .report;
    assert!(r.cache.is_none(), "no response said how a cache answered");
    assert_eq!(r.by_phase.len(), 20);
    let first = &r.by_phase[0];
    assert_eq!((first.from_ms, first.ok), (0, 2));
    assert!((first.p99_ms - 30.0).abs() < 0.1, "{first:?}");
    assert!((first.p50_ms - 20.0).abs() < 0.1, "{first:?}");
    assert_eq!(r.by_phase[12].ok, 1);
    assert_eq!(r.by_phase[19].ok, 1);
    assert_eq!(r.by_phase.iter().map(|p| p.ok).sum::<u64>(), 4);
}

#[test]
fn cache_hits_are_counted_apart_and_repeats_by_body() {
    let mut args = test_args(LoadShape::Constant);
    args.bodies = 3;
    let sample = |latency_us: u64, status: u16, cache: Option<Cached>| Sample {
        at: Duration::from_millis(100),
        latency: Duration::from_micros(latency_us),
        status,
        cache,
    };
    let samples = [
        sample(20_000, 200, Some(Cached::Miss)),
        sample(30_000, 200, Some(Cached::Partial)),
        sample(400, 200, Some(Cached::Hit)),
        sample(600, 200, Some(Cached::Hit)),
        sample(1, 429, None),
    ];
    let r = summarize(
        &args,
        &[0, 1, 0, 2, 0],
        2.0,
        &samples,
        &ServerSide::default(),
    )
    .unwrap()
    .report;
    assert_eq!(r.repeated_share, 0.4);
    let c = r.cache.expect("a split by x-tandem-cache");
    assert_eq!((c.hits, c.misses, c.partial), (2, 1, 1));
    assert!((c.hit_p99_ms - 0.6).abs() < 0.01, "{c:?}");
    assert!((c.hit_p50_ms - 0.4).abs() < 0.01, "{c:?}");
    assert!((c.rest_p99_ms - 30.0).abs() < 0.1, "{c:?}");
    assert!((c.rest_p50_ms - 20.0).abs() < 0.1, "{c:?}");
}
