//! The soak's verdict: how far each resource may grow, every violation in words, and the
//! printed report.

use super::SoakReport;
use super::resources::{self, Flatness, Sample, Tolerance};
use crate::cli::SoakArgs;

/// How far each figure may rise above its reference after warm-up, and why that far.
fn tolerance(args: &SoakArgs, figure: &str) -> Tolerance {
    const MIB: f64 = 1024.0 * 1024.0;
    let version_bytes = 4.0
        * args
            .dims
            .windows(2)
            .map(|w| (w[0] * w[1] + w[1]) as f64)
            .sum::<f64>();
    let (relative, absolute) = match figure {
        // The allocator keeps freed pages for reuse and hands them back lazily, so resident
        // memory moves by some MiB with the moment's allocations; a version being loaded
        // holds its file and its packed weights beside the versions already serving.
        "rss_bytes" => (0.10, 32.0 * MIB + 4.0 * version_bytes),
        // Each loaded version has its worker thread, and 2 or 3 are loaded (plus one
        // warming up); tokio starts blocking threads for file work and ends them after
        // 10 s idle.
        "threads" => (0.0, 8.0),
        // Sockets come and go with the clients: the load's connections (all reopened at a
        // segment boundary, the old ones still closing), the slow and garbage clients,
        // and a few scrapes.
        "fds" => (
            0.0,
            (2 * args.connections + args.slow_clients + 16 + 8) as f64,
        ),
        // Files a version load or a repository scan has open when the sample is taken.
        "fds_not_sockets" => (0.0, 4.0),
        // The trainer's connection (two across a restart) and HTTP connections opened or
        // closed between the two readings (the descriptor scan, then /metrics).
        "sockets_not_http_connections" => (0.0, 8.0),
        // Counters gain digits; the loaded versions' series (2 or 3); a restarted trainer
        // may take another slot, each with its own series, up to `max_trainers`.
        "metrics_bytes" => (0.02, 8192.0),
        _ => (0.0, 0.0),
    };
    Tolerance { relative, absolute }
}

pub(super) fn flatness(args: &SoakArgs, samples: &[Sample]) -> Vec<Flatness> {
    let warmup_s = args.duration * args.warmup_share;
    resources::series(samples)
        .into_iter()
        .filter_map(|(figure, points)| {
            resources::judge(figure, &points, warmup_s, tolerance(args, figure))
        })
        .collect()
}

/// Everything that went wrong, in words; empty when the soak passed.
pub(super) fn violations(r: &SoakReport) -> Vec<String> {
    let mut v = Vec::new();
    load_violations(r, &mut v);
    let server = &r.server;
    let server_5xx: f64 = server
        .requests_by_code
        .iter()
        .filter(|(code, _)| code.starts_with('5'))
        .map(|(_, n)| n)
        .sum();
    if server_5xx > 0.0 {
        v.push(format!("the server counted {server_5xx} 5xx answers"));
    }
    if let Some(how) = &server.exited {
        v.push(format!("the server {how}"));
    }
    if !server.ready_at_end {
        v.push("the server was not ready at the end".into());
    }
    if let Some(logged) = &server.reloads_logged {
        let f = &r.faults;
        let valid = f.reloads_sent - f.invalid_reloads_sent;
        if logged.received != f.reloads_sent
            || logged.applied != valid
            || logged.rejected != f.invalid_reloads_sent
        {
            v.push(format!(
                "{} SIGHUP reloads sent ({} invalid), the log shows {logged:?}",
                f.reloads_sent, f.invalid_reloads_sent
            ));
        }
    }
    v.extend(r.faults.violations.iter().cloned());
    v.extend(
        r.faults
            .errors
            .iter()
            .map(|e| format!("the soak could not: {e}")),
    );
    v.extend(r.slow_clients.violations.iter().cloned());
    v.extend(r.garbage_clients.violations.iter().cloned());
    for f in r.flatness.iter().filter(|f| !f.flat) {
        v.push(format!(
            "{} grew after warm-up: {:.0} at {:.0} s, limit {:.0} (reference {:.0})",
            f.figure, f.max_after_warmup, f.max_at_s, f.limit, f.reference
        ));
    }
    v
}

fn load_violations(r: &SoakReport, v: &mut Vec<String>) {
    let (load, c) = (&r.load, &r.load.counts);
    if c.five_xx > 0 {
        v.push(format!("{} load requests answered 5xx", c.five_xx));
    }
    if c.lost > 0 {
        v.push(format!("{} load requests lost (no answer)", c.lost));
    }
    if c.unexpected > 0 {
        v.push(format!(
            "{} load requests answered neither 200, 429 nor 5xx",
            c.unexpected
        ));
    }
    if c.ok == 0 {
        v.push("no load request was answered 200".into());
    }
    if load.p99_ms > r.settings.p99_limit_ms {
        v.push(format!(
            "p99 of the 200s {:.2} ms, over the limit of {} ms",
            load.p99_ms, r.settings.p99_limit_ms
        ));
    }
    let refused = c.refused_429 as f64 / load.sent.max(1) as f64;
    if refused > r.settings.max_refused_share {
        v.push(format!(
            "{:.2}% of the load refused with 429, over {:.2}%",
            refused * 100.0,
            r.settings.max_refused_share * 100.0
        ));
    }
    for s in load.segments.iter().filter(|s| s.error.is_some()) {
        v.push(format!(
            "the load at {:.0} s did not run: {}",
            s.from_s,
            s.error.as_deref().unwrap_or("")
        ));
    }
}

pub(super) fn print_report(r: &SoakReport) {
    let (l, c) = (&r.load, &r.load.counts);
    println!(
        "\nload      sent {}  200 {}  429 {}  5xx {}  lost {}  other {}   p50 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms",
        l.sent,
        c.ok,
        c.refused_429,
        c.five_xx,
        c.lost,
        c.unexpected,
        l.p50_ms,
        l.p99_ms,
        l.p999_ms,
        l.max_ms
    );
    let f = &r.faults;
    println!(
        "faults    versions {} ({} corrupt, {} deleted, newest {})  trainers {} started, {} joined, {} killed, {} seen leaving  SIGHUP {} ({} invalid)",
        f.versions_written,
        f.corrupt_versions_written,
        f.versions_deleted,
        f.newest_version,
        f.trainers_started,
        f.trainers_joined,
        f.trainers_killed,
        f.trainer_departures_seen,
        f.reloads_sent,
        f.invalid_reloads_sent
    );
    let s = &r.server;
    println!(
        "server    answers {:?}  version loads {:?}  reloads logged {:?}",
        s.requests_by_code, s.version_loads, s.reloads_logged
    );
    println!(
        "slow      {} connections: {:?}",
        r.slow_clients.connections, r.slow_clients.outcomes
    );
    println!(
        "garbage   {} connections: {:?}",
        r.garbage_clients.connections, r.garbage_clients.outcomes
    );
    println!(
        "{:<30} {:>14} {:>14} {:>14} {:>10} {:>14} {:>6}",
        "figure", "reference", "limit", "max after", "at s", "slope/hour", "flat"
    );
    for f in &r.flatness {
        println!(
            "{:<30} {:>14.0} {:>14.0} {:>14.0} {:>10.0} {:>14.1} {:>6}",
            f.figure,
            f.reference,
            f.limit,
            f.max_after_warmup,
            f.max_at_s,
            f.slope_per_hour,
            f.flat
        );
    }
    match r.passed {
        true => println!("PASSED"),
        false => println!("FAILED:\n  {}", r.violations.join("\n  ")),
    }
}
