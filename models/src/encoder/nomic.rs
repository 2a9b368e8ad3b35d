//! NomicBERT (`model_type` `"nomic_bert"`, nomic-embed-text's architecture): BERT's
//! post-norm layers with a fused `Wqkv`, rotary queries and keys in place of a position
//! table, and a gated feed-forward `fc2(fc11(x) ⊙ act(fc12(x)))`, biases where the config
//! says. It runs on ModernBERT's layer code (`modern_cpu`), described by a
//! [`ModernBertParams`] with its norms after each sum and its own gate.
//!
//! Its `config.json` is a GPT-2 configuration (`n_embd`, `n_layer`, ...; `config` reads
//! those under BERT's names). What the Hugging Face code (`modeling_hf_nomic_bert.py`)
//! would compute differently from what is described here is refused with the key: a
//! pre-norm or parallel block, partial or interleaved rotary embeddings, a scaled rotary
//! base, RMS norms, experts, a causal mask, a norm inside the feed-forward.

use std::path::Path;

use serde::Deserialize;

use super::modern::{
    Gate, LayerBiases, ModernBertParams, ModernLayer, ModernWeights, NormPlacement,
    post_norm_layers,
};
use super::weights::{Embeddings, Found, stack};
use crate::LoadError;
use crate::encoder::spec::EncoderConfig;
use crate::folder::read_json;
use crate::text::pooling::Pooling;

/// NomicBERT's own keys, with the defaults of the Hugging Face code nomic-embed-text-v1.5
/// ships (`configuration_hf_nomic_bert.py`) where a key may be absent.
#[derive(Deserialize)]
struct NomicJson {
    #[serde(default = "gpt2_eps")]
    layer_norm_epsilon: f64,
    activation_function: String,
    #[serde(default)]
    prenorm: bool,
    #[serde(default)]
    parallel_block: bool,
    #[serde(default)]
    rotary_emb_fraction: f64,
    #[serde(default = "rotary_base")]
    rotary_emb_base: f64,
    #[serde(default)]
    rotary_emb_interleaved: bool,
    rotary_emb_scale_base: Option<f64>,
    /// Dynamic NTK scaling: it changes the base only for sequences longer than
    /// `max_trained_positions`, which are then not served.
    rotary_scaling_factor: Option<f64>,
    #[serde(default = "trained_positions")]
    max_trained_positions: usize,
    #[serde(default = "yes")]
    qkv_proj_bias: bool,
    #[serde(default = "yes")]
    mlp_fc1_bias: bool,
    #[serde(default = "yes")]
    mlp_fc2_bias: bool,
    #[serde(default)]
    use_rms_norm: bool,
    #[serde(default)]
    causal: bool,
    #[serde(default)]
    norm_mlp: bool,
    #[serde(default)]
    rotary_head_dim: bool,
    moe_every_n_layers: Option<usize>,
    num_experts: Option<usize>,
    #[serde(default = "one_usize")]
    pad_vocab_size_multiple: usize,
}

fn gpt2_eps() -> f64 {
    1e-5
}
fn rotary_base() -> f64 {
    10_000.0
}
fn trained_positions() -> usize {
    2048
}
fn yes() -> bool {
    true
}
fn one_usize() -> usize {
    1
}

/// What `config.json` says of a NomicBERT beyond BERT's sizes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct NomicConfig {
    pub params: ModernBertParams,
    /// The longest sequence its rotary embeddings serve as the Hugging Face code does.
    pub max_positions: Option<usize>,
    /// The word table's rows: `vocab_size` rounded up to `pad_vocab_size_multiple`.
    pub vocab_size: usize,
    /// The feed-forward's width: `n_inner` rounded up to [`GATED_MULTIPLE`].
    pub intermediate: usize,
    pub layer_norm_eps: f64,
}

/// The Hugging Face code's gated feed-forward rounds its width up to a multiple of this
/// (`multiple_of`), whatever `n_inner` says.
pub(super) const GATED_MULTIPLE: usize = 256;

/// The sizes `config.json` gives under GPT-2's names, as `config` read them.
pub(super) struct Sizes {
    pub vocab: usize,
    /// `n_inner`.
    pub intermediate: usize,
    pub layers: usize,
    pub head_dim: usize,
}

/// NomicBERT's parameters from `config.json` at `path`, of a model of `sizes`.
pub(super) fn read(path: &Path, sizes: Sizes) -> Result<NomicConfig, LoadError> {
    let json: NomicJson = read_json(path)?;
    let unsupported = |(what, supported): (String, &'static str)| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    check_layers(&json).map_err(unsupported)?;
    let gate = match json.activation_function.as_str() {
        "swiglu" => Gate::Silu,
        "geglu" => Gate::Gelu,
        other => {
            return Err(unsupported((
                format!("activation_function {other:?}"),
                "NomicBERT's gated feed-forwards are served: \"swiglu\" and \"geglu\"",
            )));
        }
    };
    let invalid = |reason: String| LoadError::Config {
        path: path.to_path_buf(),
        reason,
    };
    check_sizes(&json, sizes.head_dim).map_err(invalid)?;
    let multiple = json.pad_vocab_size_multiple.max(1);
    let scaled = json.rotary_scaling_factor.is_some_and(|f| f != 0.0);
    Ok(NomicConfig {
        params: ModernBertParams {
            global: vec![true; sizes.layers],
            window: 0,
            global_theta: json.rotary_emb_base,
            local_theta: json.rotary_emb_base,
            ntk: None,
            classifier_pooling: Pooling::Cls,
            classifier_bias: false,
            norms: NormPlacement::After,
            gate,
            biases: LayerBiases {
                attention: json.qkv_proj_bias,
                mlp_in: json.mlp_fc1_bias,
                mlp_out: json.mlp_fc2_bias,
            },
        },
        max_positions: scaled.then_some(json.max_trained_positions),
        vocab_size: sizes.vocab.next_multiple_of(multiple),
        intermediate: sizes.intermediate.next_multiple_of(GATED_MULTIPLE),
        layer_norm_eps: json.layer_norm_epsilon,
    })
}

fn check_sizes(json: &NomicJson, head_dim: usize) -> Result<(), String> {
    let positive = |key: &str, v: f64| match v.is_finite() && v > 0.0 {
        true => Ok(()),
        false => Err(format!("{key} is {v}, expected a positive number")),
    };
    positive("rotary_emb_base", json.rotary_emb_base)?;
    positive("layer_norm_epsilon", json.layer_norm_epsilon)?;
    if json.max_trained_positions == 0 {
        return Err("max_trained_positions is 0, expected at least 1".into());
    }
    // Rotary embeddings turn pairs of a head's values.
    match head_dim.is_multiple_of(2) {
        true => Ok(()),
        false => Err(format!(
            "heads of {head_dim} values: rotary embeddings need an even number"
        )),
    }
}

/// The first key whose value the layers here would not compute as the Hugging Face code
/// does, and what is served instead.
fn check_layers(json: &NomicJson) -> Result<(), (String, &'static str)> {
    let flags = [
        ("prenorm", json.prenorm),
        ("parallel_block", json.parallel_block),
        ("rotary_emb_interleaved", json.rotary_emb_interleaved),
        ("use_rms_norm", json.use_rms_norm),
        ("causal", json.causal),
        ("norm_mlp", json.norm_mlp),
        ("rotary_head_dim", json.rotary_head_dim),
    ];
    if let Some((key, _)) = flags.iter().find(|(_, on)| *on) {
        return Err((
            format!("{key} true"),
            "NomicBERT is served as nomic-embed-text is published: post-norm layers, \
             rotate-half rotary embeddings, layer norms",
        ));
    }
    if json.rotary_emb_fraction != 1.0 || json.rotary_emb_scale_base.is_some() {
        return Err((
            format!(
                "rotary_emb_fraction {} with rotary_emb_scale_base {}",
                json.rotary_emb_fraction,
                json.rotary_emb_scale_base
                    .map_or("null".into(), |b| b.to_string())
            ),
            "rotary embeddings over whole heads (fraction 1.0), unscaled",
        ));
    }
    if json.moe_every_n_layers.is_some_and(|n| n > 0) || json.num_experts.is_some_and(|n| n > 0) {
        return Err((
            "moe_every_n_layers or num_experts".into(),
            "NomicBERT without mixture-of-experts layers",
        ));
    }
    Ok(())
}

/// A NomicBERT's tensors: `embeddings.{word,token_type}_embeddings` and `emb_ln`, then
/// `encoder.layers.N.{attn.Wqkv,attn.out_proj,norm1,mlp.fc11,mlp.fc12,mlp.fc2,norm2}`.
/// The feed-forward's input matrix is `[fc12; fc11]`: the gate's half first, as the layer
/// code reads it.
pub(super) fn read_weights(
    found: &mut Found<'_>,
    c: &EncoderConfig,
    p: &ModernBertParams,
) -> Result<(Embeddings, ModernWeights), LoadError> {
    let h = c.hidden;
    let embeddings = Embeddings {
        word: found.f32("embeddings.word_embeddings.weight", &[c.vocab_size, h])?,
        position: Vec::new(),
        token_type: found.f32(
            "embeddings.token_type_embeddings.weight",
            &[c.type_vocab_size, h],
        )?,
        norm: found.norm("emb_ln", h)?,
    };
    let weights = post_norm_layers(found, c.layers, |found, i| {
        read_layer(found, c, i, p.biases)
    })?;
    Ok((embeddings, weights))
}

fn read_layer(
    found: &mut Found<'_>,
    c: &EncoderConfig,
    i: usize,
    b: LayerBiases,
) -> Result<ModernLayer, LoadError> {
    let (h, inter) = (c.hidden, c.intermediate);
    let name = |part: &str| format!("encoder.layers.{i}.{part}");
    let up = found.linear(&name("mlp.fc11"), h, inter, b.mlp_in)?;
    let gate = found.linear(&name("mlp.fc12"), h, inter, b.mlp_in)?;
    Ok(ModernLayer {
        attention_norm: Some(found.norm(&name("norm1"), h)?),
        qkv: found.linear(&name("attn.Wqkv"), h, 3 * h, b.attention)?,
        attention_out: found.linear(&name("attn.out_proj"), h, h, b.attention)?,
        mlp_norm: found.norm(&name("norm2"), h)?,
        mlp_in: stack(&[gate, up]),
        mlp_out: found.linear(&name("mlp.fc2"), inter, h, b.mlp_out)?,
    })
}
