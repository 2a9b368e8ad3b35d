//! What a family's own keys in `config.json` say of its layers, beside BERT's sizes:
//! ModernBERT's in `modern`, NomicBERT's in `nomic`, GTE's in `gte`.

use std::path::Path;

use super::{BertJson, Kind, bert_eps};
use crate::LoadError;
use crate::encoder::family::Family;
use crate::encoder::modern::{self, ModernBertParams};
use crate::encoder::{gte, nomic};

/// What a family's own keys say of its layers, beside BERT's sizes.
pub(super) struct FamilyLayers {
    pub modern: Option<ModernBertParams>,
    pub layer_norm_eps: f64,
    pub vocab_size: usize,
    pub intermediate: usize,
    /// A limit on a sequence's tokens beyond `max_position_embeddings`.
    pub max_positions: Option<usize>,
    pub type_vocab_size: usize,
}

impl FamilyLayers {
    pub(super) fn read(
        path: &Path,
        bert: &BertJson,
        family: Family,
        kind: Kind,
    ) -> Result<Self, LoadError> {
        let bert_layers = |layer_norm_eps| FamilyLayers {
            modern: None,
            layer_norm_eps,
            vocab_size: bert.vocab_size,
            intermediate: bert.intermediate_size,
            max_positions: None,
            type_vocab_size: bert.type_vocab_size,
        };
        Ok(match family {
            Family::Qwen2 | Family::Qwen3 | Family::Gemma3 => {
                return Err(LoadError::Inconsistent(
                    "a decoder's config.json is read as a decoder's (crate::decoder)".into(),
                ));
            }
            // DistilBERT's LayerNorms fix their epsilon at 1e-12 whatever the config says.
            Family::DistilBert => bert_layers(bert_eps()),
            Family::ModernBert => {
                let (params, eps) = modern::read(path, kind == Kind::Classifier)?;
                FamilyLayers {
                    modern: Some(params),
                    ..bert_layers(eps)
                }
            }
            Family::NomicBert => {
                let sizes = nomic::Sizes {
                    vocab: bert.vocab_size,
                    intermediate: bert.intermediate_size,
                    layers: bert.num_hidden_layers,
                    head_dim: bert.hidden_size / bert.num_attention_heads.max(1),
                };
                let n = nomic::read(path, sizes)?;
                FamilyLayers {
                    modern: Some(n.params),
                    layer_norm_eps: n.layer_norm_eps,
                    vocab_size: n.vocab_size,
                    intermediate: n.intermediate,
                    max_positions: n.max_positions,
                    type_vocab_size: bert.type_vocab_size,
                }
            }
            Family::Gte => {
                let head_dim = bert.hidden_size / bert.num_attention_heads.max(1);
                let g = gte::read(path, bert.num_hidden_layers, head_dim)?;
                FamilyLayers {
                    modern: Some(g.params),
                    type_vocab_size: g.type_vocab_size,
                    ..bert_layers(bert.layer_norm_eps)
                }
            }
            Family::Bert | Family::Roberta | Family::Mpnet => bert_layers(bert.layer_norm_eps),
        })
    }
}
