//! Which batching policy a version runs, from its settings: the one place that names every
//! policy, so that the policies themselves (`policy.rs`'s static one, `adaptive.rs`) stand
//! side by side behind [`BatchPolicy`].

use std::time::Duration;

use super::adaptive::AdaptivePolicy;
use super::latency::LatencyModel;
use super::policy::{BatchPolicy, StaticPolicy};

/// The batching policy a model's settings ask for, batches of at most `max_rows` (of a
/// model taking `input`); the adaptive one starts from the version's warm-up timings.
pub fn for_settings(
    settings: &crate::config::ModelSettings,
    max_rows: usize,
    warmup: &[(usize, Duration)],
    input: &models::InputKind,
) -> Box<dyn BatchPolicy> {
    match settings.policy {
        crate::config::PolicyKind::Static => Box::new(StaticPolicy {
            max_batch_rows: max_rows,
            max_queue_delay: Duration::from_micros(settings.max_queue_delay_us),
        }),
        crate::config::PolicyKind::Adaptive => Box::new(
            AdaptivePolicy::new(
                settings.budget(),
                max_rows,
                LatencyModel::from_warmup(warmup),
            )
            .counting(row_unit(input)),
        ),
    }
}

/// What a batch's rows are, in messages: a text model's batches count token-units.
fn row_unit(input: &models::InputKind) -> &'static str {
    match input {
        models::InputKind::Dense { .. } | models::InputKind::Tensors(_) => "rows",
        models::InputKind::Text(_) => "token-units",
    }
}
