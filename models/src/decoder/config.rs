//! A decoder's `config.json` (transformers 4's `rope_theta` and 5's `rope_parameters`
//! alike), read into an [`EncoderConfig`] with [`DecoderParams`]; its modules (pooling,
//! Dense, Normalize) and its limit as the encoders' are read. What transformers would
//! compute differently is refused with the value found: scaled rotary frequencies, sliding
//! windows, another activation.

use std::path::Path;

use serde::Deserialize;

use super::{Architecture, DecoderParams, architecture};
use crate::LoadError;
use crate::encoder::config::max_seq_len::given_max_seq_len;
use crate::encoder::spec::EncoderConfig;
use crate::folder::read_json;

#[derive(Deserialize)]
struct DecoderJson {
    model_type: String,
    architectures: Option<Vec<String>>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    /// Absent: one key/value head a query head (no grouping).
    num_key_value_heads: Option<usize>,
    /// Absent: `hidden_size / num_attention_heads`.
    head_dim: Option<usize>,
    intermediate_size: usize,
    max_position_embeddings: usize,
    rms_norm_eps: f64,
    #[serde(default = "silu")]
    hidden_act: String,
    rope_theta: Option<f64>,
    rope_scaling: Option<serde_json::Value>,
    rope_parameters: Option<RopeParameters>,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    use_sliding_window: bool,
    /// gte-Qwen2's remote code attends both ways; transformers' own classes are causal.
    #[serde(default = "yes")]
    is_causal: bool,
}

/// transformers 5's rotary settings: the default type is the only one served.
#[derive(Deserialize)]
struct RopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

fn silu() -> String {
    "silu".into()
}
fn yes() -> bool {
    true
}

/// transformers' default rotary base for Qwen2 and Qwen3.
const DEFAULT_ROPE_THETA: f64 = 10_000.0;

/// The decoder architecture `config.json` names, if it names one (`None`: read it as an
/// encoder's).
pub(crate) fn decoder_model_type(path: &Path) -> Result<Option<&'static Architecture>, LoadError> {
    #[derive(Deserialize)]
    struct ModelType {
        model_type: Option<String>,
    }
    let m: ModelType = read_json(path)?;
    Ok(m.model_type.as_deref().and_then(architecture))
}

/// Reads and validates a decoder's `config.json` at `path` in `dir`.
pub(crate) fn read(
    dir: &Path,
    path: &Path,
    arch: &Architecture,
) -> Result<EncoderConfig, LoadError> {
    let json: DecoderJson = read_json(path)?;
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    for name in json.architectures.iter().flatten() {
        if !arch.architectures.contains(&name.as_str()) {
            return Err(unsupported(
                format!("architecture {name:?} of model_type {:?}", json.model_type),
                "a decoder is served as an encoder of embeddings: Qwen2Model, \
                 Qwen2ForCausalLM, Qwen3Model or Qwen3ForCausalLM (the head left out)",
            ));
        }
    }
    if json.hidden_act != "silu" {
        return Err(unsupported(
            format!("hidden_act {:?}", json.hidden_act),
            "a Qwen decoder's feed-forward is served with SiLU only",
        ));
    }
    if json.use_sliding_window {
        return Err(unsupported(
            "use_sliding_window true".into(),
            "Qwen decoders are served with full attention in every layer",
        ));
    }
    if json.attention_bias && !arch.qkv_bias {
        return Err(unsupported(
            "attention_bias true".into(),
            "Qwen3's attention is served without biases",
        ));
    }
    let rope_theta = rope_theta(path, &json)?;
    let params = check_sizes(path, &json, arch, rope_theta)?;
    let modules = crate::encoder::modules::read_head_modules(dir, json.hidden_size)?;
    let max_seq_len = given_max_seq_len(dir)?
        .unwrap_or(json.max_position_embeddings)
        .min(json.max_position_embeddings);
    Ok(EncoderConfig {
        family: arch.family,
        pad_token_id: 0,
        vocab_size: json.vocab_size,
        hidden: json.hidden_size,
        layers: json.num_hidden_layers,
        heads: json.num_attention_heads,
        intermediate: json.intermediate_size,
        max_position_embeddings: json.max_position_embeddings,
        type_vocab_size: 0,
        layer_norm_eps: json.rms_norm_eps as f32,
        max_seq_len,
        pooling: modules.pooling,
        dense: modules.dense,
        normalize: modules.normalize,
        labels: Vec::new(),
        multi_label: false,
        modern: None,
        sparse: None,
        decoder: Some(params),
    })
}

/// The rotary base, from `rope_parameters` or `rope_theta`; scaling of any kind refused.
fn rope_theta(path: &Path, json: &DecoderJson) -> Result<f64, LoadError> {
    let unsupported = |what: String| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported: "rotary embeddings are served unscaled (rope_type \"default\")",
    };
    if let Some(scaling) = json.rope_scaling.as_ref().filter(|s| !s.is_null()) {
        return Err(unsupported(format!("rope_scaling {scaling}")));
    }
    let Some(p) = &json.rope_parameters else {
        return Ok(json.rope_theta.unwrap_or(DEFAULT_ROPE_THETA));
    };
    if let Some(kind) = p.rope_type.as_deref().filter(|t| *t != "default") {
        return Err(unsupported(format!("rope_type {kind:?}")));
    }
    if let Some(key) = p.rest.keys().next() {
        return Err(unsupported(format!("rope_parameters key {key:?}")));
    }
    Ok(p.rope_theta
        .or(json.rope_theta)
        .unwrap_or(DEFAULT_ROPE_THETA))
}

/// Sizes that are not zero and that fit together: query heads in whole groups over the
/// key/value heads, an even head size (rotary pairs), a finite positive epsilon and base.
fn check_sizes(
    path: &Path,
    json: &DecoderJson,
    arch: &Architecture,
    rope_theta: f64,
) -> Result<DecoderParams, LoadError> {
    let invalid = |reason: String| LoadError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let heads = json.num_attention_heads;
    let kv_heads = json.num_key_value_heads.unwrap_or(heads);
    let head_dim = match json.head_dim {
        Some(d) => d,
        None if heads > 0 => json.hidden_size / heads,
        None => 0,
    };
    let sizes = [
        ("vocab_size", json.vocab_size),
        ("hidden_size", json.hidden_size),
        ("num_hidden_layers", json.num_hidden_layers),
        ("num_attention_heads", heads),
        ("num_key_value_heads", kv_heads),
        ("head_dim", head_dim),
        ("intermediate_size", json.intermediate_size),
        ("max_position_embeddings", json.max_position_embeddings),
    ];
    if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
        return Err(invalid(format!("{name} is 0, expected at least 1")));
    }
    if !heads.is_multiple_of(kv_heads) {
        return Err(invalid(format!(
            "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )));
    }
    if !head_dim.is_multiple_of(2) {
        return Err(invalid(format!(
            "head_dim {head_dim} is odd: rotary embeddings turn pairs of values"
        )));
    }
    if !(json.rms_norm_eps.is_finite() && json.rms_norm_eps > 0.0) {
        return Err(invalid(format!(
            "rms_norm_eps is {}, expected a positive number",
            json.rms_norm_eps
        )));
    }
    if !(rope_theta.is_finite() && rope_theta > 1.0) {
        return Err(invalid(format!(
            "the rotary base is {rope_theta}, expected a number above 1"
        )));
    }
    Ok(DecoderParams {
        kv_heads,
        head_dim,
        rope_theta,
        qkv_bias: arch.qkv_bias,
        qk_norm: arch.qk_norm,
        causal: json.is_causal,
    })
}
