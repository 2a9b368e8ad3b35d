//! Training on the CPU: forward through `kernels::cpu::Linear` (saving activations), the
//! backward products on the `gemm` crate, Adam in place.

use kernels::cpu::{Linear, MatRef, matmul};

use super::{Adam, StepOptions, StepStats, Train, softmax_xent, to_checkpoint};
use crate::{Checkpoint, ModelError};

struct Moments {
    m_w: Vec<f32>,
    v_w: Vec<f32>,
    m_b: Vec<f32>,
    v_b: Vec<f32>,
}

pub struct CpuTrainer {
    layers: Vec<Linear>,
    moments: Vec<Moments>,
    grads: Vec<(Vec<f32>, Vec<f32>)>,
    scratch: Scratch,
    adam: Adam,
    t: i32,
}

/// Activations for micro-batches of `rows` rows: every layer's output, and two gradients
/// as wide as the widest layer taking turns as the one flowing back.
#[derive(Default)]
struct Scratch {
    rows: usize,
    acts: Vec<Vec<f32>>,
    delta: [Vec<f32>; 2],
}

impl Scratch {
    fn bytes(&self) -> usize {
        let values: usize = self.acts.iter().chain(&self.delta).map(Vec::len).sum();
        values * 4
    }
}

impl CpuTrainer {
    pub fn new(init: &Checkpoint, adam: Adam) -> CpuTrainer {
        let layers: Vec<Linear> = init
            .layers
            .iter()
            .map(|l| {
                Linear::new(l.weight.to_f32(), l.bias.clone(), l.inputs, l.outputs)
                    .expect("a validated checkpoint has consistent shapes")
            })
            .collect();
        let zeros = |l: &Linear| {
            (
                vec![0f32; l.inputs() * l.outputs()],
                vec![0f32; l.outputs()],
            )
        };
        CpuTrainer {
            moments: layers
                .iter()
                .map(|l| {
                    let (w, b) = zeros(l);
                    Moments {
                        m_w: w.clone(),
                        v_w: w,
                        m_b: b.clone(),
                        v_b: b,
                    }
                })
                .collect(),
            grads: layers.iter().map(zeros).collect(),
            scratch: Scratch::default(),
            layers,
            adam,
            t: 0,
        }
    }

    /// Sizes the scratch buffers for exactly `rows` rows (freeing larger ones).
    fn fit_scratch(&mut self, rows: usize) {
        if self.scratch.rows == rows {
            return;
        }
        let widest = self
            .layers
            .iter()
            .map(|l| l.inputs().max(l.outputs()))
            .max()
            .unwrap_or(1);
        let exact = |len: usize| vec![0f32; len];
        self.scratch = Scratch {
            rows,
            acts: self
                .layers
                .iter()
                .map(|l| exact(rows * l.outputs()))
                .collect(),
            delta: [exact(rows * widest), exact(rows * widest)],
        };
    }

    /// Forward and backward of one micro-batch, adding its gradients (of the mean loss over
    /// `total_rows`) into `self.grads`.
    fn accumulate(
        &mut self,
        x: &[f32],
        labels: &[u32],
        total_rows: usize,
        threads: usize,
    ) -> Result<(f32, usize), ModelError> {
        let rows = labels.len();
        self.forward(x, rows, threads)?;
        let result = self.loss(labels, 1.0 / total_rows as f32);
        self.backward(x, rows, threads);
        Ok(result)
    }

    /// Every layer's output, kept for the backward pass.
    fn forward(&mut self, x: &[f32], rows: usize, threads: usize) -> Result<(), ModelError> {
        let n = self.layers.len();
        let acts = &mut self.scratch.acts;
        for (i, layer) in self.layers.iter().enumerate() {
            let (before, after) = acts.split_at_mut(i);
            let input = if i == 0 {
                x
            } else {
                &before[i - 1][..rows * layer.inputs()]
            };
            let out = &mut after[0][..rows * layer.outputs()];
            layer.forward(input, rows, out, crate::mlp::activation(i, n), threads)?;
        }
        Ok(())
    }

    /// The micro-batch's summed loss and correct count; the loss's gradient (scaled by
    /// `scale`) into `delta[0]`.
    fn loss(&mut self, labels: &[u32], scale: f32) -> (f32, usize) {
        let classes = self.layers[self.layers.len() - 1].outputs();
        let s = &mut self.scratch;
        let logits = s.acts.last().expect("at least one layer");
        let (mut loss, mut correct) = (0f32, 0usize);
        for (r, &label) in labels.iter().enumerate() {
            let row = r * classes..(r + 1) * classes;
            let (l, ok) = softmax_xent(
                &logits[row.clone()],
                label as usize,
                scale,
                &mut s.delta[0][row],
            );
            loss += l;
            correct += ok as usize;
        }
        (loss, correct)
    }

    /// From the loss's gradient in `delta[0]` back to the first layer, accumulating every
    /// layer's gradients; the gradient in flight alternates between the two deltas.
    fn backward(&mut self, x: &[f32], rows: usize, threads: usize) {
        let s = &mut self.scratch;
        let mut cur = 0;
        for i in (0..self.layers.len()).rev() {
            let layer = &self.layers[i];
            let (k, o) = (layer.inputs(), layer.outputs());
            let input = if i == 0 {
                x
            } else {
                &s.acts[i - 1][..rows * k]
            };
            let [d0, d1] = &mut s.delta;
            let (delta, prev) = if cur == 0 { (&*d0, d1) } else { (&*d1, d0) };
            let delta = &delta[..rows * o];
            let (dw, db) = &mut self.grads[i];
            // dW += deltaᵀ · A_prev: [o, rows] x [rows, k].
            matmul(
                dw,
                MatRef::new(delta, rows, o).t(),
                MatRef::new(input, rows, k),
                true,
                threads,
            );
            for r in 0..rows {
                for (g, d) in db.iter_mut().zip(&delta[r * o..(r + 1) * o]) {
                    *g += d;
                }
            }
            if i == 0 {
                break;
            }
            // delta_prev = (delta · W) ⊙ relu'(A_prev): [rows, o] x [o, k].
            let prev = &mut prev[..rows * k];
            matmul(
                prev,
                MatRef::new(delta, rows, o),
                MatRef::new(layer.weight(), o, k),
                false,
                threads,
            );
            for (d, a) in prev.iter_mut().zip(input) {
                if *a <= 0.0 {
                    *d = 0.0;
                }
            }
            cur = 1 - cur;
        }
    }

    fn apply_adam(&mut self) {
        self.t += 1;
        let a = self.adam;
        let c1 = 1.0 - a.beta1.powi(self.t);
        let c2 = 1.0 - a.beta2.powi(self.t);
        for ((layer, m), (gw, gb)) in self
            .layers
            .iter_mut()
            .zip(&mut self.moments)
            .zip(&mut self.grads)
        {
            let (w, b) = layer.params_mut();
            for (p, g, m1, m2) in [
                (w, gw, &mut m.m_w, &mut m.v_w),
                (b, gb, &mut m.m_b, &mut m.v_b),
            ] {
                for i in 0..p.len() {
                    let gi = g[i];
                    m1[i] = a.beta1 * m1[i] + (1.0 - a.beta1) * gi;
                    m2[i] = a.beta2 * m2[i] + (1.0 - a.beta2) * gi * gi;
                    p[i] -= a.lr * (m1[i] / c1) / ((m2[i] / c2).sqrt() + a.eps);
                    g[i] = 0.0;
                }
            }
        }
    }
}

impl Train for CpuTrainer {
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
        self.fit_scratch(opts.micro_batch.clamp(1, rows.max(1)));
        let stats = super::micro_batches(inputs, labels, shape, opts, |x, y| {
            self.accumulate(x, y, rows, opts.threads.max(1))
        })?;
        self.apply_adam();
        Ok(stats)
    }

    fn checkpoint(&mut self) -> Result<Checkpoint, ModelError> {
        Ok(to_checkpoint(
            self.layers
                .iter()
                .map(|l| {
                    (
                        l.inputs(),
                        l.outputs(),
                        l.weight().to_vec(),
                        l.bias().to_vec(),
                    )
                })
                .collect(),
        ))
    }

    fn bytes_per_row(&self) -> usize {
        // Every layer's output, kept for the backward pass, and two gradients in flight.
        let widest = self
            .layers
            .iter()
            .map(|l| l.inputs().max(l.outputs()))
            .max()
            .unwrap_or(0);
        (self.layers.iter().map(|l| l.outputs()).sum::<usize>() + 2 * widest) * 4
    }

    fn fixed_bytes(&self) -> usize {
        // Parameters, gradients and two moments: four f32 values a parameter.
        let params: usize = self
            .layers
            .iter()
            .map(|l| l.inputs() * l.outputs() + l.outputs())
            .sum();
        16 * params
    }

    fn resident_bytes(&self) -> usize {
        self.fixed_bytes() + self.scratch.bytes()
    }

    fn reserve_rows(&mut self, rows: usize) -> Result<(), ModelError> {
        self.fit_scratch(rows.max(1));
        Ok(())
    }
}
