//! ModernBERT's own configuration, beside BERT's sizes in `config.json`: which layers attend
//! to the whole sequence and which within a sliding window, the window, and the rotary
//! bases of each kind of layer. Old configs (`global_attn_every_n_layers`,
//! `global_rope_theta`, `local_rope_theta`) and new ones (`layer_types`, `rope_parameters`)
//! are read alike; whatever transformers would compute differently from what is described
//! here (biases, another activation, scaled rotary embeddings) is refused.

use std::path::Path;

use serde::Deserialize;

use super::spec::EncoderConfig;
pub use super::spec::{Gate, LayerBiases, ModernBertParams, NormPlacement, Ntk};
use super::weights::{ClassifierWeights, Dense, Embeddings, Found, HeadActivation, Norm};
pub use super::weights::{ModernLayer, ModernWeights};
use crate::folder::read_json;
use crate::text::pooling::Pooling;
use crate::{LoadError, WeightData};

#[derive(Deserialize)]
struct ModernJson {
    num_hidden_layers: usize,
    hidden_size: usize,
    num_attention_heads: usize,
    #[serde(default = "gelu")]
    hidden_activation: String,
    #[serde(default = "modern_eps")]
    norm_eps: f64,
    #[serde(default)]
    norm_bias: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default = "three")]
    global_attn_every_n_layers: usize,
    #[serde(default = "full_window")]
    local_attention: usize,
    /// Absent: None; `null`: Some(None), which is refused (transformers 4 would take the
    /// global base for the local layers, 5 fails).
    #[serde(default, deserialize_with = "present")]
    global_rope_theta: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    local_rope_theta: Option<Option<f64>>,
    layer_types: Option<Vec<String>>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    #[serde(default = "cls")]
    classifier_pooling: String,
    #[serde(default)]
    classifier_bias: bool,
    #[serde(default = "gelu")]
    classifier_activation: String,
}

/// Only the keys served: scaling (`factor`, `type`, `partial_rotary_factor`, ...) or a flat
/// form not keyed by layer type is refused, not ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RopeParameters {
    full_attention: Option<Rope>,
    sliding_attention: Option<Rope>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rope {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<f64>>, D::Error> {
    Option::<f64>::deserialize(d).map(Some)
}

fn gelu() -> String {
    "gelu".into()
}
fn cls() -> String {
    "cls".into()
}
fn modern_eps() -> f64 {
    1e-5
}
fn three() -> usize {
    3
}
fn full_window() -> usize {
    128
}

const GLOBAL_THETA: f64 = 160_000.0;
const LOCAL_THETA: f64 = 10_000.0;

/// ModernBERT's parameters from `config.json` at `path` (of a classifier if `classifier`),
/// and its norms' epsilon.
pub(super) fn read(path: &Path, classifier: bool) -> Result<(ModernBertParams, f64), LoadError> {
    let json: ModernJson = read_json(path)?;
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    check_layers(&json, classifier).map_err(|(what, supported)| unsupported(what, supported))?;
    let invalid = |reason: String| LoadError::Config {
        path: path.to_path_buf(),
        reason,
    };
    check_sizes(&json).map_err(invalid)?;
    let classifier_pooling = match json.classifier_pooling.as_str() {
        "cls" => Pooling::Cls,
        "mean" => Pooling::Mean,
        other => {
            return Err(unsupported(
                format!("classifier_pooling {other:?}"),
                "a classifier pools by \"cls\" or \"mean\"",
            ));
        }
    };
    let global = global_layers(&json)
        .map_err(|what| unsupported(what, "layer_types that follow global_attn_every_n_layers"))?;
    let (global_theta, local_theta) = thetas(&json).map_err(|what| {
        unsupported(
            what,
            "rotary embeddings of rope_type \"default\" with a positive rope_theta",
        )
    })?;
    let params = ModernBertParams {
        global,
        window: json.local_attention / 2,
        global_theta,
        local_theta,
        ntk: None,
        classifier_pooling,
        classifier_bias: json.classifier_bias,
        norms: NormPlacement::Before,
        gate: Gate::Gelu,
        biases: LayerBiases::default(),
    };
    Ok((params, json.norm_eps))
}

/// Refuses what the layers would compute differently: another activation (the head's only
/// in a classifier, the one model that builds it), biases, scaled rotary embeddings.
fn check_layers(json: &ModernJson, classifier: bool) -> Result<(), (String, &'static str)> {
    let mut activations = vec![("hidden_activation", &json.hidden_activation)];
    if classifier {
        activations.push(("classifier_activation", &json.classifier_activation));
    }
    for (key, value) in activations {
        if value != "gelu" {
            return Err((
                format!("{key} {value:?}"),
                "only \"gelu\" (with the exact error function) is served",
            ));
        }
    }
    if json.norm_bias || json.attention_bias || json.mlp_bias {
        return Err((
            "norm_bias, attention_bias or mlp_bias true".into(),
            "ModernBERT is served as it is published: without biases",
        ));
    }
    if json.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
        return Err((
            "rope_scaling".into(),
            "ModernBERT's rotary embeddings are served unscaled",
        ));
    }
    Ok(())
}

fn check_sizes(json: &ModernJson) -> Result<(), String> {
    if !(json.norm_eps.is_finite() && json.norm_eps > 0.0) {
        return Err(format!(
            "norm_eps is {}, expected a positive number",
            json.norm_eps
        ));
    }
    // Rotary embeddings turn pairs of a head's values (sizes are checked non-zero before).
    let head_dim = json.hidden_size / json.num_attention_heads.max(1);
    if !head_dim.is_multiple_of(2) {
        return Err(format!(
            "heads of {head_dim} values: rotary embeddings need an even number"
        ));
    }
    if json.global_attn_every_n_layers == 0 {
        return Err("global_attn_every_n_layers is 0, expected at least 1".into());
    }
    Ok(())
}

/// Which layers attend globally: every `global_attn_every_n_layers`-th from the first.
/// transformers picks a layer's window by this rule and its rotary base by `layer_types`,
/// so `layer_types` must say the same.
fn global_layers(json: &ModernJson) -> Result<Vec<bool>, String> {
    let n = json.global_attn_every_n_layers;
    let global: Vec<bool> = (0..json.num_hidden_layers).map(|i| i % n == 0).collect();
    if let Some(types) = &json.layer_types {
        let expected = global.iter().map(|g| match g {
            true => "full_attention",
            false => "sliding_attention",
        });
        if !types.iter().map(String::as_str).eq(expected) {
            return Err(format!("layer_types {types:?}"));
        }
    }
    Ok(global)
}

/// The rotary bases, from `rope_parameters` when given, else the old keys, else
/// transformers' defaults.
fn thetas(json: &ModernJson) -> Result<(f64, f64), String> {
    let from = |rope: Option<&Rope>, (key, old): (&str, Option<Option<f64>>), default: f64| {
        if let Some(kind) = rope.and_then(|r| r.rope_type.as_deref())
            && kind != "default"
        {
            return Err(format!("rope_type {kind:?}"));
        }
        if old == Some(None) {
            return Err(format!("{key} null"));
        }
        let theta = (rope.and_then(|r| r.rope_theta))
            .or(old.flatten())
            .unwrap_or(default);
        match theta.is_finite() && theta > 0.0 {
            true => Ok(theta),
            false => Err(format!("rope_theta {theta}")),
        }
    };
    let p = json.rope_parameters.as_ref();
    Ok((
        from(
            p.and_then(|p| p.full_attention.as_ref()),
            ("global_rope_theta", json.global_rope_theta),
            GLOBAL_THETA,
        )?,
        from(
            p.and_then(|p| p.sliding_attention.as_ref()),
            ("local_rope_theta", json.local_rope_theta),
            LOCAL_THETA,
        )?,
    ))
}

/// A ModernBERT's tensors: `embeddings.tok_embeddings` and `embeddings.norm`, then
/// `layers.N.{attn_norm,attn.Wqkv,attn.Wo,mlp_norm,mlp.Wi,mlp.Wo}` and `final_norm`. The
/// embeddings come back with empty position and token type tables: it has neither.
pub(super) fn read_weights(
    found: &mut Found<'_>,
    c: &EncoderConfig,
    p: &ModernBertParams,
) -> Result<(Embeddings, ModernWeights, Option<ClassifierWeights>), LoadError> {
    let h = c.hidden;
    let mut norm = |name: &str| -> Result<Norm, LoadError> {
        Ok(Norm {
            gamma: found.f32(&format!("{name}.weight"), &[h])?,
            beta: vec![0.0; h],
        })
    };
    let embeddings_norm = norm("embeddings.norm")?;
    let final_norm = norm("final_norm")?;
    let embeddings = Embeddings {
        word: found.f32("embeddings.tok_embeddings.weight", &[c.vocab_size, h])?,
        position: Vec::new(),
        token_type: Vec::new(),
        norm: embeddings_norm,
    };
    let layers = (0..c.layers)
        .map(|i| read_layer(found, c, i))
        .collect::<Result<Vec<_>, _>>()?;
    let classifier = match c.is_classifier() {
        true => Some(read_classifier(found, c, p)?),
        false => None,
    };
    let weights = ModernWeights {
        layers,
        final_norm: Some(final_norm),
    };
    Ok((embeddings, weights, classifier))
}

/// The `layers` layers of a family whose norms follow each sum (NomicBERT, GTE), each
/// read by `layer`: there is no final norm.
pub(super) fn post_norm_layers(
    found: &mut Found<'_>,
    layers: usize,
    mut layer: impl FnMut(&mut Found<'_>, usize) -> Result<ModernLayer, LoadError>,
) -> Result<ModernWeights, LoadError> {
    let layers = (0..layers)
        .map(|i| layer(found, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ModernWeights {
        layers,
        final_norm: None,
    })
}

/// `ModernBertForSequenceClassification`'s head: `head.dense`, GELU, `head.norm`, then
/// `classifier` (with its bias), widened to f32 for the host.
fn read_classifier(
    found: &mut Found<'_>,
    c: &EncoderConfig,
    p: &ModernBertParams,
) -> Result<ClassifierWeights, LoadError> {
    let h = c.hidden;
    let widened = |mut d: Dense| {
        d.weight = WeightData::F32(d.weight.to_f32());
        d
    };
    Ok(ClassifierWeights {
        pooler: widened(found.linear("head.dense", h, h, p.classifier_bias)?),
        activation: HeadActivation::Gelu,
        norm: Some(Norm {
            gamma: found.f32("head.norm.weight", &[h])?,
            beta: vec![0.0; h],
        }),
        classifier: widened(found.linear("classifier", h, c.labels.len(), true)?),
    })
}

fn read_layer(
    found: &mut Found<'_>,
    c: &EncoderConfig,
    i: usize,
) -> Result<ModernLayer, LoadError> {
    let (h, inter) = (c.hidden, c.intermediate);
    let name = |part: &str| format!("layers.{i}.{part}");
    let mut norm = |part: &str| -> Result<Norm, LoadError> {
        Ok(Norm {
            gamma: found.f32(&name(&format!("{part}.weight")), &[h])?,
            beta: vec![0.0; h],
        })
    };
    let attention_norm = match i {
        0 => None,
        _ => Some(norm("attn_norm")?),
    };
    let mlp_norm = norm("mlp_norm")?;
    Ok(ModernLayer {
        attention_norm,
        qkv: found.linear(&name("attn.Wqkv"), h, 3 * h, false)?,
        attention_out: found.linear(&name("attn.Wo"), h, h, false)?,
        mlp_norm,
        mlp_in: found.linear(&name("mlp.Wi"), h, 2 * inter, false)?,
        mlp_out: found.linear(&name("mlp.Wo"), inter, h, false)?,
    })
}
