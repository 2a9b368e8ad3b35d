//! Decoder transformers served as sentence encoders (Qwen3-Embedding, gte-Qwen2,
//! EmbeddingGemma): the same packed batches, tokenizer, pooling, Dense and Normalize
//! modules, prompts and serving as the BERT family's (`crate::encoder`), on layers of their
//! own.
//!
//! - `qwen2`, `qwen3` and `gemma3`: what each `model_type` is and its own keys of
//!   `config.json` (one file an architecture, chosen by `model_type`);
//! - `config`: `config.json` read into an [`EncoderConfig`](crate::encoder::EncoderConfig)
//!   with [`DecoderParams`], refusing what would run differently from transformers (rope
//!   scaling, Qwen's sliding windows, another activation);
//! - `weights`: `model.safetensors` by those names, validated against the config;
//! - `cpu`: the forward pass, layers of RMSNorm, rotary grouped-query attention (causal or
//!   not, global or windowed) and a gated feed-forward, every dense layer once over all the
//!   batch's tokens;
//! - `attention`: blockwise attention over packed sequences, causal or not, several query
//!   heads reading one key/value head in place (no copy per head), never holding more than
//!   a block of scores.

pub(crate) mod attention;
pub(crate) mod config;
pub(crate) mod cpu;
mod gemma3;
mod qwen2;
mod qwen3;
pub(crate) mod weights;

use std::path::Path;

use crate::LoadError;
use crate::dense::Dense;
use crate::encoder::family::Family;

/// One layer: `x += Wo · attention(rope(norm_q(Wq·n)), rope(norm_k(Wk·n)), Wv·n)` with
/// `n = rms(x) · input_norm`, then `x += down · (act(gate · m) ⊙ up · m)` with
/// `m = rms(x) · mlp_norm`; Gemma3 normalises each block's output too before the sum.
/// Norm weights are as stored (Gemma's scale by `1 + w`: `DecoderParams::norm_offset`).
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderLayer {
    pub input_norm: Vec<f32>,
    /// `[(H + 2K) · d, hidden]`: the query heads, then the key heads, then the value heads;
    /// biases zero where the architecture has none.
    pub qkv: Dense,
    /// Qwen3's and Gemma3's RMSNorm over each head's `d` queries and keys.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// `[hidden, H · d]`.
    pub attention_out: Dense,
    /// Gemma3's norm of the attention's output.
    pub attention_out_norm: Option<Vec<f32>>,
    /// Before the feed-forward: Qwen's `post_attention_layernorm`, Gemma3's
    /// `pre_feedforward_layernorm`.
    pub mlp_norm: Vec<f32>,
    /// Gemma3's norm of the feed-forward's output.
    pub mlp_out_norm: Option<Vec<f32>>,
    /// `[2 · intermediate, hidden]`: the gate, then the half it multiplies.
    pub gate_up: Dense,
    pub down: Dense,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DecoderWeights {
    /// `[vocab, hidden]`.
    pub embed: Vec<f32>,
    /// What embeddings are multiplied by: Gemma's `√hidden` in the table's stored
    /// precision, as transformers rounds it; 1 for the others.
    pub embed_scale: f32,
    pub layers: Vec<DecoderLayer>,
    /// The norm after the last layer.
    pub norm: Vec<f32>,
}

/// What a decoder's layers are, beside the sizes every encoder has.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderParams {
    /// Key/value heads: each serves `heads / kv_heads` query heads.
    pub kv_heads: usize,
    /// Values per head (Qwen3's and Gemma3's may make `heads · head_dim` differ from
    /// `hidden`).
    pub head_dim: usize,
    /// The query, key and value projections add biases (Qwen2).
    pub qkv_bias: bool,
    /// Queries and keys go through an RMSNorm per head before the rotation (Qwen3, Gemma3).
    pub qk_norm: bool,
    /// A token attends only to those before it (and itself); otherwise to its whole
    /// sequence (EmbeddingGemma, gte-Qwen2).
    pub causal: bool,
    pub gate: Gate,
    pub norms: Norms,
    /// Added to every RMSNorm's weight: Gemma's norms scale by `1 + w`.
    pub norm_offset: f32,
    /// The embeddings are scaled by `√hidden` (Gemma), rounded to the table's precision.
    pub scale_embeddings: bool,
    /// What the scores are multiplied by: `1 / √head_dim`, or Gemma3's
    /// `query_pre_attn_scalar^-½`.
    pub attention_scale: f64,
    /// The rotary base of the layers that attend to the whole sequence.
    pub rope_theta: f64,
    /// The layers that attend within a window, where some do (Gemma3).
    pub local: Option<LocalAttention>,
}

/// The feed-forward's gate: `down · (act(gate · x) ⊙ up · x)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Silu,
    /// GELU by its tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
}

/// Where a layer's RMSNorms are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norms {
    /// Before attention and before the feed-forward (Qwen).
    Pre,
    /// Before and after each (Gemma3): `x += norm(f(norm(x)))`.
    Sandwich,
}

/// Sliding-window layers: which, how far they see, and their rotary base.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalAttention {
    /// Per layer: whether it attends within the window.
    pub sliding: Vec<bool>,
    /// A query sees the keys at most this many positions away (from the config's
    /// `sliding_window` as transformers reads it: `gemma3`).
    pub window: usize,
    pub rope_theta: f64,
}

impl DecoderParams {
    /// Query values a token has, and the widths of a `[queries | keys | values]` row.
    pub fn query_width(&self, heads: usize) -> usize {
        heads * self.head_dim
    }

    pub fn qkv_width(&self, heads: usize) -> usize {
        (heads + 2 * self.kv_heads) * self.head_dim
    }

    /// The window of layer `i`, if it has one.
    pub fn window_of(&self, i: usize) -> Option<usize> {
        let local = self.local.as_ref()?;
        local
            .sliding
            .get(i)
            .copied()
            .unwrap_or(false)
            .then_some(local.window)
    }
}

/// The sizes every architecture's parameters are read with.
pub(crate) struct Sizes {
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) layers: usize,
}

/// One decoder architecture: its family, the `architectures` served, and how its own keys
/// of `config.json` are read.
pub(crate) struct Architecture {
    pub(crate) model_type: &'static str,
    pub(crate) family: Family,
    /// The `architectures` read as an encoder of embeddings (a causal LM's head is left out,
    /// as sentence-transformers leaves it).
    pub(crate) architectures: &'static [&'static str],
    pub(crate) params: fn(&Path, &serde_json::Value, Sizes) -> Result<DecoderParams, LoadError>,
    /// What transformers' configuration class takes where `config.json` says nothing.
    pub(crate) defaults: Defaults,
}

/// An architecture's defaults for keys a `config.json` may leave out.
pub(crate) struct Defaults {
    pub(crate) kv_heads: usize,
    /// `None`: `hidden_size / num_attention_heads`.
    pub(crate) head_dim: Option<usize>,
    pub(crate) max_positions: usize,
}

const ARCHITECTURES: [&Architecture; 3] = [&qwen2::QWEN2, &qwen3::QWEN3, &gemma3::GEMMA3];

/// The decoder architecture of a `model_type`, if it is one.
pub(crate) fn architecture(model_type: &str) -> Option<&'static Architecture> {
    ARCHITECTURES
        .iter()
        .copied()
        .find(|a| a.model_type == model_type)
}
