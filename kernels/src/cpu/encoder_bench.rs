//! Not tests: the measurements behind the encoder's kernel choices, run by hand:
//! `cargo test --release -p kernels --lib encoder_bench -- --ignored --nocapture`.

use std::time::Instant;

use super::test_support::values;
use super::{AlignedVec, MatRef, MatmulPrecision, PackedLinear, matmul};
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

/// CPU time of the calling thread: on a shared machine, the time this thread ran, which
/// other processes' load does not inflate (only one thread may do the work).
fn thread_cpu_seconds() -> f64 {
    super::clock::thread_cpu_time().as_secs_f64()
}

/// Like `seconds`, in this thread's CPU time: for single-threaded measurements.
fn cpu_seconds(mut f: impl FnMut(), reps: usize) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = thread_cpu_seconds();
        for _ in 0..reps {
            f();
        }
        best = best.min((thread_cpu_seconds() - t) / reps as f64);
    }
    best
}

/// One thread, in CPU time: the dense kernels' FLOP rate on a core, whatever else runs.
#[test]
#[ignore = "a measurement, run by hand"]
fn dense_kernel_choice_one_core() {
    // Pieces a kernel spawns run on this pool's one thread, which is the one measured.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(dense_one_core);
}

fn dense_one_core() {
    for &(k, n) in &SHAPES {
        let w = values(k * n, 1);
        let b = values(n, 2);
        let packed = PackedLinear::new(HostWeights::F32(&w), &b, k, n).unwrap();
        let with = |precision: MatmulPrecision| {
            let w = HostWeights::F32(&w);
            (precision.available())
                .then(|| PackedLinear::with_precision(w, &b, k, n, precision).unwrap())
        };
        let (bf16, bf16x3) = (with(MatmulPrecision::Bf16), with(MatmulPrecision::Bf16x3));
        for rows in [8usize, 16, 32, 64, 128, 256, 512, 1024, 2048] {
            let x = AlignedVec::from_slice(&values(rows * k, 3));
            let mut y = AlignedVec::default();
            y.resize(rows * n);
            let flop = 2.0 * (rows * k * n) as f64;
            let reps = (1e9 / flop).clamp(1.0, 100.0) as usize;
            let id = Activation::Identity;
            let tp = cpu_seconds(|| packed.forward(&x, rows, &mut y, id, 1).unwrap(), reps);
            let a = MatRef::new(&x, rows, k);
            let bt = MatRef::new(&w, n, k).t();
            let tg = cpu_seconds(|| matmul(&mut y, a, bt, false, 1), reps);
            let mut time = |layer: &Option<PackedLinear>| {
                layer.as_ref().map_or(f64::NAN, |l| {
                    cpu_seconds(|| l.forward(&x, rows, &mut y, id, 1).unwrap(), reps)
                })
            };
            let (tb, t3) = (time(&bf16), time(&bf16x3));
            println!(
                "{k:>5}x{n:<5} rows {rows:>5}: packed {:6.1} GFLOP/s, gemm {:6.1} GFLOP/s, \
                 bf16 products {:6.1} GFLOP/s, bf16x3 {:6.1} GFLOP/s (one core)",
                flop / tp / 1e9,
                flop / tg / 1e9,
                flop / tb / 1e9,
                flop / t3 / 1e9
            );
        }
    }
}

#[test]
#[ignore = "a measurement, run by hand"]
fn dense_kernel_choice() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for &(k, n) in &SHAPES {
        let w = values(k * n, 1);
        let b = values(n, 2);
        let packed = PackedLinear::new(HostWeights::F32(&w), &b, k, n).unwrap();
        let bf16 = MatmulPrecision::Bf16.available().then(|| {
            PackedLinear::with_precision(HostWeights::F32(&w), &b, k, n, MatmulPrecision::Bf16)
                .unwrap()
        });
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
            let tb = bf16.as_ref().map_or(f64::NAN, |l| {
                let id = Activation::Identity;
                seconds(|| l.forward(&x, rows, &mut y, id, threads).unwrap(), reps)
            });
            println!(
                "{k:>5}x{n:<5} rows {rows:>5}: packed {:6.1} GFLOP/s, gemm {:6.1} GFLOP/s, \
                 bf16 products {:6.1} GFLOP/s",
                flop / tp / 1e9,
                flop / tg / 1e9,
                flop / tb / 1e9
            );
        }
    }
}

/// Where one MiniLM-sized encoder layer spends its time, op by op, on packed batches of
/// equal-length sequences, with f32 products and (where the CPU has them) bf16 products in
/// the dense layers: one thread, in CPU time.
#[test]
#[ignore = "a measurement, run by hand"]
fn layer_breakdown() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(layer_breakdown_one_core);
}

/// Hidden and intermediate widths of a MiniLM-sized encoder layer.
const HIDDEN: usize = 384;
const INTERMEDIATE: usize = 1536;

/// The weights of one MiniLM-sized encoder layer, packed as serving packs them.
struct LayerWeights {
    qkv: PackedLinear,
    out: PackedLinear,
    up: PackedLinear,
    down: PackedLinear,
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

impl LayerWeights {
    fn new(precision: MatmulPrecision) -> LayerWeights {
        let dense = |k: usize, n: usize, seed| {
            let w = values(k * n, seed);
            PackedLinear::with_precision(
                HostWeights::F32(&w),
                &values(n, seed + 1),
                k,
                n,
                precision,
            )
            .unwrap()
        };
        let (h, inter) = (HIDDEN, INTERMEDIATE);
        LayerWeights {
            qkv: dense(h, 3 * h, 1),
            out: dense(h, h, 3),
            up: dense(h, inter, 5),
            down: dense(inter, h, 7),
            gamma: vec![1.0; h],
            beta: vec![0.0; h],
        }
    }
}

/// The activations of a batch of `batch` sequences of `len` tokens.
struct LayerBatch {
    tokens: usize,
    offsets: Vec<usize>,
    x: AlignedVec,
    x2: AlignedVec,
    qkv: AlignedVec,
    ctx: AlignedVec,
    sum: AlignedVec,
    up: AlignedVec,
    scratch: super::AttentionScratch,
}

impl LayerBatch {
    fn new(batch: usize, len: usize) -> LayerBatch {
        let (t, h) = (batch * len, HIDDEN);
        let x = AlignedVec::from_slice(&values(t * h, 9));
        LayerBatch {
            tokens: t,
            offsets: (0..=batch).map(|i| i * len).collect(),
            x2: x.clone(),
            x,
            qkv: AlignedVec::from_slice(&values(t * 3 * h, 10)),
            ctx: AlignedVec::from_slice(&values(t * h, 11)),
            sum: AlignedVec::from_slice(&values(t * h, 12)),
            up: AlignedVec::from_slice(&values(t * INTERMEDIATE, 13)),
            scratch: Default::default(),
        }
    }
}

/// Each op of the layer on `b`: its name, seconds per run (one thread, CPU time) and FLOPs.
fn time_ops(w: &LayerWeights, b: &mut LayerBatch) -> Vec<(&'static str, f64, f64)> {
    use super::{AttentionInput, AttentionShape, NormParams, add_layer_norm, biased_attention};
    let (t, h, inter, threads) = (b.tokens, HIDDEN, INTERMEDIATE, 1);
    let reps = (200_000 / t).clamp(3, 200);
    let time = |f: &mut dyn FnMut()| cpu_seconds(f, reps);
    let id = Activation::Identity;
    let shape = AttentionShape {
        hidden: h,
        heads: 12,
    };
    let norm = NormParams {
        gamma: &w.gamma,
        beta: &w.beta,
        eps: 1e-12,
    };
    let len = t / (b.offsets.len() - 1);
    let dense = |t: usize, k: usize, n: usize| 2.0 * (t * k * n) as f64;
    vec![
        (
            "qkv",
            time(&mut || w.qkv.forward(&b.x, t, &mut b.qkv, id, threads).unwrap()),
            dense(t, h, 3 * h),
        ),
        (
            "attention",
            time(&mut || {
                let input = AttentionInput {
                    qkv: &b.qkv,
                    offsets: &b.offsets,
                    shape,
                    bias: None,
                    window: None,
                    products: w.qkv.precision(),
                };
                biased_attention(input, &mut b.ctx, &mut b.scratch, threads).unwrap()
            }),
            4.0 * (t * len * h) as f64,
        ),
        (
            "attn_out",
            time(&mut || w.out.forward(&b.ctx, t, &mut b.sum, id, threads).unwrap()),
            dense(t, h, h),
        ),
        (
            "norm",
            time(&mut || add_layer_norm(&mut b.x2, Some(&b.sum), norm, threads).unwrap()),
            0.0,
        ),
        (
            // GELU in the kernel's epilogue, as the encoder runs it.
            "ffn_up+gelu",
            time(&mut || {
                let gelu = Activation::Gelu;
                w.up.forward(&b.x, t, &mut b.up, gelu, threads).unwrap()
            }),
            dense(t, h, inter),
        ),
        (
            "ffn_down",
            time(&mut || w.down.forward(&b.up, t, &mut b.sum, id, threads).unwrap()),
            dense(t, inter, h),
        ),
    ]
}

/// The layer's time (the norm counted twice, as a layer runs two) and each op's share.
fn print_breakdown(batch: usize, len: usize, ops: &[(&str, f64, f64)]) {
    let total: f64 = ops.iter().map(|o| o.1).sum::<f64>() + ops[3].1;
    let flops: f64 = ops.iter().map(|o| o.2).sum();
    println!(
        "batch {batch} x {len} tokens: {:.3} ms per layer, {:.1} GFLOP/s",
        total * 1e3,
        flops / total / 1e9
    );
    for (name, s, f) in ops {
        println!(
            "  {name:>9}: {:7.1} us {:5.1}% {:6.1} GFLOP/s",
            s * 1e6,
            100.0 * s / total,
            f / s / 1e9
        );
    }
}

fn layer_breakdown_one_core() {
    use MatmulPrecision::*;
    for precision in [F32, Bf16, Bf16x3] {
        if !precision.available() {
            continue;
        }
        println!("{precision:?} products");
        let weights = LayerWeights::new(precision);
        for (batch, len) in [(1usize, 13usize), (8, 13), (32, 13), (1, 256), (8, 256)] {
            let mut b = LayerBatch::new(batch, len);
            let ops = time_ops(&weights, &mut b);
            print_breakdown(batch, len, &ops);
        }
    }
}

/// Attention alone, one thread, in CPU time, at a few lengths, with f32 products and (where
/// the CPU has AMX) bf16 ones, for heads of 32 values (MiniLM's) and 64 (BERT-base's).
#[test]
#[ignore = "a measurement, run by hand"]
fn attention_one_core() {
    use super::{AttentionInput, AttentionScratch, AttentionShape, biased_attention};
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| {
        for (h, precision) in [384, 768]
            .into_iter()
            .flat_map(|h| [(h, MatmulPrecision::F32), (h, MatmulPrecision::Bf16)])
            .filter(|(_, p)| p.available())
        {
            let shape = AttentionShape {
                hidden: h,
                heads: 12,
            };
            for (batch, len) in [(32usize, 13usize), (8, 64), (2, 256), (1, 512)] {
                let t = batch * len;
                let offsets: Vec<usize> = (0..=batch).map(|i| i * len).collect();
                let qkv = AlignedVec::from_slice(&values(t * 3 * h, 10));
                let mut ctx = AlignedVec::from_slice(&values(t * h, 11));
                let mut scratch = AttentionScratch::default();
                let input = AttentionInput {
                    qkv: &qkv,
                    offsets: &offsets,
                    shape,
                    bias: None,
                    window: None,
                    products: precision,
                };
                let flop = 4.0 * (batch * len * len * h) as f64;
                let reps = (2e8 / flop).clamp(2.0, 200.0) as usize;
                let s = cpu_seconds(
                    || biased_attention(input, &mut ctx, &mut scratch, 1).unwrap(),
                    reps,
                );
                println!(
                    "attention d {} {precision:?}, {batch} x {len}: {:8.1} us, {:5.1} GFLOP/s \
                     (one core)",
                    h / 12,
                    s * 1e6,
                    flop / s / 1e9
                );
            }
        }
    });
}

/// GELU alone, one thread, CPU time: cycles per value at the machine's nominal 2.45 GHz.
#[test]
#[ignore = "a measurement, run by hand"]
fn gelu_one_core() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| {
        let n = 13 * 1536;
        let x0 = AlignedVec::from_slice(&values(n, 5));
        let mut x = x0.clone();
        let reps = 2000;
        let copy = cpu_seconds(|| x.copy_from_slice(&x0), reps);
        let both = cpu_seconds(
            || {
                x.copy_from_slice(&x0);
                super::gelu_in_place(&mut x, 1)
            },
            reps,
        );
        let per_value = (both - copy) / n as f64;
        println!(
            "gelu: {:.2} ns per value, {:.1} cycles at 2.45 GHz",
            per_value * 1e9,
            per_value * 2.45e9
        );
    });
}

/// The cores' f32 multiply-add peak, the denominator of "% of peak" (`super::peak`): on one
/// thread in its CPU time, and on every thread of the machine in wall time.
#[test]
#[ignore = "a measurement, run by hand"]
fn fma_peak() {
    const STEPS: usize = 20_000_000;
    let one = super::peak::measure(1, STEPS).gflops_per_cpu_second;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let all = super::peak::measure(threads, STEPS).wall_gflops;
    println!(
        "f32 FMA peak ({} lanes): one core {one:.1} GFLOP/s (CPU time); {threads} threads {all:.1} GFLOP/s (wall)",
        super::peak::lanes()
    );
}
