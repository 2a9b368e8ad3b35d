//! The CPU dense-layer kernels on the shapes of the 784→1024→1024→10 MLP, at the batch sizes
//! serving produces: the panel kernel serving runs (`kernels::cpu::PackedLinear`, with f32
//! weights and with the same weights stored as f16) against the two that training's `Linear`
//! chooses between — our dot-product small-batch kernel and the `gemm` crate, whose
//! crossover is `kernels::cpu::SMALL_BATCH_ROWS`; and what an input that does not start on a
//! cache line costs the small-batch kernel (why `kernels::cpu::AlignedVec` exists).
//!
//!     cargo bench --bench gemm

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels::cpu::{AlignedVec, CpuKernel, Linear, PackedLinear};
use kernels::{Activation, HostWeights};

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn dense_layers(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (k, n) in [(784usize, 1024usize), (1024, 1024), (1024, 10)] {
        let layer = Linear::new(values(k * n, 1), values(n, 2), k, n).unwrap();
        let packed =
            PackedLinear::new(HostWeights::F32(layer.weight()), layer.bias(), k, n).unwrap();
        let halves: Vec<half::f16> = layer
            .weight()
            .iter()
            .map(|&v| half::f16::from_f32(v))
            .collect();
        let packed_f16 = PackedLinear::new(HostWeights::F16(&halves), layer.bias(), k, n).unwrap();
        let mut group = c.benchmark_group(format!("dense_{k}x{n}"));
        group.sample_size(20);
        group.warm_up_time(std::time::Duration::from_millis(300));
        group.measurement_time(std::time::Duration::from_millis(1200));
        for rows in [1usize, 4, 8, 12, 16, 32, 64, 128, 256, 512] {
            let x = AlignedVec::from_slice(&values(rows * k, 3));
            let mut y = vec![0f32; rows * n];
            group.throughput(Throughput::Elements((2 * rows * k * n) as u64));
            for (name, layer) in [("packed", &packed), ("packed_f16", &packed_f16)] {
                group.bench_with_input(BenchmarkId::new(name, rows), &rows, |b, &rows| {
                    b.iter(|| {
                        layer
                            .forward(&x, rows, &mut y, Activation::Relu, threads)
                            .unwrap()
                    })
                });
            }
            for (name, kernel) in [
                ("small_batch", CpuKernel::SmallBatch),
                ("gemm", CpuKernel::Gemm),
            ] {
                group.bench_with_input(BenchmarkId::new(name, rows), &rows, |b, &rows| {
                    b.iter(|| {
                        layer
                            .forward_using(kernel, &x, rows, &mut y, Activation::Relu, threads)
                            .unwrap()
                    })
                });
            }
        }
        group.finish();
    }
}

fn input_alignment(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (k, n) in [(784usize, 1024usize), (1024, 1024)] {
        let layer = Linear::new(values(k * n, 1), values(n, 2), k, n).unwrap();
        let mut group = c.benchmark_group(format!("input_alignment_{k}x{n}"));
        group.sample_size(20);
        group.warm_up_time(std::time::Duration::from_millis(300));
        group.measurement_time(std::time::Duration::from_millis(1200));
        for rows in [8usize, 32] {
            // One buffer on a cache line; the input either at its start or 16 bytes in,
            // where a large `Vec<f32>` from the allocator starts.
            let buffer = AlignedVec::from_slice(&values(rows * k + 4, 3));
            let mut y = vec![0f32; rows * n];
            group.throughput(Throughput::Elements((2 * rows * k * n) as u64));
            for (name, offset) in [("on_a_cache_line", 0), ("16_bytes_in", 4)] {
                let x = &buffer[offset..offset + rows * k];
                group.bench_with_input(BenchmarkId::new(name, rows), &rows, |b, &rows| {
                    b.iter(|| {
                        layer
                            .forward_using(
                                CpuKernel::SmallBatch,
                                x,
                                rows,
                                &mut y,
                                Activation::Relu,
                                threads,
                            )
                            .unwrap()
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, dense_layers, input_alignment);
criterion_main!(benches);
