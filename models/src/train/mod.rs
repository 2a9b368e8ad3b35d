//! Training the MLP: forward with saved activations, softmax cross-entropy, backward, and
//! Adam — on the CPU (`cpu`) and on CUDA (`cuda`, a low-priority stream). The trainer obeys
//! co-location directives through [`StepOptions`]: how many threads (CPU) it may use, and
//! how many rows it may hold at once (a memory limit), splitting each step into
//! micro-batches with gradient accumulation so the effective batch stays the same.
//!
//! What a trainer holds is its parameters with their gradients and Adam's moments (16
//! bytes a parameter, plus cuBLAS's workspace on a GPU: [`Train::fixed_bytes`]) and
//! scratch buffers for one micro-batch ([`Train::bytes_per_row`] a row), sized for the
//! micro-batch in force and shrunk, the memory given back, when it falls.

mod cpu;
mod cuda;

use kernels::Device;

use crate::{Checkpoint, LayerWeights, LoadError, WeightData};

pub use cpu::CpuTrainer;
pub use cuda::CudaTrainer;

/// Adam's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

impl Default for Adam {
    fn default() -> Self {
        Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

/// Limits for one step, from the co-location directive in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepOptions {
    /// CPU threads (or, on a GPU, streams) the step may use.
    pub threads: usize,
    /// Rows processed at once: the batch is split into micro-batches of at most this many
    /// rows and their gradients accumulated.
    pub micro_batch: usize,
}

/// What one step saw.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepStats {
    pub loss: f32,
    pub correct: usize,
    pub rows: usize,
    pub micro_batches: usize,
}

/// A trainer on some device: one optimiser step on a batch of labelled rows.
pub trait Train: Send {
    fn step(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
        opts: StepOptions,
    ) -> Result<StepStats, crate::ModelError>;

    /// The current weights, as a checkpoint the gateway can serve.
    fn checkpoint(&mut self) -> Result<Checkpoint, crate::ModelError>;

    /// Bytes of device memory one row of a micro-batch needs (activations and gradients).
    fn bytes_per_row(&self) -> usize;

    /// Bytes held whatever the micro-batch: parameters, their gradients, Adam's two
    /// moments, and on a GPU the cuBLAS workspace.
    fn fixed_bytes(&self) -> usize;

    /// Bytes held now: the fixed part and the scratch buffers as sized.
    fn resident_bytes(&self) -> usize;

    /// Sizes the scratch buffers for micro-batches of exactly `rows` rows now, freeing
    /// (and giving back to the device) what a larger size held. Steps size them to their
    /// micro-batch too; this lets a memory limit take effect before the next step runs.
    fn reserve_rows(&mut self, rows: usize) -> Result<(), crate::ModelError>;

    /// What micro-batches of `rows` rows hold in all.
    fn bytes_for_rows(&self, rows: usize) -> usize {
        self.fixed_bytes() + rows * self.bytes_per_row()
    }

    /// The most rows whose micro-batches fit in `limit` bytes (at least one).
    fn rows_within(&self, limit: u64) -> usize {
        let room = limit.saturating_sub(self.fixed_bytes() as u64);
        ((room / self.bytes_per_row().max(1) as u64) as usize).max(1)
    }
}

/// A trainer for `init` on `device`.
pub fn trainer(
    init: &Checkpoint,
    device: &Device,
    adam: Adam,
) -> Result<Box<dyn Train>, LoadError> {
    Ok(match device {
        Device::Cpu => Box::new(CpuTrainer::new(init, adam)),
        Device::Cuda(d) => Box::new(CudaTrainer::new(init, d.clone(), adam)?),
    })
}

/// Per-layer f32 parameters, as both backends hold them on the host side of a checkpoint.
pub(crate) fn to_checkpoint(layers: Vec<(usize, usize, Vec<f32>, Vec<f32>)>) -> Checkpoint {
    Checkpoint {
        layers: layers
            .into_iter()
            .map(|(inputs, outputs, w, b)| LayerWeights {
                inputs,
                outputs,
                weight: WeightData::F32(w),
                bias: b,
            })
            .collect(),
    }
}

/// Checks a step's batch, then runs it in micro-batches of at most `opts.micro_batch` rows:
/// `micro(inputs, labels)` returns the micro-batch's summed loss and correct count (its
/// gradients scaled by 1 / all rows, accumulated by the backend), and the step's stats add
/// them up. Shared by every backend so that they split and check batches the same way.
pub(crate) fn micro_batches(
    inputs: &[f32],
    labels: &[u32],
    (width, classes): (usize, usize),
    opts: StepOptions,
    mut micro: impl FnMut(&[f32], &[u32]) -> Result<(f32, usize), crate::ModelError>,
) -> Result<StepStats, crate::ModelError> {
    let rows = labels.len();
    if inputs.len() != rows * width || rows == 0 {
        return Err(crate::ModelError::InputSize {
            rows,
            width,
            expected: rows * width,
            given: inputs.len(),
        });
    }
    if let Some(bad) = labels.iter().find(|l| **l as usize >= classes) {
        return Err(crate::ModelError::InputSize {
            rows,
            width: classes,
            expected: classes,
            given: *bad as usize + 1,
        });
    }
    let size = opts.micro_batch.clamp(1, rows);
    let mut stats = StepStats {
        rows,
        ..Default::default()
    };
    for start in (0..rows).step_by(size) {
        let end = (start + size).min(rows);
        let (loss, correct) = micro(&inputs[start * width..end * width], &labels[start..end])?;
        stats.loss += loss;
        stats.correct += correct;
        stats.micro_batches += 1;
    }
    stats.loss /= rows as f32;
    Ok(stats)
}

/// Softmax cross-entropy of one row: returns (loss, whether the arg-max is the label) and
/// writes `(softmax - onehot) * scale` into `grad`.
pub(crate) fn softmax_xent(
    logits: &[f32],
    label: usize,
    scale: f32,
    grad: &mut [f32],
) -> (f32, bool) {
    let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
    for (i, &z) in logits.iter().enumerate() {
        if z > max {
            max = z;
            arg = i;
        }
    }
    let sum: f32 = logits.iter().map(|z| (z - max).exp()).sum();
    for (i, (g, &z)) in grad.iter_mut().zip(logits).enumerate() {
        let p = (z - max).exp() / sum;
        *g = (p - if i == label { 1.0 } else { 0.0 }) * scale;
    }
    (sum.ln() + max - logits[label], arg == label)
}
