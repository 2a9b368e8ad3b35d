//! A decoder's weights from `model.safetensors`, by transformers' names (`embed_tokens`,
//! `layers.N.self_attn.q_proj`, ..., `norm`), under `model.` (a causal LM's checkpoint) or
//! not (a bare model's, as sentence-transformers saves it). Every tensor the config implies
//! must be there with its shape; a causal LM's `lm_head` is left out (an encoder of
//! embeddings does not read it), anything else is refused by name. Matrices keep their
//! stored precision (f32, f16 or bf16) for the device to lay out; embeddings and norms are
//! widened to f32.

use safetensors::Dtype;

use super::{DecoderLayer, DecoderParams, DecoderWeights, Norms};
use crate::LoadError;
use crate::checkpoint::{check_finite, decode_weight};
use crate::dense::stack;
use crate::encoder::spec::EncoderConfig;
use crate::encoder::weights::Found;

/// Reads every tensor of a decoder `config` describes out of `found`.
pub(crate) fn read(found: &mut Found<'_>, c: &EncoderConfig) -> Result<DecoderWeights, LoadError> {
    let Some(p) = &c.decoder else {
        return Err(LoadError::Inconsistent(
            "a decoder's configuration without its parameters".into(),
        ));
    };
    let table = found.take("embed_tokens.weight", &[c.vocab_size, c.hidden])?;
    let stored = table.dtype();
    let embed = decode_weight("embed_tokens.weight", &table)?.to_f32();
    check_finite("embed_tokens.weight", &embed)?;
    let embed_scale = match p.scale_embeddings {
        true => rounded_to(stored, (c.hidden as f32).sqrt()),
        false => 1.0,
    };
    let layers = (0..c.layers)
        .map(|i| layer(found, c, p, i))
        .collect::<Result<Vec<_>, _>>()?;
    let norm = found.f32("norm.weight", &[c.hidden])?;
    Ok(DecoderWeights {
        embed,
        embed_scale,
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
    let mut norm = |part: &str| found.f32(&name(&format!("{part}.weight")), &[h]);
    let (attention_out_norm, mlp_norm, mlp_out_norm) = match p.norms {
        Norms::Pre => (None, norm("post_attention_layernorm")?, None),
        Norms::Sandwich => (
            Some(norm("post_attention_layernorm")?),
            norm("pre_feedforward_layernorm")?,
            Some(norm("post_feedforward_layernorm")?),
        ),
    };
    Ok(DecoderLayer {
        input_norm: found.f32(&name("input_layernorm.weight"), &[h])?,
        qkv: stack(&[query, key, value]),
        q_norm,
        k_norm,
        attention_out: found.linear(&name("self_attn.o_proj"), q, h, false)?,
        attention_out_norm,
        mlp_norm,
        mlp_out_norm,
        gate_up: stack(&[gate, up]),
        down: found.linear(&name("mlp.down_proj"), c.intermediate, h, false)?,
    })
}

/// `value` as a tensor of `dtype` holds it (transformers multiplies by the scale in the
/// table's precision: √768 is 27.75 in bf16).
fn rounded_to(dtype: Dtype, value: f32) -> f32 {
    match dtype {
        Dtype::BF16 => half::bf16::from_f32(value).to_f32(),
        Dtype::F16 => half::f16::from_f32(value).to_f32(),
        _ => value,
    }
}
