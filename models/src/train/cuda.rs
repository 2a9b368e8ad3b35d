//! Training on a GPU: parameters, gradients and Adam moments resident on the device, on a
//! low-priority stream (serving's streams go first inside one process), cuBLAS for the
//! products and the kernels of `kernels/cuda/train.cu` for the rest.
//!
//! Row-major products, as column-major cuBLAS sees them (W is `[out, in]`):
//! forward `Y = X·Wᵀ` is `gemm(T, N, out, rows, in)`; `dW += δᵀ·A` is
//! `gemm(N, T, in, out, rows)` with β = 1; `dX = δ·W` is `gemm(N, N, in, rows, out)`.

use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use kernels::KernelError;
use kernels::cuda::{CudaDevice, StreamPriority, sources};

use super::{Adam, StepOptions, StepStats, Train, to_checkpoint};
use crate::{Checkpoint, LoadError, ModelError};

struct Layer {
    inputs: usize,
    outputs: usize,
    w: CudaSlice<f32>,
    b: CudaSlice<f32>,
    gw: CudaSlice<f32>,
    gb: CudaSlice<f32>,
    mw: CudaSlice<f32>,
    vw: CudaSlice<f32>,
    mb: CudaSlice<f32>,
    vb: CudaSlice<f32>,
}

struct Kernels {
    bias_act: CudaFunction,
    relu_backward: CudaFunction,
    softmax_xent: CudaFunction,
    column_sums: CudaFunction,
    adam_step: CudaFunction,
}

/// Activation buffers for micro-batches of up to `rows` rows.
struct Scratch {
    rows: usize,
    x: CudaSlice<f32>,
    labels: CudaSlice<u32>,
    acts: Vec<CudaSlice<f32>>,
    delta: [CudaSlice<f32>; 2],
    loss: CudaSlice<f32>,
    correct: CudaSlice<f32>,
}

pub struct CudaTrainer {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    k: Kernels,
    layers: Vec<Layer>,
    scratch: Option<Scratch>,
    adam: Adam,
    t: i32,
}

use kernels::cuda::linear::elementwise as grid;

fn drv(context: &'static str) -> impl Fn(cudarc::driver::DriverError) -> ModelError + Copy {
    move |e| ModelError::Kernel(KernelError::driver(context)(e))
}

fn blas_err(
    context: &'static str,
) -> impl Fn(cudarc::cublas::result::CublasError) -> ModelError + Copy {
    move |e| ModelError::Kernel(KernelError::cublas(context)(e))
}

impl CudaTrainer {
    pub fn new(
        init: &Checkpoint,
        device: Arc<CudaDevice>,
        adam: Adam,
    ) -> Result<CudaTrainer, LoadError> {
        let stream = device.new_stream(StreamPriority::Training)?;
        let blas =
            CudaBlas::new(stream.clone()).map_err(KernelError::cublas("creating a handle"))?;
        let train = &sources::TRAIN;
        let k = Kernels {
            bias_act: device.function(&sources::BIAS_ACT, "bias_act_f32")?,
            relu_backward: device.function(train, "relu_backward")?,
            softmax_xent: device.function(train, "softmax_xent")?,
            column_sums: device.function(train, "column_sums")?,
            adam_step: device.function(train, "adam_step")?,
        };
        let up = KernelError::driver("uploading parameters");
        let layers = init
            .layers
            .iter()
            .map(|l| -> Result<Layer, KernelError> {
                let n = l.inputs * l.outputs;
                Ok(Layer {
                    inputs: l.inputs,
                    outputs: l.outputs,
                    w: stream.clone_htod(&l.weight.to_f32()).map_err(up)?,
                    b: stream.clone_htod(&l.bias).map_err(up)?,
                    gw: stream.alloc_zeros(n).map_err(up)?,
                    gb: stream.alloc_zeros(l.outputs).map_err(up)?,
                    mw: stream.alloc_zeros(n).map_err(up)?,
                    vw: stream.alloc_zeros(n).map_err(up)?,
                    mb: stream.alloc_zeros(l.outputs).map_err(up)?,
                    vb: stream.alloc_zeros(l.outputs).map_err(up)?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CudaTrainer {
            stream,
            blas,
            k,
            layers,
            scratch: None,
            adam,
            t: 0,
        })
    }

    fn scratch(&mut self, rows: usize) -> Result<(), ModelError> {
        if self.scratch.as_ref().is_some_and(|s| s.rows >= rows) {
            return Ok(());
        }
        let a = drv("allocating training buffers");
        let s = &self.stream;
        let widest = self
            .layers
            .iter()
            .map(|l| l.inputs.max(l.outputs))
            .max()
            .unwrap_or(1);
        self.scratch = Some(Scratch {
            rows,
            x: s.alloc_zeros(rows * self.layers[0].inputs).map_err(a)?,
            labels: s.alloc_zeros(rows).map_err(a)?,
            acts: self
                .layers
                .iter()
                .map(|l| s.alloc_zeros(rows * l.outputs))
                .collect::<Result<Vec<_>, _>>()
                .map_err(a)?,
            delta: [
                s.alloc_zeros(rows * widest).map_err(a)?,
                s.alloc_zeros(rows * widest).map_err(a)?,
            ],
            loss: s.alloc_zeros(rows).map_err(a)?,
            correct: s.alloc_zeros(rows).map_err(a)?,
        });
        Ok(())
    }

    fn micro_batch(
        &mut self,
        x: &[f32],
        labels: &[u32],
        total_rows: usize,
    ) -> Result<(f32, usize), ModelError> {
        let rows = labels.len();
        self.scratch(rows)?;
        let Self {
            stream,
            blas,
            k,
            layers,
            scratch,
            ..
        } = self;
        let sc = scratch.as_mut().expect("allocated above");
        let copy = drv("copying a micro-batch");
        stream
            .memcpy_htod(x, &mut sc.x.slice_mut(0..x.len()))
            .map_err(copy)?;
        stream
            .memcpy_htod(labels, &mut sc.labels.slice_mut(0..rows))
            .map_err(copy)?;
        let n = layers.len();
        // Forward, keeping every activation.
        for i in 0..n {
            let l = &layers[i];
            let (m_, n_, k_) = (l.outputs as i32, rows as i32, l.inputs as i32);
            let cfg = GemmConfig {
                transa: CUBLAS_OP_T,
                transb: CUBLAS_OP_N,
                m: m_,
                n: n_,
                k: k_,
                alpha: 1.0f32,
                lda: k_,
                ldb: k_,
                beta: 0.0f32,
                ldc: m_,
            };
            let (before, after) = sc.acts.split_at_mut(i);
            let out = &mut after[0];
            let input = if i == 0 { &sc.x } else { &before[i - 1] };
            // SAFETY: W is [out, in], input holds rows x in, out holds rows x out values.
            unsafe { blas.gemm(cfg, &l.w, input, out) }.map_err(blas_err("forward product"))?;
            let (r, c, relu) = (rows as u32, l.outputs as u32, (i + 1 < n) as i32);
            let mut launch = stream.launch_builder(&k.bias_act);
            launch.arg(&mut *out).arg(&l.b).arg(&r).arg(&c).arg(&relu);
            // SAFETY: out holds rows x cols values, bias holds cols; args match the kernel.
            unsafe { launch.launch(grid(rows * l.outputs)) }.map_err(drv("bias_act"))?;
        }
        // Loss and its gradient.
        let classes = layers[n - 1].outputs;
        let scale = 1.0f32 / total_rows as f32;
        let (r, c) = (rows as u32, classes as u32);
        {
            let mut launch = stream.launch_builder(&k.softmax_xent);
            launch
                .arg(&sc.acts[n - 1])
                .arg(&sc.labels)
                .arg(&mut sc.delta[0])
                .arg(&mut sc.loss)
                .arg(&mut sc.correct)
                .arg(&r)
                .arg(&c)
                .arg(&scale);
            // SAFETY: logits and delta hold rows x classes, labels/loss/correct hold rows;
            // labels are below `classes` (checked by the caller).
            unsafe { launch.launch(grid(rows)) }.map_err(drv("softmax_xent"))?;
        }
        // Backward.
        let mut cur = 0;
        for i in (0..n).rev() {
            let l = &mut layers[i];
            let (o, kin) = (l.outputs as i32, l.inputs as i32);
            let input = if i == 0 { &sc.x } else { &sc.acts[i - 1] };
            let cfg = GemmConfig {
                transa: CUBLAS_OP_N,
                transb: CUBLAS_OP_T,
                m: kin,
                n: o,
                k: rows as i32,
                alpha: 1.0f32,
                lda: kin,
                ldb: o,
                beta: 1.0f32,
                ldc: kin,
            };
            // SAFETY: input is rows x in, delta rows x out, gw in x out (column-major view of
            // the row-major [out, in] gradient).
            unsafe { blas.gemm(cfg, input, &sc.delta[cur], &mut l.gw) }
                .map_err(blas_err("weight gradient"))?;
            let (rr, cc, acc) = (rows as u32, l.outputs as u32, 1i32);
            let mut launch = stream.launch_builder(&k.column_sums);
            launch
                .arg(&sc.delta[cur])
                .arg(&mut l.gb)
                .arg(&rr)
                .arg(&cc)
                .arg(&acc);
            // SAFETY: delta holds rows x cols, gb holds cols.
            unsafe { launch.launch(grid(l.outputs)) }.map_err(drv("column_sums"))?;
            if i == 0 {
                break;
            }
            let next = 1 - cur;
            let cfg = GemmConfig {
                transa: CUBLAS_OP_N,
                transb: CUBLAS_OP_N,
                m: kin,
                n: rows as i32,
                k: o,
                alpha: 1.0f32,
                lda: kin,
                ldb: o,
                beta: 0.0f32,
                ldc: kin,
            };
            let [d0, d1] = &mut sc.delta;
            let (src, dst) = if cur == 0 { (&*d0, d1) } else { (&*d1, d0) };
            // SAFETY: W is [out, in], src holds rows x out, dst rows x in.
            unsafe { blas.gemm(cfg, &l.w, src, dst) }.map_err(blas_err("input gradient"))?;
            let count = (rows * l.inputs) as u32;
            let mut launch = stream.launch_builder(&k.relu_backward);
            launch.arg(&mut *dst).arg(&sc.acts[i - 1]).arg(&count);
            // SAFETY: dst and the activation both hold rows x in values.
            unsafe { launch.launch(grid(rows * l.inputs)) }.map_err(drv("relu_backward"))?;
            cur = next;
        }
        let loss: Vec<f32> = stream
            .clone_dtoh(&sc.loss.slice(0..rows))
            .map_err(drv("reading the loss"))?;
        let correct: Vec<f32> = stream
            .clone_dtoh(&sc.correct.slice(0..rows))
            .map_err(drv("reading the accuracy"))?;
        Ok((
            loss.iter().sum(),
            correct.iter().filter(|c| **c > 0.5).count(),
        ))
    }

    fn adam_step(&mut self) -> Result<(), ModelError> {
        self.t += 1;
        let a = self.adam;
        let (c1, c2) = (1.0 - a.beta1.powi(self.t), 1.0 - a.beta2.powi(self.t));
        let Self {
            stream, k, layers, ..
        } = self;
        for l in layers.iter_mut() {
            for (p, g, m, v) in [
                (&mut l.w, &mut l.gw, &mut l.mw, &mut l.vw),
                (&mut l.b, &mut l.gb, &mut l.mb, &mut l.vb),
            ] {
                let n = p.len() as u32;
                let mut launch = stream.launch_builder(&k.adam_step);
                launch
                    .arg(&mut *p)
                    .arg(&*g)
                    .arg(&mut *m)
                    .arg(&mut *v)
                    .arg(&n)
                    .arg(&a.lr)
                    .arg(&a.beta1)
                    .arg(&a.beta2)
                    .arg(&a.eps)
                    .arg(&c1)
                    .arg(&c2);
                // SAFETY: p, g, m, v all hold n values; args match the kernel.
                unsafe { launch.launch(grid(n as usize)) }.map_err(drv("adam_step"))?;
                stream.memset_zeros(g).map_err(drv("clearing gradients"))?;
            }
        }
        Ok(())
    }
}

impl Train for CudaTrainer {
    fn step(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
        opts: StepOptions,
    ) -> Result<StepStats, ModelError> {
        let shape = (
            self.layers[0].inputs,
            self.layers[self.layers.len() - 1].outputs,
        );
        let rows = labels.len();
        let stats = super::micro_batches(inputs, labels, shape, opts, |x, y| {
            self.micro_batch(x, y, rows)
        })?;
        self.adam_step()?;
        Ok(stats)
    }

    fn checkpoint(&mut self) -> Result<Checkpoint, ModelError> {
        let read = drv("reading parameters");
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok((
                    l.inputs,
                    l.outputs,
                    self.stream.clone_dtoh(&l.w).map_err(read)?,
                    self.stream.clone_dtoh(&l.b).map_err(read)?,
                ))
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(to_checkpoint(layers))
    }

    fn bytes_per_row(&self) -> usize {
        let widths: usize =
            self.layers.iter().map(|l| l.outputs).sum::<usize>() + self.layers[0].inputs;
        let widest = self
            .layers
            .iter()
            .map(|l| l.inputs.max(l.outputs))
            .max()
            .unwrap_or(0);
        (widths + 2 * widest + 3) * 4
    }
}
