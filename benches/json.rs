//! Decoding an inference request's JSON: the per-request cost that, with HTTP, bounds how
//! many single-row requests two cores serve (the profile of a load test puts number parsing
//! at about a quarter of the server's CPU). `decode` is the server's own one-pass reader
//! (`gateway::protocol::json_de`), `decode_varied` the same over 64 bodies in turn (as
//! clients send new values each time; one body repeated lets the branch predictor learn
//! it), `decode_varied_f64` the same values printed as Python clients print them (16–17
//! digits), `decode_serde_json` the same with serde_json, and `skip` serde_json only scanning
//! the same bytes, the floor for anything built on it.
//!
//!     cargo bench -p gateway --bench json

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gateway::protocol::{InferRequest, json_de};
use std::hint::black_box;

/// A single-row request as clients send it: 784 normally distributed f32 values, printed
/// in full (shortest round-trip form).
fn body(width: usize) -> Vec<u8> {
    body_with_seed(width, 7)
}

fn body_with_seed(width: usize, seed: u64) -> Vec<u8> {
    let mut rng = models::rng::SplitMix64::new(seed);
    let values: Vec<f32> = (0..width).map(|_| rng.normal()).collect();
    request(values)
}

/// The same values as Python clients print them: numpy's float32 through `tolist()` and
/// `json.dumps`, that is the f64 of each f32 in shortest form (16–17 digits).
fn body_as_f64(width: usize, seed: u64) -> Vec<u8> {
    let mut rng = models::rng::SplitMix64::new(seed);
    let values: Vec<f64> = (0..width).map(|_| rng.normal() as f64).collect();
    request(values)
}

fn request<T: serde::Serialize>(values: Vec<T>) -> Vec<u8> {
    let width = values.len();
    serde_json::json!({
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, width], "data": values}]
    })
    .to_string()
    .into_bytes()
}

fn decode(c: &mut Criterion) {
    let body = body(784);
    let mut g = c.benchmark_group("infer_request_784_fp32");
    g.throughput(Throughput::Elements(784));
    g.bench_function("decode", |b| {
        b.iter(|| {
            let r: InferRequest = json_de::from_slice(black_box(&body)).unwrap();
            r
        })
    });
    // Clients send new values each time: 64 bodies in turn, so that no branch predictor
    // can learn one body's numbers.
    let bodies: Vec<Vec<u8>> = (0..64).map(|seed| body_with_seed(784, seed)).collect();
    let mut next = 0;
    g.bench_function("decode_varied", |b| {
        b.iter(|| {
            next = (next + 1) % bodies.len();
            let r: InferRequest = json_de::from_slice(black_box(&bodies[next])).unwrap();
            r
        })
    });
    let bodies: Vec<Vec<u8>> = (0..64).map(|seed| body_as_f64(784, seed)).collect();
    g.bench_function("decode_varied_f64", |b| {
        b.iter(|| {
            next = (next + 1) % bodies.len();
            let r: InferRequest = json_de::from_slice(black_box(&bodies[next])).unwrap();
            r
        })
    });
    g.bench_function("decode_serde_json", |b| {
        b.iter(|| {
            let r: InferRequest = serde_json::from_slice(black_box(&body)).unwrap();
            r
        })
    });
    g.bench_function("skip", |b| {
        b.iter(|| {
            let r: serde::de::IgnoredAny = serde_json::from_slice(black_box(&body)).unwrap();
            r
        })
    });
    g.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
