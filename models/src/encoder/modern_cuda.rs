//! ModernBERT's forward pass on a GPU, the layer of `modern_cpu` on the ops of
//! `kernels::cuda::encoder`: dense layers on cuBLAS over all the batch's tokens (16-bit
//! weights on the tensor cores), rotary positions turned into the queries and keys,
//! attention per sequence within the sliding window in all but every few layers (only the
//! key tiles a window reaches are read), a gated GELU feed-forward, pre-norm residual sums
//! and a final norm. Every op is queued on one stream, with one wait at the end for the
//! pooled states.

use std::sync::Arc;

use kernels::KernelError;
use kernels::cpu::AttentionShape;
use kernels::cuda::CudaDevice;
use kernels::cuda::encoder::{
    AttentionSpec, DeviceBatch, DeviceNorm, DeviceVec, EmbeddingTables, EncoderOps, Epilogue,
    MAX_HEAD_DIM, RotaryTables,
};
use kernels::cuda::linear::Linear;

use super::cuda::upload_tokens;
use super::modern::{Gate, ModernBertParams, ModernWeights, NormPlacement, Ntk};
use super::weights::{Dense, Embeddings, Norm};
use crate::encoder::spec::EncoderConfig;
use crate::text::packed::PackedTokens;
use crate::text::pooling::Pooling;
use crate::text::rotary::Rotary;
use crate::{LoadError, ModelError};

pub(super) struct ModernCudaEncoder {
    config: EncoderConfig,
    params: ModernBertParams,
    ops: EncoderOps,
    word: DeviceVec,
    embedding_norm: DeviceNorm,
    layers: Vec<CudaLayer>,
    final_norm: DeviceNorm,
    scratch: Scratch,
}

struct CudaLayer {
    attention_norm: Option<DeviceNorm>,
    qkv: Linear,
    attention_out: Linear,
    mlp_norm: DeviceNorm,
    mlp_in: Linear,
    mlp_out: Linear,
}

/// Device activations (`[tokens, width]` each), grown to the largest batch seen, and the
/// rotary tables of the global and the sliding-window layers.
#[derive(Default)]
struct Scratch {
    batch: DeviceBatch,
    /// The residual stream.
    x: DeviceVec,
    /// A layer norm of it, the input of attention and of the feed-forward.
    normed: DeviceVec,
    qkv: DeviceVec,
    ctx: DeviceVec,
    /// A block's output on its way into the residual sum.
    out: DeviceVec,
    /// The feed-forward's input projection (`[tokens, 2 · intermediate]`) and its gated half.
    up: DeviceVec,
    gated: DeviceVec,
    pooled: DeviceVec,
    /// Each token's position in its sequence, on the host.
    positions: Vec<u32>,
    global: DeviceRotary,
    local: DeviceRotary,
}

/// Rotary tables computed on the host (as the CPU path computes them) and copied up when
/// they grow.
#[derive(Default)]
struct DeviceRotary {
    host: Rotary,
    device: RotaryTables,
}

impl DeviceRotary {
    fn cover(
        &mut self,
        ops: &EncoderOps,
        theta: f64,
        ntk: Option<Ntk>,
        span: usize,
        head_dim: usize,
    ) -> Result<(), KernelError> {
        if self.host.fill(theta, ntk, span, head_dim) {
            let (cos, sin) = self.host.tables();
            let uploaded = (ops.upload_into(cos, &mut self.device.cos))
                .and_then(|()| ops.upload_into(sin, &mut self.device.sin));
            if uploaded.is_err() {
                // Filled again, and uploaded, by the next batch.
                self.host = Rotary::default();
            }
            uploaded?;
        }
        Ok(())
    }
}

/// Whether the layers are ModernBERT's own, the only ones the GPU runs: norms before, a
/// GELU gate, no biases, a final norm. NomicBERT is refused before (`cpu_only`); this
/// holds the line for any other form.
fn is_modern(p: &ModernBertParams) -> bool {
    p.norms == NormPlacement::Before && p.gate == Gate::Gelu && p.biases == Default::default()
}

impl ModernCudaEncoder {
    pub(super) fn new(
        config: &EncoderConfig,
        params: &ModernBertParams,
        embeddings: &Embeddings,
        weights: &ModernWeights,
        device: Arc<CudaDevice>,
    ) -> Result<Self, LoadError> {
        if config.head_dim() > MAX_HEAD_DIM {
            return Err(LoadError::Device(KernelError::Shape {
                op: "cuda attention",
                detail: format!(
                    "heads of {} values; up to {MAX_HEAD_DIM} run on CUDA",
                    config.head_dim()
                ),
            }));
        }
        let Some(final_norm) = weights.final_norm.as_ref().filter(|_| is_modern(params)) else {
            return Err(LoadError::CpuOnly {
                what: "an encoder with NomicBERT's layers",
            });
        };
        let ops = EncoderOps::new(device)?;
        let eps = config.layer_norm_eps;
        let dense = |d: &Dense| ops.upload_linear(d.weight.host(), &d.bias, d.inputs, d.outputs);
        let norm = |n: &Norm| ops.upload_norm(&n.gamma, &n.beta, eps);
        let layers = (weights.layers.iter())
            .map(|l| {
                Ok(CudaLayer {
                    attention_norm: l.attention_norm.as_ref().map(norm).transpose()?,
                    qkv: dense(&l.qkv)?,
                    attention_out: dense(&l.attention_out)?,
                    mlp_norm: norm(&l.mlp_norm)?,
                    mlp_in: dense(&l.mlp_in)?,
                    mlp_out: dense(&l.mlp_out)?,
                })
            })
            .collect::<Result<Vec<_>, KernelError>>()?;
        Ok(ModernCudaEncoder {
            config: config.clone(),
            params: params.clone(),
            word: ops.upload(&embeddings.word)?,
            embedding_norm: norm(&embeddings.norm)?,
            final_norm: norm(final_norm)?,
            layers,
            scratch: Scratch::default(),
            ops,
        })
    }

    /// Runs validated `tokens` and writes `[sequences, hidden]` pooled states.
    pub(super) fn forward(
        &mut self,
        tokens: &PackedTokens,
        output: &mut [f32],
    ) -> Result<(), ModelError> {
        let c = &self.config;
        let (t, h) = (tokens.tokens(), c.hidden);
        let (ops, s) = (&mut self.ops, &mut self.scratch);
        upload_tokens(ops, c, tokens, &mut s.positions, &mut s.batch)?;
        for (buffer, width) in [
            (&mut s.x, h),
            (&mut s.normed, h),
            (&mut s.qkv, 3 * h),
            (&mut s.ctx, h),
            (&mut s.out, h),
            (&mut s.up, 2 * c.intermediate),
            (&mut s.gated, c.intermediate),
        ] {
            ops.reserve(buffer, t * width)?;
        }
        ops.reserve(&mut s.pooled, tokens.sequences() * h)?;
        let span = tokens.max_len();
        let p = &self.params;
        s.global
            .cover(ops, p.global_theta, p.ntk, span, c.head_dim())?;
        s.local
            .cover(ops, p.local_theta, p.ntk, span, c.head_dim())?;
        let tables = EmbeddingTables {
            word: &self.word,
            position: None,
            token_type: None,
        };
        ops.embed(&s.batch, tables, h, &mut s.x)?;
        ops.add_layer_norm(&mut s.x, None, &self.embedding_norm, t)?;
        for (layer, &global) in self.layers.iter().zip(&p.global) {
            let window = (!global).then_some(p.window);
            attend(ops, layer, c, window, s, t)?;
            feed_forward(ops, layer, c, s, t)?;
        }
        ops.add_layer_norm(&mut s.x, None, &self.final_norm, t)?;
        let cls = c.pooling == Pooling::Cls;
        ops.pool(&s.x, &s.batch, h, cls, &mut s.pooled)?;
        ops.download(&s.pooled, output)?;
        Ok(())
    }
}

/// `x += Wo · attention(rotary(Wqkv · attn_norm(x)))`, within `window` if there is one
/// (with the local rotary base; the global one otherwise).
fn attend(
    ops: &mut EncoderOps,
    l: &CudaLayer,
    c: &EncoderConfig,
    window: Option<usize>,
    s: &mut Scratch,
    t: usize,
) -> Result<(), ModelError> {
    let h = c.hidden;
    let input = match &l.attention_norm {
        Some(norm) => {
            ops.copy(&s.x, &mut s.normed, t * h)?;
            ops.add_layer_norm(&mut s.normed, None, norm, t)?;
            &s.normed
        }
        None => &s.x,
    };
    ops.dense(&l.qkv, input, t, &mut s.qkv, Epilogue::None)?;
    let rotary = match window {
        Some(_) => &s.local.device,
        None => &s.global.device,
    };
    ops.rotary(&mut s.qkv, &s.batch, rotary, h, c.head_dim())?;
    let spec = AttentionSpec {
        shape: AttentionShape {
            hidden: h,
            heads: c.heads,
        },
        bias: None,
        window,
    };
    ops.attention(&s.qkv, &s.batch, spec, &mut s.ctx)?;
    ops.dense(&l.attention_out, &s.ctx, t, &mut s.out, Epilogue::None)?;
    ops.add_in_place(&mut s.x, &s.out, t, h)?;
    Ok(())
}

/// `x += Wo · (gelu(a) ⊙ g)` where `[a, g] = Wi · mlp_norm(x)`.
fn feed_forward(
    ops: &mut EncoderOps,
    l: &CudaLayer,
    c: &EncoderConfig,
    s: &mut Scratch,
    t: usize,
) -> Result<(), ModelError> {
    let h = c.hidden;
    ops.copy(&s.x, &mut s.normed, t * h)?;
    ops.add_layer_norm(&mut s.normed, None, &l.mlp_norm, t)?;
    ops.dense(&l.mlp_in, &s.normed, t, &mut s.up, Epilogue::None)?;
    ops.gelu_gate(&s.up, &mut s.gated, t, c.intermediate)?;
    ops.dense(&l.mlp_out, &s.gated, t, &mut s.out, Epilogue::None)?;
    ops.add_in_place(&mut s.x, &s.out, t, h)?;
    Ok(())
}
