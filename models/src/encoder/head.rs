//! A sequence classifier's head, as `BertForSequenceClassification` runs it on the `[CLS]`
//! state: the pooler (`tanh(W·x + b)`, hidden to hidden; a ReLU for DistilBERT), then the
//! classifier (hidden to one logit per label). ModernBERT's reads the pooled state its
//! config names (first token or mean) and runs GELU, then a layer norm, between the two.
//! It runs on the host, with the CPU's packed kernels over all the batch's sequences at
//! once, after the device's forward pass has pooled the states: `hidden²` multiply-adds a
//! sequence, next to the encoder's `12·hidden²` a token, so the device's kernels serve it
//! unchanged.

use kernels::Activation;
use kernels::cpu::{NormParams, PackedLinear, add_layer_norm, gelu_in_place};

use super::weights::packed;
use super::weights::{ClassifierWeights, HeadActivation, Norm};
use crate::{LoadError, ModelError};

pub(super) struct ClassifierHead {
    pooler: PackedLinear,
    activation: HeadActivation,
    /// ModernBERT's norm after the activation, and its epsilon.
    norm: Option<(Norm, f32)>,
    classifier: PackedLinear,
    /// The pooled states, `[sequences, hidden]`.
    pooled: Vec<f32>,
}

impl ClassifierHead {
    pub(super) fn new(w: &ClassifierWeights, eps: f32) -> Result<ClassifierHead, LoadError> {
        Ok(ClassifierHead {
            pooler: packed(&w.pooler)?,
            activation: w.activation,
            norm: w.norm.clone().map(|n| (n, eps)),
            classifier: packed(&w.classifier)?,
            pooled: Vec::new(),
        })
    }

    pub(super) fn labels(&self) -> usize {
        self.classifier.outputs()
    }

    /// Logits `[sequences, labels]` from the pooled states `[sequences, hidden]`, on up to
    /// `threads` threads of the current rayon pool.
    pub(super) fn apply(
        &mut self,
        pooled_states: &[f32],
        logits: &mut [f32],
        threads: usize,
    ) -> Result<(), ModelError> {
        let sequences = pooled_states.len() / self.pooler.inputs();
        self.pooled.resize(sequences * self.pooler.outputs(), 0.0);
        let id = Activation::Identity;
        let activation = match self.activation {
            HeadActivation::Tanh | HeadActivation::Gelu => id,
            HeadActivation::Relu => Activation::Relu,
        };
        (self.pooler).forward(
            pooled_states,
            sequences,
            &mut self.pooled,
            activation,
            threads,
        )?;
        match self.activation {
            HeadActivation::Tanh => self.pooled.iter_mut().for_each(|v| *v = v.tanh()),
            HeadActivation::Gelu => gelu_in_place(&mut self.pooled, threads),
            HeadActivation::Relu => {}
        }
        if let Some((norm, eps)) = &self.norm {
            let norm = NormParams {
                gamma: &norm.gamma,
                beta: &norm.beta,
                eps: *eps,
            };
            add_layer_norm(&mut self.pooled, None, norm, threads)?;
        }
        (self.classifier).forward(&self.pooled, sequences, logits, id, threads)?;
        Ok(())
    }
}
