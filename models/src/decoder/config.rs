//! A decoder's `config.json` read into an [`EncoderConfig`] with `DecoderParams`: the
//! sizes every decoder has here, its own keys by its architecture's file (`qwen3`,
//! `gemma3`); its modules (pooling, Dense, Normalize) and its limit as the encoders' are
//! read. What transformers would compute differently is refused with the value found.

use std::path::Path;

use serde::Deserialize;

use super::{Architecture, Defaults, Sizes, architecture};
use crate::LoadError;
use crate::encoder::config::max_seq_len::given_max_seq_len;
use crate::encoder::spec::EncoderConfig;
use crate::folder::read_json;

/// The sizes every decoder's `config.json` gives.
#[derive(Deserialize)]
struct SizesJson {
    model_type: String,
    architectures: Option<Vec<String>>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    /// Absent (as the rest): the architecture's `Defaults`, as transformers reads them.
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    intermediate_size: usize,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
}

/// What a refusal of scaled rotary embeddings says is served.
const UNSCALED: &str = "rotary embeddings are served unscaled (rope_type \"default\")";

/// transformers' RMSNorm epsilon for all three families.
const RMS_NORM_EPS: f64 = 1e-6;

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
    let raw: serde_json::Value = read_json(path)?;
    let json: SizesJson = serde_json::from_value(raw.clone()).map_err(|e| LoadError::Config {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    for name in json.architectures.iter().flatten() {
        if !arch.architectures.contains(&name.as_str()) {
            return Err(LoadError::Unsupported {
                path: path.to_path_buf(),
                what: format!("architecture {name:?} of model_type {:?}", json.model_type),
                supported: "a decoder is served as an encoder of embeddings: Qwen2Model, \
                            Qwen2ForCausalLM, Qwen3Model, Qwen3ForCausalLM or Gemma3TextModel \
                            (a causal LM's head left out)",
            });
        }
    }
    let sizes = check_sizes(path, &json, &arch.defaults)?;
    let params = (arch.params)(path, &raw, sizes)?;
    require_pooling(dir)?;
    let modules = crate::encoder::modules::read_head_modules(dir, json.hidden_size)?;
    let positions = json
        .max_position_embeddings
        .unwrap_or(arch.defaults.max_positions);
    let max_seq_len = given_max_seq_len(dir)?.unwrap_or(positions).min(positions);
    Ok(EncoderConfig {
        family: arch.family,
        pad_token_id: 0,
        vocab_size: json.vocab_size,
        hidden: json.hidden_size,
        layers: json.num_hidden_layers,
        heads: json.num_attention_heads,
        intermediate: json.intermediate_size,
        max_position_embeddings: positions,
        type_vocab_size: 0,
        layer_norm_eps: json.rms_norm_eps.unwrap_or(RMS_NORM_EPS) as f32,
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

/// Sizes that are not zero and that fit together: query heads in whole groups over the
/// key/value heads, an even head size (rotary pairs), a finite positive epsilon.
fn check_sizes(path: &Path, json: &SizesJson, defaults: &Defaults) -> Result<Sizes, LoadError> {
    let invalid = |reason: String| LoadError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let heads = json.num_attention_heads;
    let kv_heads = json.num_key_value_heads.unwrap_or(defaults.kv_heads);
    let head_dim = match json.head_dim.or(defaults.head_dim) {
        Some(d) => d,
        None => json.hidden_size.checked_div(heads).unwrap_or(0),
    };
    let eps = json.rms_norm_eps.unwrap_or(RMS_NORM_EPS);
    let sizes = [
        ("vocab_size", json.vocab_size),
        ("hidden_size", json.hidden_size),
        ("num_hidden_layers", json.num_hidden_layers),
        ("num_attention_heads", heads),
        ("num_key_value_heads", kv_heads),
        ("head_dim", head_dim),
        ("intermediate_size", json.intermediate_size),
        (
            "max_position_embeddings",
            json.max_position_embeddings
                .unwrap_or(defaults.max_positions),
        ),
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
    if !(eps.is_finite() && eps > 0.0) {
        return Err(invalid(format!(
            "rms_norm_eps is {eps}, expected a positive number"
        )));
    }
    Ok(Sizes {
        kv_heads,
        head_dim,
        layers: json.num_hidden_layers,
    })
}

/// A decoder is an encoder of embeddings only by its sentence-transformers modules: a causal
/// LM's folder without them (a reranker's, a chat model's) would otherwise be read with mean
/// pooling, as for a plain transformers encoder.
fn require_pooling(dir: &Path) -> Result<(), LoadError> {
    match dir.join("modules.json").is_file() {
        true => Ok(()),
        false => Err(LoadError::Unsupported {
            path: dir.join("modules.json"),
            what: "a decoder without sentence-transformers modules".into(),
            supported: "a decoder is served as an embedder from a sentence-transformers folder: \
                        modules.json with its Pooling module",
        }),
    }
}

/// A key of `config.json` an architecture reads, refused with its value when it is not
/// what `read` takes.
pub(crate) fn key<'a, T: Deserialize<'a>>(
    path: &Path,
    json: &'a serde_json::Value,
    name: &str,
) -> Result<Option<T>, LoadError> {
    match json.get(name) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value) => T::deserialize(value)
            .map(Some)
            .map_err(|e| LoadError::Config {
                path: path.to_path_buf(),
                reason: format!("{name}: {e}"),
            }),
    }
}

/// A rotary base, refused unless finite and above 1.
pub(crate) fn check_theta(path: &Path, theta: f64) -> Result<f64, LoadError> {
    match theta.is_finite() && theta > 1.0 {
        true => Ok(theta),
        false => Err(LoadError::Config {
            path: path.to_path_buf(),
            reason: format!("the rotary base is {theta}, expected a number above 1"),
        }),
    }
}

/// transformers 5's `rope_parameters` of one kind of layer: the default type, its base;
/// anything else (scaling of any kind) refused.
pub(crate) fn rope_base(
    path: &Path,
    rope: &serde_json::Value,
    default: f64,
) -> Result<f64, LoadError> {
    let unsupported = |what: String| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported: UNSCALED,
    };
    let Some(fields) = rope.as_object() else {
        return Err(unsupported(format!("rope_parameters {rope}")));
    };
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("rope_type", v) if v == "default" => {}
            ("rope_theta", v) if v.is_number() => {}
            _ => return Err(unsupported(format!("rope_parameters {name} {value}"))),
        }
    }
    let theta = fields.get("rope_theta").and_then(|v| v.as_f64());
    check_theta(path, theta.unwrap_or(default))
}

/// `rope_scaling` set to anything but null: refused.
pub(crate) fn refuse_rope_scaling(path: &Path, json: &serde_json::Value) -> Result<(), LoadError> {
    match json.get("rope_scaling") {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(scaling) => Err(LoadError::Unsupported {
            path: path.to_path_buf(),
            what: format!("rope_scaling {scaling}"),
            supported: UNSCALED,
        }),
    }
}
