//! Qwen3 (`"qwen3"`: Qwen3-Embedding, Qwen3-Reranker's base): pre-norm layers of RMSNorm,
//! grouped-query attention with an RMSNorm over each head's queries and keys before the
//! rotation, no biases, a SwiGLU feed-forward; `head_dim` may make the attention wider than
//! the residual stream (0.6B: 16 heads of 128 over a hidden size of 1024). Qwen2 reads the
//! same keys (`qwen_params`).

use std::path::Path;

use super::config::{check_theta, key, refuse_rope_scaling, rope_base};
use super::{Architecture, DecoderParams, Defaults, Gate, Norms, Sizes};
use crate::LoadError;
use crate::encoder::family::Family;

pub(super) const QWEN3: Architecture = Architecture {
    model_type: "qwen3",
    family: Family::Qwen3,
    architectures: &["Qwen3Model", "Qwen3ForCausalLM"],
    params: |path, json, sizes| qwen_params(path, json, sizes, QWEN3_FORM),
    defaults: Defaults {
        kv_heads: 8,
        head_dim: Some(128),
        max_positions: 32_768,
    },
};

const QWEN3_FORM: QwenForm = QwenForm {
    qkv_bias: false,
    both_ways_key: "use_bidirectional_attention",
};

/// What tells Qwen2 and Qwen3 apart: Qwen2's query, key and value biases, or Qwen3's
/// norms of queries and keys; and the key that says a model attends both ways, as TEI reads
/// them (transformers' own classes are always causal).
pub(super) struct QwenForm {
    pub(super) qkv_bias: bool,
    /// Qwen2's `is_causal` (false: both ways), Qwen3's `use_bidirectional_attention`.
    pub(super) both_ways_key: &'static str,
}

/// transformers' default rotary base for Qwen2 and Qwen3.
const DEFAULT_ROPE_THETA: f64 = 10_000.0;

/// A Qwen decoder's own keys: SiLU, full attention in every layer, its rotary base
/// (transformers 4's `rope_theta` or 5's `rope_parameters`), and whether it attends both
/// ways (gte-Qwen2 was trained so, but its config does not say it: TEI asks for
/// `is_causal: false` there).
pub(super) fn qwen_params(
    path: &Path,
    json: &serde_json::Value,
    sizes: Sizes,
    form: QwenForm,
) -> Result<DecoderParams, LoadError> {
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    let act: String = key(path, json, "hidden_act")?.unwrap_or_else(|| "silu".into());
    if act != "silu" {
        return Err(unsupported(
            format!("hidden_act {act:?}"),
            "a Qwen decoder's feed-forward is served with SiLU only",
        ));
    }
    if key::<bool>(path, json, "use_sliding_window")?.unwrap_or(false) {
        return Err(unsupported(
            "use_sliding_window true".into(),
            "Qwen decoders are served with full attention in every layer",
        ));
    }
    if !form.qkv_bias && key::<bool>(path, json, "attention_bias")?.unwrap_or(false) {
        return Err(unsupported(
            "attention_bias true".into(),
            "Qwen3's attention is served without biases",
        ));
    }
    refuse_rope_scaling(path, json)?;
    let theta: Option<f64> = key(path, json, "rope_theta")?;
    let theta = match json.get("rope_parameters").filter(|r| !r.is_null()) {
        Some(rope) => rope_base(path, rope, theta.unwrap_or(DEFAULT_ROPE_THETA))?,
        None => check_theta(path, theta.unwrap_or(DEFAULT_ROPE_THETA))?,
    };
    Ok(DecoderParams {
        kv_heads: sizes.kv_heads,
        head_dim: sizes.head_dim,
        qkv_bias: form.qkv_bias,
        qk_norm: !form.qkv_bias,
        causal: causal(path, json, &form)?,
        gate: Gate::Silu,
        norms: Norms::Pre,
        norm_offset: 0.0,
        scale_embeddings: false,
        attention_scale: 1.0 / (sizes.head_dim as f64).sqrt(),
        rope_theta: theta,
        local: None,
    })
}

/// Whether the model attends causally, from its family's key.
fn causal(path: &Path, json: &serde_json::Value, form: &QwenForm) -> Result<bool, LoadError> {
    let said: Option<bool> = key(path, json, form.both_ways_key)?;
    Ok(match form.both_ways_key {
        "is_causal" => said.unwrap_or(true),
        _ => !said.unwrap_or(false),
    })
}
