//! `tandem-bench forward`: latency and throughput of the MLP's forward pass in this process, per
//! batch size — the ceiling that serving over HTTP is measured against.

use std::time::{Duration, Instant};

use anyhow::Context;
use kernels::{DeviceSpec, Selection};
use models::Mlp;
use models::rng::SplitMix64;
use serde::Serialize;

use super::stats::quantile;
use crate::cli::ForwardArgs;

#[derive(Debug, Serialize)]
struct Report {
    model: String,
    dims: Vec<usize>,
    device: String,
    threads: usize,
    /// MiB written between timed calls (`--evict-mib`).
    evict_mib: u32,
    rows: Vec<Row>,
}

#[derive(Debug, Serialize)]
struct Row {
    batch: usize,
    iterations: usize,
    p50_us: f64,
    p99_us: f64,
    samples_per_second: f64,
    gflops: f64,
}

pub fn run(args: ForwardArgs) -> anyhow::Result<()> {
    let spec: DeviceSpec = args.device.parse()?;
    let selection = Selection::select(spec)?;
    tracing::info!(device = %selection.device.label(), reason = %selection.reason, "device selected");
    let threads = args.threads.unwrap_or_else(rayon::current_num_threads);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let mut mlp = Mlp::load(&args.model, &selection.device)
        .with_context(|| format!("loading {}", args.model.display()))?;
    mlp.set_threads(threads);

    let mut evict = vec![0u8; (args.evict_mib as usize) << 20];
    let mut rows = Vec::new();
    let mut rng = SplitMix64::new(7);
    for &batch in &args.batch {
        anyhow::ensure!(batch > 0, "batch sizes must be positive");
        let input: Vec<f32> = (0..batch * mlp.input_width())
            .map(|_| rng.normal())
            .collect();
        let mut output = vec![0f32; batch * mlp.output_width()];
        let row = pool.install(|| {
            time_batch(
                &mut mlp,
                &input,
                batch,
                &mut output,
                args.seconds,
                &mut evict,
            )
        })?;
        rows.push(row);
    }
    let report = Report {
        model: args.model.display().to_string(),
        dims: mlp.dims().to_vec(),
        device: selection.device.label(),
        threads,
        evict_mib: args.evict_mib,
        rows,
    };
    print_table(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn time_batch(
    mlp: &mut Mlp,
    input: &[f32],
    batch: usize,
    output: &mut [f32],
    seconds: f64,
    evict: &mut [u8],
) -> anyhow::Result<Row> {
    // Warm-up: caches, buffer growth, lazily compiled kernels.
    let warm_until = Instant::now() + Duration::from_secs_f64((seconds / 10.0).min(0.5));
    while Instant::now() < warm_until {
        mlp.forward_rows(input, batch, output)?;
    }
    let mut latencies = Vec::new();
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut passes = 0u8;
    while start.elapsed() < budget || latencies.len() < 20 {
        // One write per cache line; a different value each pass so no line is skipped.
        passes = passes.wrapping_add(1);
        for line in evict.chunks_mut(64) {
            line[0] = passes;
        }
        std::hint::black_box(&mut *evict);
        let t = Instant::now();
        mlp.forward_rows(input, batch, output)?;
        latencies.push(t.elapsed().as_secs_f64());
    }
    let total: f64 = latencies.iter().sum();
    latencies.sort_by(f64::total_cmp);
    let samples_per_second = (batch * latencies.len()) as f64 / total;
    Ok(Row {
        batch,
        iterations: latencies.len(),
        p50_us: quantile(&latencies, 0.5) * 1e6,
        p99_us: quantile(&latencies, 0.99) * 1e6,
        samples_per_second,
        gflops: 2.0 * mlp.macs_per_row() as f64 * samples_per_second / 1e9,
    })
}

fn print_table(report: &Report) {
    let dims: Vec<String> = report.dims.iter().map(|d| d.to_string()).collect();
    println!(
        "forward  model {} ({})  device {}  threads {}{}",
        report.model,
        dims.join("→"),
        report.device,
        report.threads,
        if report.evict_mib > 0 {
            format!("  {} MiB written before each call", report.evict_mib)
        } else {
            String::new()
        }
    );
    println!(
        "{:>6} {:>10} {:>10} {:>12} {:>9}",
        "batch", "p50 µs", "p99 µs", "samples/s", "GFLOP/s"
    );
    for r in &report.rows {
        println!(
            "{:>6} {:>10.1} {:>10.1} {:>12.0} {:>9.1}",
            r.batch, r.p50_us, r.p99_us, r.samples_per_second, r.gflops
        );
    }
}
