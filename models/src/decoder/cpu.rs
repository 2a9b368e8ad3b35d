//! A decoder's forward pass on the CPU over packed batches: every dense layer once over all
//! the batch's tokens (the encoders' packed kernels, f32 or bf16 products), attention per
//! sequence and head (`attention`), positions counted from each sequence's start. Norm
//! weights are kept with Gemma's offset added, so every RMSNorm here scales by its weight.

use kernels::Activation;
use kernels::cpu::{AlignedVec, MatmulPrecision, PackedLinear, gelu_tanh_in_place, silu_in_place};

use super::attention::{Heads, attend};
use super::{DecoderParams, DecoderWeights, Gate};
use crate::dense::packed_for;
use crate::encoder::cpu::pool;
use crate::encoder::modern_cpu::{add_in_place, gate};
use crate::encoder::spec::EncoderConfig;
use crate::text::packed::PackedTokens;
use crate::text::rotary::Rotary;
use crate::{LoadError, ModelError};

pub(crate) struct DecoderCpu {
    config: EncoderConfig,
    params: DecoderParams,
    embed: Vec<f32>,
    embed_scale: f32,
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
    attention_out_norm: Option<Vec<f32>>,
    mlp_norm: Vec<f32>,
    mlp_out_norm: Option<Vec<f32>>,
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
    /// Rotary cosines and sines of the global layers, and of the sliding-window ones.
    global: Rotary,
    local: Rotary,
}

impl DecoderCpu {
    pub(crate) fn new(
        config: &EncoderConfig,
        params: &DecoderParams,
        weights: DecoderWeights,
        precision: MatmulPrecision,
    ) -> Result<Self, LoadError> {
        let packed = |d| packed_for(d, precision);
        let norm = |w: &[f32]| {
            w.iter()
                .map(|v| v + params.norm_offset)
                .collect::<Vec<f32>>()
        };
        let layers = (weights.layers.iter())
            .map(|l| {
                Ok(CpuLayer {
                    input_norm: norm(&l.input_norm),
                    qkv: packed(&l.qkv)?,
                    q_norm: l.q_norm.as_deref().map(norm),
                    k_norm: l.k_norm.as_deref().map(norm),
                    attention_out: packed(&l.attention_out)?,
                    attention_out_norm: l.attention_out_norm.as_deref().map(norm),
                    mlp_norm: norm(&l.mlp_norm),
                    mlp_out_norm: l.mlp_out_norm.as_deref().map(norm),
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
            embed_scale: weights.embed_scale,
            layers,
            norm: norm(&weights.norm),
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
        let scale = self.embed_scale;
        for (row, &id) in s.x.chunks_exact_mut(h).zip(&tokens.ids) {
            let embedding = &self.embed[id as usize * h..][..h];
            row.iter_mut()
                .zip(embedding)
                .for_each(|(x, e)| *x = e * scale);
        }
        let span = tokens.max_len();
        s.global.fill(p.rope_theta, None, span, p.head_dim);
        if let Some(local) = &p.local {
            s.local.fill(local.rope_theta, None, span, p.head_dim);
        }
        for (i, layer) in self.layers.iter().enumerate() {
            attention_block(c, p, layer, p.window_of(i), tokens, s, threads)?;
            feed_forward(c, p, layer, t, s, threads)?;
        }
        rms_norm(&mut s.x, &self.norm, c.layer_norm_eps);
        pool(&s.x, tokens, h, c.pooling, output);
        Ok(())
    }
}

/// `x += Wo · attention(rope(norm(Wq·n)), rope(norm(Wk·n)), Wv·n)`, `n = rms(x) · w`
/// (the sum normalised first where the layer has a norm of its output), within `window`.
fn attention_block(
    c: &EncoderConfig,
    p: &DecoderParams,
    l: &CpuLayer,
    window: Option<usize>,
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
    let rotary = match window {
        Some(_) => &s.local,
        None => &s.global,
    };
    rotary.apply_rows(&mut s.qkv, tokens, width, turned, d);
    let heads = Heads {
        heads: c.heads,
        kv_heads: p.kv_heads,
        head_dim: d,
        causal: p.causal,
        window,
        scale: p.attention_scale as f32,
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
    if let Some(norm) = &l.attention_out_norm {
        rms_norm(&mut s.out, norm, c.layer_norm_eps);
    }
    add_in_place(&mut s.x, &s.out);
    Ok(())
}

/// `x += down · (act(gate · m) ⊙ up · m)`, `m = rms(x) · w` (the sum normalised first
/// where the layer has a norm of its output).
fn feed_forward(
    c: &EncoderConfig,
    p: &DecoderParams,
    l: &CpuLayer,
    t: usize,
    s: &mut Scratch,
    threads: usize,
) -> Result<(), ModelError> {
    let id = Activation::Identity;
    s.normed.copy_from_slice(&s.x);
    rms_norm(&mut s.normed, &l.mlp_norm, c.layer_norm_eps);
    l.gate_up.forward(&s.normed, t, &mut s.up, id, threads)?;
    gate(&s.up, &mut s.gated, c.intermediate, |g| match p.gate {
        Gate::Silu => silu_in_place(g, threads),
        Gate::GeluTanh => gelu_tanh_in_place(g, threads),
    });
    l.down.forward(&s.gated, t, &mut s.out, id, threads)?;
    if let Some(norm) = &l.mlp_out_norm {
        rms_norm(&mut s.out, norm, c.layer_norm_eps);
    }
    add_in_place(&mut s.x, &s.out);
    Ok(())
}

/// Each run of `w.len()` values of `x` scaled to a root mean square of one, then by `w`, as
/// transformers' RMSNorms compute it in f32.
pub(crate) fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(w.len()) {
        let mean = row.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        row.iter_mut()
            .zip(w)
            .for_each(|(v, g)| *v = g * (*v * scale));
    }
}
