//! The MLP on a GPU: weights resident in their stored format, activations in device
//! buffers reused across calls, one high-priority stream per replica.

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use kernels::cuda::linear::{Activations, Executor, Linear};
use kernels::cuda::{CudaDevice, StreamPriority};
use kernels::{DType, KernelError};

use super::activation;
use crate::{Checkpoint, LoadError, ModelError};

pub(super) struct CudaMlp {
    exec: Executor,
    layers: Vec<Linear>,
    buffers: Option<Buffers>,
}

/// Device buffers sized for `rows` rows of the widest layer.
struct Buffers {
    rows: usize,
    input: CudaSlice<f32>,
    /// f32 products, ping-pong.
    f32: [CudaSlice<f32>; 2],
    /// A 16-bit copy of the current activations, for layers with 16-bit weights.
    half: CudaSlice<u16>,
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
            .map(|l| Linear::upload(exec.stream(), l.weight.host(), &l.bias, l.inputs, l.outputs))
            .collect::<Result<Vec<_>, _>>()?;
        exec.synchronize()?;
        Ok(CudaMlp {
            exec,
            layers,
            buffers: None,
        })
    }

    fn buffers(&mut self, rows: usize) -> Result<&mut Buffers, KernelError> {
        if self.buffers.as_ref().is_none_or(|b| b.rows < rows) {
            // Grow by doubling so a slowly rising batch size does not reallocate every call.
            let rows = rows.next_power_of_two();
            let width = self
                .layers
                .iter()
                .map(|l| l.inputs().max(l.outputs()))
                .max()
                .unwrap_or(1);
            let stream = self.exec.stream();
            let alloc = KernelError::driver("allocating activation buffers");
            let input_width = self.layers[0].inputs();
            self.buffers = Some(Buffers {
                rows,
                input: stream.alloc_zeros(rows * input_width).map_err(alloc)?,
                f32: [
                    stream.alloc_zeros(rows * width).map_err(alloc)?,
                    stream.alloc_zeros(rows * width).map_err(alloc)?,
                ],
                half: stream.alloc_zeros(rows * width).map_err(alloc)?,
            });
        }
        Ok(self.buffers.as_mut().expect("allocated above"))
    }

    pub(super) fn forward(
        &mut self,
        input: &[f32],
        rows: usize,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        self.buffers(rows)?;
        let Self {
            exec,
            layers,
            buffers,
        } = self;
        let bufs = buffers.as_mut().expect("allocated above");
        let stream = exec.stream().clone();
        let copy_in = KernelError::driver("copying the batch to the device");
        let in_view = &mut bufs.input.slice_mut(0..input.len());
        stream.memcpy_htod(input, in_view).map_err(copy_in)?;

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
        let copy_out = KernelError::driver("copying the result to the host");
        stream
            .memcpy_dtoh(&last.slice(0..output.len()), output)
            .map_err(copy_out)?;
        exec.synchronize()?;
        Ok(())
    }
}
