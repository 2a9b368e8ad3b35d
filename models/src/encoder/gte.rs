//! GTE (`model_type` `"new"`, `NewModel`: Alibaba's gte-base-en-v1.5, gte-large-en-v1.5 and
//! gte-multilingual-base): BERT's post-norm layers with a fused `qkv_proj`, rotary queries
//! and keys in place of a position table (their frequencies optionally NTK-scaled), and a
//! gated feed-forward `down_proj(up ⊙ act(gate))` from one `up_gate_proj`. It runs on
//! ModernBERT's layer code (`modern_cpu`), as NomicBERT does. Its classifier
//! (`NewForSequenceClassification`, gte-multilingual-reranker-base's) is BERT's head under
//! `new.`, read in `weights`.
//!
//! Its `config.json` uses BERT's names for the sizes; its own keys are read here, with the
//! defaults of its Hugging Face code (`configuration.py` of `Alibaba-NLP/new-impl`). What
//! that code would compute differently is refused with the key: absolute positions, RMS
//! norms, log-n attention scaling, another rotary scaling, separate query, key and value
//! matrices (none of the published models has them).

use std::path::Path;

use serde::Deserialize;

use super::modern::{
    Gate, LayerBiases, ModernBertParams, ModernLayer, ModernWeights, NormPlacement, Ntk,
    post_norm_layers,
};
use super::weights::{Dense, Embeddings, Found};
use crate::encoder::spec::EncoderConfig;
use crate::folder::read_json;
use crate::text::pooling::Pooling;
use crate::{LoadError, WeightData};

/// GTE's own keys, with its configuration's defaults.
#[derive(Deserialize)]
struct GteJson {
    #[serde(default = "gelu")]
    hidden_act: String,
    #[serde(default = "rope")]
    position_embedding_type: String,
    rope_theta: Option<f64>,
    rope_scaling: Option<RopeScaling>,
    /// What transformers 5 saves in place of `rope_scaling`, which GTE's code does not read.
    rope_parameters: Option<RopeScaling>,
    #[serde(default = "layer_norm")]
    layer_norm_type: String,
    #[serde(default)]
    logn_attention_scale: bool,
    #[serde(default = "yes")]
    pack_qkv: bool,
    #[serde(default = "one")]
    type_vocab_size: usize,
}

/// Only the keys of its NTK scaling, and those transformers 5 adds (the type again as
/// `rope_type`, and the base): another key is refused, not ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RopeScaling {
    #[serde(rename = "type")]
    kind: Option<String>,
    rope_type: Option<String>,
    factor: Option<f64>,
    mixed_b: Option<f64>,
    rope_theta: Option<f64>,
}

fn gelu() -> String {
    "gelu".into()
}
fn rope() -> String {
    "rope".into()
}
/// Its configuration's rotary base.
const DEFAULT_ROPE_THETA: f64 = 10_000.0;
fn layer_norm() -> String {
    "layer_norm".into()
}
fn yes() -> bool {
    true
}
fn one() -> usize {
    1
}

/// What `config.json` says of a GTE beyond BERT's sizes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct GteConfig {
    pub params: ModernBertParams,
    /// Rows of its token type table; 0: it has none, and reads no type ids.
    pub type_vocab_size: usize,
}

/// GTE's parameters from `config.json` at `path`, of a model of `layers` layers whose
/// heads hold `head_dim` values.
pub(super) fn read(path: &Path, layers: usize, head_dim: usize) -> Result<GteConfig, LoadError> {
    let json: GteJson = read_json(path)?;
    let unsupported = |(what, supported): (String, &'static str)| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    check_layers(&json).map_err(unsupported)?;
    let gate = match json.hidden_act.as_str() {
        "gelu" => Gate::Gelu,
        "silu" | "swish" => Gate::Silu,
        other => {
            return Err(unsupported((
                format!("hidden_act {other:?}"),
                "GTE's gates are served with \"gelu\" (the exact error function) or \"silu\"",
            )));
        }
    };
    let (theta, ntk) = read_rotary(path, &json)?;
    let rotary_fits = theta.is_finite() && theta > 0.0 && head_dim.is_multiple_of(2);
    if !rotary_fits {
        return Err(LoadError::Config {
            path: path.to_path_buf(),
            reason: format!(
                "rope_theta {theta} with heads of {head_dim} values: rotary embeddings need \
                 a positive base and an even number of values"
            ),
        });
    }
    Ok(GteConfig {
        params: ModernBertParams {
            global: vec![true; layers],
            window: 0,
            global_theta: theta,
            local_theta: theta,
            ntk,
            classifier_pooling: Pooling::Cls,
            classifier_bias: false,
            norms: NormPlacement::After,
            gate,
            biases: LayerBiases {
                attention: true,
                mlp_in: false,
                mlp_out: true,
            },
        },
        type_vocab_size: json.type_vocab_size,
    })
}

/// The first key whose value the layers here would not compute as GTE's code does.
fn check_layers(json: &GteJson) -> Result<(), (String, &'static str)> {
    let served = "GTE is served as its models are published: rotary positions, layer norms, \
                  no log-n attention scaling";
    if json.position_embedding_type != "rope" {
        let what = format!("position_embedding_type {:?}", json.position_embedding_type);
        return Err((what, served));
    }
    if json.layer_norm_type != "layer_norm" {
        return Err((
            format!("layer_norm_type {:?}", json.layer_norm_type),
            served,
        ));
    }
    if json.logn_attention_scale {
        return Err(("logn_attention_scale true".into(), served));
    }
    if !json.pack_qkv {
        return Err((
            "pack_qkv false".into(),
            "GTE with one qkv_proj (pack_qkv true)",
        ));
    }
    Ok(())
}

/// The rotary base and scaling, as GTE's code reads them: `rope_theta` (absent: 10,000),
/// and `rope_scaling` absent or `{"type": "ntk", "factor": f ≥ 1, "mixed_b": b > 0}`.
fn read_rotary(path: &Path, json: &GteJson) -> Result<(f64, Option<Ntk>), LoadError> {
    let theta = json.rope_theta.unwrap_or(DEFAULT_ROPE_THETA);
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    let same_base = |s: &RopeScaling| s.rope_theta.is_none_or(|t| t == theta);
    // Transformers 5 saves a scaling here, where GTE's code does not look: it runs such a
    // model unscaled, unlike the model it was trained as.
    if let Some(p) = &json.rope_parameters {
        let kind = p.kind.as_deref().or(p.rope_type.as_deref());
        let unscaled = kind == Some("default") && p.factor.is_none() && p.mixed_b.is_none();
        if !(unscaled && same_base(p)) {
            return Err(unsupported(
                format!("rope_parameters {}", describe(p)),
                "rope_parameters only unscaled (rope_type \"default\") with config.json's \
                 rope_theta: GTE's code reads its scaling from rope_scaling only (a config \
                 saved by transformers 5 has it under rope_parameters: rename the key)",
            ));
        }
    }
    let Some(s) = &json.rope_scaling else {
        return Ok((theta, None));
    };
    let ntk = |t: Option<&str>| t.is_none_or(|t| t == "ntk");
    let typed = (s.kind.is_some() || s.rope_type.is_some()) && ntk(s.kind.as_deref());
    let positive = |v: f64| v.is_finite() && v > 0.0;
    match s.factor {
        Some(factor)
            if typed
                && ntk(s.rope_type.as_deref())
                && same_base(s)
                && factor.is_finite()
                && factor >= 1.0
                && s.mixed_b.is_none_or(positive) =>
        {
            let mixed_b = s.mixed_b;
            Ok((theta, Some(Ntk { factor, mixed_b })))
        }
        _ => Err(unsupported(
            format!("rope_scaling {}", describe(s)),
            "GTE's NTK scaling: type \"ntk\", a factor of at least 1, a positive mixed_b \
             if any, and config.json's rope_theta if it repeats one",
        )),
    }
}

fn describe(s: &RopeScaling) -> String {
    format!(
        "of type {:?} (rope_type {:?}), factor {:?}, mixed_b {:?}, rope_theta {:?}",
        s.kind, s.rope_type, s.factor, s.mixed_b, s.rope_theta
    )
}

/// A GTE's tensors: `embeddings.word_embeddings`, `embeddings.token_type_embeddings` (where
/// `type_vocab_size` is not 0) and `embeddings.LayerNorm`, then
/// `encoder.layer.N.{attention.qkv_proj,attention.o_proj,attn_ln,mlp.up_gate_proj,
/// mlp.down_proj,mlp_ln}`. `up_gate_proj` is `[up; gate]`; the layer code reads the gate's
/// half first.
pub(super) fn read_weights(
    found: &mut Found<'_>,
    c: &EncoderConfig,
) -> Result<(Embeddings, ModernWeights), LoadError> {
    let h = c.hidden;
    let token_type = match c.type_vocab_size {
        0 => Vec::new(),
        n => found.f32("embeddings.token_type_embeddings.weight", &[n, h])?,
    };
    let embeddings = Embeddings {
        word: found.f32("embeddings.word_embeddings.weight", &[c.vocab_size, h])?,
        position: Vec::new(),
        token_type,
        norm: found.norm("embeddings.LayerNorm", h)?,
    };
    let weights = post_norm_layers(found, c.layers, |found, i| read_layer(found, c, i))?;
    Ok((embeddings, weights))
}

fn read_layer(
    found: &mut Found<'_>,
    c: &EncoderConfig,
    i: usize,
) -> Result<ModernLayer, LoadError> {
    let (h, inter) = (c.hidden, c.intermediate);
    let name = |part: &str| format!("encoder.layer.{i}.{part}");
    let up_gate = found.linear(&name("mlp.up_gate_proj"), h, 2 * inter, false)?;
    Ok(ModernLayer {
        attention_norm: Some(found.norm(&name("attn_ln"), h)?),
        qkv: found.linear(&name("attention.qkv_proj"), h, 3 * h, true)?,
        attention_out: found.linear(&name("attention.o_proj"), h, h, true)?,
        mlp_norm: found.norm(&name("mlp_ln"), h)?,
        mlp_in: gate_first(up_gate),
        mlp_out: found.linear(&name("mlp.down_proj"), inter, h, true)?,
    })
}

/// `[up; gate]` as `[gate; up]`: the rows' two halves swapped. It has no bias (its zeros
/// stay as they are).
fn gate_first(mut up_gate: Dense) -> Dense {
    fn swap<T>(rows: &mut [T]) {
        rows.rotate_left(rows.len() / 2);
    }
    match &mut up_gate.weight {
        WeightData::F32(w) => swap(w),
        WeightData::F16(w) => swap(w),
        WeightData::BF16(w) => swap(w),
    }
    up_gate
}
