//! Triton's statistics extension: `GET /v2/models/stats`, `/v2/models/{m}/stats` and
//! `/v2/models/{m}/versions/{v}/stats`, cumulative per model version since it loaded —
//! what `tritonclient`'s `get_inference_statistics` and `perf_analyzer` read for the
//! server's side of a request. Prometheus has the same times as histograms; these are the
//! counts and nanoseconds Triton gives, in its JSON.
//!
//! What each part of a request counts here:
//! - `compute_input`: from the body's arrival to the request entering the queue (decoding
//!   and validation);
//! - `queue`: from entering the queue to its batch starting on a worker;
//! - `compute_infer`: the batch's forward pass (each request counts its whole batch);
//! - `compute_output`: from the batch's end to the response being ready to write;
//! - `success` / `fail`: the whole time of answered requests, 200 or not;
//! - `cache_hit`: requests answered wholly from the response cache, and the time their
//!   lookups took; `cache_miss`: requests that computed some of their inputs, and the time
//!   their lookups and stores took. A hit counts in `success`, and neither in
//!   `inference_count` nor in any part of a computed request's time, as in Triton; a
//!   partial hit's `inference_count` is the inputs it computed.
//!
//! Per batch size (`batch_stats`), from the worker: copying the requests' rows into the
//! batch buffer, the forward pass, and splitting the result back to the requests.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// A count of events and their total duration.
#[derive(Default)]
pub struct Tally {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Tally {
    pub fn add(&self, d: Duration) {
        self.count.fetch_add(1, Relaxed);
        self.ns.fetch_add(nanos(d), Relaxed);
    }

    fn json(&self) -> Value {
        json!({"count": self.count.load(Relaxed), "ns": self.ns.load(Relaxed)})
    }
}

#[derive(Clone, Copy, Default)]
struct BatchTally {
    count: u64,
    input_ns: u64,
    infer_ns: u64,
    output_ns: u64,
}

/// The parts of one answered request's time in the server.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestTimes {
    pub total: Duration,
    pub input: Duration,
    pub queue: Duration,
    pub infer: Duration,
    pub output: Duration,
}

#[derive(Default)]
pub struct VersionStats {
    success: Tally,
    fail: Tally,
    queue: Tally,
    compute_input: Tally,
    compute_infer: Tally,
    compute_output: Tally,
    cache_hit: Tally,
    cache_miss: Tally,
    /// Rows answered (Triton's inferences: a request of n rows is n).
    inference_count: AtomicU64,
    /// Tokens of the text requests answered.
    tokens: AtomicU64,
    /// Batches run, and the device time they took (copy in and forward pass).
    execution_count: AtomicU64,
    /// Rows (a text model's: texts) those batches ran.
    executed_rows: AtomicU64,
    device_ns: AtomicU64,
    last_inference_ms: AtomicU64,
    /// Written once per batch by the worker, read by the stats endpoint.
    batches: Mutex<BTreeMap<usize, BatchTally>>,
}

impl VersionStats {
    /// A request answered 200.
    pub fn succeeded(&self, rows: usize, tokens: usize, t: RequestTimes) {
        self.tokens.fetch_add(tokens as u64, Relaxed);
        self.success.add(t.total);
        self.compute_input.add(t.input);
        self.queue.add(t.queue);
        self.compute_infer.add(t.infer);
        self.compute_output.add(t.output);
        self.inference_count.fetch_add(rows as u64, Relaxed);
        self.touch();
    }

    /// A request answered 200 wholly from the response cache, whose lookups took `lookup`:
    /// a success, and no inference (as Triton counts a hit).
    pub fn answered_from_cache(&self, tokens: usize, total: Duration, lookup: Duration) {
        self.tokens.fetch_add(tokens as u64, Relaxed);
        self.success.add(total);
        self.cache_hit.add(lookup);
        self.touch();
    }

    /// A request that looked up the response cache and computed some of its inputs; its
    /// lookups and stores took `spent`.
    pub fn cache_missed(&self, spent: Duration) {
        self.cache_miss.add(spent);
    }

    /// The device time a row (a text model's: a text) has taken on average so far.
    pub fn device_time_per_row(&self) -> Duration {
        let rows = self.executed_rows.load(Relaxed).max(1);
        Duration::from_nanos(self.device_ns.load(Relaxed) / rows)
    }

    /// A request answered with an error, after `total` in the server.
    pub fn failed(&self, total: Duration) {
        self.fail.add(total);
        self.touch();
    }

    /// A batch of `rows` run by a worker: the rows' copy in, the forward pass, the split out.
    pub fn executed(&self, rows: usize, input: Duration, infer: Duration, output: Duration) {
        self.execution_count.fetch_add(1, Relaxed);
        self.executed_rows.fetch_add(rows as u64, Relaxed);
        self.device_ns.fetch_add(nanos(input + infer), Relaxed);
        let mut batches = self.batches.lock().unwrap_or_else(|p| p.into_inner());
        let b = batches.entry(rows).or_default();
        b.count += 1;
        b.input_ns += nanos(input);
        b.infer_ns += nanos(infer);
        b.output_ns += nanos(output);
    }

    /// Requests answered 200 so far.
    pub fn answered(&self) -> u64 {
        self.success.count.load(Relaxed)
    }

    /// Tokens of the text requests answered 200 so far.
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Relaxed)
    }

    /// Device time this version's batches have taken so far.
    pub fn device_time(&self) -> Duration {
        Duration::from_nanos(self.device_ns.load(Relaxed))
    }

    fn touch(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.last_inference_ms.store(now, Relaxed);
    }

    /// One entry of Triton's `model_stats`.
    pub fn to_json(&self, name: &str, version: u64) -> Value {
        let batches = self
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let tally = |count: u64, ns: u64| json!({"count": count, "ns": ns});
        let batch_stats: Vec<Value> = batches
            .iter()
            .map(|(rows, b)| {
                json!({
                    "batch_size": rows,
                    "compute_input": tally(b.count, b.input_ns),
                    "compute_infer": tally(b.count, b.infer_ns),
                    "compute_output": tally(b.count, b.output_ns),
                })
            })
            .collect();
        json!({
            "name": name,
            "version": version.to_string(),
            "last_inference": self.last_inference_ms.load(Relaxed),
            "inference_count": self.inference_count.load(Relaxed),
            "execution_count": self.execution_count.load(Relaxed),
            "inference_stats": {
                "success": self.success.json(),
                "fail": self.fail.json(),
                "queue": self.queue.json(),
                "compute_input": self.compute_input.json(),
                "compute_infer": self.compute_infer.json(),
                "compute_output": self.compute_output.json(),
                "cache_hit": self.cache_hit.json(),
                "cache_miss": self.cache_miss.json(),
            },
            "batch_stats": batch_stats,
        })
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_times_add_up_per_part_and_per_batch_size() {
        let s = VersionStats::default();
        let ms = Duration::from_millis;
        let t = RequestTimes {
            total: ms(10),
            input: ms(1),
            queue: ms(2),
            infer: ms(3),
            output: ms(4),
        };
        s.succeeded(2, 0, t);
        s.succeeded(1, 0, t);
        s.failed(ms(5));
        s.executed(3, ms(1), ms(3), ms(1));
        s.executed(3, ms(1), ms(3), ms(1));
        s.executed(1, ms(0), ms(2), ms(0));
        let j = s.to_json("m", 7);
        assert_eq!(j["version"], "7");
        assert_eq!(j["inference_count"], 3);
        assert_eq!(j["execution_count"], 3);
        let i = &j["inference_stats"];
        assert_eq!(i["success"], json!({"count": 2, "ns": 20_000_000}));
        assert_eq!(i["fail"], json!({"count": 1, "ns": 5_000_000}));
        assert_eq!(i["queue"]["ns"], 4_000_000);
        assert_eq!(i["compute_output"]["ns"], 8_000_000);
        assert_eq!(j["batch_stats"][0]["batch_size"], 1);
        assert_eq!(j["batch_stats"][1]["batch_size"], 3);
        assert_eq!(
            j["batch_stats"][1]["compute_infer"],
            json!({"count": 2, "ns": 6_000_000})
        );
        assert!(j["last_inference"].as_u64().unwrap() > 1_700_000_000_000);
    }
}
