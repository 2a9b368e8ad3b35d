//! A decoder's forward pass on the CPU over packed batches: every dense layer once over all
//! the batch's tokens (the encoders' packed kernels, f32 or bf16 products), attention per
//! sequence and head (`attention`), positions counted from each sequence's start.

use kernels::Activation;
use kernels::cpu::{AlignedVec, MatmulPrecision, PackedLinear, silu_in_place};

use super::attention::{Heads, attend};
use super::{DecoderParams, DecoderWeights};
use crate::encoder::cpu::pool;
use crate::encoder::spec::EncoderConfig;
use crate::encoder::weights::packed_for;
use crate::text::packed::PackedTokens;
use crate::text::rotary::Rotary;
use crate::{LoadError, ModelError};

pub(crate) struct DecoderCpu {
    config: EncoderConfig,
    params: DecoderParams,
    embed: Vec<f32>,
    layers: Vec<CpuLayer>,
    norm: Vec<f32>,
    scratch: Scratch,
    pub(crate) threads: usize,
    /// What its layers' products run in.
    pub(crate) precision: MatmulPrecision,
}

struct CpuLayer {
    input_norm: Vec<f32>,
    qkv: PackedLinear,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    attention_out: PackedLinear,
    post_norm: Vec<f32>,
    gate_up: PackedLinear,
    down: PackedLinear,
}

/// Activations, `[tokens, width]` each.
#[derive(Default)]
struct Scratch {
    /// The residual stream.
    x: AlignedVec,
    normed: AlignedVec,
    qkv: AlignedVec,
    ctx: AlignedVec,
    out: AlignedVec,
    /// The feed-forward's gate and up projections side by side, and their product.
    up: AlignedVec,
    gated: AlignedVec,
    head_major: Vec<f32>,
    rotary: Rotary,
}

impl DecoderCpu {
    pub(crate) fn new(
        config: &EncoderConfig,
        params: &DecoderParams,
        weights: DecoderWeights,
        precision: MatmulPrecision,
    ) -> Result<Self, LoadError> {
        let packed = |d| packed_for(d, precision);
        let layers = (weights.layers.iter())
            .map(|l| {
                Ok(CpuLayer {
                    input_norm: l.input_norm.clone(),
                    qkv: packed(&l.qkv)?,
                    q_norm: l.q_norm.clone(),
                    k_norm: l.k_norm.clone(),
                    attention_out: packed(&l.attention_out)?,
                    post_norm: l.post_norm.clone(),
                    gate_up: packed(&l.gate_up)?,
                    down: packed(&l.down)?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        // What the layers were built with, so that what it reports is what runs.
        let precision = layers.first().map_or(precision, |l| l.qkv.precision());
        Ok(DecoderCpu {
            config: config.clone(),
            params: params.clone(),
            embed: weights.embed,
            layers,
            norm: weights.norm,
            scratch: Scratch::default(),
            threads: rayon::current_num_threads(),
            precision,
        })
    }

    /// Runs validated `tokens` and writes `[sequences, hidden]` pooled states (every state
    /// of a sequence that keeps them).
    pub(crate) fn forward(
        &mut self,
        tokens: &PackedTokens,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        let (c, p, s) = (&self.config, &self.params, &mut self.scratch);
        let (t, h, threads) = (tokens.tokens(), c.hidden, self.threads);
        for (buffer, width) in [
            (&mut s.x, h),
            (&mut s.normed, h),
            (&mut s.qkv, p.qkv_width(c.heads)),
            (&mut s.ctx, p.query_width(c.heads)),
            (&mut s.out, h),
            (&mut s.up, 2 * c.intermediate),
            (&mut s.gated, c.intermediate),
        ] {
            // Every value is written before it is read.
            buffer.resize_for_overwrite(t * width);
        }
        for (row, &id) in s.x.chunks_exact_mut(h).zip(&tokens.ids) {
            row.copy_from_slice(&self.embed[id as usize * h..][..h]);
        }
        s.rotary
            .fill(p.rope_theta, None, tokens.max_len(), p.head_dim);
        for layer in &self.layers {
            attention_block(c, p, layer, tokens, s, threads)?;
            feed_forward(c, layer, t, s, threads)?;
        }
        rms_norm(&mut s.x, &self.norm, c.layer_norm_eps);
        pool(&s.x, tokens, h, c.pooling, output);
        Ok(())
    }
}

/// `x += Wo · attention(rope(norm(Wq·n)), rope(norm(Wk·n)), Wv·n)`, `n = rms(x) · w`.
fn attention_block(
    c: &EncoderConfig,
    p: &DecoderParams,
    l: &CpuLayer,
    tokens: &PackedTokens,
    s: &mut Scratch,
    threads: usize,
) -> Result<(), ModelError> {
    let t = tokens.tokens();
    let id = Activation::Identity;
    s.normed.copy_from_slice(&s.x);
    rms_norm(&mut s.normed, &l.input_norm, c.layer_norm_eps);
    l.qkv.forward(&s.normed, t, &mut s.qkv, id, threads)?;
    let (d, width) = (p.head_dim, p.qkv_width(c.heads));
    let turned = (c.heads + p.kv_heads) * d;
    if let (Some(q_norm), Some(k_norm)) = (&l.q_norm, &l.k_norm) {
        for row in s.qkv.chunks_exact_mut(width) {
            let (queries, rest) = row.split_at_mut(c.heads * d);
            rms_norm(queries, q_norm, c.layer_norm_eps);
            rms_norm(&mut rest[..p.kv_heads * d], k_norm, c.layer_norm_eps);
        }
    }
    s.rotary.apply_rows(&mut s.qkv, tokens, width, turned, d);
    let heads = Heads {
        heads: c.heads,
        kv_heads: p.kv_heads,
        head_dim: d,
        causal: p.causal,
        window: None,
    };
    attend(
        &s.qkv,
        tokens,
        heads,
        &mut s.ctx,
        &mut s.head_major,
        threads,
    );
    l.attention_out
        .forward(&s.ctx, t, &mut s.out, id, threads)?;
    add_in_place(&mut s.x, &s.out);
    Ok(())
}

/// `x += down · (silu(gate · m) ⊙ up · m)`, `m = rms(x) · w`.
fn feed_forward(
    c: &EncoderConfig,
    l: &CpuLayer,
    t: usize,
    s: &mut Scratch,
    threads: usize,
) -> Result<(), ModelError> {
    let id = Activation::Identity;
    s.normed.copy_from_slice(&s.x);
    rms_norm(&mut s.normed, &l.post_norm, c.layer_norm_eps);
    l.gate_up.forward(&s.normed, t, &mut s.up, id, threads)?;
    let i = c.intermediate;
    for (gated, up) in s.gated.chunks_exact_mut(i).zip(s.up.chunks_exact(2 * i)) {
        gated.copy_from_slice(&up[..i]);
    }
    silu_in_place(&mut s.gated, threads);
    for (gated, up) in s.gated.chunks_exact_mut(i).zip(s.up.chunks_exact(2 * i)) {
        gated.iter_mut().zip(&up[i..]).for_each(|(a, u)| *a *= u);
    }
    l.down.forward(&s.gated, t, &mut s.out, id, threads)?;
    add_in_place(&mut s.x, &s.out);
    Ok(())
}

/// Each run of `w.len()` values of `x` scaled to a root mean square of one, then by `w`, as
/// transformers' Qwen RMSNorm computes it in f32.
pub(crate) fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(w.len()) {
        let mean = row.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        row.iter_mut()
            .zip(w)
            .for_each(|(v, g)| *v = g * (*v * scale));
    }
}

fn add_in_place(x: &mut [f32], add: &[f32]) {
    x.iter_mut().zip(add).for_each(|(x, a)| *x += a);
}
