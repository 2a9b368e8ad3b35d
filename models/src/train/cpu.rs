//! Training on the CPU: forward through `kernels::cpu::Linear` (saving activations), the
//! backward products on the `gemm` crate, Adam in place.

use kernels::Activation;
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
    adam: Adam,
    t: i32,
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
            layers,
            adam,
            t: 0,
        }
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
        let n = self.layers.len();
        // activations[0] is the input; activations[i + 1] the output of layer i.
        let mut activations: Vec<Vec<f32>> = Vec::with_capacity(n + 1);
        activations.push(x.to_vec());
        for (i, layer) in self.layers.iter().enumerate() {
            let act = if i + 1 < n {
                Activation::Relu
            } else {
                Activation::Identity
            };
            let mut out = vec![0f32; rows * layer.outputs()];
            layer.forward(&activations[i], rows, &mut out, act, threads)?;
            activations.push(out);
        }
        let classes = self.layers[n - 1].outputs();
        let logits = &activations[n];
        let mut delta = vec![0f32; rows * classes];
        let scale = 1.0 / total_rows as f32;
        let (mut loss, mut correct) = (0f32, 0usize);
        for r in 0..rows {
            let label = labels[r] as usize;
            let (l, ok) = softmax_xent(
                &logits[r * classes..(r + 1) * classes],
                label,
                scale,
                &mut delta[r * classes..(r + 1) * classes],
            );
            loss += l;
            correct += ok as usize;
        }
        for i in (0..n).rev() {
            let layer = &self.layers[i];
            let (k, o) = (layer.inputs(), layer.outputs());
            let (dw, db) = &mut self.grads[i];
            // dW += deltaᵀ · A_prev: [o, rows] x [rows, k].
            matmul(
                dw,
                MatRef::new(&delta, rows, o).t(),
                MatRef::new(&activations[i], rows, k),
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
            let mut prev = vec![0f32; rows * k];
            matmul(
                &mut prev,
                MatRef::new(&delta, rows, o),
                MatRef::new(layer.weight(), o, k),
                false,
                threads,
            );
            for (d, a) in prev.iter_mut().zip(&activations[i]) {
                if *a <= 0.0 {
                    *d = 0.0;
                }
            }
            delta = prev;
        }
        Ok((loss, correct))
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
        // Activations of every layer, kept for the backward pass, plus one delta.
        let widths: usize =
            self.layers.iter().map(|l| l.outputs()).sum::<usize>() + self.layers[0].inputs();
        (widths
            + self
                .layers
                .iter()
                .map(|l| l.inputs().max(l.outputs()))
                .max()
                .unwrap_or(0))
            * 4
    }
}
