//! The MLP on the CPU: layers whose weights keep their stored precision (16-bit ones are
//! widened in registers), or are rounded to bf16 for bf16 products; scratch buffers reused
//! across calls, every one on a cache line.

use kernels::cpu::{AlignedVec, MatmulPrecision, PackedLinear};

use super::activation;
use crate::{Checkpoint, LoadError, ModelError};

const CACHE_LINE: usize = 64;

pub(super) struct CpuMlp {
    /// The layers with their weights in panels (`kernels::cpu::PackedLinear`): a served
    /// model's weights never change, so they are laid out once for the kernel.
    layers: Vec<PackedLinear>,
    /// Ping-pong buffers for the hidden activations, grown to the largest batch seen.
    scratch: [AlignedVec; 2],
    /// The input, copied here when the caller's buffer does not start on a cache line: an
    /// input off one slows the first layer by far more than the copy costs (`cargo bench -p
    /// kernels --bench gemm -- input_alignment`).
    input: AlignedVec,
    pub(super) threads: usize,
}

impl CpuMlp {
    /// Its layers' products in `precision`.
    pub(super) fn new(
        checkpoint: &Checkpoint,
        precision: MatmulPrecision,
    ) -> Result<CpuMlp, LoadError> {
        let layers = (checkpoint.layers.iter())
            .map(|l| {
                let weight = l.weight.host();
                PackedLinear::with_precision(weight, &l.bias, l.inputs, l.outputs, precision)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CpuMlp {
            layers,
            scratch: Default::default(),
            input: AlignedVec::default(),
            threads: rayon::current_num_threads(),
        })
    }

    pub(super) fn forward(
        &mut self,
        input: &[f32],
        rows: usize,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        let n = self.layers.len();
        let input = if (input.as_ptr() as usize).is_multiple_of(CACHE_LINE) {
            input
        } else {
            self.input.resize(input.len());
            self.input.copy_from_slice(input);
            &self.input[..]
        };
        let [b0, b1] = &mut self.scratch;
        for (i, layer) in self.layers.iter().enumerate() {
            let act = activation(i, n);
            // Layer i reads what layer i - 1 wrote and writes the other buffer.
            let (read, write) = if i % 2 == 0 {
                (&*b1, &mut *b0)
            } else {
                (&*b0, &mut *b1)
            };
            let src: &[f32] = if i == 0 { input } else { read };
            if i + 1 == n {
                layer.forward(src, rows, output, act, self.threads)?;
            } else {
                write.resize(rows * layer.outputs());
                layer.forward(src, rows, write, act, self.threads)?;
            }
        }
        Ok(())
    }
}
