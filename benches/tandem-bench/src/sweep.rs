//! `tandem-bench sweep`: goodput at p99 ≤ budget — the most requests per second answered
//! 200 within the budget, over runs whose 200s keep their p99 within it and where nothing
//! failed (429s, load shed at the door, are allowed unless `--min-within-budget` bounds
//! them with the late answers; they are not goodput). Rates are found by doubling, then
//! bisecting, over `bench load` runs; a failing rate is run again (`--confirm-failures`)
//! before the search turns below it.

use anyhow::Context;
use serde::Serialize;

use super::load::{LoadReport, measure, print_report};
use crate::cli::SweepArgs;

#[derive(Debug, Serialize)]
pub struct SweepReport {
    budget_ms: f64,
    /// The highest offered rate that passed, if any did.
    best_rps: Option<f64>,
    /// The most goodput of a passing run.
    pub best_goodput_rps: Option<f64>,
    runs: Vec<(bool, LoadReport)>,
}

/// Whether a run kept the promise: the p99 of its 200s within the budget, every request
/// answered 200 or shed with 429 (no errors, timeouts or client overload), and at least
/// `min_within_budget` of them answered 200 within the budget.
fn passes(r: &LoadReport, min_within_budget: f64) -> bool {
    let failed: u64 = r
        .outcomes
        .iter()
        .filter(|(k, _)| k.as_str() != "200" && k.as_str() != "429")
        .map(|(_, v)| v)
        .sum();
    let ok = r.outcomes.get("200").copied().unwrap_or(0);
    failed == 0 && ok > 0 && r.p99_ms <= r.budget_ms && r.within_budget >= min_within_budget
}

pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.load.threads.max(1))
        .enable_all()
        .build()?;
    let report = runtime.block_on(search(&args))?;
    match (report.best_rps, report.best_goodput_rps) {
        (Some(best), Some(goodput)) => println!(
            "highest rate with p99 <= {} ms: {:.0} req/s offered; goodput {:.0} req/s",
            report.budget_ms, best, goodput
        ),
        _ => println!("no rate passed (even {:.0} req/s)", args.min_rate),
    }
    if let Some(path) = &args.load.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        let runs: Vec<&LoadReport> = report.runs.iter().map(|(_, r)| r).collect();
        super::plot::sweep(&runs, &path.with_extension("svg"))?;
    }
    Ok(())
}

/// Doubles from the minimum rate until one fails (or the maximum passes), then bisects
/// between the last pass and the first failure.
pub async fn search(args: &SweepArgs) -> anyhow::Result<SweepReport> {
    let mut runs = Vec::new();
    let (mut lo, mut hi) = (None::<f64>, None::<f64>);
    let mut rate = args.min_rate;
    loop {
        if judge(args, rate, &mut runs).await? {
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
    while let (Some(l), Some(h)) = (lo, hi) {
        if (h - l) / l <= args.precision {
            break;
        }
        let mid = (l + h) / 2.0;
        if judge(args, mid, &mut runs).await? {
            lo = Some(mid);
        } else {
            hi = Some(mid);
        }
    }
    let best_goodput_rps = runs
        .iter()
        .filter(|(ok, _)| *ok)
        .map(|(_, r)| r.goodput_rps)
        .fold(None, |m: Option<f64>, g| Some(m.map_or(g, |m| m.max(g))));
    Ok(SweepReport {
        budget_ms: args.load.budget_ms,
        best_rps: lo,
        best_goodput_rps,
        runs,
    })
}

/// Whether `rate` passes: one of its first 1 + `confirm_failures` runs does. Every run
/// goes into `runs`.
async fn judge(
    args: &SweepArgs,
    rate: f64,
    runs: &mut Vec<(bool, LoadReport)>,
) -> anyhow::Result<bool> {
    for _ in 0..=args.confirm_failures {
        let (ok, r) = try_rate(args, rate).await?;
        runs.push((ok, r));
        if ok {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One run at `rate`, printed, then the cooldown.
async fn try_rate(args: &SweepArgs, rate: f64) -> anyhow::Result<(bool, LoadReport)> {
    let mut load = args.load.clone();
    load.rate = rate;
    let r = measure(&load).await?;
    print_report(&r);
    let ok = passes(&r, args.min_within_budget);
    println!(
        "=> {:.0} req/s {}\n",
        rate,
        if ok { "PASSES" } else { "fails" }
    );
    tokio::time::sleep(std::time::Duration::from_secs_f64(args.cooldown)).await;
    Ok((ok, r))
}
