//! Gemma3's text model (`"gemma3_text"`: EmbeddingGemma): layers with an RMSNorm before and
//! after attention and the feed-forward, each scaling by `1 + w`; grouped-query attention
//! with Gemma's norms of queries and keys, scores scaled by `query_pre_attn_scalar^-½`,
//! some layers within a sliding window (with a rotary base of their own), both ways where
//! `use_bidirectional_attention` says (EmbeddingGemma); a GELU-tanh gate; embeddings scaled
//! by `√hidden`. transformers 4's keys (`rope_theta`, `rope_local_base_freq`,
//! `sliding_window_pattern`) and 5's (`rope_parameters` by layer type, `layer_types`) alike.

use std::path::Path;

use super::config::{check_theta, key, refuse_rope_scaling, rope_base};
use super::{Architecture, DecoderParams, Defaults, Gate, LocalAttention, Norms, Sizes};
use crate::LoadError;
use crate::encoder::family::Family;

pub(super) const GEMMA3: Architecture = Architecture {
    model_type: "gemma3_text",
    family: Family::Gemma3,
    architectures: &["Gemma3TextModel", "Gemma3ForCausalLM"],
    params: gemma_params,
    defaults: Defaults {
        kv_heads: 4,
        head_dim: Some(256),
        max_positions: 131_072,
    },
};

/// transformers' defaults for Gemma3's text model.
const GLOBAL_THETA: f64 = 1_000_000.0;
const LOCAL_THETA: f64 = 10_000.0;
const SLIDING_WINDOW: usize = 4096;
const SLIDING_PATTERN: usize = 6;

fn gemma_params(
    path: &Path,
    json: &serde_json::Value,
    sizes: Sizes,
) -> Result<DecoderParams, LoadError> {
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    let act: String =
        key(path, json, "hidden_activation")?.unwrap_or_else(|| "gelu_pytorch_tanh".into());
    if act != "gelu_pytorch_tanh" {
        return Err(unsupported(
            format!("hidden_activation {act:?}"),
            "Gemma3's feed-forward is served with gelu_pytorch_tanh only",
        ));
    }
    if let Some(cap) = key::<f64>(path, json, "attn_logit_softcapping")? {
        return Err(unsupported(
            format!("attn_logit_softcapping {cap}"),
            "Gemma3's attention is served without soft-capping",
        ));
    }
    if key::<bool>(path, json, "attention_bias")?.unwrap_or(false) {
        return Err(unsupported(
            "attention_bias true".into(),
            "Gemma3's attention is served without biases",
        ));
    }
    let scalar: f64 = key(path, json, "query_pre_attn_scalar")?.unwrap_or(256.0);
    if !(scalar.is_finite() && scalar > 0.0) {
        return Err(LoadError::Config {
            path: path.to_path_buf(),
            reason: format!("query_pre_attn_scalar is {scalar}, expected a positive number"),
        });
    }
    let (global_theta, local_theta) = rope_bases(path, json)?;
    if json.get("sliding_window").is_some_and(|w| w.is_null()) {
        return Err(unsupported(
            "sliding_window null".into(),
            "Gemma3's sliding layers are served with a window",
        ));
    }
    let window: usize = key(path, json, "sliding_window")?.unwrap_or(SLIDING_WINDOW);
    let sliding = sliding_layers(path, json, sizes.layers)?;
    let causal = !key(path, json, "use_bidirectional_attention")?.unwrap_or(false);
    // transformers' window is exclusive, and both ways it is halved (Gemma3TextConfig's
    // `(sliding_window // 2) + 1`): how many positions away a query still sees.
    let reach = match causal {
        true => window.max(1) - 1,
        false => window / 2,
    };
    Ok(DecoderParams {
        kv_heads: sizes.kv_heads,
        head_dim: sizes.head_dim,
        qkv_bias: false,
        qk_norm: true,
        causal,
        gate: Gate::GeluTanh,
        norms: Norms::Sandwich,
        norm_offset: 1.0,
        scale_embeddings: true,
        attention_scale: scalar.powf(-0.5),
        rope_theta: global_theta,
        local: Some(LocalAttention {
            sliding,
            window: reach,
            rope_theta: local_theta,
        }),
    })
}

/// The rotary bases of the global and the sliding layers.
fn rope_bases(path: &Path, json: &serde_json::Value) -> Result<(f64, f64), LoadError> {
    refuse_rope_scaling(path, json)?;
    let global: f64 = key(path, json, "rope_theta")?.unwrap_or(GLOBAL_THETA);
    let local: f64 = key(path, json, "rope_local_base_freq")?.unwrap_or(LOCAL_THETA);
    let Some(rope) = json.get("rope_parameters").filter(|r| !r.is_null()) else {
        return Ok((check_theta(path, global)?, check_theta(path, local)?));
    };
    let by_kind = |kind: &str, default| match rope.get(kind) {
        Some(r) => rope_base(path, r, default),
        None => check_theta(path, default),
    };
    if let Some(other) = (rope.as_object().into_iter().flatten())
        .map(|(k, _)| k)
        .find(|k| !matches!(k.as_str(), "full_attention" | "sliding_attention"))
    {
        return Err(LoadError::Unsupported {
            path: path.to_path_buf(),
            what: format!("rope_parameters key {other:?}"),
            supported: "Gemma3's rope_parameters are keyed by full_attention and sliding_attention",
        });
    }
    Ok((
        by_kind("full_attention", global)?,
        by_kind("sliding_attention", local)?,
    ))
}

/// Per layer, whether it attends within the window: `layer_types`, or every layer but each
/// `sliding_window_pattern`-th.
fn sliding_layers(
    path: &Path,
    json: &serde_json::Value,
    layers: usize,
) -> Result<Vec<bool>, LoadError> {
    let invalid = |reason: String| LoadError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let Some(types) = key::<Vec<String>>(path, json, "layer_types")? else {
        let pattern: usize = key(path, json, "sliding_window_pattern")?.unwrap_or(SLIDING_PATTERN);
        return Ok((0..layers).map(|i| (i + 1) % pattern.max(1) != 0).collect());
    };
    if types.len() != layers {
        return Err(invalid(format!(
            "layer_types names {} layers, num_hidden_layers is {layers}",
            types.len()
        )));
    }
    (types.iter())
        .map(|t| match t.as_str() {
            "sliding_attention" => Ok(true),
            "full_attention" => Ok(false),
            other => Err(invalid(format!("layer type {other:?} is not served"))),
        })
        .collect()
}
