//! SVG plots of bench runs (plotters): what an operator looks at.
//!
//! - [`timeline`]: one load run — p99 per second against the budget, with the server's
//!   mean batch size on a second axis.
//! - [`sweep`]: a sweep — p50 and p99 against offered load, with the budget, and goodput.

use std::path::Path;

use anyhow::Context;
use plotters::chart::DualCoordChartContext;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::load::LoadReport;

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e}")
}

pub fn timeline(r: &LoadReport, path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let secs = r.timeline.len().max(1) as f64;
    let y_max = r
        .timeline
        .iter()
        .map(|s| s.p99_ms)
        .fold(r.budget_ms * 1.5, f64::max);
    let rows_max = r
        .timeline
        .iter()
        .filter_map(|s| s.batch_rows)
        .fold(1.0, f64::max)
        * 1.2;
    let caption = format!(
        "{} — {:?} {:.0} req/s: p99 per second vs the {:.0} ms budget",
        r.model, r.shape, r.offered_rps, r.budget_ms
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .right_y_label_area_size(55)
        .build_cartesian_2d(0f64..secs, 0f64..y_max)
        .map_err(err)?
        .set_secondary_coord(0f64..secs, 0f64..rows_max);
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("p99 latency (ms)")
        .draw()
        .map_err(err)?;
    chart
        .configure_secondary_axes()
        .y_desc("mean rows per batch")
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            r.timeline.iter().map(|s| (s.t as f64 + 0.5, s.p99_ms)),
            RED.stroke_width(2),
        ))
        .map_err(err)?
        .label("p99 (ms)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .draw_series(LineSeries::new(
            [(0.0, r.budget_ms), (secs, r.budget_ms)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?
        .label("budget")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .draw_secondary_series(LineSeries::new(
            r.timeline
                .iter()
                .filter_map(|s| s.batch_rows.map(|b| (s.t as f64 + 0.5, b))),
            BLUE.stroke_width(2),
        ))
        .map_err(err)?
        .label("rows per batch")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present()
        .map_err(err)
        .with_context(|| format!("writing {}", path.display()))
}

/// A chart over offered load: latency on the left axis, goodput on the right.
type DualChart<'a, 'b> = DualCoordChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
>;

pub fn sweep(runs: &[&LoadReport], path: &Path) -> anyhow::Result<()> {
    let Some(first) = runs.first() else {
        return Ok(());
    };
    let mut runs: Vec<&LoadReport> = runs.to_vec();
    runs.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
    let x_max = runs.iter().map(|r| r.offered_rps).fold(1.0, f64::max) * 1.05;
    let budget = first.budget_ms;
    let y_max = (budget * 3.0).max(1.0);
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = sweep_chart(&root, first, x_max, y_max)?;
    draw_percentiles(&mut chart, &runs, y_max)?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, budget), (x_max, budget)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?
        .label("budget")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .draw_secondary_series(LineSeries::new(
            runs.iter().map(|r| (r.offered_rps, r.goodput_rps)),
            BLUE.stroke_width(2),
        ))
        .map_err(err)?
        .label("goodput (right axis)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present()
        .map_err(err)
        .with_context(|| format!("writing {}", path.display()))
}

/// The sweep's axes: offered load across, latency up to `y_max` on the left, goodput on
/// the right.
fn sweep_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    first: &LoadReport,
    x_max: f64,
    y_max: f64,
) -> anyhow::Result<DualChart<'a, 'b>> {
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!(
                "{} — latency against offered load ({:?})",
                first.model, first.shape
            ),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .right_y_label_area_size(65)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?
        .set_secondary_coord(0f64..x_max, 0f64..x_max);
    chart
        .configure_mesh()
        .x_desc("offered requests/s")
        .y_desc("latency (ms), clipped at 3x budget")
        .draw()
        .map_err(err)?;
    chart
        .configure_secondary_axes()
        .y_desc("goodput (requests/s within budget)")
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// p50 and p99 of each run, lines and points, clipped at `y_max`.
fn draw_percentiles(
    chart: &mut DualChart<'_, '_>,
    runs: &[&LoadReport],
    y_max: f64,
) -> anyhow::Result<()> {
    let clip = |v: f64| v.min(y_max);
    for (label, color, pick) in [
        (
            "p50",
            GREEN,
            (|r: &LoadReport| r.p50_ms) as fn(&LoadReport) -> f64,
        ),
        ("p99", RED, |r: &LoadReport| r.p99_ms),
    ] {
        chart
            .draw_series(LineSeries::new(
                runs.iter().map(|r| (r.offered_rps, clip(pick(r)))),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(
                runs.iter()
                    .map(|r| Circle::new((r.offered_rps, clip(pick(r))), 3, color.filled())),
            )
            .map_err(err)?;
    }
    Ok(())
}
