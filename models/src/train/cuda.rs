//! Training on a GPU, composed of `kernels::cuda::train`'s safe ops: parameters, gradients
//! and Adam moments resident on the device, activations in scratch buffers sized for the
//! micro-batch in force (and shrunk, giving the memory back, when it falls), every op on
//! one low-priority stream and one wait at the end of each micro-batch (for its loss) and
//! of each step (so that a step's time is its compute, and a paused trainer computes
//! nothing).

use std::sync::Arc;

use kernels::cuda::CudaDevice;
use kernels::cuda::buffer::DeviceVec;
use kernels::cuda::train::{AdamStep, DeviceLabels, LossBuffers, TrainOps, TrainParams};

use super::{Adam, StepOptions, StepStats, Train, to_checkpoint};
use crate::mlp::activation;
use crate::{Checkpoint, LoadError, ModelError};

pub struct CudaTrainer {
    layers: Vec<TrainParams>,
    scratch: Scratch,
    adam: Adam,
    t: i32,
    /// Dropped last: the buffers above are freed on its stream, in its device's context.
    ops: TrainOps,
}

/// Activation buffers for micro-batches of `rows` rows. The loss's gradient and `delta`
/// take turns as the gradient flowing back through the layers, so both are as wide as the
/// widest layer.
#[derive(Default)]
struct Scratch {
    rows: usize,
    x: DeviceVec,
    labels: DeviceLabels,
    acts: Vec<DeviceVec>,
    loss: LossBuffers,
    delta: DeviceVec,
    /// Host copies of the micro-batch's per-row loss and correct flags.
    host_loss: Vec<f32>,
    host_correct: Vec<f32>,
}

impl Scratch {
    fn bytes(&self) -> usize {
        self.x.bytes()
            + self.labels.bytes()
            + self.acts.iter().map(DeviceVec::bytes).sum::<usize>()
            + self.loss.grad.bytes()
            + self.loss.loss.bytes()
            + self.loss.correct.bytes()
            + self.delta.bytes()
    }
}

impl CudaTrainer {
    pub fn new(
        init: &Checkpoint,
        device: Arc<CudaDevice>,
        adam: Adam,
    ) -> Result<CudaTrainer, LoadError> {
        let ops = TrainOps::new(device)?;
        let layers = init
            .layers
            .iter()
            .map(|l| ops.upload_params(&l.weight.to_f32(), &l.bias, l.inputs, l.outputs))
            .collect::<Result<Vec<_>, _>>()?;
        ops.synchronize()?;
        Ok(CudaTrainer {
            layers,
            scratch: Scratch::default(),
            adam,
            t: 0,
            ops,
        })
    }

    fn widest(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.inputs().max(l.outputs()))
            .max()
            .unwrap_or(1)
    }

    /// Sizes the scratch buffers for exactly `rows` rows; returns whether memory was freed.
    fn fit_scratch(&mut self, rows: usize) -> Result<bool, ModelError> {
        if self.scratch.rows == rows {
            return Ok(false);
        }
        let shrinks = rows < self.scratch.rows;
        let (exec, widest) = (self.ops.executor(), self.widest());
        let s = &mut self.scratch;
        // Unsized until every buffer is: a failed allocation leaves no size to trust.
        s.rows = 0;
        s.acts.resize_with(self.layers.len(), DeviceVec::default);
        exec.resize(&mut s.x, rows * self.layers[0].inputs())?;
        self.ops.resize_labels(&mut s.labels, rows)?;
        for (act, layer) in s.acts.iter_mut().zip(&self.layers) {
            exec.resize(act, rows * layer.outputs())?;
        }
        exec.resize(&mut s.loss.grad, rows * widest)?;
        exec.resize(&mut s.delta, rows * widest)?;
        exec.resize(&mut s.loss.loss, rows)?;
        exec.resize(&mut s.loss.correct, rows)?;
        s.rows = rows;
        Ok(shrinks)
    }

    /// Once the stream has drained: hands freed memory back to the device.
    fn give_back(&self) -> Result<(), ModelError> {
        self.ops.synchronize()?;
        self.ops.executor().device().release_free_memory()?;
        Ok(())
    }

    /// Forward and backward of one micro-batch, adding its gradients (of the mean loss over
    /// `total_rows`) into the layers'; returns its summed loss and correct count.
    fn micro_batch(
        &mut self,
        x: &[f32],
        labels: &[u32],
        total_rows: usize,
    ) -> Result<(f32, usize), ModelError> {
        let rows = labels.len();
        let classes = self.layers[self.layers.len() - 1].outputs();
        let exec = self.ops.executor();
        exec.write(x, &mut self.scratch.x)?;
        self.ops
            .write_labels(labels, classes, &mut self.scratch.labels)?;
        self.forward(rows)?;
        let logits = self.scratch.acts.last().expect("at least one layer");
        self.ops.softmax_xent(
            logits,
            &self.scratch.labels,
            1.0 / total_rows as f32,
            &mut self.scratch.loss,
        )?;
        self.backward(rows)?;
        self.read_loss(rows)
    }

    /// Every layer's output, kept for the backward pass.
    fn forward(&mut self, rows: usize) -> Result<(), ModelError> {
        let n = self.layers.len();
        let s = &mut self.scratch;
        for (i, layer) in self.layers.iter().enumerate() {
            let (before, after) = s.acts.split_at_mut(i);
            let input = if i == 0 { &s.x } else { &before[i - 1] };
            self.ops
                .forward(layer, input, rows, &mut after[0], activation(i, n))?;
        }
        Ok(())
    }

    /// From the loss's gradient back to the first layer, accumulating every layer's
    /// gradients. The gradient in flight alternates between the loss's buffer and `delta`.
    fn backward(&mut self, rows: usize) -> Result<(), ModelError> {
        let s = &mut self.scratch;
        let mut in_loss_buffer = true;
        for i in (0..self.layers.len()).rev() {
            let layer = &mut self.layers[i];
            let input = if i == 0 { &s.x } else { &s.acts[i - 1] };
            let (grad, other) = if in_loss_buffer {
                (&s.loss.grad, &mut s.delta)
            } else {
                (&s.delta, &mut s.loss.grad)
            };
            self.ops.accumulate_gradients(layer, input, grad, rows)?;
            if i > 0 {
                self.ops.backprop(layer, grad, rows, input, other)?;
                in_loss_buffer = !in_loss_buffer;
            }
        }
        Ok(())
    }

    /// The micro-batch's summed loss and correct count, once it has run.
    fn read_loss(&mut self, rows: usize) -> Result<(f32, usize), ModelError> {
        let (exec, s) = (self.ops.executor(), &mut self.scratch);
        s.host_loss.resize(rows, 0.0);
        s.host_correct.resize(rows, 0.0);
        exec.read(&s.loss.loss, &mut s.host_loss)?;
        exec.read(&s.loss.correct, &mut s.host_correct)?;
        Ok((
            s.host_loss.iter().sum(),
            s.host_correct.iter().filter(|c| **c > 0.5).count(),
        ))
    }

    fn adam_step(&mut self) -> Result<(), ModelError> {
        self.t += 1;
        let a = self.adam;
        let step = AdamStep {
            lr: a.lr,
            beta1: a.beta1,
            beta2: a.beta2,
            eps: a.eps,
            c1: 1.0 - a.beta1.powi(self.t),
            c2: 1.0 - a.beta2.powi(self.t),
        };
        for layer in &mut self.layers {
            self.ops.adam(layer, step)?;
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
            self.layers[0].inputs(),
            self.layers[self.layers.len() - 1].outputs(),
        );
        let rows = labels.len();
        let freed = self.fit_scratch(opts.micro_batch.clamp(1, rows.max(1)))?;
        let stats = super::micro_batches(inputs, labels, shape, opts, |x, y| {
            self.micro_batch(x, y, rows)
        })?;
        self.adam_step()?;
        // The step ends when its last kernel has run: a pause or a duty cycle timed from
        // here must not find Adam still running.
        self.ops.synchronize()?;
        if freed {
            self.give_back()?;
        }
        Ok(stats)
    }

    fn checkpoint(&mut self) -> Result<Checkpoint, ModelError> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let (w, b) = self.ops.download_params(l)?;
                Ok((l.inputs(), l.outputs(), w, b))
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(to_checkpoint(layers))
    }

    fn bytes_per_row(&self) -> usize {
        let widths: usize =
            self.layers.iter().map(|l| l.outputs()).sum::<usize>() + self.layers[0].inputs();
        // Activations, two gradients as wide as the widest layer, and per row a label, a
        // loss and a correct flag.
        (widths + 2 * self.widest() + 3) * 4
    }

    fn fixed_bytes(&self) -> usize {
        let workspace = self.ops.executor().device().blas_workspace_bytes() as usize;
        self.layers.iter().map(TrainParams::bytes).sum::<usize>() + workspace
    }

    fn resident_bytes(&self) -> usize {
        self.fixed_bytes() + self.scratch.bytes()
    }

    fn reserve_rows(&mut self, rows: usize) -> Result<(), ModelError> {
        if self.fit_scratch(rows.max(1))? {
            self.give_back()?;
        }
        Ok(())
    }
}
