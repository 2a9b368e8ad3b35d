//! ModernBERT's forward pass on the CPU, on the same packed batches and kernels as BERT's
//! (`cpu`): every dense layer once over all the batch's tokens, attention per sequence on
//! its own length. What differs is the layer: pre-norm, rotary positions turned into the
//! queries and keys, a sliding window in all but every few layers (the attention kernel's
//! window, which scores only the keys near each query, so those layers cost in proportion
//! to a text's length), a gated GELU feed-forward, and a final norm before pooling. Batches
//! run a group of sequences per thread where they can, as BERT's do (`groups`).
//!
//! NomicBERT runs here too: the same layers with BERT's order of norms (after each residual
//! sum, no final norm), biases where it has them, token types, and a SiLU gate for
//! `swiglu`.

use kernels::Activation;
use kernels::cpu::{
    AlignedVec, AttentionInput, AttentionScratch, MatmulPrecision, NormParams, PackedLinear,
    add_layer_norm, biased_attention, gelu_in_place, silu_in_place,
};

use super::cpu::{attention_input, pool};
use super::groups::{Group, Grouped};
use super::modern::{Gate, ModernBertParams, ModernLayer, ModernWeights, NormPlacement};
use super::weights::packed_for;
use super::weights::{Dense, Embeddings, Norm};
use crate::encoder::spec::EncoderConfig;
use crate::text::packed::PackedTokens;
use crate::text::rotary::Rotary;
use crate::{LoadError, ModelError};

pub(super) struct ModernCpuEncoder {
    config: EncoderConfig,
    params: ModernBertParams,
    embeddings: Embeddings,
    layers: Vec<CpuLayer>,
    final_norm: Option<Norm>,
    scratch: Scratch,
    /// One per thread, for batches run a group of sequences per thread.
    groups: Vec<Group<Scratch>>,
    pub(super) threads: usize,
    /// What its layers' products run in.
    pub(super) precision: MatmulPrecision,
}

/// What a forward pass reads.
struct Weights<'a> {
    config: &'a EncoderConfig,
    params: &'a ModernBertParams,
    embeddings: &'a Embeddings,
    layers: &'a [CpuLayer],
    final_norm: Option<&'a Norm>,
}

struct CpuLayer {
    attention_norm: Option<Norm>,
    qkv: PackedLinear,
    attention_out: PackedLinear,
    mlp_norm: Norm,
    mlp_in: PackedLinear,
    mlp_out: PackedLinear,
}

/// Activations, `[tokens, width]` each, and the batch's position tables.
#[derive(Default)]
struct Scratch {
    /// The residual stream.
    x: AlignedVec,
    /// A layer norm of it, the input of attention and of the feed-forward.
    normed: AlignedVec,
    qkv: AlignedVec,
    ctx: AlignedVec,
    /// A block's output on its way into the residual sum.
    out: AlignedVec,
    /// The feed-forward's input projection (`[tokens, 2 · intermediate]`) and its gated half.
    up: AlignedVec,
    gated: AlignedVec,
    attention: AttentionScratch,
    /// Rotary cosines and sines by position for the global and the sliding-window layers.
    global: Rotary,
    local: Rotary,
}

impl ModernCpuEncoder {
    pub(super) fn new(
        config: &EncoderConfig,
        params: &ModernBertParams,
        embeddings: Embeddings,
        weights: ModernWeights,
        precision: MatmulPrecision,
    ) -> Result<Self, LoadError> {
        let packed = |d: &Dense| packed_for(d, precision);
        let layers = (weights.layers.iter())
            .map(|l: &ModernLayer| {
                Ok(CpuLayer {
                    attention_norm: l.attention_norm.clone(),
                    qkv: packed(&l.qkv)?,
                    attention_out: packed(&l.attention_out)?,
                    mlp_norm: l.mlp_norm.clone(),
                    mlp_in: packed(&l.mlp_in)?,
                    mlp_out: packed(&l.mlp_out)?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        // What the layers were built with, so that what it reports is what runs.
        let precision = layers.first().map_or(precision, |l| l.qkv.precision());
        Ok(ModernCpuEncoder {
            config: config.clone(),
            params: params.clone(),
            embeddings,
            layers,
            final_norm: weights.final_norm,
            scratch: Scratch::default(),
            groups: Vec::new(),
            threads: rayon::current_num_threads(),
            precision,
        })
    }

    /// Runs validated `tokens` and writes `[sequences, hidden]` pooled states.
    pub(super) fn forward(
        &mut self,
        tokens: &PackedTokens,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        let c = &self.config;
        let weights = Weights {
            config: c,
            params: &self.params,
            embeddings: &self.embeddings,
            layers: &self.layers,
            final_norm: self.final_norm.as_ref(),
        };
        // A token's dense layers (8h² + 6h·intermediate FLOPs a layer, the gate included)
        // against a pair of tokens in a global layer (4h), at f32's rate.
        let speedup = super::dense_speedup(self.precision);
        let pair_cost = super::pair_weight(self.precision, c.head_dim())
            / (2.0 * c.hidden as f64 + 1.5 * c.intermediate as f64);
        let grouped = Grouped {
            tokens,
            threads: self.threads,
            pair_cost,
            token_flops: (8 * c.hidden * c.hidden + 6 * c.hidden * c.intermediate) as f64 / speedup,
            width: c.hidden,
        };
        let forward = |part: &PackedTokens, s: &mut Scratch, out: &mut [f32], threads| {
            weights.run(part, s, out, threads)
        };
        grouped.run(&mut self.groups, &mut self.scratch, output, &forward)
    }
}

impl Weights<'_> {
    /// The forward pass of `tokens` on up to `threads` threads, in `s`.
    fn run(
        &self,
        tokens: &PackedTokens,
        s: &mut Scratch,
        output: &mut [f32],
        threads: usize,
    ) -> Result<(), ModelError> {
        let c = self.config;
        let (t, h) = (tokens.tokens(), c.hidden);
        for (buffer, width) in [
            (&mut s.x, h),
            (&mut s.normed, h),
            (&mut s.qkv, 3 * h),
            (&mut s.ctx, h),
            (&mut s.out, h),
            (&mut s.up, 2 * c.intermediate),
            (&mut s.gated, c.intermediate),
        ] {
            // Every value is written before it is read.
            buffer.resize_for_overwrite(t * width);
        }
        embed(self.embeddings, tokens, h, &mut s.x);
        let eps = c.layer_norm_eps;
        add_layer_norm(&mut s.x, None, params(&self.embeddings.norm, eps), threads)?;
        let span = tokens.lengths().max().unwrap_or(0);
        let head_dim = c.head_dim();
        let p = &self.params;
        s.global.fill(p.global_theta, p.ntk, span, head_dim);
        s.local.fill(p.local_theta, p.ntk, span, head_dim);
        for (layer, &global) in self.layers.iter().zip(&self.params.global) {
            let kind = match global {
                true => Attention::Global,
                false => Attention::Window(self.params.window),
            };
            attend(self, layer, tokens, kind, s, threads)?;
            feed_forward(self, layer, tokens.tokens(), s, threads)?;
        }
        if let Some(norm) = self.final_norm {
            add_layer_norm(&mut s.x, None, params(norm, eps), threads)?;
        }
        pool(&s.x, tokens, h, c.pooling, output);
        Ok(())
    }
}

/// `x[t] = word[id]`, plus `token_type[type id]` where the model has token types.
fn embed(e: &Embeddings, tokens: &PackedTokens, h: usize, x: &mut [f32]) {
    for (t, (row, &id)) in x.chunks_exact_mut(h).zip(&tokens.ids).enumerate() {
        row.copy_from_slice(&e.word[id as usize * h..][..h]);
        if !e.token_type.is_empty() {
            let kind = &e.token_type[tokens.type_ids[t] as usize * h..][..h];
            row.iter_mut().zip(kind).for_each(|(v, k)| *v += k);
        }
    }
}

fn params(norm: &Norm, eps: f32) -> NormParams<'_> {
    NormParams {
        gamma: &norm.gamma,
        beta: &norm.beta,
        eps,
    }
}

/// How a layer attends: to the whole sequence (with the global rotary base), or to the
/// tokens at most so many positions away (with the local base).
#[derive(Clone, Copy)]
enum Attention {
    Global,
    Window(usize),
}

/// `x += Wo · attention(rotary(Wqkv · attn_norm(x)))`, or with the norm after:
/// `x = attn_norm(x + Wo · attention(rotary(Wqkv · x)))`.
fn attend(
    w: &Weights<'_>,
    l: &CpuLayer,
    tokens: &PackedTokens,
    kind: Attention,
    s: &mut Scratch,
    threads: usize,
) -> Result<(), ModelError> {
    let (c, norms) = (w.config, w.params.norms);
    let t = tokens.tokens();
    let id = Activation::Identity;
    let input = match (&l.attention_norm, norms) {
        (Some(norm), NormPlacement::Before) => {
            s.normed.copy_from_slice(&s.x);
            add_layer_norm(&mut s.normed, None, params(norm, c.layer_norm_eps), threads)?;
            &s.normed
        }
        _ => &s.x,
    };
    l.qkv.forward(input, t, &mut s.qkv, id, threads)?;
    let (rotary, window) = match kind {
        Attention::Global => (&s.global, None),
        Attention::Window(w) => (&s.local, Some(w)),
    };
    rotary.apply(&mut s.qkv, tokens, c.hidden, c.head_dim());
    let input = AttentionInput {
        window,
        ..attention_input(&s.qkv, tokens, c, l.qkv.precision())
    };
    biased_attention(input, &mut s.ctx, &mut s.attention, threads)?;
    l.attention_out
        .forward(&s.ctx, t, &mut s.out, id, threads)?;
    match (&l.attention_norm, norms) {
        (Some(norm), NormPlacement::After) => {
            let norm = params(norm, c.layer_norm_eps);
            add_layer_norm(&mut s.x, Some(&s.out), norm, threads)?;
        }
        _ => add_in_place(&mut s.x, &s.out),
    }
    Ok(())
}

/// `x += Wo · (act(a) ⊙ g)` where `[a, g] = Wi · mlp_norm(x)`, or with the norm after:
/// `x = mlp_norm(x + Wo · (act(a) ⊙ g))` where `[a, g] = Wi · x`.
fn feed_forward(
    w: &Weights<'_>,
    l: &CpuLayer,
    t: usize,
    s: &mut Scratch,
    threads: usize,
) -> Result<(), ModelError> {
    let (c, p) = (w.config, w.params);
    let id = Activation::Identity;
    let norm = params(&l.mlp_norm, c.layer_norm_eps);
    let input = match p.norms {
        NormPlacement::Before => {
            s.normed.copy_from_slice(&s.x);
            add_layer_norm(&mut s.normed, None, norm, threads)?;
            &s.normed
        }
        NormPlacement::After => &s.x,
    };
    l.mlp_in.forward(input, t, &mut s.up, id, threads)?;
    gate(&s.up, &mut s.gated, c.intermediate, |g| match p.gate {
        Gate::Gelu => gelu_in_place(g, threads),
        Gate::Silu => silu_in_place(g, threads),
    });
    l.mlp_out.forward(&s.gated, t, &mut s.out, id, threads)?;
    match p.norms {
        NormPlacement::Before => add_in_place(&mut s.x, &s.out),
        NormPlacement::After => add_layer_norm(&mut s.x, Some(&s.out), norm, threads)?,
    }
    Ok(())
}

/// `gated = act(a) ⊙ g` for each token's `[a, g]` row of `up` (`[tokens, 2 · width]`), the
/// activation applied in place over all of `gated` at once.
pub(crate) fn gate(up: &[f32], gated: &mut [f32], width: usize, act: impl FnOnce(&mut [f32])) {
    for (gated, up) in gated
        .chunks_exact_mut(width)
        .zip(up.chunks_exact(2 * width))
    {
        gated.copy_from_slice(&up[..width]);
    }
    act(gated);
    for (gated, up) in gated
        .chunks_exact_mut(width)
        .zip(up.chunks_exact(2 * width))
    {
        gated
            .iter_mut()
            .zip(&up[width..])
            .for_each(|(a, g)| *a *= g);
    }
}

pub(crate) fn add_in_place(x: &mut [f32], add: &[f32]) {
    x.iter_mut().zip(add).for_each(|(x, a)| *x += a);
}
