//! The ops of training a dense network on a GPU, as safe calls on device buffers that
//! callers hold without seeing cudarc: parameters with their gradients and Adam moments
//! resident on the device ([`TrainParams`]), cuBLAS for the products and the kernels of
//! `kernels/cuda/train.cu` for the rest, all queued in order on one low-priority stream
//! (serving's streams go first inside one process).
//!
//! Row-major products, as column-major cuBLAS sees them (W is `[out, in]`): forward
//! `Y = X·Wᵀ` is `gemm(T, N, out, rows, in)`; `dW += δᵀ·A` is `gemm(N, T, in, out, rows)`
//! with β = 1; `dX = δ·W` is `gemm(N, N, in, rows, out)`.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, PushKernelArg};

use super::buffer::{DeviceIndices, DeviceVec};
use super::linear::{Executor, Product, check_len, elementwise};
use super::{CudaDevice, StreamPriority, sources};
use crate::{Activation, KernelError};

/// One dense layer's parameters `W [out, in]` and `b [out]`, their gradients and Adam's
/// two moments of each, on the device, in f32.
pub struct TrainParams {
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

impl TrainParams {
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Device memory held: four f32 copies (values, gradients, two moments) of every
    /// parameter, 16 bytes each.
    pub fn bytes(&self) -> usize {
        16 * (self.inputs * self.outputs + self.outputs)
    }
}

/// Labels on the device, each checked on the host to be below `classes`: the loss kernel
/// indexes a row of logits by them.
#[derive(Default)]
pub struct DeviceLabels {
    data: DeviceIndices,
    rows: usize,
    classes: usize,
}

impl DeviceLabels {
    pub fn bytes(&self) -> usize {
        self.data.bytes()
    }

    /// Frees the device memory (stream-ordered).
    pub fn release(&mut self) {
        self.data.release();
        self.rows = 0;
    }
}

/// What the loss of a micro-batch writes: per row its loss and 1 where the arg-max was the
/// label, and the gradient of the loss with respect to the logits.
#[derive(Default)]
pub struct LossBuffers {
    pub grad: DeviceVec,
    pub loss: DeviceVec,
    pub correct: DeviceVec,
}

/// Adam's step `t` with its hyper-parameters; `c1` and `c2` are the bias corrections
/// `1 - beta1^t` and `1 - beta2^t`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamStep {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub c1: f32,
    pub c2: f32,
}

/// The training ops on one low-priority stream of one device.
pub struct TrainOps {
    exec: Executor,
    relu_backward: CudaFunction,
    softmax_xent: CudaFunction,
    column_sums: CudaFunction,
    adam_step: CudaFunction,
}

/// `n` as the `unsigned int` the kernels take.
fn u32_of(op: &'static str, n: usize) -> Result<u32, KernelError> {
    u32::try_from(n).map_err(|_| KernelError::Shape {
        op,
        detail: format!("{n} does not fit the kernels' 32-bit sizes"),
    })
}

impl TrainOps {
    /// Compiles (once per device) and loads the kernels, on a new training-priority stream.
    pub fn new(device: Arc<CudaDevice>) -> Result<TrainOps, KernelError> {
        let train = &sources::TRAIN;
        Ok(TrainOps {
            relu_backward: device.function(train, "relu_backward")?,
            softmax_xent: device.function(train, "softmax_xent")?,
            column_sums: device.function(train, "column_sums")?,
            adam_step: device.function(train, "adam_step")?,
            exec: Executor::new(device, StreamPriority::Training)?,
        })
    }

    /// The executor the ops queue on: buffers are sized, written and read through it.
    pub fn executor(&self) -> &Executor {
        &self.exec
    }

    /// Blocks until everything queued has run.
    pub fn synchronize(&self) -> Result<(), KernelError> {
        self.exec.synchronize()
    }

    /// A layer's `[outputs, inputs]` weights and biases, with zero gradients and moments.
    pub fn upload_params(
        &self,
        weight: &[f32],
        bias: &[f32],
        inputs: usize,
        outputs: usize,
    ) -> Result<TrainParams, KernelError> {
        let n = inputs * outputs;
        if weight.len() != n || bias.len() != outputs {
            return Err(KernelError::Shape {
                op: "cuda::upload_params",
                detail: format!(
                    "weight has {} values and bias {}, expected {outputs}x{inputs} and {outputs}",
                    weight.len(),
                    bias.len()
                ),
            });
        }
        let s = self.exec.stream();
        let up = KernelError::driver("uploading parameters");
        Ok(TrainParams {
            inputs,
            outputs,
            w: s.clone_htod(weight).map_err(up)?,
            b: s.clone_htod(bias).map_err(up)?,
            gw: s.alloc_zeros(n).map_err(up)?,
            gb: s.alloc_zeros(outputs).map_err(up)?,
            mw: s.alloc_zeros(n).map_err(up)?,
            vw: s.alloc_zeros(n).map_err(up)?,
            mb: s.alloc_zeros(outputs).map_err(up)?,
            vb: s.alloc_zeros(outputs).map_err(up)?,
        })
    }

    /// The layer's weights and biases, once everything queued before has run.
    pub fn download_params(&self, p: &TrainParams) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
        let read = KernelError::driver("reading parameters");
        let s = self.exec.stream();
        let w = s.clone_dtoh(&p.w).map_err(read)?;
        let b = s.clone_dtoh(&p.b).map_err(read)?;
        // Copies into pageable memory may return before they have landed.
        self.synchronize()?;
        Ok((w, b))
    }

    /// Uploads `labels`, each checked to be below `classes`, sizing `buf` to exactly as
    /// many rows when it holds fewer (see [`Executor::resize`] for giving memory back).
    pub fn write_labels(
        &self,
        labels: &[u32],
        classes: usize,
        buf: &mut DeviceLabels,
    ) -> Result<(), KernelError> {
        if let Some(bad) = labels.iter().find(|l| **l as usize >= classes) {
            return Err(KernelError::Shape {
                op: "cuda::write_labels",
                detail: format!("label {bad} of {classes} classes"),
            });
        }
        if buf.data.capacity() < labels.len() {
            self.exec.resize(&mut buf.data, labels.len())?;
        }
        self.exec.write(labels, &mut buf.data)?;
        buf.rows = labels.len();
        buf.classes = classes;
        Ok(())
    }

    /// Sizes `buf` for exactly `rows` labels (freeing a larger allocation).
    pub fn resize_labels(&self, buf: &mut DeviceLabels, rows: usize) -> Result<(), KernelError> {
        self.exec.resize(&mut buf.data, rows)?;
        buf.rows = buf.rows.min(rows);
        Ok(())
    }

    /// `y[rows, out] = act(x[rows, in] · Wᵀ + b)`.
    pub fn forward(
        &self,
        p: &TrainParams,
        x: &DeviceVec,
        rows: usize,
        y: &mut DeviceVec,
        act: Activation,
    ) -> Result<(), KernelError> {
        let op = "cuda::train forward";
        let (x, y) = (
            x.get(op, rows * p.inputs)?,
            y.get_mut(op, rows * p.outputs)?,
        );
        let product = Product {
            transa: true,
            transb: false,
            m: p.outputs,
            n: rows,
            k: p.inputs,
            lda: p.inputs,
            ldb: p.inputs,
            ldc: p.outputs,
            beta: 0.0,
        };
        self.exec.gemm(product, &p.w, x, y)?;
        self.exec.bias_act_slice(&p.b, y, rows, act)
    }

    /// Softmax cross-entropy over `rows` rows of `logits`: per row its loss and whether
    /// the arg-max is the label, and the gradient of the loss scaled by `scale` (the mean
    /// over a whole batch split into micro-batches scales by 1 / its rows).
    pub fn softmax_xent(
        &self,
        logits: &DeviceVec,
        labels: &DeviceLabels,
        scale: f32,
        out: &mut LossBuffers,
    ) -> Result<(), KernelError> {
        let op = "cuda::softmax_xent";
        let (rows, classes) = (labels.rows, labels.classes);
        let logits = logits.get(op, rows * classes)?;
        let ids = labels.data.get(op, rows)?;
        let grad = out.grad.get_mut(op, rows * classes)?;
        let loss = out.loss.get_mut(op, rows)?;
        let correct = out.correct.get_mut(op, rows)?;
        let (r, c) = (u32_of(op, rows)?, u32_of(op, classes)?);
        let mut launch = self.exec.stream().launch_builder(&self.softmax_xent);
        launch
            .arg(logits)
            .arg(ids)
            .arg(grad)
            .arg(loss)
            .arg(correct)
            .arg(&r)
            .arg(&c)
            .arg(&scale);
        // SAFETY: one thread per row reads `classes` logits and writes as many gradients
        // (both hold rows · classes values, checked), reads its label, which
        // `write_labels` checked to be below `classes`, and writes one loss and one
        // correct flag (rows each, checked). Arguments match (const float*, const uint*,
        // float*, float*, float*, uint, uint, float).
        unsafe { launch.launch(elementwise(rows)) }
            .map(drop)
            .map_err(KernelError::driver("launching softmax_xent"))
    }

    /// `dW += δᵀ · x` and `db += Σ_rows δ`, for `rows` rows of the layer's input `x` and
    /// of the gradient `delta` at its output.
    pub fn accumulate_gradients(
        &self,
        p: &mut TrainParams,
        x: &DeviceVec,
        delta: &DeviceVec,
        rows: usize,
    ) -> Result<(), KernelError> {
        let op = "cuda::accumulate_gradients";
        let x = x.get(op, rows * p.inputs)?;
        let delta = delta.get(op, rows * p.outputs)?;
        let product = Product {
            transa: false,
            transb: true,
            m: p.inputs,
            n: p.outputs,
            k: rows,
            lda: p.inputs,
            ldb: p.outputs,
            ldc: p.inputs,
            beta: 1.0,
        };
        // The column-major [in, out] view of the row-major [out, in] gradient.
        self.exec.gemm(product, x, delta, &mut p.gw)?;
        let (r, c, accumulate) = (u32_of(op, rows)?, u32_of(op, p.outputs)?, 1i32);
        let mut launch = self.exec.stream().launch_builder(&self.column_sums);
        launch
            .arg(delta)
            .arg(&mut p.gb)
            .arg(&r)
            .arg(&c)
            .arg(&accumulate);
        // SAFETY: one thread per column reads `rows` values of delta (rows · outputs,
        // checked) and adds into gb, which holds `outputs` (allocated with the layer).
        // Arguments match (const float*, float*, uint, uint, int).
        unsafe { launch.launch(elementwise(p.outputs)) }
            .map(drop)
            .map_err(KernelError::driver("launching column_sums"))
    }

    /// `dx = (δ · W) ⊙ [relu_input > 0]`: the gradient at the layer's input, which was the
    /// ReLU output `relu_input` of the layer before.
    pub fn backprop(
        &self,
        p: &TrainParams,
        delta: &DeviceVec,
        rows: usize,
        relu_input: &DeviceVec,
        dx: &mut DeviceVec,
    ) -> Result<(), KernelError> {
        let op = "cuda::backprop";
        let n = rows * p.inputs;
        let delta = delta.get(op, rows * p.outputs)?;
        let relu_input = relu_input.get(op, n)?;
        let dx = dx.get_mut(op, n)?;
        let product = Product {
            transa: false,
            transb: false,
            m: p.inputs,
            n: rows,
            k: p.outputs,
            lda: p.inputs,
            ldb: p.outputs,
            ldc: p.inputs,
            beta: 0.0,
        };
        self.exec.gemm(product, &p.w, delta, dx)?;
        let count = u32_of(op, n)?;
        let mut launch = self.exec.stream().launch_builder(&self.relu_backward);
        launch.arg(&mut *dx).arg(relu_input).arg(&count);
        // SAFETY: dx and relu_input both hold rows · inputs values (checked). Arguments
        // match (float*, const float*, uint).
        unsafe { launch.launch(elementwise(n)) }
            .map(drop)
            .map_err(KernelError::driver("launching relu_backward"))
    }

    /// One Adam step on the layer's weights and biases from their accumulated gradients,
    /// which are then cleared for the next step.
    pub fn adam(&self, p: &mut TrainParams, step: AdamStep) -> Result<(), KernelError> {
        let op = "cuda::adam";
        for (param, grad, m, v) in [
            (&mut p.w, &mut p.gw, &mut p.mw, &mut p.vw),
            (&mut p.b, &mut p.gb, &mut p.mb, &mut p.vb),
        ] {
            let len = param.len();
            check_len(op, grad.len().min(m.len()).min(v.len()), len)?;
            let n = u32_of(op, len)?;
            let mut launch = self.exec.stream().launch_builder(&self.adam_step);
            launch
                .arg(&mut *param)
                .arg(&*grad)
                .arg(&mut *m)
                .arg(&mut *v)
                .arg(&n)
                .arg(&step.lr)
                .arg(&step.beta1)
                .arg(&step.beta2)
                .arg(&step.eps)
                .arg(&step.c1)
                .arg(&step.c2);
            // SAFETY: param, grad, m and v all hold n values (allocated together with the
            // layer; checked). Arguments match (float*, const float*, float*, float*, uint,
            // float x6).
            unsafe { launch.launch(elementwise(len)) }
                .map_err(KernelError::driver("launching adam_step"))?;
            self.exec
                .stream()
                .memset_zeros(grad)
                .map_err(KernelError::driver("clearing gradients"))?;
        }
        Ok(())
    }
}
