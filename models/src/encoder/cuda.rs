//! The encoder on a GPU, composed of `kernels::cuda::encoder`'s safe ops: weights resident
//! in their stored precision (16-bit matrices run on the tensor cores), activations in
//! device buffers grown to the largest batch seen, every op queued on one serving-priority
//! stream and one wait at the end, for the pooled embeddings. Like the CPU path, every
//! dense layer runs once over all the batch's tokens and attention per sequence, with
//! MPNet's bias by relative position where the model has one (its table by head and
//! distance built on the host for the batch's longest sequence and copied up with it).

use std::sync::Arc;

use kernels::KernelError;
use kernels::cpu::AttentionShape;
use kernels::cuda::CudaDevice;
use kernels::cuda::encoder::{
    AttentionBias, AttentionSpec, BatchIds, DeviceBatch, DeviceNorm, DeviceVec, EmbeddingTables,
    EncoderOps, Epilogue, MAX_HEAD_DIM, Residual,
};
use kernels::cuda::linear::Linear;

use super::family::fill_bias_table;
use super::weights::{Dense, EncoderWeights};
use crate::encoder::spec::EncoderConfig;
use crate::text::packed::PackedTokens;
use crate::text::pooling::Pooling;
use crate::{LoadError, ModelError};

pub(super) struct CudaEncoder {
    config: EncoderConfig,
    ops: EncoderOps,
    /// Word, position and token type tables.
    tables: [DeviceVec; 3],
    embedding_norm: DeviceNorm,
    layers: Vec<CudaLayer>,
    /// MPNet's attention bias, `[buckets, heads]`, on the host.
    relative_bias: Option<Vec<f32>>,
    scratch: Scratch,
}

struct CudaLayer {
    qkv: Linear,
    attention_out: Linear,
    attention_norm: DeviceNorm,
    ffn_up: Linear,
    ffn_down: Linear,
    ffn_norm: DeviceNorm,
}

#[derive(Default)]
struct Scratch {
    batch: DeviceBatch,
    x: DeviceVec,
    qkv: DeviceVec,
    ctx: DeviceVec,
    /// A dense layer's output on its way into the residual sum.
    sum: DeviceVec,
    intermediate: DeviceVec,
    pooled: DeviceVec,
    /// Each token's row of the position table, on the host.
    positions: Vec<u32>,
    /// MPNet's bias by head and distance for the batch's longest sequence, on the host and
    /// on the device.
    bias_table: Vec<f32>,
    bias: DeviceVec,
}

impl CudaEncoder {
    pub(super) fn new(
        config: &EncoderConfig,
        weights: &EncoderWeights,
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
        let ops = EncoderOps::new(device)?;
        let e = &weights.embeddings;
        let eps = config.layer_norm_eps;
        let dense = |d: &Dense| ops.upload_linear(d.weight.host(), &d.bias, d.inputs, d.outputs);
        let layers = weights
            .layers
            .iter()
            .map(|l| {
                Ok(CudaLayer {
                    qkv: dense(&l.qkv)?,
                    attention_out: dense(&l.attention_out)?,
                    attention_norm: ops.upload_norm(
                        &l.attention_norm.gamma,
                        &l.attention_norm.beta,
                        eps,
                    )?,
                    ffn_up: dense(&l.ffn_up)?,
                    ffn_down: dense(&l.ffn_down)?,
                    ffn_norm: ops.upload_norm(&l.ffn_norm.gamma, &l.ffn_norm.beta, eps)?,
                })
            })
            .collect::<Result<Vec<_>, KernelError>>()?;
        Ok(CudaEncoder {
            config: config.clone(),
            tables: [
                ops.upload(&e.word)?,
                ops.upload(&e.position)?,
                ops.upload(&e.token_type)?,
            ],
            embedding_norm: ops.upload_norm(&e.norm.gamma, &e.norm.beta, eps)?,
            layers,
            relative_bias: weights.relative_bias.clone(),
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
        ops.reserve(&mut s.x, t * h)?;
        ops.reserve(&mut s.qkv, t * 3 * h)?;
        ops.reserve(&mut s.ctx, t * h)?;
        ops.reserve(&mut s.sum, t * h)?;
        ops.reserve(&mut s.intermediate, t * c.intermediate)?;
        ops.reserve(&mut s.pooled, tokens.sequences() * h)?;
        let [word, position, kind] = &self.tables;
        let tables = EmbeddingTables {
            word,
            position: Some(position),
            token_type: Some(kind),
        };
        ops.embed(&s.batch, tables, h, &mut s.x)?;
        ops.add_layer_norm(&mut s.x, None, &self.embedding_norm, t)?;
        let span = tokens.max_len();
        if let Some(weights) = &self.relative_bias {
            fill_bias_table(weights, c.heads, span, &mut s.bias_table);
            ops.upload_into(&s.bias_table, &mut s.bias)?;
        }
        let span = self.relative_bias.as_ref().map(|_| span);
        for layer in &self.layers {
            run_layer(ops, layer, c, span, s, t)?;
        }
        let cls = c.pooling == Pooling::Cls;
        ops.pool(&s.x, &s.batch, h, cls, &mut s.pooled)?;
        ops.download(&s.pooled, output)?;
        Ok(())
    }
}

/// Copies a packed batch to the device, each token with its row of the position table
/// (computed into `positions`).
pub(super) fn upload_tokens(
    ops: &EncoderOps,
    c: &EncoderConfig,
    tokens: &PackedTokens,
    positions: &mut Vec<u32>,
    batch: &mut DeviceBatch,
) -> Result<(), KernelError> {
    c.batch_position_ids(tokens, positions);
    let packed = BatchIds {
        ids: &tokens.ids,
        type_ids: &tokens.type_ids,
        positions,
        offsets: &tokens.offsets,
    };
    ops.upload_batch(packed, batch)
}

/// One post-norm layer; `bias_span` is the span of `s.bias` when the model has one.
fn run_layer(
    ops: &mut EncoderOps,
    l: &CudaLayer,
    c: &EncoderConfig,
    bias_span: Option<usize>,
    s: &mut Scratch,
    t: usize,
) -> Result<(), ModelError> {
    ops.dense(&l.qkv, &s.x, t, &mut s.qkv, Epilogue::Bias)?;
    let shape = AttentionShape {
        hidden: c.hidden,
        heads: c.heads,
    };
    let spec = AttentionSpec {
        shape,
        bias: bias_span.map(|span| AttentionBias {
            table: &s.bias,
            span,
        }),
        window: None,
    };
    ops.attention(&s.qkv, &s.batch, spec, &mut s.ctx)?;
    ops.dense(&l.attention_out, &s.ctx, t, &mut s.sum, Epilogue::None)?;
    let residual = Residual {
        output: &s.sum,
        layer: &l.attention_out,
    };
    ops.add_layer_norm(&mut s.x, Some(residual), &l.attention_norm, t)?;
    ops.dense(&l.ffn_up, &s.x, t, &mut s.intermediate, Epilogue::BiasGelu)?;
    ops.dense(&l.ffn_down, &s.intermediate, t, &mut s.sum, Epilogue::None)?;
    let residual = Residual {
        output: &s.sum,
        layer: &l.ffn_down,
    };
    ops.add_layer_norm(&mut s.x, Some(residual), &l.ffn_norm, t)?;
    Ok(())
}
