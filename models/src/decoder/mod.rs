//! Decoder transformers served as sentence encoders (Qwen3-Embedding, gte-Qwen2): the same
//! packed batches, tokenizer, pooling, Dense and Normalize modules, prompts and serving as
//! the BERT family's (`crate::encoder`), on layers of their own.
//!
//! - `qwen2` and `qwen3`: what each `model_type` is (one file an architecture, chosen by
//!   `config.json`'s `model_type`);
//! - `config`: `config.json` read into an [`EncoderConfig`] with [`DecoderParams`], refusing
//!   what would run differently from transformers (rope scaling, sliding windows, another
//!   activation);
//! - `weights`: `model.safetensors` by those names, validated against the config;
//! - `cpu`: the forward pass, pre-norm layers of RMSNorm, rotary grouped-query attention
//!   and a SwiGLU feed-forward, every dense layer once over all the batch's tokens;
//! - `attention`: blockwise attention over packed sequences, causal or not, several query
//!   heads reading one key/value head in place (no copy per head), never holding more than
//!   a block of scores.

pub(crate) mod attention;
pub(crate) mod config;
pub(crate) mod cpu;
mod qwen2;
mod qwen3;
pub(crate) mod weights;

use crate::encoder::family::Family;
use crate::encoder::spec::EncoderConfig;

pub use weights::{DecoderLayer, DecoderWeights};

/// What a decoder's layers are, beside the sizes every encoder has.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderParams {
    /// Key/value heads: each serves `heads / kv_heads` query heads.
    pub kv_heads: usize,
    /// Values per head (Qwen3's may make `heads · head_dim` differ from `hidden`).
    pub head_dim: usize,
    /// The rotary base.
    pub rope_theta: f64,
    /// The query, key and value projections add biases (Qwen2).
    pub qkv_bias: bool,
    /// Queries and keys go through an RMSNorm per head before the rotation (Qwen3).
    pub qk_norm: bool,
    /// A token attends only to those before it (and itself).
    pub causal: bool,
}

impl DecoderParams {
    /// Query values a token has, and the widths of a `[queries | keys | values]` row.
    pub fn query_width(&self, heads: usize) -> usize {
        heads * self.head_dim
    }

    pub fn qkv_width(&self, heads: usize) -> usize {
        (heads + 2 * self.kv_heads) * self.head_dim
    }
}

/// One decoder architecture: its family, the `architectures` served, and its layers' form.
pub(crate) struct Architecture {
    pub(crate) model_type: &'static str,
    pub(crate) family: Family,
    /// The `architectures` read as an encoder of embeddings (a causal LM's head is left out,
    /// as sentence-transformers leaves it).
    pub(crate) architectures: &'static [&'static str],
    pub(crate) qkv_bias: bool,
    pub(crate) qk_norm: bool,
}

const ARCHITECTURES: [&Architecture; 2] = [&qwen2::QWEN2, &qwen3::QWEN3];

/// The decoder architecture of a `model_type`, if it is one.
pub(crate) fn architecture(model_type: &str) -> Option<&'static Architecture> {
    ARCHITECTURES
        .iter()
        .copied()
        .find(|a| a.model_type == model_type)
}

/// FLOPs of one layer's dense products for one token: queries and the attention's output
/// (`2 · h · H·d` each), keys and values (`2 · h · K·d` each), and the gated feed-forward's
/// three matrices (`2 · h · i` each).
pub(crate) fn dense_flops_per_token(c: &EncoderConfig, p: &DecoderParams) -> u64 {
    let (h, i) = (c.hidden as u64, c.intermediate as u64);
    let (q, kv) = (
        p.query_width(c.heads) as u64,
        (p.kv_heads * p.head_dim) as u64,
    );
    2 * (2 * h * q + 2 * h * kv + 3 * h * i)
}
