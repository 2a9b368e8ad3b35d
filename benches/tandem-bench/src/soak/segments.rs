//! The soak's load: `bench load` runs of `--segment` seconds back to back, and their
//! outcomes summed by what they mean for the verdict.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use super::load_args;
use crate::cli::SoakArgs;
use crate::load::{LoadOptions, Measured, measure_with};

/// The load of one run and its segments.
#[derive(Debug, Serialize)]
pub(super) struct LoadTotals {
    pub(super) rate_rps: f64,
    pub(super) sent: u64,
    pub(super) outcomes: BTreeMap<String, u64>,
    #[serde(flatten)]
    pub(super) counts: Counts,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) p999_ms: f64,
    pub(super) max_ms: f64,
    pub(super) segments: Vec<SegmentRow>,
    #[serde(skip)]
    pub(super) latency_us: Histogram<u64>,
}

/// Outcomes of the load's requests, by what they mean for the verdict.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(super) struct Counts {
    pub(super) ok: u64,
    pub(super) refused_429: u64,
    pub(super) five_xx: u64,
    /// No answer: transport errors, timeouts, sends the generator could not make, and
    /// sends with no outcome at all.
    pub(super) lost: u64,
    /// Any other status (a valid request answered 404 or 400, say).
    pub(super) unexpected: u64,
}

impl Counts {
    pub(super) fn of(sent: u64, outcomes: &BTreeMap<String, u64>) -> Counts {
        let mut c = Counts::default();
        for (label, n) in outcomes {
            match label.parse::<u16>() {
                Ok(200) => c.ok += n,
                Ok(429) => c.refused_429 += n,
                Ok(s) if s >= 500 => c.five_xx += n,
                Ok(_) => c.unexpected += n,
                Err(_) => c.lost += n,
            }
        }
        c.lost += sent.saturating_sub(outcomes.values().sum());
        c
    }
}

/// One segment of the load.
#[derive(Debug, Serialize)]
pub(super) struct SegmentRow {
    pub(super) from_s: f64,
    pub(super) sent: u64,
    #[serde(flatten)]
    pub(super) counts: Counts,
    pub(super) p99_ms: f64,
    pub(super) max_ms: f64,
    /// Why the segment did not run (the generator could not start it).
    pub(super) error: Option<String>,
}

impl LoadTotals {
    pub(super) fn new(rate_rps: f64) -> anyhow::Result<LoadTotals> {
        Ok(LoadTotals {
            rate_rps,
            sent: 0,
            outcomes: BTreeMap::new(),
            counts: Counts::default(),
            p50_ms: 0.0,
            p99_ms: 0.0,
            p999_ms: 0.0,
            max_ms: 0.0,
            segments: Vec::new(),
            latency_us: Histogram::new_with_bounds(1, 600_000_000, 3)?,
        })
    }

    pub(super) fn add(&mut self, from_s: f64, m: Measured) {
        let r = &m.report;
        let _ = self.latency_us.add(&m.ok_latency_us);
        self.sent += r.sent;
        for (k, v) in &r.outcomes {
            *self.outcomes.entry(k.clone()).or_default() += v;
        }
        self.segments.push(SegmentRow {
            from_s,
            sent: r.sent,
            counts: Counts::of(r.sent, &r.outcomes),
            p99_ms: r.p99_ms,
            max_ms: r.max_ms,
            error: None,
        });
        self.refresh();
    }

    pub(super) fn failed(&mut self, from_s: f64, e: &anyhow::Error) {
        self.segments.push(SegmentRow {
            from_s,
            sent: 0,
            counts: Counts::default(),
            p99_ms: 0.0,
            max_ms: 0.0,
            error: Some(format!("{e:#}")),
        });
    }

    fn refresh(&mut self) {
        let h = &self.latency_us;
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        self.counts = Counts::of(self.sent, &self.outcomes);
        (self.p50_ms, self.p99_ms, self.p999_ms) = (ms(0.5), ms(0.99), ms(0.999));
        self.max_ms = h.max() as f64 / 1000.0;
    }
}

/// The load, in runs of `--segment` seconds back to back until `--duration` has passed
/// (each run opens its connections afresh, so a segment boundary is also a reconnect).
pub(super) async fn drive(
    args: &SoakArgs,
    url: &str,
    rate: f64,
    pid: Option<u32>,
) -> anyhow::Result<LoadTotals> {
    let mut totals = LoadTotals::new(rate)?;
    let options = LoadOptions {
        request_timeout: Some(Duration::from_secs_f64(args.request_timeout_s)),
    };
    let start = Instant::now();
    for i in 0u64.. {
        let from_s = start.elapsed().as_secs_f64();
        let left = args.duration - from_s;
        if left < 1.0 {
            break;
        }
        let segment = load_args(
            args,
            url,
            rate,
            args.segment.min(left),
            args.seed.wrapping_add(i),
        );
        match measure_with(&segment, &options).await {
            Ok(m) => totals.add(from_s, m),
            Err(e) => {
                totals.failed(from_s, &e);
                if pid.is_some_and(|pid| !alive(pid)) {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    Ok(totals)
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sort_outcomes_by_what_they_mean() {
        let outcomes: BTreeMap<String, u64> = [
            ("200", 90),
            ("429", 3),
            ("503", 1),
            ("404", 2),
            ("error", 1),
            ("timeout", 1),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        // Two sends with no outcome at all are lost too.
        let c = Counts::of(100, &outcomes);
        assert_eq!(
            (c.ok, c.refused_429, c.five_xx, c.unexpected, c.lost),
            (90, 3, 1, 2, 4)
        );
    }
}
