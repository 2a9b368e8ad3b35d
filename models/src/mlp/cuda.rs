//! The MLP on a GPU: weights resident in their stored format, activations in device
//! buffers reused across calls, one high-priority stream per replica.

use std::sync::Arc;

use kernels::DType;
use kernels::cuda::linear::{Activations, Executor, Linear};
use kernels::cuda::{CudaDevice, DeviceVec, HalfVec, StreamPriority};

use super::activation;
use crate::{Checkpoint, LoadError, ModelError};

pub(super) struct CudaMlp {
    exec: Executor,
    layers: Vec<Linear>,
    buffers: Buffers,
}

/// Device buffers for the largest batch seen, as wide as the widest layer. Grown by
/// doubling, so a slowly rising batch size does not reallocate every call.
#[derive(Default)]
struct Buffers {
    input: DeviceVec,
    /// f32 products, ping-pong.
    f32: [DeviceVec; 2],
    /// A 16-bit copy of the current activations, for layers with 16-bit weights.
    half: HalfVec,
}

impl CudaMlp {
    pub(super) fn new(
        checkpoint: &Checkpoint,
        device: Arc<CudaDevice>,
    ) -> Result<CudaMlp, LoadError> {
        let exec = Executor::new(device, StreamPriority::Serving)?;
        let layers = checkpoint
            .layers
            .iter()
            .map(|l| exec.upload_linear(l.weight.host(), &l.bias, l.inputs, l.outputs))
            .collect::<Result<Vec<_>, _>>()?;
        exec.synchronize()?;
        Ok(CudaMlp {
            exec,
            layers,
            buffers: Buffers::default(),
        })
    }

    fn reserve(&mut self, rows: usize) -> Result<(), ModelError> {
        let width = self
            .layers
            .iter()
            .map(|l| l.inputs().max(l.outputs()))
            .max()
            .unwrap_or(1);
        let (exec, b) = (&self.exec, &mut self.buffers);
        exec.reserve(&mut b.input, rows * self.layers[0].inputs())?;
        for buf in &mut b.f32 {
            exec.reserve(buf, rows * width)?;
        }
        exec.reserve(&mut b.half, rows * width)?;
        Ok(())
    }

    pub(super) fn forward(
        &mut self,
        input: &[f32],
        rows: usize,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        self.reserve(rows)?;
        let Self {
            exec,
            layers,
            buffers: bufs,
        } = self;
        exec.write(input, &mut bufs.input)?;
        let n = layers.len();
        if layers[0].input_dtype() != DType::F32 {
            exec.convert(
                &bufs.input,
                input.len(),
                &mut bufs.half,
                layers[0].input_dtype(),
            )?;
        }
        // Which f32 buffer holds the current activations: None means the input buffer.
        let mut current: Option<usize> = None;
        for (i, layer) in layers.iter().enumerate() {
            let act = activation(i, n);
            let out = match current {
                Some(c) => 1 - c,
                None => 0,
            };
            let [f0, f1] = &mut bufs.f32;
            let (read, write) = if out == 0 { (&*f1, f0) } else { (&*f0, f1) };
            let x = match (layer.input_dtype(), current) {
                (DType::F32, None) => Activations::F32(&bufs.input),
                (DType::F32, Some(_)) => Activations::F32(read),
                _ => Activations::Half(&bufs.half),
            };
            exec.matmul(layer, x, rows, write)?;
            let next_half = layers
                .get(i + 1)
                .map(|l| l.input_dtype())
                .filter(|d| *d != DType::F32);
            match next_half {
                Some(dtype) => {
                    exec.bias_act_to_half(layer, write, rows, act, &mut bufs.half, dtype)?
                }
                None => exec.bias_act(layer, write, rows, act)?,
            }
            current = Some(out);
        }
        let last = &bufs.f32[current.expect("at least one layer")];
        // Waits for the copy: the one wait of the forward pass.
        exec.read(last, output)?;
        Ok(())
    }
}
