//! A decoder's weights from `model.safetensors`, by transformers' names (`embed_tokens`,
//! `layers.N.self_attn.q_proj`, ..., `norm`), under `model.` (a causal LM's checkpoint) or
//! not (a bare model's, as sentence-transformers saves it). Every tensor the config implies
//! must be there with its shape; a causal LM's `lm_head` is left out (an encoder of
//! embeddings does not read it), anything else is refused by name. Matrices keep their
//! stored precision (f32, f16 or bf16) for the device to lay out; embeddings and norms are
//! widened to f32.

use super::DecoderParams;
use crate::LoadError;
use crate::encoder::spec::EncoderConfig;
use crate::encoder::weights::{Dense, Found, stack};

/// One layer: `x += Wo · attention(rope(norm_q(Wq·n)), rope(norm_k(Wk·n)), Wv·n)` with
/// `n = rms(x) · input_norm`, then `x += down · (silu(gate · m) ⊙ up · m)` with
/// `m = rms(x) · post_norm`.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderLayer {
    pub input_norm: Vec<f32>,
    /// `[(H + 2K) · d, hidden]`: the query heads, then the key heads, then the value heads;
    /// biases zero where the architecture has none.
    pub qkv: Dense,
    /// Qwen3's RMSNorm over each head's `d` queries and keys.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// `[hidden, H · d]`.
    pub attention_out: Dense,
    pub post_norm: Vec<f32>,
    /// `[2 · intermediate, hidden]`: the gate, then the half it multiplies.
    pub gate_up: Dense,
    pub down: Dense,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DecoderWeights {
    /// `[vocab, hidden]`.
    pub embed: Vec<f32>,
    pub layers: Vec<DecoderLayer>,
    /// The norm after the last layer.
    pub norm: Vec<f32>,
}

/// Reads every tensor of a decoder `config` describes out of `found`.
pub(crate) fn read(found: &mut Found<'_>, c: &EncoderConfig) -> Result<DecoderWeights, LoadError> {
    let Some(p) = &c.decoder else {
        return Err(LoadError::Inconsistent(
            "a decoder's configuration without its parameters".into(),
        ));
    };
    let embed = found.f32("embed_tokens.weight", &[c.vocab_size, c.hidden])?;
    let layers = (0..c.layers)
        .map(|i| layer(found, c, p, i))
        .collect::<Result<Vec<_>, _>>()?;
    let norm = found.f32("norm.weight", &[c.hidden])?;
    Ok(DecoderWeights {
        embed,
        layers,
        norm,
    })
}

fn layer(
    found: &mut Found<'_>,
    c: &EncoderConfig,
    p: &DecoderParams,
    i: usize,
) -> Result<DecoderLayer, LoadError> {
    let (h, d) = (c.hidden, p.head_dim);
    let (q, kv) = (p.query_width(c.heads), p.kv_heads * d);
    let name = |part: &str| format!("layers.{i}.{part}");
    let bias = p.qkv_bias;
    let query = found.linear(&name("self_attn.q_proj"), h, q, bias)?;
    let key = found.linear(&name("self_attn.k_proj"), h, kv, bias)?;
    let value = found.linear(&name("self_attn.v_proj"), h, kv, bias)?;
    let head_norm = |found: &mut Found<'_>, which: &str| match p.qk_norm {
        true => found
            .f32(&name(&format!("self_attn.{which}.weight")), &[d])
            .map(Some),
        false => Ok(None),
    };
    let q_norm = head_norm(found, "q_norm")?;
    let k_norm = head_norm(found, "k_norm")?;
    let gate = found.linear(&name("mlp.gate_proj"), h, c.intermediate, false)?;
    let up = found.linear(&name("mlp.up_proj"), h, c.intermediate, false)?;
    Ok(DecoderLayer {
        input_norm: found.f32(&name("input_layernorm.weight"), &[h])?,
        qkv: stack(&[query, key, value]),
        q_norm,
        k_norm,
        attention_out: found.linear(&name("self_attn.o_proj"), q, h, false)?,
        post_norm: found.f32(&name("post_attention_layernorm.weight"), &[h])?,
        gate_up: stack(&[gate, up]),
        down: found.linear(&name("mlp.down_proj"), c.intermediate, h, false)?,
    })
}
