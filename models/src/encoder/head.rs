//! A sequence classifier's head, as `BertForSequenceClassification` runs it on the
//! `[CLS]` state: the pooler (`tanh(W·x + b)`, hidden to hidden), then the classifier
//! (hidden to one logit per label). It runs on the host in f32 after the device's forward
//! pass: a few hundred thousand multiply-adds a sequence, next to the encoder's millions a
//! token, so moving it onto the device would save nothing worth a kernel.

use super::weights::{ClassifierWeights, Dense};

pub(super) struct ClassifierHead {
    pooler: HostDense,
    classifier: HostDense,
    /// One sequence's pooled state.
    pooled: Vec<f32>,
}

/// A dense layer in f32, `[outputs, inputs]` row-major.
struct HostDense {
    inputs: usize,
    outputs: usize,
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl HostDense {
    fn new(d: &Dense) -> HostDense {
        HostDense {
            inputs: d.inputs,
            outputs: d.outputs,
            weight: d.weight.to_f32(),
            bias: d.bias.clone(),
        }
    }

    /// `out = W·x + b`, each sum in f64 (the head is tiny; its outputs are compared as
    /// scores, so they should not carry f32 summation noise).
    fn apply(&self, x: &[f32], out: &mut [f32]) {
        for ((o, row), b) in out
            .iter_mut()
            .zip(self.weight.chunks_exact(self.inputs))
            .zip(&self.bias)
        {
            let dot: f64 = row.iter().zip(x).map(|(w, v)| *w as f64 * *v as f64).sum();
            *o = (dot + *b as f64) as f32;
        }
    }
}

impl ClassifierHead {
    pub(super) fn new(w: &ClassifierWeights) -> ClassifierHead {
        ClassifierHead {
            pooler: HostDense::new(&w.pooler),
            classifier: HostDense::new(&w.classifier),
            pooled: vec![0.0; w.pooler.outputs],
        }
    }

    pub(super) fn labels(&self) -> usize {
        self.classifier.outputs
    }

    /// Logits `[sequences, labels]` from the `[CLS]` states `[sequences, hidden]`.
    pub(super) fn apply(&mut self, cls: &[f32], logits: &mut [f32]) {
        let (h, labels) = (self.pooler.inputs, self.labels());
        for (x, out) in cls.chunks_exact(h).zip(logits.chunks_exact_mut(labels)) {
            self.pooler.apply(x, &mut self.pooled);
            self.pooled.iter_mut().for_each(|v| *v = v.tanh());
            self.classifier.apply(&self.pooled, out);
        }
    }
}
