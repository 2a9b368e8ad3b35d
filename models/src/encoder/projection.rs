//! sentence-transformers' `Dense` modules: after pooling and before `Normalize`, each maps
//! the sentence embedding through `activation(W·x + b)`, as LaBSE's and distiluse's
//! projections do. A module's folder holds its `config.json` and `model.safetensors`
//! (`linear.weight` `[out, in]`, `linear.bias`). They run on the host with the CPU's
//! packed kernels over all the batch's sequences at once, as a classifier's head does:
//! `in·out` multiply-adds a sequence, next to the encoder's `12·hidden²` a token.

use kernels::Activation;
use kernels::cpu::PackedLinear;

use super::dense_module::{DenseActivation, DenseModule};
use super::weights::{Dense, packed};
use crate::{LoadError, ModelError};

/// The Dense modules of an encoder, in order, ready to run.
pub(super) struct Projection {
    layers: Vec<(PackedLinear, DenseActivation)>,
    /// A layer's input and output, swapped after each layer.
    input: Vec<f32>,
    output: Vec<f32>,
}

impl Projection {
    pub(super) fn new(modules: &[DenseModule], weights: &[Dense]) -> Result<Self, LoadError> {
        let layers = modules
            .iter()
            .zip(weights)
            .map(|(m, w)| Ok((packed(w)?, m.activation)))
            .collect::<Result<Vec<_>, LoadError>>()?;
        Ok(Projection {
            layers,
            input: Vec::new(),
            output: Vec::new(),
        })
    }

    /// Values per sequence out of the last module.
    pub(super) fn outputs(&self) -> usize {
        self.layers.last().map_or(0, |(l, _)| l.outputs())
    }

    /// `[sequences, outputs]` into `out` from the pooled `[sequences, hidden]`, on up to
    /// `threads` threads of the current rayon pool.
    pub(super) fn apply(
        &mut self,
        pooled: &[f32],
        out: &mut [f32],
        threads: usize,
    ) -> Result<(), ModelError> {
        let Some((first, _)) = self.layers.first() else {
            out.copy_from_slice(pooled);
            return Ok(());
        };
        let sequences = pooled.len() / first.inputs();
        self.input.clear();
        self.input.extend_from_slice(pooled);
        for (linear, activation) in &self.layers {
            self.output.resize(sequences * linear.outputs(), 0.0);
            let kernel_activation = match activation {
                DenseActivation::Relu => Activation::Relu,
                DenseActivation::Identity | DenseActivation::Tanh => Activation::Identity,
            };
            linear.forward(
                &self.input,
                sequences,
                &mut self.output,
                kernel_activation,
                threads,
            )?;
            if *activation == DenseActivation::Tanh {
                self.output.iter_mut().for_each(|v| *v = v.tanh());
            }
            std::mem::swap(&mut self.input, &mut self.output);
        }
        out.copy_from_slice(&self.input);
        Ok(())
    }
}
