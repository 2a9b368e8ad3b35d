//! Not tests: the measurements behind the encoder's kernel choices, run by hand:
//! `cargo test --release -p kernels --lib encoder_bench -- --ignored --nocapture`.

use std::time::Instant;

use super::test_support::values;
use super::{AlignedVec, MatRef, PackedLinear, matmul};
use crate::{Activation, HostWeights};

/// The dense layers of a MiniLM / BERT-base-like encoder layer: (inputs, outputs).
const SHAPES: [(usize, usize); 4] = [(384, 1152), (384, 384), (384, 1536), (1536, 384)];

fn seconds(mut f: impl FnMut(), reps: usize) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    best
}

#[test]
#[ignore = "a measurement, run by hand"]
fn dense_kernel_choice() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for &(k, n) in &SHAPES {
        let w = values(k * n, 1);
        let b = values(n, 2);
        let packed = PackedLinear::new(HostWeights::F32(&w), &b, k, n).unwrap();
        for rows in [8usize, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192] {
            let x = AlignedVec::from_slice(&values(rows * k, 3));
            let mut y = AlignedVec::default();
            y.resize(rows * n);
            let flop = 2.0 * (rows * k * n) as f64;
            let reps = (2e9 / flop).clamp(1.0, 200.0) as usize;
            let tp = seconds(
                || {
                    packed
                        .forward(&x, rows, &mut y, Activation::Identity, threads)
                        .unwrap()
                },
                reps,
            );
            let tg = seconds(
                || {
                    matmul(
                        &mut y,
                        MatRef::new(&x, rows, k),
                        MatRef::new(&w, n, k).t(),
                        false,
                        threads,
                    )
                },
                reps,
            );
            println!(
                "{k:>5}x{n:<5} rows {rows:>5}: packed {:6.1} GFLOP/s, gemm {:6.1} GFLOP/s",
                flop / tp / 1e9,
                flop / tg / 1e9
            );
        }
    }
}
