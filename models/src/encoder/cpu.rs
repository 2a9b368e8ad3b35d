//! The encoder on the CPU: every dense layer runs once over all the batch's tokens packed
//! end to end (`kernels::cpu::PackedLinear`, weights in panels in their stored precision, or
//! rounded to bf16 for bf16 products),
//! attention per sequence and head on its own length (`kernels::cpu::biased_attention`,
//! with MPNet's bias by relative position), layer norms in place, GELU in the dense kernel.
//! A batch of several sequences runs a group of them per thread where it can (`groups`),
//! each layer split over the threads otherwise. Activations live in buffers the encoder owns, grown to the largest
//! batch seen, so a forward pass allocates nothing once warm.

use kernels::Activation;
use kernels::cpu::{
    AlignedVec, AttentionInput, AttentionScratch, AttentionShape, MatmulPrecision, NormParams,
    PackedLinear, RelativeBias, add_layer_norm, biased_attention,
};

use super::family::fill_bias_table;
use super::groups::{Group, Grouped};
use super::weights::packed_for;
use super::weights::{Dense, Embeddings, EncoderWeights, Norm};
use crate::encoder::spec::EncoderConfig;
use crate::text::packed::PackedTokens;
use crate::text::pooling::Pooling;
use crate::{LoadError, ModelError};

pub(super) struct CpuEncoder {
    config: EncoderConfig,
    embeddings: Embeddings,
    layers: Vec<CpuLayer>,
    /// MPNet's attention bias, `[buckets, heads]`.
    relative_bias: Option<Vec<f32>>,
    /// That bias by head and distance for the batch's longest sequence.
    bias_table: Vec<f32>,
    scratch: Scratch,
    /// One per thread, for batches run a group of sequences per thread.
    groups: Vec<Group<Scratch>>,
    pub(super) threads: usize,
    /// What its layers' products run in.
    pub(super) precision: MatmulPrecision,
}

/// What a forward pass reads: the weights, and MPNet's bias table for the batch.
struct Weights<'a> {
    config: &'a EncoderConfig,
    embeddings: &'a Embeddings,
    layers: &'a [CpuLayer],
    bias: Option<(&'a [f32], usize)>,
}

struct CpuLayer {
    qkv: PackedLinear,
    attention_out: PackedLinear,
    attention_norm: Norm,
    ffn_up: PackedLinear,
    ffn_down: PackedLinear,
    ffn_norm: Norm,
}

/// Activations, `[tokens, width]` each.
#[derive(Default)]
struct Scratch {
    /// The hidden states, updated in place layer by layer.
    x: AlignedVec,
    qkv: AlignedVec,
    /// Attention's output, before its dense layer.
    ctx: AlignedVec,
    /// A dense layer's output on its way into the residual sum.
    sum: AlignedVec,
    intermediate: AlignedVec,
    attention: AttentionScratch,
    /// Each token's row of the position table.
    positions: Vec<u32>,
}

impl CpuEncoder {
    /// The layers' products in `precision`.
    pub(super) fn new(
        config: &EncoderConfig,
        weights: EncoderWeights,
        precision: MatmulPrecision,
    ) -> Result<Self, LoadError> {
        let packed = |d: &Dense| packed_for(d, precision);
        let layers = weights
            .layers
            .iter()
            .map(|l| {
                Ok(CpuLayer {
                    qkv: packed(&l.qkv)?,
                    attention_out: packed(&l.attention_out)?,
                    attention_norm: l.attention_norm.clone(),
                    ffn_up: packed(&l.ffn_up)?,
                    ffn_down: packed(&l.ffn_down)?,
                    ffn_norm: l.ffn_norm.clone(),
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        // What the layers were built with, so that what it reports is what runs.
        let precision = layers.first().map_or(precision, |l| l.qkv.precision());
        Ok(CpuEncoder {
            config: config.clone(),
            embeddings: weights.embeddings,
            layers,
            relative_bias: weights.relative_bias,
            bias_table: Vec::new(),
            scratch: Scratch::default(),
            groups: Vec::new(),
            threads: rayon::current_num_threads(),
            precision,
        })
    }

    /// Runs validated `tokens` and writes `[output rows, hidden]`: pooled states, and every
    /// state of the sequences that keep them.
    pub(super) fn forward(
        &mut self,
        tokens: &PackedTokens,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        let c = &self.config;
        let span = tokens.max_len();
        if let Some(weights) = &self.relative_bias {
            fill_bias_table(weights, c.heads, span, &mut self.bias_table);
        }
        let weights = Weights {
            config: c,
            embeddings: &self.embeddings,
            layers: &self.layers,
            bias: (self.relative_bias.as_ref()).map(|_| (self.bias_table.as_slice(), span)),
        };
        // A token's dense layers cost 2h + intermediate times what one pair of tokens costs
        // in attention (per layer: 8h² + 4h·intermediate FLOPs against 4h), at f32's rates.
        let speedup = super::dense_speedup(self.precision);
        let pair_cost = super::pair_weight(self.precision, c.head_dim())
            / (2 * c.hidden + c.intermediate) as f64;
        let grouped = Grouped {
            tokens,
            threads: self.threads,
            pair_cost,
            token_flops: (8 * c.hidden * c.hidden + 4 * c.hidden * c.intermediate) as f64 / speedup,
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
        // Every value of these is written before it is read.
        s.x.resize_for_overwrite(t * h);
        s.qkv.resize_for_overwrite(t * 3 * h);
        s.ctx.resize_for_overwrite(t * h);
        s.sum.resize_for_overwrite(t * h);
        s.intermediate.resize_for_overwrite(t * c.intermediate);
        c.batch_position_ids(tokens, &mut s.positions);
        embed(self.embeddings, c, tokens, &s.positions, &mut s.x);
        let norm = params(&self.embeddings.norm, c);
        add_layer_norm(&mut s.x, None, norm, threads)?;
        for layer in self.layers {
            run_layer(layer, c, tokens, self.bias, s, threads)?;
        }
        pool(&s.x, tokens, h, c.pooling, output);
        Ok(())
    }
}

fn params<'a>(norm: &'a Norm, c: &EncoderConfig) -> NormParams<'a> {
    NormParams {
        gamma: &norm.gamma,
        beta: &norm.beta,
        eps: c.layer_norm_eps,
    }
}

/// `x[t] = word[id] + position[positions[t]] + token_type[type id]`.
fn embed(
    e: &Embeddings,
    c: &EncoderConfig,
    tokens: &PackedTokens,
    positions: &[u32],
    x: &mut [f32],
) {
    let h = c.hidden;
    for (t, out) in x.chunks_exact_mut(h).take(tokens.tokens()).enumerate() {
        let word = &e.word[tokens.ids[t] as usize * h..][..h];
        let position = &e.position[positions[t] as usize * h..][..h];
        let kind = &e.token_type[tokens.type_ids[t] as usize * h..][..h];
        for (((o, w), p), k) in out.iter_mut().zip(word).zip(position).zip(kind) {
            *o = w + p + k;
        }
    }
}

fn run_layer(
    l: &CpuLayer,
    c: &EncoderConfig,
    tokens: &PackedTokens,
    bias: Option<(&[f32], usize)>,
    s: &mut Scratch,
    threads: usize,
) -> Result<(), ModelError> {
    let t = tokens.tokens();
    let id = Activation::Identity;
    l.qkv.forward(&s.x, t, &mut s.qkv, id, threads)?;
    let bias = bias.map(|(table, span)| RelativeBias { table, span });
    let input = AttentionInput {
        bias,
        ..attention_input(&s.qkv, tokens, c, l.qkv.precision())
    };
    biased_attention(input, &mut s.ctx, &mut s.attention, threads)?;
    l.attention_out
        .forward(&s.ctx, t, &mut s.sum, id, threads)?;
    add_layer_norm(
        &mut s.x,
        Some(&s.sum),
        params(&l.attention_norm, c),
        threads,
    )?;
    // GELU in the dense kernel's epilogue: each tile is activated in registers, by the
    // thread that computed it, rather than in a pass of its own over the buffer.
    let gelu = Activation::Gelu;
    l.ffn_up
        .forward(&s.x, t, &mut s.intermediate, gelu, threads)?;
    l.ffn_down
        .forward(&s.intermediate, t, &mut s.sum, id, threads)?;
    add_layer_norm(&mut s.x, Some(&s.sum), params(&l.ffn_norm, c), threads)?;
    Ok(())
}

/// Attention's input: a layer's `qkv` over the packed `tokens`, its products in the
/// precision of the layer's dense ones.
pub(super) fn attention_input<'a>(
    qkv: &'a [f32],
    tokens: &'a PackedTokens,
    c: &EncoderConfig,
    products: MatmulPrecision,
) -> AttentionInput<'a> {
    AttentionInput {
        qkv,
        offsets: &tokens.offsets,
        shape: AttentionShape {
            hidden: c.hidden,
            heads: c.heads,
        },
        bias: None,
        window: None,
        products,
    }
}

/// One vector per sequence from its token states (their mean, or the first, `[CLS]`), or
/// every state of a sequence that keeps them, in order.
pub(crate) fn pool(
    x: &[f32],
    tokens: &PackedTokens,
    h: usize,
    pooling: Pooling,
    output: &mut [f32],
) {
    let mut rows = output.chunks_exact_mut(h);
    for seq in 0..tokens.sequences() {
        let range = tokens.range(seq);
        let states = &x[range.start * h..range.end * h];
        if tokens.keeps_states(seq) {
            // The states first: a zip that ran out on them would still take a row.
            for (state, out) in states.chunks_exact(h).zip(rows.by_ref()) {
                out.copy_from_slice(state);
            }
            continue;
        }
        let Some(out) = rows.next() else { return };
        match pooling {
            Pooling::Cls => out.copy_from_slice(&states[..h]),
            Pooling::LastToken => out.copy_from_slice(&states[states.len() - h..]),
            Pooling::Mean => {
                out.fill(0.0);
                let n = range.len() as f32;
                for row in states.chunks_exact(h) {
                    for (o, v) in out.iter_mut().zip(row) {
                        *o += v;
                    }
                }
                out.iter_mut().for_each(|o| *o /= n);
            }
        }
    }
}
