//! The transformer families served (BERT, DistilBERT, MPNet, RoBERTa, XLM-RoBERTa, ModernBERT,
//! NomicBERT, GTE, and the Qwen2, Qwen3 and Gemma3 decoders): what tells them apart, and
//! MPNet's buckets of relative positions.

/// The transformer families served. BERT's four share its layers and differ in how tensors
/// are named and how positions are numbered; ModernBERT's layers are their own, and NomicBERT
/// and GTE run on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// BERT (`model_type` `"bert"`): positions count from 0; tensors may sit under `bert.`;
    /// a classifier's head is `pooler.dense`, then `classifier`.
    Bert,
    /// RoBERTa and XLM-RoBERTa (`"roberta"`, `"xlm-roberta"`): positions count from
    /// `pad_token_id + 1`, skipping padding tokens; tensors may sit under `roberta.`; a
    /// classifier's head is `classifier.dense`, then `classifier.out_proj`.
    Roberta,
    /// DistilBERT (`"distilbert"`): BERT's layers under other names (`transformer.layer.N`
    /// with `q_lin`, `sa_layer_norm`, `ffn.lin1`, ...), no token types, tensors may sit
    /// under `distilbert.`; a classifier's head is `pre_classifier` with a ReLU, then
    /// `classifier`.
    DistilBert,
    /// MPNet (`"mpnet"`): RoBERTa's positions and no token types, layers named
    /// `attention.attn.q` and so on under `mpnet.`, and a bias by relative position added to
    /// every layer's attention scores (`encoder.relative_attention_bias`); a classifier's
    /// head is RoBERTa's.
    Mpnet,
    /// ModernBERT (`"modernbert"`): pre-norm layers without biases, rotary positions (no
    /// position table), a gated GELU feed-forward, sliding-window attention in all but every
    /// few layers, and a final norm; tensors may sit under `model.`.
    ModernBert,
    /// NomicBERT (`"nomic_bert"`, nomic-embed-text): BERT's post-norm layers and token types
    /// with a fused `Wqkv`, rotary positions (no position table) and a gated feed-forward
    /// (`fc11`, `fc12`, `fc2`), biases as its config says; tensors may sit under `bert.`.
    NomicBert,
    /// GTE (`"new"`, `NewModel`: gte-base-en-v1.5, gte-multilingual-base): BERT's
    /// post-norm layers with a fused `qkv_proj`, rotary positions (no position table), a
    /// gated feed-forward (`up_gate_proj`, `down_proj`) and, in some, no token types;
    /// tensors may sit under `new.`.
    Gte,
    /// Qwen2 (`"qwen2"`, gte-Qwen2) and Qwen3 (`"qwen3"`, Qwen3-Embedding): decoders
    /// (`crate::decoder`), tensors under `model.` in a causal LM's checkpoint.
    Qwen2,
    Qwen3,
    /// Gemma3's text model (`"gemma3_text"`, EmbeddingGemma): a decoder too.
    Gemma3,
}

impl Family {
    /// The prefix a task model (a classifier's checkpoint) puts before the encoder's tensors.
    pub fn prefix(self) -> &'static str {
        match self {
            Family::Bert => "bert.",
            Family::Roberta => "roberta.",
            Family::DistilBert => "distilbert.",
            Family::Mpnet => "mpnet.",
            Family::ModernBert => "model.",
            Family::NomicBert => "bert.",
            Family::Gte => "new.",
            Family::Qwen2 | Family::Qwen3 | Family::Gemma3 => "model.",
        }
    }

    /// Whether a BERT-layered model adds a token type embedding (DistilBERT and MPNet have
    /// none; a GTE's table is read with its layers).
    pub fn has_token_types(self) -> bool {
        matches!(self, Family::Bert | Family::Roberta | Family::NomicBert)
    }

    /// Whether positions count after the padding id, skipping padding tokens.
    pub(crate) fn positions_after_padding(self) -> bool {
        matches!(self, Family::Roberta | Family::Mpnet)
    }
}

/// The relative-position buckets MPNet's attention bias has: transformers computes them
/// with 32 whatever the config says, so a config that says otherwise is refused.
pub const RELATIVE_BUCKETS: usize = 32;
/// Distances from which MPNet's buckets are all the same.
const RELATIVE_MAX_DISTANCE: usize = 128;

/// MPNet's (and T5's) bucket of the relative position `j - i` of key `j` to query `i`: half
/// the buckets for keys after the query, half for those before, each exact for distances
/// below 8 and logarithmic up to 128. In f32, as transformers computes it, so that the
/// bucket of a distance is the same.
pub fn relative_bucket(relative: i64) -> usize {
    let half = RELATIVE_BUCKETS / 2;
    let exact = half / 2;
    let after = if relative > 0 { half } else { 0 };
    let n = relative.unsigned_abs() as usize;
    let within = if n < exact {
        n
    } else {
        let ratio =
            (n as f32 / exact as f32).ln() / ((RELATIVE_MAX_DISTANCE / exact) as f64).ln() as f32;
        (exact + (ratio * (half - exact) as f32) as usize).min(half - 1)
    };
    after + within
}

/// `table[h · (2·span − 1) + span − 1 + r]` = head `h`'s bias for the relative position `r`
/// (key after query), from MPNet's `[buckets, heads]` weights: the layout of
/// `kernels::cpu::RelativeBias` and `kernels::cuda::encoder::AttentionBias`.
pub fn fill_bias_table(weights: &[f32], heads: usize, span: usize, table: &mut Vec<f32>) {
    table.clear();
    let width = (2 * span).saturating_sub(1);
    for h in 0..heads {
        table.extend((0..width).map(|k| {
            let relative = k as i64 - (span as i64 - 1);
            weights[relative_bucket(relative) * heads + h]
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::relative_bucket;

    /// The buckets transformers' `relative_position_bucket` gives (computed by
    /// tests/python/bert_reference.py's own implementation of it), around every edge.
    #[test]
    fn relative_buckets_are_mpnets() {
        let cases = [
            (0, 0),
            (1, 17),
            (-1, 1),
            (7, 23),
            (-7, 7),
            (8, 24),
            (-8, 8),
            (15, 25),
            (16, 26),
            (31, 27),
            (32, 28),
            (63, 29),
            (64, 30),
            (127, 31),
            (128, 31),
            (500, 31),
            (-500, 15),
        ];
        for (relative, bucket) in cases {
            assert_eq!(relative_bucket(relative), bucket, "relative {relative}");
        }
    }
}
