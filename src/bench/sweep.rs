//! `tandem bench sweep`: the highest offered rate at which the server keeps its p99 within
//! the budget, every request answered 200, and the achieved rate within 2% of the offered
//! one — found by doubling, then bisecting, over `bench load` runs.

use anyhow::Context;
use serde::Serialize;

use super::load::{LoadReport, measure, print_report};
use crate::cli::SweepArgs;

#[derive(Debug, Serialize)]
struct SweepReport {
    budget_ms: f64,
    /// The highest rate that passed, if any did.
    best_rps: Option<f64>,
    runs: Vec<(bool, LoadReport)>,
}

/// Whether a run kept the promise: p99 within budget, no failures, rate held.
pub fn passes(r: &LoadReport) -> bool {
    let ok = r.outcomes.get("200").copied().unwrap_or(0);
    ok == r.sent && r.p99_ms <= r.budget_ms && r.achieved_rps >= 0.98 * r.offered_rps
}

pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.load.threads.max(1))
        .enable_all()
        .build()?;
    let report = runtime.block_on(async {
        let mut runs = Vec::new();
        let try_rate = |rate: f64| {
            let mut load = args.load.clone();
            load.rate = rate;
            let cooldown = args.cooldown;
            async move {
                let r = measure(&load).await?;
                print_report(&r);
                let ok = passes(&r);
                println!(
                    "=> {:.0} req/s {}\n",
                    rate,
                    if ok { "PASSES" } else { "fails" }
                );
                tokio::time::sleep(std::time::Duration::from_secs_f64(cooldown)).await;
                anyhow::Ok((ok, r))
            }
        };
        let (mut lo, mut hi) = (None::<f64>, None::<f64>);
        // Double from the minimum until a rate fails (or the maximum passes).
        let mut rate = args.min_rate;
        loop {
            let (ok, r) = try_rate(rate).await?;
            runs.push((ok, r));
            if ok {
                lo = Some(rate);
                if rate >= args.max_rate {
                    break;
                }
                rate = (rate * 2.0).min(args.max_rate);
            } else {
                hi = Some(rate);
                break;
            }
        }
        // Bisect between the last pass and the first failure.
        while let (Some(l), Some(h)) = (lo, hi) {
            if (h - l) / l <= args.precision {
                break;
            }
            let mid = (l + h) / 2.0;
            let (ok, r) = try_rate(mid).await?;
            runs.push((ok, r));
            if ok {
                lo = Some(mid);
            } else {
                hi = Some(mid);
            }
        }
        anyhow::Ok(SweepReport {
            budget_ms: args.load.budget_ms,
            best_rps: lo,
            runs,
        })
    })?;
    match report.best_rps {
        Some(best) => println!(
            "highest rate with p99 <= {} ms: {:.0} req/s",
            report.budget_ms, best
        ),
        None => println!("no rate passed (even {:.0} req/s)", args.min_rate),
    }
    if let Some(path) = &args.load.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
