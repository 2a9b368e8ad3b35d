//! Every metric tandem exports: its name, help text, unit and buckets live here, and call
//! sites use the constants. Names start with `tandem_`, use base units, counters end in
//! `_total`; labels are bounded (model, version, device, reason, code).

mod float;

use std::sync::OnceLock;

pub use float::{FloatCounter, float_counter};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const REQUESTS: &str = "tandem_requests_total";
pub const REQUEST_DURATION: &str = "tandem_request_duration_seconds";
pub const QUEUE_DURATION: &str = "tandem_queue_duration_seconds";
pub const COMPUTE_DURATION: &str = "tandem_compute_duration_seconds";
pub const BATCH_ROWS: &str = "tandem_batch_rows";
pub const BATCH_TOKENS: &str = "tandem_batch_tokens";
pub const BATCH_PADDING_RATIO: &str = "tandem_batch_padding_ratio";
pub const REQUEST_TOKENS: &str = "tandem_request_tokens";
pub const COST_PER_1K_TOKENS: &str = "tandem_cost_per_1k_tokens_usd";
pub const BATCHES: &str = "tandem_batches_total";
pub const QUEUE_DEPTH: &str = "tandem_queue_depth_requests";
pub const REQUESTS_REJECTED: &str = "tandem_requests_rejected_total";
pub const REQUESTS_REJECTED_BESIDE_TRAINER: &str = "tandem_requests_rejected_beside_trainer_total";
pub const REQUESTS_ADMITTED_LATE: &str = "tandem_requests_admitted_late_total";
pub const DEVICE_BUSY_RATIO: &str = "tandem_device_busy_ratio";
pub const PROCESS_CONTEXT_SWITCHES: &str = "tandem_process_context_switches_total";
pub const MODEL_VERSION_LOADED: &str = "tandem_model_version_loaded";
pub const MODEL_LOADS: &str = "tandem_model_loads_total";
pub const CONNECTIONS: &str = "tandem_http_connections";
pub const CONNECTIONS_CUT: &str = "tandem_http_connections_cut_total";
pub const HTTP_UNAUTHORIZED: &str = "tandem_http_unauthorized_total";
pub const TLS_FAILED: &str = "tandem_http_tls_handshakes_failed_total";
pub const SLO_BUDGET: &str = "tandem_slo_p99_budget_seconds";
pub const SLO_EFFECTIVE_BUDGET: &str = "tandem_slo_effective_budget_seconds";
pub const OBSERVED_P99: &str = "tandem_observed_p99_seconds";
pub const OBSERVED_THROUGHPUT: &str = "tandem_observed_throughput_requests_per_second";
pub const PREDICTED_BATCH_DURATION: &str = "tandem_predicted_batch_duration_seconds";
pub const PREDICTION_SPREAD: &str = "tandem_predicted_batch_spread_ratio";
pub const LOAD_RATIO: &str = "tandem_load_ratio";
pub const DEVICE_ALLOWANCE: &str = "tandem_training_allowance";
pub const TRAINERS_CONNECTED: &str = "tandem_trainers_connected";
pub const TRAINER_ALLOWANCE: &str = "tandem_trainer_allowance";
pub const TRAINER_DIRECTIVES: &str = "tandem_trainer_directives_total";
pub const TRAINER_ESCALATIONS: &str = "tandem_trainer_escalations_total";
pub const TRAINER_ACK_DURATION: &str = "tandem_trainer_ack_duration_seconds";
pub const TRAINER_SAMPLES_PER_SECOND: &str = "tandem_trainer_samples_per_second";
pub const TRAINER_LOSS: &str = "tandem_trainer_loss";
pub const COST: &str = "tandem_cost_usd_total";
pub const COST_PER_INFERENCE: &str = "tandem_cost_per_inference_usd";
pub const HARVESTED_DEVICE_SECONDS: &str = "tandem_training_harvested_device_seconds_total";
pub const CACHE_HITS: &str = "tandem_cache_hits_total";
pub const CACHE_MISSES: &str = "tandem_cache_misses_total";
pub const CACHE_EVICTIONS: &str = "tandem_cache_evictions_total";
pub const CACHE_BYTES: &str = "tandem_cache_bytes";
pub const CACHE_ENTRIES: &str = "tandem_cache_entries";
pub const CACHE_SAVED_DEVICE_SECONDS: &str = "tandem_cache_saved_device_seconds_total";
pub const CACHE_SAVED_USD: &str = "tandem_cache_saved_usd_total";

/// Latency buckets from 100 µs to 10 s: fine where budgets live (1–100 ms).
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
    0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Tokens per request and per batch: a sentence is tens, a batch up to tens of thousands.
const TOKEN_BUCKETS: &[f64] = &[
    8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
];
const ROW_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    /// A counter of fractions ([`float`]), rendered apart from the recorder's.
    FloatCounter,
    Gauge,
    Histogram,
}

/// Every metric's kind, whether it is in seconds, and its help text. A model's
/// `tandem_model_version_loaded` is rendered apart ([`render_loaded_versions`]).
#[rustfmt::skip]
const HELP: &[(&str, Kind, bool, &str)] = &[
    (REQUESTS, Kind::Counter, false, "Inference requests answered, by model, protocol (http, grpc) and HTTP status code (a gRPC status as its HTTP equivalent)."),
    (REQUEST_DURATION, Kind::Histogram, true, "Time from a request's arrival to its response being ready."),
    (QUEUE_DURATION, Kind::Histogram, true, "Time from a request's arrival to its batch starting: decoding, validation and the queue."),
    (COMPUTE_DURATION, Kind::Histogram, true, "Time a batch's forward pass took on the device."),
    (BATCH_ROWS, Kind::Histogram, false, "Rows in each batch run (a text model's: texts)."),
    (BATCHES, Kind::Counter, false, "Batches run, by the reason the batcher released them (full, deadline, timer, idle)."),
    (QUEUE_DEPTH, Kind::Gauge, false, "Requests waiting in the model's queue."),
    (REQUESTS_REJECTED, Kind::Counter, false, "Requests turned away, each counted once, by reason: shed (predicted to miss its deadline), door_closed (refused unparsed just after a shed), late (refused unparsed: the queue ahead ends past its budget), unread (refused unparsed: it sat in its socket past its budget), queue_full, expired (its deadline passed before its batch), deadline_passed (its propagated deadline had passed on arrival), abandoned (its client left first)."),
    (REQUESTS_REJECTED_BESIDE_TRAINER, Kind::Counter, false, "Requests turned away while a co-located trainer held an allowance, by reason (also counted in tandem_requests_rejected_total): serving should have taken the device back first."),
    (REQUESTS_ADMITTED_LATE, Kind::Counter, false, "Requests admitted though predicted to finish past the budget: on the 1% a p99 leaves, or while a trainer computes (which the coordinator then stops)."),
    (DEVICE_BUSY_RATIO, Kind::Gauge, false, "Share of the last second the device spent running batches."),
    (PROCESS_CONTEXT_SWITCHES, Kind::Counter, false, "Context switches of the server process, every thread, waits and preemptions."),
    (MODEL_LOADS, Kind::Counter, false, "Model version loads, by outcome (ok, error)."),
    (CONNECTIONS, Kind::Gauge, false, "Open HTTP connections."),
    (HTTP_UNAUTHORIZED, Kind::Counter, false, "Requests refused 401 for a missing or wrong API key, by API family (v2, openai, tei, cohere, metrics)."),
    (TLS_FAILED, Kind::Counter, false, "TLS handshakes that failed, by reason: handshake (no common protocol or cipher, an untrusted or missing client certificate, plain HTTP sent to a TLS listener), timeout (not done within limits.header_read_timeout_ms)."),
    (CONNECTIONS_CUT, Kind::Counter, false, "HTTP connections the server closed on a client, by reason: header_timeout (no complete request head within limits.header_read_timeout_ms, idle keep-alive connections included), write_stall (nothing of a response read within limits.response_write_timeout_ms), ping_timeout (an HTTP/2 keep-alive ping unanswered). A stalled body is answered 408 and counted in tandem_requests_total."),
    (SLO_BUDGET, Kind::Gauge, true, "The model's p99 latency budget (the adaptive policy meets it; the trainer coordinator holds serving to it under any policy)."),
    (SLO_EFFECTIVE_BUDGET, Kind::Gauge, true, "The share of the budget the queue and device may use, as the feedback loop set it."),
    (OBSERVED_P99, Kind::Gauge, true, "p99 of arrival-to-response latency over the last 2 s, under any policy (from a sample of at most 4,096 latencies, each weighted by the completions it stands for)."),
    (BATCH_TOKENS, Kind::Histogram, false, "Tokens per batch of a text model (sequences packed end to end)."),
    (REQUEST_TOKENS, Kind::Histogram, false, "Tokens per request to a text model, after truncation, special tokens included."),
    (BATCH_PADDING_RATIO, Kind::Gauge, false, "Share of the token positions a text model's last batch computed that were padding: 0, since sequences are packed end to end."),
    (COST_PER_1K_TOKENS, Kind::Gauge, false, "Inference cost charged to a text model over [cost] window_s, per 1,000 tokens it answered in that window; holds its last value while the model answers nothing."),
    (LOAD_RATIO, Kind::Gauge, false, "The autoscaling signal: requests offered over the last 5 s (refused ones included) divided by the rate the model can serve within its p99 budget (the lower of the device's, from the latency model, and the cores', at 85% busy). Scale out above 1."),
    (OBSERVED_THROUGHPUT, Kind::Gauge, false, "Requests completed per second over the last 2 s (an exact count, at any rate)."),
    (PREDICTED_BATCH_DURATION, Kind::Gauge, true, "The latency model's prediction for a batch of efficient size."),
    (PREDICTION_SPREAD, Kind::Gauge, false, "How far recent batch times strayed from the latency model's prediction: mean absolute deviation, relative (its high quantile is the mean times 1 + 3 x this)."),
    (DEVICE_ALLOWANCE, Kind::Gauge, false, "Share of the device lent to training (0..1), from serving's latency headroom."),
    (TRAINERS_CONNECTED, Kind::Gauge, false, "Training processes connected to the coordinator."),
    (TRAINER_ALLOWANCE, Kind::Gauge, false, "Allowance in the last directive sent to this trainer (by slot)."),
    (TRAINER_DIRECTIVES, Kind::Counter, false, "Directives sent to this trainer (by slot)."),
    (TRAINER_ESCALATIONS, Kind::Counter, false, "Pauses not acknowledged in time and enforced with SIGSTOP (by slot)."),
    (TRAINER_ACK_DURATION, Kind::Histogram, true, "Time from a directive to the trainer's ack."),
    (TRAINER_SAMPLES_PER_SECOND, Kind::Gauge, false, "Training samples per second the trainer last reported."),
    (TRAINER_LOSS, Kind::Gauge, false, "Training loss the trainer last reported."),
    (COST, Kind::FloatCounter, false, "Device cost so far in US dollars, charged to inference or training by the share lent."),
    (COST_PER_INFERENCE, Kind::Gauge, false, "Inference cost charged to the model over [cost] window_s (split by the device time its batches took) divided by the requests it answered in that window, in US dollars; holds its last value while the model answers nothing."),
    (HARVESTED_DEVICE_SECONDS, Kind::FloatCounter, true, "Device-seconds lent to training so far."),
    (CACHE_HITS, Kind::Counter, false, "Inputs answered from the response cache (a text, a row, or a whole request where the model's rows are not independent), counting those another request was computing."),
    (CACHE_MISSES, Kind::Counter, false, "Inputs looked up in the response cache and computed."),
    (CACHE_EVICTIONS, Kind::Counter, false, "Entries that left the response cache, by reason: size (evicted, or not admitted, to keep within max_bytes), expired, invalidated (a version unloaded or replaced, or the model's cache cleared), replaced."),
    (CACHE_BYTES, Kind::Gauge, false, "Bytes the model's entries take in the response cache, keys included."),
    (CACHE_ENTRIES, Kind::Gauge, false, "Entries the model has in the response cache."),
    (CACHE_SAVED_DEVICE_SECONDS, Kind::FloatCounter, true, "Device time the response cache saved so far: each hit counted at the model's mean device time per input computed so far."),
    (CACHE_SAVED_USD, Kind::FloatCounter, false, "What the device time the response cache saved so far would have cost, at [cost] device_hour_usd."),
];

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    for &(name, kind, seconds, help) in HELP {
        match (kind, seconds) {
            (Kind::Counter, _) => describe_counter!(name, help),
            (Kind::FloatCounter, _) => {}
            (Kind::Gauge, true) => describe_gauge!(name, Unit::Seconds, help),
            (Kind::Gauge, false) => describe_gauge!(name, help),
            (Kind::Histogram, true) => describe_histogram!(name, Unit::Seconds, help),
            (Kind::Histogram, false) => describe_histogram!(name, help),
        }
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder (once) and returns the handle that renders it.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(BATCH_ROWS.into()), ROW_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_tokens".into()), TOKEN_BUCKETS)
                })
                // Fails only on an empty bucket list, and ours are constants: were one
                // emptied, serve with the default buckets rather than not at all.
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let handle = match builder.install_recorder() {
                Ok(h) => h,
                // Another recorder exists (a test harness): render an empty registry.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            };
            describe();
            handle
        })
        .clone()
}

/// `tandem_model_version_loaded{model,version} 1` for every version loaded now, rendered
/// from the registry at each scrape: a version that is unloaded leaves the scrape with it,
/// so a trainer that checkpoints every few seconds does not grow `/metrics` without bound
/// (the recorder can set a gauge to 0 but never remove it).
pub fn render_loaded_versions(versions: &[(String, u64)]) -> String {
    use std::fmt::Write;
    let mut out = String::from("\n");
    out += &format!(
        "# HELP {MODEL_VERSION_LOADED} 1 for each model version loaded and serving now.\n# TYPE {MODEL_VERSION_LOADED} gauge\n"
    );
    for (model, version) in versions {
        let _ = writeln!(
            out,
            "{MODEL_VERSION_LOADED}{{model=\"{}\",version=\"{version}\"}} 1",
            escape_label(model)
        );
    }
    out
}

/// A model's answered-request series, made at 0 when it starts serving, so that alerts and
/// panels reading them find a series before the first answer (the status and protocol
/// that most answers carry; others are born with their first answer).
pub fn register_request_series(model: &str) {
    let model = model.to_string();
    metrics::counter!(REQUESTS, "model" => model.clone(), "code" => "200", "protocol" => "http")
        .increment(0);
    let _ = metrics::histogram!(REQUEST_DURATION, "model" => model, "protocol" => "http");
}

/// Every float counter made so far ([`float_counter`]), as exposition text.
pub fn render_float_counters() -> String {
    float::render(|name| {
        HELP.iter()
            .find(|(n, ..)| *n == name)
            .map_or("", |(.., help)| *help)
    })
}

/// A label value as the exposition format spells it: backslash, quote and newline escaped.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric name this file declares has its help text: promtool and dashboards
    /// read it, and a name without one is easy to add by accident.
    #[test]
    fn every_declared_metric_has_help_text() {
        let described: Vec<&str> = HELP.iter().map(|(name, ..)| *name).collect();
        let declared = include_str!("mod.rs").lines().filter_map(|l| {
            let (name, value) = l.strip_prefix("pub const ")?.split_once(": &str = \"")?;
            Some((name, value.strip_suffix("\";")?))
        });
        for (name, value) in declared {
            assert!(
                described.contains(&value) || value == MODEL_VERSION_LOADED,
                "{name} ({value}) has no help text in HELP"
            );
        }
    }

    #[test]
    fn loaded_versions_render_with_escaped_labels() {
        let text = render_loaded_versions(&[("m".into(), 2), ("a\"b\\c".into(), 1)]);
        assert!(text.contains("tandem_model_version_loaded{model=\"m\",version=\"2\"} 1\n"));
        assert!(text.contains("model=\"a\\\"b\\\\c\""), "{text}");
        assert!(
            text.trim_start()
                .starts_with("# HELP tandem_model_version_loaded")
        );
    }
}
