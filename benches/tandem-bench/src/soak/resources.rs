//! What the server holds, sampled once a second through the soak, and whether it stayed
//! flat after warm-up.
//!
//! Flat means: the largest value after warm-up is at most `reference × (1 + relative) +
//! absolute`, where the reference is the largest value over the second half of the
//! warm-up. The reference is a maximum over a window rather than one sample because every
//! figure here moves with the faults' schedule (versions loaded 2 or 3, a trainer
//! connected or not, slow clients in the middle of a connection or between two), and a
//! window that spans their cycles compares peak with peak; a single sample could be a
//! trough, and the next peak would read as growth. The tolerances per figure are in
//! `tolerances` with the reason for each.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::{Stop, metrics_value};
use crate::server::get;

/// One second's reading. A figure the soak cannot read (no pid for a server at `--url`) is
/// `None`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub rss_bytes: Option<f64>,
    pub threads: Option<f64>,
    pub fds: Option<f64>,
    pub socket_fds: Option<f64>,
    pub metrics_bytes: Option<f64>,
    /// `tandem_http_connections`: the sockets the server knows as HTTP connections.
    pub http_connections: Option<f64>,
    pub trainers_connected: Option<f64>,
}

/// Reads `pid`'s figures and `/metrics` every second until `stop`.
pub async fn sample(addr: SocketAddr, pid: Option<u32>, start: Instant, stop: Stop) -> Vec<Sample> {
    let authority = addr.to_string();
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.stopped() => return samples,
        }
        let mut s = Sample {
            t_s: start.elapsed().as_secs_f64(),
            ..Sample::default()
        };
        // The HTTP connections are read before and after the descriptor scan, and the
        // larger count kept: a connection that opened or closed while the scan ran is a
        // socket in it, and in one of the two readings. With one reading, the moment the
        // load's connections all close (its end, a segment boundary) reads as sockets
        // that are not HTTP connections.
        let before = read_metrics(addr, &authority).await;
        if let Some(pid) = pid {
            read_proc(pid, &mut s);
        }
        if let Some(after) = read_metrics(addr, &authority).await {
            s.metrics_bytes = Some(after.bytes);
            let earlier = before.and_then(|b| b.http_connections);
            s.http_connections = match (after.http_connections, earlier) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            s.trainers_connected = after.trainers_connected;
        }
        samples.push(s);
    }
}

/// What one `/metrics` read says.
struct MetricsReading {
    bytes: f64,
    http_connections: Option<f64>,
    trainers_connected: Option<f64>,
}

async fn read_metrics(addr: SocketAddr, authority: &str) -> Option<MetricsReading> {
    let (status, body) = get(addr, authority, "/metrics").await.ok()?;
    if !status.is_success() {
        return None;
    }
    let text = String::from_utf8_lossy(&body);
    Some(MetricsReading {
        bytes: body.len() as f64,
        http_connections: metrics_value(&text, "tandem_http_connections", None),
        trainers_connected: metrics_value(&text, "tandem_trainers_connected", None),
    })
}

/// Resident memory and threads from `/proc/PID/status`, descriptors from `/proc/PID/fd`.
fn read_proc(pid: u32, s: &mut Sample) {
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        s.rss_bytes = field("VmRSS:").map(|kib| kib * 1024.0);
        s.threads = field("Threads:");
    }
    if let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        let targets = entries.flatten().map(|e| std::fs::read_link(e.path()).ok());
        let (fds, sockets) = count_descriptors(targets);
        s.fds = Some(fds);
        s.socket_fds = Some(sockets);
    }
}

/// Descriptors and sockets among the targets of a `/proc/PID/fd` listing. A descriptor
/// whose link could not be read closed between the listing and the read (a connection
/// ending, as the load's all do at a segment's end): it is counted in neither, where
/// counted as a descriptor it would read as a file the server holds.
fn count_descriptors(targets: impl Iterator<Item = Option<std::path::PathBuf>>) -> (f64, f64) {
    targets
        .flatten()
        .fold((0.0, 0.0), |(fds, sockets), target| {
            let socket = target.to_string_lossy().starts_with("socket:");
            (fds + 1.0, sockets + if socket { 1.0 } else { 0.0 })
        })
}

/// How far a figure may rise above its reference: `reference × (1 + relative) + absolute`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Tolerance {
    pub relative: f64,
    pub absolute: f64,
}

/// One figure's verdict.
#[derive(Debug, Serialize)]
pub struct Flatness {
    pub figure: &'static str,
    /// The largest value over the second half of the warm-up.
    pub reference: f64,
    pub tolerance: Tolerance,
    pub limit: f64,
    /// The largest value after warm-up, and when.
    pub max_after_warmup: f64,
    pub max_at_s: f64,
    pub last: f64,
    /// The least-squares slope of the values after warm-up, per hour: how fast it would
    /// grow if it grew. Reported, not judged: a figure that steps with the faults' schedule
    /// has a slope without growing.
    pub slope_per_hour: f64,
    pub flat: bool,
}

/// Judges the series `points` (time in seconds, value) against `tolerance`, with warm-up
/// ending at `warmup_s`. `None` without samples in both the reference window and after it.
pub fn judge(
    figure: &'static str,
    points: &[(f64, f64)],
    warmup_s: f64,
    tolerance: Tolerance,
) -> Option<Flatness> {
    let reference = points
        .iter()
        .filter(|(t, _)| *t >= warmup_s / 2.0 && *t <= warmup_s)
        .map(|(_, v)| *v)
        .reduce(f64::max)?;
    let after: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(t, _)| *t > warmup_s)
        .collect();
    let (max_at_s, max_after_warmup) = after
        .iter()
        .copied()
        .reduce(|a, b| if b.1 > a.1 { b } else { a })?;
    let limit = reference * (1.0 + tolerance.relative) + tolerance.absolute;
    Some(Flatness {
        figure,
        reference,
        tolerance,
        limit,
        max_after_warmup,
        max_at_s,
        last: after.last().map_or(f64::NAN, |p| p.1),
        slope_per_hour: slope(&after) * 3600.0,
        flat: max_after_warmup <= limit,
    })
}

/// The least-squares slope of `points` (0 for fewer than two).
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(sxy, sxx), p| {
        (sxy + (p.0 - mx) * (p.1 - my), sxx + (p.0 - mx) * (p.0 - mx))
    });
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

/// The series judged, from the samples: each figure's (t, value) where it was read.
pub fn series(samples: &[Sample]) -> Vec<(&'static str, Vec<(f64, f64)>)> {
    let pick = |f: fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| f(s).map(|v| (s.t_s, v)))
            .collect()
    };
    vec![
        ("rss_bytes", pick(|s| s.rss_bytes)),
        ("threads", pick(|s| s.threads)),
        ("fds", pick(|s| s.fds)),
        ("fds_not_sockets", pick(|s| Some(s.fds? - s.socket_fds?))),
        (
            "sockets_not_http_connections",
            pick(|s| Some(s.socket_fds? - s.http_connections?)),
        ),
        ("metrics_bytes", pick(|s| s.metrics_bytes)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOL: Tolerance = Tolerance {
        relative: 0.25,
        absolute: 5.0,
    };

    fn points(values: &[f64]) -> Vec<(f64, f64)> {
        values
            .iter()
            .enumerate()
            .map(|(t, v)| (t as f64, *v))
            .collect()
    }

    #[test]
    fn a_figure_that_oscillates_as_it_did_in_warm_up_is_flat() {
        // Warm-up ends at 10 s; the reference is the peak of 5..=10 s (100).
        let mut v = vec![
            10.0, 50.0, 80.0, 90.0, 95.0, 100.0, 90.0, 100.0, 92.0, 100.0, 95.0,
        ];
        v.extend([100.0, 91.0, 100.0, 90.0, 130.0, 96.0]);
        let f = judge("x", &points(&v), 10.0, TOL).unwrap();
        assert_eq!(f.reference, 100.0);
        assert_eq!(f.limit, 130.0);
        assert_eq!((f.max_after_warmup, f.max_at_s), (130.0, 15.0));
        assert!(f.flat, "{f:?}");
    }

    #[test]
    fn a_figure_that_climbs_after_warm_up_is_not() {
        let v: Vec<f64> = (0..60).map(|t| 100.0 + t as f64).collect();
        let f = judge("x", &points(&v), 10.0, TOL).unwrap();
        assert_eq!((f.reference, f.limit), (110.0, 142.5));
        assert!(!f.flat, "{f:?}");
        assert!((f.slope_per_hour - 3600.0).abs() < 1e-6, "{f:?}");
        assert_eq!(f.last, 159.0);
    }

    #[test]
    fn no_samples_no_verdict() {
        assert!(judge("x", &points(&[1.0, 2.0]), 10.0, TOL).is_none());
        assert!(judge("x", &[], 10.0, TOL).is_none());
    }

    #[test]
    fn descriptors_closed_during_the_scan_are_counted_in_neither() {
        let t = |s: &str| Some(std::path::PathBuf::from(s));
        let targets = [
            t("socket:[12]"),
            None,
            t("/dev/null"),
            None,
            t("socket:[13]"),
            t("pipe:[7]"),
        ];
        assert_eq!(count_descriptors(targets.into_iter()), (4.0, 2.0));
    }

    #[test]
    fn derived_series_skip_samples_that_lack_a_part() {
        let s = |t: f64, fds: Option<f64>, sockets: Option<f64>| Sample {
            t_s: t,
            fds,
            socket_fds: sockets,
            ..Sample::default()
        };
        let all = series(&[s(0.0, Some(10.0), Some(7.0)), s(1.0, Some(11.0), None)]);
        let (_, not_sockets) = all.iter().find(|(n, _)| *n == "fds_not_sockets").unwrap();
        assert_eq!(not_sockets, &vec![(0.0, 3.0)]);
    }
}
