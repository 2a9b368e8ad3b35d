//! What an encoder is, once its folder is read ([`super::config`] reads it): its family and
//! sizes, limits, pooling and head, and ModernBERT's (NomicBERT's, GTE's) layer form. Every
//! other part of the encoder takes this, and none of them reads a file for it.

use super::dense_module::DenseModule;
use super::family::Family;
use crate::SlidingWindow;
use crate::decoder::DecoderParams;
use crate::text::packed::PackedTokens;
use crate::text::pooling::{Pooling, SparsePooling};
pub use crate::text::rotary::Ntk;

/// A validated encoder configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub family: Family,
    /// The padding token's id: a RoBERTa model numbers positions after it.
    pub pad_token_id: u32,
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    /// Rows of the position table, the ones a family skips included.
    pub max_position_embeddings: usize,
    /// Rows of the token type table; 0 for a model that reads no type ids (a GTE without
    /// one).
    pub type_vocab_size: usize,
    pub layer_norm_eps: f32,
    /// The longest sequence served, in tokens (special ones included).
    pub max_seq_len: usize,
    pub pooling: Pooling,
    /// sentence-transformers `Dense` modules after pooling, in order; the last one's
    /// `out_features` is the embedding's width.
    pub dense: Vec<DenseModule>,
    /// Whether the folder's modules end with `Normalize`.
    pub normalize: bool,
    /// A sequence classifier's labels in output order (`id2label`); empty for an encoder
    /// of embeddings. A classifier's head reads the `[CLS]` state, so its pooling is `Cls`
    /// (a ModernBERT's may be `Mean`).
    pub labels: Vec<String>,
    /// A classifier whose labels are independent (`problem_type`
    /// `"multi_label_classification"`): each is scored by its own sigmoid, not a softmax.
    pub multi_label: bool,
    /// ModernBERT's (and NomicBERT's and GTE's) attention windows, rotary bases and layer form; None
    /// for BERT's families.
    pub modern: Option<ModernBertParams>,
    /// A sparse encoder's pooling (`BertForMaskedLM` read as SPLADE): its embeddings have a
    /// weight a vocabulary entry, from the masked-language head; `pooling`, `dense` and
    /// `normalize` do not apply.
    pub sparse: Option<SparsePooling>,
    /// A decoder's grouped-query attention, rotary bases and layer form (Qwen2, Qwen3,
    /// Gemma3); its `type_vocab_size` is 0 and `layer_norm_eps` its RMSNorms' epsilon.
    pub decoder: Option<DecoderParams>,
}

impl EncoderConfig {
    /// What makes it a model served on the CPU only, if anything: a sparse encoder's head
    /// runs on the host over every token's state, which only the CPU's encoders keep, and
    /// NomicBERT's and GTE's layers, the decoders' and last-token pooling have no CUDA
    /// kernels.
    pub fn cpu_only(&self) -> Option<&'static str> {
        if self.sparse.is_some() {
            Some("a sparse encoder (BertForMaskedLM, SPLADE)")
        } else if self.family == Family::NomicBert {
            Some("a NomicBERT encoder")
        } else if self.family == Family::Gte {
            Some("a GTE encoder")
        } else if self.decoder.is_some() {
            Some("a decoder (Qwen2, Qwen3, Gemma3)")
        } else if self.pooling == Pooling::LastToken {
            Some("an encoder with last-token pooling")
        } else {
            None
        }
    }

    /// Whether it is a sequence classifier rather than an encoder of embeddings.
    pub fn is_classifier(&self) -> bool {
        !self.labels.is_empty()
    }

    /// FLOPs of one layer's dense products for one token: `2 × (4h² + 2hi)` for BERT's
    /// families, and `2 × (4h² + 3hi)` for ModernBERT, whose gated feed-forward has a third
    /// matrix of `h · i`; a decoder's as `decoder_dense_flops_per_token` counts them.
    pub fn dense_flops_per_token(&self) -> u64 {
        if let Some(p) = &self.decoder {
            return self.decoder_dense_flops_per_token(p);
        }
        let (h, i) = (self.hidden as u64, self.intermediate as u64);
        let ffn_matrices = if self.modern.is_some() { 3 } else { 2 };
        2 * (4 * h * h + ffn_matrices * h * i)
    }

    /// A decoder's: queries and the attention's output (`2 · h · H·d` each), keys and values
    /// (`2 · h · K·d` each), and the gated feed-forward's three matrices (`2 · h · i` each).
    fn decoder_dense_flops_per_token(&self, p: &DecoderParams) -> u64 {
        let (h, i) = (self.hidden as u64, self.intermediate as u64);
        let q = p.query_width(self.heads) as u64;
        let kv = (p.kv_heads * p.head_dim) as u64;
        2 * (2 * h * q + 2 * h * kv + 3 * h * i)
    }

    /// ModernBERT's (or a decoder's) local layers: its window and their share of the
    /// layers.
    pub fn sliding_window(&self) -> Option<SlidingWindow> {
        let window = match (&self.modern, &self.decoder) {
            (Some(m), _) => m.window,
            (None, Some(d)) => d.local.as_ref()?.window,
            (None, None) => return None,
        };
        let local = self.local_layers();
        (local > 0).then(|| SlidingWindow {
            window,
            share: local as f64 / self.layers.max(1) as f64,
        })
    }

    /// How many layers attend within a window.
    pub fn local_layers(&self) -> usize {
        match (&self.modern, &self.decoder) {
            (Some(m), _) => m.global.iter().filter(|global| !**global).count(),
            (None, Some(d)) => d
                .local
                .as_ref()
                .map_or(0, |l| l.sliding.iter().filter(|s| **s).count()),
            (None, None) => 0,
        }
    }

    /// Values per head.
    pub fn head_dim(&self) -> usize {
        match &self.decoder {
            Some(p) => p.head_dim,
            None => self.hidden / self.heads,
        }
    }

    /// FLOPs of attention for a pair of tokens a layer scores: `4 · heads · head_dim` (the
    /// score and the weighted sum).
    pub fn attention_flops_per_pair(&self) -> u64 {
        4 * (self.heads * self.head_dim()) as u64
    }

    /// The row of the position table of a sequence's first token (when it is not padding):
    /// 0 for BERT and DistilBERT, `pad_token_id + 1` for RoBERTa and MPNet.
    pub fn first_position(&self) -> usize {
        first_position(self.family, self.pad_token_id)
    }

    /// The row of the position table of each token of a packed batch, into `out` (cleared
    /// first).
    pub fn batch_position_ids(&self, tokens: &PackedTokens, out: &mut Vec<u32>) {
        out.clear();
        out.reserve(tokens.tokens());
        for seq in 0..tokens.sequences() {
            self.position_ids(&tokens.ids[tokens.range(seq)], out);
        }
    }

    /// The row of the position table of each of a sequence's tokens, appended to `out`. BERT
    /// counts from 0. RoBERTa and MPNet count from `pad_token_id + 1`, and a padding token inside a
    /// sequence takes the row `pad_token_id` and does not advance the count, as
    /// transformers' `create_position_ids_from_input_ids` does.
    pub fn position_ids(&self, ids: &[u32], out: &mut Vec<u32>) {
        if !self.family.positions_after_padding() {
            out.extend(0..ids.len() as u32);
            return;
        }
        let pad = self.pad_token_id;
        let mut next = pad;
        out.extend(ids.iter().map(|&id| {
            if id == pad {
                pad
            } else {
                next += 1;
                next
            }
        }));
    }
}

/// How a ModernBERT's layers attend and where its positions come from. NomicBERT and GTE
/// run on the same layers (a fused `Wqkv`, rotary queries and keys, a gated feed-forward)
/// and are described here too (`nomic`, `gte`): every layer global, their norms after each
/// residual sum, their own gate and biases, and GTE's scaled rotary frequencies.
#[derive(Clone, Debug, PartialEq)]
pub struct ModernBertParams {
    /// Per layer: whether it attends to the whole sequence; the others attend to the
    /// tokens at most [`window`](Self::window) positions away.
    pub global: Vec<bool>,
    /// `local_attention / 2`.
    pub window: usize,
    /// The rotary base of the global layers and of the sliding-window ones.
    pub global_theta: f64,
    pub local_theta: f64,
    /// GTE's NTK scaling of every rotary frequency (`rope_scaling` `{"type": "ntk"}`).
    pub ntk: Option<Ntk>,
    /// A classifier's head pools this way (`classifier_pooling`) ...
    pub classifier_pooling: Pooling,
    /// ... and its dense layer has a bias (`classifier_bias`).
    pub classifier_bias: bool,
    /// Where a layer's norms sit: ModernBERT's before attention and the feed-forward,
    /// NomicBERT's after each residual sum (BERT's order).
    pub norms: NormPlacement,
    /// What the feed-forward's gated half goes through.
    pub gate: Gate,
    /// Which dense layers have biases (ModernBERT's none).
    pub biases: LayerBiases,
}

/// Which of a layer's dense products add a bias (NomicBERT's config flags; ModernBERT has
/// none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerBiases {
    /// `Wqkv` and the attention's output.
    pub attention: bool,
    pub mlp_in: bool,
    pub mlp_out: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlacement {
    /// `x += f(norm(x))`, with a final norm after the last layer.
    Before,
    /// `x = norm(x + f(x))`, and no final norm.
    After,
}

/// The activation of the gated feed-forward: `Wo · (act(a) ⊙ g)` for `[a, g] = Wi · x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// GELU with the exact error function (ModernBERT; NomicBERT's `geglu`; GTE's `gelu`).
    Gelu,
    /// SiLU (NomicBERT's `swiglu`, GTE's `silu`).
    Silu,
}

/// The row of the position table of a sequence's first token, by family.
pub(super) fn first_position(family: Family, pad_token_id: u32) -> usize {
    if family.positions_after_padding() {
        pad_token_id as usize + 1
    } else {
        0
    }
}
