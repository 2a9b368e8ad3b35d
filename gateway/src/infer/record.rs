//! An answered request's latency back to its version's batcher and into its statistics.

use super::Arrival;
use crate::batching::Completed;
use crate::batching::feedback::Answered;
use crate::lifecycle::registry::ModelVersion;
use crate::stats::RequestTimes;

/// A request is answered (its response written as soon as the handler returns, on this
/// task): the latency the client sees, less the wire, goes to the feedback loop and the
/// statistics. `queued` is when it was submitted; `rows` the rows (or texts) it ran.
pub fn record(
    version: &ModelVersion,
    arrival: &Arrival,
    queued: std::time::Instant,
    rows: usize,
    completed: &Completed,
) {
    let latency = arrival.arrived.elapsed();
    let after_compute = latency.saturating_sub(completed.queue_time + completed.compute_time);
    version.core.answered(Answered {
        latency,
        after_compute,
    });
    // The worker's queue time counts from arrival; the stats split off decoding.
    let input = queued.saturating_duration_since(arrival.arrived);
    version.stats.succeeded(
        rows,
        completed.tokens,
        RequestTimes {
            total: latency,
            input,
            queue: completed.queue_time.saturating_sub(input),
            infer: completed.compute_time,
            output: after_compute,
        },
    );
}
