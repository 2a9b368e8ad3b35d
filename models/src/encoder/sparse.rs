//! A sparse encoder's head (SPLADE): every token's final state through BERT's
//! masked-language head (`cls.predictions`: a dense layer with GELU, a layer norm, then the
//! decoder to a logit a vocabulary entry), `log(1 + relu)` of each logit, pooled over the
//! sequence by maximum or sum: one weight a vocabulary entry, most of them zero.
//!
//! It runs on the host with the CPU's packed kernels, on the states the encoder keeps for
//! it, the decoder a block of tokens at a time: a batch's logits, tokens × vocabulary, are
//! never held whole (16,384 tokens of BERT's 30,522 would be 2 GB).

use kernels::Activation;
use kernels::cpu::{NormParams, PackedLinear, add_layer_norm};

use super::weights::packed;
use super::weights::{MaskedLmWeights, Norm};
use crate::text::packed::PackedTokens;
use crate::text::pooling::SparsePooling;
use crate::{LoadError, ModelError};

/// Tokens whose logits are computed at once: 64 × 30,522 logits are 7.8 MB.
const BLOCK_TOKENS: usize = 64;

pub(super) struct SparseHead {
    transform: PackedLinear,
    norm: Norm,
    eps: f32,
    decoder: PackedLinear,
    pooling: SparsePooling,
    /// The batch, every sequence keeping its states.
    tokens: PackedTokens,
    /// Those states, `[tokens, hidden]`.
    states: Vec<f32>,
    /// Through the transform and its norm, `[tokens, hidden]`.
    transformed: Vec<f32>,
    /// One block's logits, after the ReLU: `[BLOCK_TOKENS, vocabulary]`.
    logits: Vec<f32>,
}

impl SparseHead {
    pub(super) fn new(
        w: &MaskedLmWeights,
        eps: f32,
        pooling: SparsePooling,
    ) -> Result<SparseHead, LoadError> {
        Ok(SparseHead {
            transform: packed(&w.transform)?,
            norm: w.norm.clone(),
            eps,
            decoder: packed(&w.decoder)?,
            pooling,
            tokens: PackedTokens::new(),
            states: Vec::new(),
            transformed: Vec::new(),
            logits: Vec::new(),
        })
    }

    /// Weights per sequence out: one a vocabulary entry.
    pub(super) fn vocabulary(&self) -> usize {
        self.decoder.outputs()
    }

    /// `[sequences, vocabulary]` weights of `tokens` into `output`, from the final states
    /// `states_of` writes (`[tokens, hidden]`, for the tokens given it, each sequence
    /// keeping its states), on up to `threads` threads of the current rayon pool.
    pub(super) fn run(
        &mut self,
        tokens: &PackedTokens,
        output: &mut [f32],
        threads: usize,
        states_of: impl FnOnce(&PackedTokens, &mut [f32]) -> Result<(), ModelError>,
    ) -> Result<(), ModelError> {
        let (h, t) = (self.transform.inputs(), tokens.tokens());
        tokens.copy_picked(0..tokens.sequences(), &mut self.tokens);
        self.tokens.keep_all_states();
        self.states.resize(t * h, 0.0);
        states_of(&self.tokens, &mut self.states)?;
        self.transformed.resize(t * h, 0.0);
        (self.transform).forward(
            &self.states,
            t,
            &mut self.transformed,
            Activation::Gelu,
            threads,
        )?;
        let norm = NormParams {
            gamma: &self.norm.gamma,
            beta: &self.norm.beta,
            eps: self.eps,
        };
        add_layer_norm(&mut self.transformed, None, norm, threads)?;
        output.fill(0.0);
        self.pool_blocks(tokens, output, threads)?;
        if self.pooling == SparsePooling::Max {
            output.iter_mut().for_each(|w| *w = w.ln_1p());
        }
        Ok(())
    }

    /// The decoder's logits a block of tokens at a time, each token's pooled into its
    /// sequence's row: for `Max` the largest ReLU (`log(1 + x)` rises with `x`, so it is
    /// taken once at the end), for `Sum` the sum of `log(1 + relu)`.
    fn pool_blocks(
        &mut self,
        tokens: &PackedTokens,
        output: &mut [f32],
        threads: usize,
    ) -> Result<(), ModelError> {
        let (h, vocab) = (self.transform.inputs(), self.vocabulary());
        let mut sequence = 0;
        for start in (0..tokens.tokens()).step_by(BLOCK_TOKENS) {
            let n = BLOCK_TOKENS.min(tokens.tokens() - start);
            self.logits.resize(n * vocab, 0.0);
            let states = &self.transformed[start * h..(start + n) * h];
            (self.decoder).forward(states, n, &mut self.logits, Activation::Relu, threads)?;
            for (i, logits) in self.logits.chunks_exact(vocab).enumerate() {
                while tokens.offsets[sequence + 1] <= start + i {
                    sequence += 1;
                }
                let row = &mut output[sequence * vocab..][..vocab];
                match self.pooling {
                    SparsePooling::Max => (row.iter_mut().zip(logits)).for_each(|(w, &x)| {
                        *w = w.max(x);
                    }),
                    SparsePooling::Sum => (row.iter_mut().zip(logits))
                        .filter(|(_, x)| **x > 0.0)
                        .for_each(|(w, &x)| *w += x.ln_1p()),
                }
            }
        }
        Ok(())
    }
}
