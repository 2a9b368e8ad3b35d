//! Not a test: the Rust side of benches/encoder_vs_pytorch.py, which runs it once per case
//! and round, alternating with sentence-transformers on PyTorch. Run by hand through that
//! script; alone:
//!
//!     TANDEM_BENCH_SPEC=spec.json cargo test --release -p models --test encoder_bench \
//!         -- --ignored --nocapture
//!
//! The spec (JSON): `{"model": DIR, "texts": [...], "batch": B, "seconds": S, "threads": N}`,
//! and optionally `"precision": "bf16"` (or `"bf16x3"`) for the dense layers' products
//! (`LoadOptions::cpu_precision`; f32 by default).
//! Batches of `batch` texts are taken from `texts` in turn, each tokenized (truncating at the
//! model's limit), packed, run and L2-normalised — what a client of the gateway gets — for
//! `seconds` after one warm-up pass over the texts. Prints one JSON line `RESULT {...}`:
//! tokens and texts per second end to end, and the forward pass alone: its FLOP rate in
//! wall-clock time, and per CPU-second of the process (a core's rate, which other load on
//! the machine does not lower).
//!
//! `peak` reads the same spec's `threads` and `seconds` and prints `RESULT {...}` with the
//! cores' f32 multiply-add peak on that many threads (`kernels::cpu::peak`): the script
//! measures it in turn with the cases, so that a share of peak divides two figures taken
//! at the same clock.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kernels::Device;
use models::encoder::{Encoder, PackedTokens, TextTokenizer, l2_normalize_rows};
use models::{LoadOptions, MatmulPrecision};

#[derive(serde::Deserialize)]
struct Spec {
    model: PathBuf,
    texts: Vec<String>,
    batch: usize,
    seconds: f64,
    threads: usize,
    #[serde(default)]
    precision: Precision,
}

/// `LoadOptions::cpu_precision`, as the spec names it.
#[derive(serde::Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Precision {
    #[default]
    F32,
    Bf16,
    Bf16x3,
}

#[derive(Default)]
struct Totals {
    batches: u64,
    texts: u64,
    tokens: u64,
    flops: u64,
    forward: Duration,
    /// CPU time of the whole process (all threads) during forward passes.
    forward_cpu: f64,
}

/// CPU time of the whole process, all threads: on a shared machine, the time this process
/// ran, which other processes' load does not inflate.
fn process_cpu_seconds() -> f64 {
    kernels::cpu::clock::process_cpu_time().as_secs_f64()
}

fn run_batch(
    encoder: &mut Encoder,
    tokenizer: &TextTokenizer,
    texts: &[String],
    packed: &mut PackedTokens,
    out: &mut Vec<f32>,
    totals: &mut Totals,
) {
    packed.clear();
    for t in texts {
        packed.push(&tokenizer.encode(t, true).expect("truncating never refuses"));
    }
    out.resize(texts.len() * encoder.output_width(), 0.0);
    let (started, cpu) = (Instant::now(), process_cpu_seconds());
    encoder.forward_packed(packed, out).unwrap();
    totals.forward += started.elapsed();
    totals.forward_cpu += process_cpu_seconds() - cpu;
    l2_normalize_rows(out, encoder.output_width());
    totals.batches += 1;
    totals.texts += texts.len() as u64;
    totals.tokens += packed.tokens() as u64;
    totals.flops += encoder.flops(packed);
}

#[test]
#[ignore = "a benchmark: run by benches/encoder_vs_pytorch.py"]
fn throughput() {
    let path = std::env::var("TANDEM_BENCH_SPEC").expect("TANDEM_BENCH_SPEC names a spec file");
    let spec: Spec = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(spec.threads)
        .build()
        .unwrap();
    pool.install(|| measure(&spec));
}

fn measure(spec: &Spec) {
    let cpu_precision = match spec.precision {
        Precision::F32 => MatmulPrecision::F32,
        Precision::Bf16 => MatmulPrecision::Bf16,
        Precision::Bf16x3 => MatmulPrecision::Bf16x3,
    };
    let options = LoadOptions { cpu_precision };
    let mut encoder = Encoder::load_with(&spec.model, &Device::Cpu, options).unwrap();
    encoder.set_threads(spec.threads);
    let tokenizer = TextTokenizer::from_dir(&spec.model, encoder.max_seq_len()).unwrap();
    let batches: Vec<&[String]> = spec.texts.chunks(spec.batch).collect();
    let (mut packed, mut out) = (PackedTokens::new(), Vec::new());
    let mut warm = Totals::default();
    for texts in &batches {
        run_batch(
            &mut encoder,
            &tokenizer,
            texts,
            &mut packed,
            &mut out,
            &mut warm,
        );
    }
    let mut totals = Totals::default();
    let started = Instant::now();
    let budget = Duration::from_secs_f64(spec.seconds);
    let mut i = 0;
    while started.elapsed() < budget {
        let texts = batches[i % batches.len()];
        run_batch(
            &mut encoder,
            &tokenizer,
            texts,
            &mut packed,
            &mut out,
            &mut totals,
        );
        i += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let forward = totals.forward.as_secs_f64();
    let result = serde_json::json!({
        "batches": totals.batches,
        "tokens_per_batch": totals.tokens as f64 / totals.batches as f64,
        "tokens_per_s": totals.tokens as f64 / elapsed,
        "texts_per_s": totals.texts as f64 / elapsed,
        "forward_tokens_per_s": totals.tokens as f64 / forward,
        "forward_gflops": totals.flops as f64 / forward / 1e9,
        "forward_share": forward / elapsed,
        "forward_gflops_per_cpu_second": totals.flops as f64 / totals.forward_cpu / 1e9,
    });
    println!("RESULT {result}");
}

#[derive(serde::Deserialize)]
struct PeakSpec {
    seconds: f64,
    threads: usize,
}

#[test]
#[ignore = "a benchmark: run by benches/encoder_vs_pytorch.py"]
fn peak() {
    let path = std::env::var("TANDEM_BENCH_SPEC").expect("TANDEM_BENCH_SPEC names a spec file");
    let spec: PeakSpec = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    // A short run sizes the measured one to the spec's seconds: a step is sixteen FMAs of
    // the vector width on each thread.
    let probe = kernels::cpu::peak::measure(spec.threads, 1_000_000);
    let flops_per_step = (16 * kernels::cpu::peak::lanes() * 2 * spec.threads) as f64;
    let steps = (spec.seconds * probe.wall_gflops * 1e9 / flops_per_step) as usize;
    let peak = kernels::cpu::peak::measure(spec.threads, steps);
    let result = serde_json::json!({
        "gflops": peak.wall_gflops,
        "gflops_per_cpu_second": peak.gflops_per_cpu_second,
    });
    println!("RESULT {result}");
}
