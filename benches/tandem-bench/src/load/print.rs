//! `tandem-bench load`'s report, as text.

use super::LoadReport;

pub fn print_report(r: &LoadReport) {
    let drawn = r.zipf.map(|s| format!(" zipf {s}")).unwrap_or_default();
    println!(
        "load  {} model {}  {:?} {:.0} req/s x {:.0} s  rows/request {}  {} {:?}  bodies {}{}",
        r.url,
        r.model,
        r.shape,
        r.offered_rps,
        r.duration_s,
        r.rows_per_request,
        match (&r.grpc, r.binary) {
            (Some(_), _) => "grpc",
            (None, true) => "binary",
            (None, false) => "json",
        },
        r.api,
        r.bodies,
        drawn
    );
    println!(
        "{:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "sent", "ok/s", "goodput/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    println!(
        "{:>10} {:>10.1} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        r.sent, r.achieved_rps, r.goodput_rps, r.p50_ms, r.p90_ms, r.p99_ms, r.p999_ms, r.max_ms
    );
    let outcomes: Vec<String> = r
        .outcomes
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    println!(
        "outcomes  {}   within {:.0} ms budget: {:.2}%",
        outcomes.join("  "),
        r.budget_ms,
        r.within_budget * 100.0
    );
    if r.bodies > 1 {
        println!(
            "repeats   {:.1}% of requests repeat a body sent earlier in the run",
            r.repeated_share * 100.0
        );
    }
    if let Some(c) = &r.cache {
        println!(
            "cache     hits {} p50 {:.2} ms p99 {:.2} ms   misses {} partial {}: p50 {:.2} ms p99 {:.2} ms",
            c.hits, c.hit_p50_ms, c.hit_p99_ms, c.misses, c.partial, c.rest_p50_ms, c.rest_p99_ms
        );
    }
}
