//! The autoscaling signal, `tandem_load_ratio{model}`: the demand offered to a model over
//! the last [`WINDOW`] divided by what it can serve within its p99 budget, so that "scale
//! out when above 1" is the whole rule. Requests refused count as demand: a server that
//! sheds half its requests reads 2, not 1.
//!
//! What it can serve is the lower of two capacities:
//! - the device's, from the latency model: the largest batch whose high-quantile time,
//!   twice over (a request waits for the batch running when it arrives, then runs in its
//!   own), fits the budget, at that batch's mean rate;
//! - the process's cores', against [`CPU_USABLE`] of them: the HTTP front end's measured
//!   share (the process's, less what batches took) scaled from the requests answered to
//!   those offered, plus, for a CPU model, the device's share at this demand. The front end
//!   runs on the same cores as a CPU model (and beside a GPU's), and past that share the
//!   p99 no longer holds. The batches count at the device's rate, not at what they take
//!   now: under a light load batches are small and cost more per request than the larger
//!   ones a heavier load forms. Models sharing a device count the front end in proportion
//!   to their share of its busy time, so that their ratios add up to the pod's.

use std::time::Duration;

use tokio::time::Instant;

use super::latency::LatencyModel;
use super::window::EventCount;

/// Demand and answers are counted over this span.
pub const WINDOW: Duration = Duration::from_secs(5);

/// The share of the cores beyond which latency, not throughput, gives.
pub const CPU_USABLE: f64 = 0.85;

/// What the ratio is computed from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadInputs {
    /// Requests offered per second, refused ones included.
    pub demand: f64,
    /// Requests answered per second.
    pub served: f64,
    /// Requests per second the device sustains within the budget.
    pub device_capacity: f64,
    /// The share of the cores the HTTP front end used lately for this model (the process's
    /// share less what batches took), if measured.
    pub front_share: Option<f64>,
    /// Whether the model's batches run on those cores (a CPU device).
    pub computes_on_cores: bool,
}

/// Demand over capacity (0 without demand).
pub fn load_ratio(i: LoadInputs) -> f64 {
    if i.demand <= 0.0 {
        return 0.0;
    }
    let device = if i.device_capacity > 0.0 {
        i.demand / i.device_capacity
    } else {
        0.0
    };
    let cores = match i.front_share {
        Some(front) if i.served > 0.0 => {
            let compute = if i.computes_on_cores { device } else { 0.0 };
            (front * i.demand / i.served + compute) / CPU_USABLE
        }
        _ => 0.0,
    };
    device.max(cores)
}

/// Rows per second batches of at most `max_rows` sustain while a request waits for at most
/// one batch ahead of its own, both within `budget`.
pub fn device_capacity(model: &LatencyModel, budget: Duration, max_rows: usize) -> f64 {
    let fits = |rows: usize| model.predict_high(rows) * 2 <= budget;
    let mut best = 1;
    let mut rows = 1;
    while rows <= max_rows.max(1) {
        if fits(rows) {
            best = rows;
        }
        rows = if rows == max_rows {
            rows + 1
        } else {
            (rows * 2).min(max_rows.max(1))
        };
    }
    best as f64 / model.predict_mean(best).as_secs_f64().max(1e-9)
}

/// Counts offered and answered requests from the version's cumulative totals.
pub struct LoadMeter {
    demand: EventCount,
    served: EventCount,
    last: Option<(u64, u64)>,
    /// Rows per admitted request, smoothed: capacity is in rows, demand in requests.
    rows_per_request: f64,
}

impl Default for LoadMeter {
    fn default() -> LoadMeter {
        LoadMeter {
            demand: EventCount::new(WINDOW),
            served: EventCount::new(WINDOW),
            last: None,
            rows_per_request: 1.0,
        }
    }
}

impl LoadMeter {
    pub fn admitted(&mut self, rows: usize) {
        self.rows_per_request += 0.01 * (rows as f64 - self.rows_per_request);
    }

    /// Takes the version's totals so far (offered, completed) at `now`.
    pub fn observe(&mut self, offered: u64, completed: u64, now: Instant) {
        let (o, c) = self.last.unwrap_or((offered, completed));
        self.demand.add(offered.saturating_sub(o), now);
        self.served.add(completed.saturating_sub(c), now);
        self.last = Some((offered, completed));
    }

    pub fn ratio(&self, capacity_rows: f64, cores: CoresLoad, now: Instant) -> f64 {
        load_ratio(LoadInputs {
            demand: self.demand.rate(now),
            served: self.served.rate(now),
            device_capacity: capacity_rows / self.rows_per_request.max(1.0),
            front_share: cores.front_share,
            computes_on_cores: cores.computes_on_cores,
        })
    }
}

/// What the cores' side of the ratio takes from the batcher's measurements.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoresLoad {
    pub front_share: Option<f64>,
    pub computes_on_cores: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_demand_over_the_tighter_capacity() {
        let base = LoadInputs {
            demand: 300.0,
            served: 300.0,
            device_capacity: 1000.0,
            front_share: None,
            computes_on_cores: false,
        };
        assert!((load_ratio(base) - 0.3).abs() < 1e-9);
        // Shedding half: demand counts what was refused too.
        let shedding = LoadInputs {
            demand: 2000.0,
            served: 1000.0,
            ..base
        };
        assert!((load_ratio(shedding) - 2.0).abs() < 1e-9);
        // The front end is the limit (a GPU model): at 85% busy serving what is asked, 1.
        let front = LoadInputs {
            front_share: Some(CPU_USABLE),
            device_capacity: 1e9,
            ..base
        };
        assert!((load_ratio(front) - 1.0).abs() < 1e-9);
        assert_eq!(load_ratio(LoadInputs::default()), 0.0);
    }

    #[test]
    fn a_cpu_model_adds_the_device_share_its_demand_needs_to_the_front_end() {
        // 30% of the device's rate, the front end at 5.5%: the cores at 35.5% of 85%.
        let light = LoadInputs {
            demand: 300.0,
            served: 300.0,
            device_capacity: 1000.0,
            front_share: Some(0.055),
            computes_on_cores: true,
        };
        assert!((load_ratio(light) - 0.355 / CPU_USABLE).abs() < 1e-9);
        // The same front end beside a GPU: the device's ratio is the larger.
        let gpu = LoadInputs {
            computes_on_cores: false,
            ..light
        };
        assert!((load_ratio(gpu) - 0.3).abs() < 1e-9);
        // Twice the device's rate, half of it refused: the front end scales to the demand.
        let over = LoadInputs {
            demand: 2000.0,
            served: 1000.0,
            front_share: Some(0.1),
            ..light
        };
        assert!((load_ratio(over) - (0.2 + 2.0) / CPU_USABLE).abs() < 1e-9);
    }

    #[test]
    fn the_device_capacity_is_the_largest_batch_that_fits_twice() {
        // 1 ms + 0.1 ms per row, as warm-up measured it (spread 10%: high = 1.3 x mean).
        let samples: Vec<(usize, Duration)> = [1usize, 2, 4, 8, 16, 32, 64]
            .iter()
            .map(|&r| (r, Duration::from_micros(1000 + 100 * r as u64)))
            .collect();
        let model = LatencyModel::from_warmup(&samples);
        // 64 rows: 7.4 ms mean, 9.6 ms high; twice fits 20 ms.
        let roomy = device_capacity(&model, Duration::from_millis(20), 64);
        assert!((roomy - 64.0 / 0.0074).abs() < 1.0, "{roomy}");
        // 5 ms: 8 rows (1.8 ms mean, 2.34 ms high) fit, 16 do not.
        let tight = device_capacity(&model, Duration::from_millis(5), 64);
        assert!((tight - 8.0 / 0.0018).abs() < 1.0, "{tight}");
    }

    #[test]
    fn the_meter_counts_from_the_totals_it_is_given() {
        let t0 = Instant::now();
        let mut m = LoadMeter::default();
        for s in 0..=50u64 {
            // 100 offered and 50 answered per 100 ms.
            m.observe(s * 100, s * 50, t0 + Duration::from_millis(100 * s));
        }
        let at = t0 + Duration::from_secs(5);
        let cores = CoresLoad {
            front_share: Some(CPU_USABLE),
            computes_on_cores: false,
        };
        let r = m.ratio(1e9, cores, at);
        assert!((r - 2.0).abs() < 0.1, "{r}");
    }
}
