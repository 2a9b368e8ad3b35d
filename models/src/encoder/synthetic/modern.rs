//! The synthetic folders of the families on ModernBERT's layer code: ModernBERT, NomicBERT
//! (a GPT-2 style `config.json`, tensors as `NomicBertModel` names them) and GTE (as
//! `NewModel` names them).

use serde_json::json;

use super::{Drawn, SyntheticSpec};
use crate::encoder::nomic::GATED_MULTIPLE;
use crate::text::pooling::Pooling;

/// A ModernBERT's `config.json` as transformers writes it (old keys), with the spec's window
/// (by default 8: 4 tokens each side, so that short texts feel it), and every other layer global; a
/// classifier's head pools as `spec.pooling` says.
pub(super) fn modern_config_json(spec: &SyntheticSpec, vocab: usize) -> serde_json::Value {
    json!({
        "architectures": ["ModernBertModel"],
        "model_type": "modernbert",
        "hidden_activation": "gelu",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "vocab_size": vocab,
        "norm_eps": 1e-5,
        "norm_bias": false,
        "attention_bias": false,
        "mlp_bias": false,
        "global_attn_every_n_layers": 2,
        "local_attention": spec.local_attention,
        "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0,
        "pad_token_id": 0,
        "bos_token_id": 2,
        "cls_token_id": 2,
        "eos_token_id": 3,
        "sep_token_id": 3,
        "classifier_pooling": if spec.pooling == Pooling::Cls { "cls" } else { "mean" },
        "classifier_activation": "gelu",
        "classifier_bias": false,
    })
}

/// A ModernBERT's tensors, as `ModernBertModel` names them.
pub(super) fn modern_weights(drawn: &mut Drawn, spec: &SyntheticSpec, vocab: usize) {
    let (h, i) = (spec.hidden, spec.intermediate);
    let norm = |drawn: &mut Drawn, name: String| drawn.add(name, vec![h], 0.1, 1.0, false);
    drawn.table("embeddings.tok_embeddings.weight", vocab, h, 0.5);
    norm(drawn, "embeddings.norm.weight".into());
    for l in 0..spec.layers {
        if l > 0 {
            norm(drawn, format!("layers.{l}.attn_norm.weight"));
        }
        norm(drawn, format!("layers.{l}.mlp_norm.weight"));
        for (name, inputs, outputs) in [
            ("attn.Wqkv", h, 3 * h),
            ("attn.Wo", h, h),
            ("mlp.Wi", h, 2 * i),
            ("mlp.Wo", i, h),
        ] {
            let scale = 1.0 / (inputs as f32).sqrt();
            let shape = vec![outputs, inputs];
            drawn.add(format!("layers.{l}.{name}.weight"), shape, scale, 0.0, true);
        }
    }
    norm(drawn, "final_norm.weight".into());
    if spec.labels > 0 {
        let shape = vec![h, h];
        drawn.add(
            "head.dense.weight".into(),
            shape,
            1.0 / (h as f32).sqrt(),
            0.0,
            true,
        );
        norm(drawn, "head.norm.weight".into());
        drawn.dense("classifier", h, spec.labels, 1.0);
    }
}

/// A NomicBERT's `config.json` as nomic-embed-text's is written (GPT-2's names, every
/// NomicBERT key the layers read), with the spec's gate, biases and vocabulary padding;
/// `n_inner` is the spec's intermediate size, which the model rounds up to 256.
pub(super) fn nomic_config_json(spec: &SyntheticSpec, vocab: usize) -> serde_json::Value {
    let n = &spec.nomic;
    json!({
        "architectures": ["NomicBertModel"],
        "model_type": "nomic_bert",
        "activation_function": n.activation,
        "n_embd": spec.hidden,
        "n_head": spec.heads,
        "n_inner": spec.intermediate,
        "n_layer": spec.layers,
        "n_positions": spec.max_position_embeddings,
        "vocab_size": vocab,
        "pad_vocab_size_multiple": n.pad_vocab_size_multiple,
        "type_vocab_size": 2,
        "layer_norm_epsilon": 1e-12,
        "prenorm": false,
        "parallel_block": false,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_base": 1000,
        "rotary_emb_interleaved": false,
        "rotary_emb_scale_base": null,
        "rotary_scaling_factor": null,
        "max_trained_positions": 2048,
        "qkv_proj_bias": n.qkv_proj_bias,
        "mlp_fc1_bias": n.mlp_fc1_bias,
        "mlp_fc2_bias": n.mlp_fc2_bias,
        "use_rms_norm": false,
        "causal": false,
    })
}

/// A NomicBERT's tensors: the word table padded to `pad_vocab_size_multiple` rows, token
/// types, `emb_ln`, then each layer's `attn.Wqkv`, `attn.out_proj`, `norm1`, `mlp.fc11`,
/// `mlp.fc12`, `mlp.fc2` and `norm2`, with biases only where the spec has them.
pub(super) fn nomic_weights(drawn: &mut Drawn, spec: &SyntheticSpec, vocab: usize) {
    let n = &spec.nomic;
    let i = spec.intermediate.next_multiple_of(GATED_MULTIPLE);
    let h = spec.hidden;
    let rows = vocab.next_multiple_of(n.pad_vocab_size_multiple.max(1));
    drawn.table("embeddings.word_embeddings.weight", rows, h, 0.5);
    drawn.table("embeddings.token_type_embeddings.weight", 2, h, 0.3);
    drawn.norm("emb_ln", h);
    for l in 0..spec.layers {
        let p = format!("encoder.layers.{l}");
        for (name, inputs, outputs, bias) in [
            ("attn.Wqkv", h, 3 * h, n.qkv_proj_bias),
            ("attn.out_proj", h, h, n.qkv_proj_bias),
            ("mlp.fc11", h, i, n.mlp_fc1_bias),
            ("mlp.fc12", h, i, n.mlp_fc1_bias),
            ("mlp.fc2", i, h, n.mlp_fc2_bias),
        ] {
            let scale = 1.0 / (inputs as f32).sqrt();
            drawn.dense(&format!("{p}.{name}"), inputs, outputs, scale);
            if !bias {
                drawn.tensors.pop();
            }
        }
        drawn.norm(&format!("{p}.norm1"), h);
        drawn.norm(&format!("{p}.norm2"), h);
    }
}

/// A GTE's `hidden_act` (`"gelu"` or `"silu"`), `type_vocab_size` (0: no token type table)
/// and `rope_scaling` (`(factor, mixed_b)` of its NTK scaling). By default
/// gte-base-en-v1.5's form: GELU, no token types, NTK scaling by 2.
#[derive(Clone, Debug)]
pub struct GteSpec {
    pub activation: &'static str,
    pub type_vocab_size: usize,
    pub ntk: Option<(f64, Option<f64>)>,
}

impl Default for GteSpec {
    fn default() -> Self {
        GteSpec {
            activation: "gelu",
            type_vocab_size: 0,
            ntk: Some((2.0, None)),
        }
    }
}

/// A GTE's `config.json` as gte-base-en-v1.5's is written (every key its layers read),
/// with the spec's activation, token types and scaling.
pub(super) fn gte_config_json(spec: &SyntheticSpec, vocab: usize) -> serde_json::Value {
    let g = &spec.gte;
    let scaling = g.ntk.map(|(factor, mixed_b)| {
        let mut s = json!({"type": "ntk", "factor": factor});
        if let Some(b) = mixed_b {
            s["mixed_b"] = b.into();
        }
        s
    });
    json!({
        "architectures": ["NewModel"],
        "model_type": "new",
        "hidden_act": g.activation,
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "vocab_size": vocab,
        "type_vocab_size": g.type_vocab_size,
        "layer_norm_eps": 1e-12,
        "layer_norm_type": "layer_norm",
        "position_embedding_type": "rope",
        "rope_theta": 1000.0,
        "rope_scaling": scaling,
        "logn_attention_scale": false,
        "logn_attention_clip1": false,
        "pack_qkv": true,
        "unpad_inputs": false,
        "use_memory_efficient_attention": false,
        "pad_token_id": 0,
    })
}

/// A GTE's tensors: word and (unless the spec has none) token type tables,
/// `embeddings.LayerNorm`, then each layer's `attention.qkv_proj`, `attention.o_proj`,
/// `attn_ln`, `mlp.up_gate_proj` (no bias), `mlp.down_proj` and `mlp_ln`; a classifier's
/// `pooler.dense` and `classifier`.
pub(super) fn gte_weights(drawn: &mut Drawn, spec: &SyntheticSpec, vocab: usize) {
    let (h, i) = (spec.hidden, spec.intermediate);
    drawn.table("embeddings.word_embeddings.weight", vocab, h, 0.5);
    if spec.gte.type_vocab_size > 0 {
        let types = spec.gte.type_vocab_size;
        drawn.table("embeddings.token_type_embeddings.weight", types, h, 0.3);
    }
    drawn.norm("embeddings.LayerNorm", h);
    for l in 0..spec.layers {
        let p = format!("encoder.layer.{l}");
        for (name, inputs, outputs) in [
            ("attention.qkv_proj", h, 3 * h),
            ("attention.o_proj", h, h),
            ("mlp.up_gate_proj", h, 2 * i),
            ("mlp.down_proj", i, h),
        ] {
            let scale = 1.0 / (inputs as f32).sqrt();
            drawn.dense(&format!("{p}.{name}"), inputs, outputs, scale);
            if name == "mlp.up_gate_proj" {
                drawn.tensors.pop();
            }
        }
        drawn.norm(&format!("{p}.attn_ln"), h);
        drawn.norm(&format!("{p}.mlp_ln"), h);
    }
    if spec.labels > 0 {
        drawn.dense("pooler.dense", h, h, 1.0 / (h as f32).sqrt());
        drawn.dense("classifier", h, spec.labels, 1.0);
    }
}
