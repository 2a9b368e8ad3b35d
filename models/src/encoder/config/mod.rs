//! What a sentence-transformers folder says about its encoder: `config.json` (a BERT,
//! DistilBERT, MPNet, RoBERTa, XLM-RoBERTa, ModernBERT, NomicBERT or GTE architecture; the
//! last three's own keys in `family_layers`), `sentence_bert_config.json`
//! (the sequence limit, `max_seq_len`), and the modules after the transformer (`modules`).
//!
//! Anything tandem would run differently from the folder's own library is refused here with
//! the file and the value found: another architecture, activation or position embedding.
//! Reading never touches the weights.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::family::{Family, RELATIVE_BUCKETS};
use super::modules::{HeadModules, read_head_modules, read_sparse_modules};
use super::spec::{EncoderConfig, first_position};
use crate::LoadError;
use crate::folder::{read_json, required};
use crate::text::pooling::Pooling;
use family_layers::FamilyLayers;
use max_seq_len::read_max_seq_len;

mod family_layers;
pub(crate) mod max_seq_len;

/// `config.json` as transformers writes it for BERT and RoBERTa, for DistilBERT under its
/// own names (`dim`, `n_layers`, ...) and for NomicBERT under GPT-2's (`n_embd`, `n_layer`,
/// ...); fields tandem does not need are ignored, those it needs have no defaults.
/// DistilBERT has no `layer_norm_eps`: its norms use BERT's default.
#[derive(Deserialize)]
struct BertJson {
    model_type: Option<String>,
    architectures: Option<Vec<String>>,
    vocab_size: usize,
    #[serde(alias = "dim", alias = "n_embd")]
    hidden_size: usize,
    #[serde(alias = "n_layers", alias = "n_layer")]
    num_hidden_layers: usize,
    #[serde(alias = "n_heads", alias = "n_head")]
    num_attention_heads: usize,
    #[serde(alias = "hidden_dim", alias = "n_inner")]
    intermediate_size: usize,
    #[serde(alias = "n_positions")]
    max_position_embeddings: usize,
    #[serde(default = "two")]
    type_vocab_size: usize,
    #[serde(default = "bert_eps")]
    layer_norm_eps: f64,
    #[serde(default = "gelu", alias = "activation")]
    hidden_act: String,
    #[serde(default = "absolute")]
    position_embedding_type: String,
    /// A classifier's label names by output index, as decimal strings.
    #[serde(default)]
    id2label: Option<BTreeMap<String, String>>,
    /// `"multi_label_classification"` for a classifier whose labels are scored each alone.
    #[serde(default)]
    problem_type: Option<String>,
    #[serde(default)]
    num_labels: Option<usize>,
    /// Transformers' default is 0 for BERT and 1 for RoBERTa.
    #[serde(default)]
    pad_token_id: Option<u32>,
    /// MPNet's; [`RELATIVE_BUCKETS`] is the only value served.
    #[serde(default)]
    relative_attention_num_buckets: Option<usize>,
}

/// The `model_type`s served, with their family.
const MODEL_TYPES: [(&str, Family); 8] = [
    ("bert", Family::Bert),
    ("distilbert", Family::DistilBert),
    ("modernbert", Family::ModernBert),
    ("mpnet", Family::Mpnet),
    // GTE's (`NewModel`, Alibaba's code beside its checkpoints).
    ("new", Family::Gte),
    ("nomic_bert", Family::NomicBert),
    ("roberta", Family::Roberta),
    ("xlm-roberta", Family::Roberta),
];

/// The `architectures` served: an encoder of embeddings, and a sequence classifier (a
/// cross-encoder, for reranking, is one with a single label) of each model type.
const ARCHITECTURES: [(&str, &str, Kind); 18] = [
    ("bert", "BertModel", Kind::Encoder),
    // A masked-language model is served as SPLADE reads it: a sparse encoder.
    ("bert", "BertForMaskedLM", Kind::Sparse),
    ("modernbert", "ModernBertModel", Kind::Encoder),
    // sentence-transformers reads a masked-language checkpoint's encoder, head left out.
    ("modernbert", "ModernBertForMaskedLM", Kind::Encoder),
    (
        "modernbert",
        "ModernBertForSequenceClassification",
        Kind::Classifier,
    ),
    ("bert", "BertForSequenceClassification", Kind::Classifier),
    ("distilbert", "DistilBertModel", Kind::Encoder),
    (
        "distilbert",
        "DistilBertForSequenceClassification",
        Kind::Classifier,
    ),
    ("mpnet", "MPNetModel", Kind::Encoder),
    ("mpnet", "MPNetForSequenceClassification", Kind::Classifier),
    ("nomic_bert", "NomicBertModel", Kind::Encoder),
    ("new", "NewModel", Kind::Encoder),
    // gte-multilingual-base's config names it beside NewModel, and its checkpoint holds
    // that token classifier's head; sentence-transformers runs NewModel and drops the head.
    ("new", "NewForTokenClassification", Kind::Encoder),
    ("new", "NewForSequenceClassification", Kind::Classifier),
    ("roberta", "RobertaModel", Kind::Encoder),
    (
        "roberta",
        "RobertaForSequenceClassification",
        Kind::Classifier,
    ),
    ("xlm-roberta", "XLMRobertaModel", Kind::Encoder),
    (
        "xlm-roberta",
        "XLMRobertaForSequenceClassification",
        Kind::Classifier,
    ),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Encoder,
    Classifier,
    Sparse,
}

const SERVED_MODEL_TYPES: &str = "the model types served are \"bert\", \"distilbert\", \"modernbert\", \"mpnet\", \
     \"new\" (GTE), \"nomic_bert\", \"qwen2\", \"qwen3\", \"gemma3_text\", \"roberta\" and \"xlm-roberta\"";

fn two() -> usize {
    2
}
fn bert_eps() -> f64 {
    1e-12
}
fn gelu() -> String {
    "gelu".into()
}
fn absolute() -> String {
    "absolute".into()
}

impl EncoderConfig {
    /// Reads and validates the configuration files of the folder `dir`: an encoder's, or a
    /// decoder's served as one (`crate::decoder::config`).
    pub fn read(dir: &Path) -> Result<EncoderConfig, LoadError> {
        let path = required(dir, "config.json")?;
        if let Some(arch) = crate::decoder::config::decoder_model_type(&path)? {
            return crate::decoder::config::read(dir, &path, arch);
        }
        let bert: BertJson = read_json(&path)?;
        let (family, kind) = check_architecture(&path, &bert)?;
        let labels = read_labels(&path, &bert, kind)?;
        let family_layers = FamilyLayers::read(&path, &bert, family, kind)?;
        let modern = family_layers.modern;
        let sparse = match kind {
            Kind::Sparse => Some(read_sparse_modules(dir)?),
            _ => None,
        };
        let modules = if sparse.is_some() {
            HeadModules {
                pooling: Pooling::Mean,
                dense: Vec::new(),
                normalize: false,
            }
        } else if labels.is_empty() {
            read_head_modules(dir, bert.hidden_size)?
        } else {
            // A classifier's head reads the first token's state; ModernBERT's may read the
            // mean (`classifier_pooling`).
            HeadModules {
                pooling: modern
                    .as_ref()
                    .map_or(Pooling::Cls, |m| m.classifier_pooling),
                dense: Vec::new(),
                normalize: false,
            }
        };
        let pad_token_id = match family {
            Family::Bert
            | Family::DistilBert
            | Family::ModernBert
            | Family::NomicBert
            | Family::Gte
            | Family::Qwen2
            | Family::Qwen3
            | Family::Gemma3 => bert.pad_token_id.unwrap_or(0),
            Family::Roberta => bert.pad_token_id.unwrap_or(1),
            // transformers' MPNetEmbeddings fixes its padding index at 1.
            Family::Mpnet => 1,
        };
        let positions = usable_positions(&path, &bert, family, pad_token_id)?;
        let max_seq_len = (read_max_seq_len(dir)?.min(positions))
            .min(family_layers.max_positions.unwrap_or(usize::MAX));
        Ok(EncoderConfig {
            family,
            pad_token_id,
            vocab_size: family_layers.vocab_size,
            hidden: bert.hidden_size,
            layers: bert.num_hidden_layers,
            heads: bert.num_attention_heads,
            intermediate: family_layers.intermediate,
            max_position_embeddings: bert.max_position_embeddings,
            type_vocab_size: family_layers.type_vocab_size,
            layer_norm_eps: family_layers.layer_norm_eps as f32,
            max_seq_len,
            pooling: modules.pooling,
            dense: modules.dense,
            normalize: modules.normalize,
            labels,
            multi_label: bert.problem_type.as_deref() == Some("multi_label_classification"),
            modern,
            sparse,
            decoder: None,
        })
    }
}

/// How many tokens a sequence may have for every position to have a row: a RoBERTa table's
/// first `pad_token_id + 1` rows are not positions of tokens.
fn usable_positions(
    path: &Path,
    bert: &BertJson,
    family: Family,
    pad_token_id: u32,
) -> Result<usize, LoadError> {
    match (bert.max_position_embeddings).checked_sub(first_position(family, pad_token_id)) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(LoadError::Config {
            path: path.to_path_buf(),
            reason: format!(
                "max_position_embeddings {} leaves no position after pad_token_id {pad_token_id}",
                bert.max_position_embeddings
            ),
        }),
    }
}

/// The family of the folder's `model_type`, and whether its `architectures` name an encoder
/// of embeddings (the default when none is named) or a classifier.
fn check_architecture(path: &Path, bert: &BertJson) -> Result<(Family, Kind), LoadError> {
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    let model_type = match bert.model_type.as_deref() {
        Some(t) => t,
        None => {
            return Err(unsupported(
                "a config.json without model_type".into(),
                SERVED_MODEL_TYPES,
            ));
        }
    };
    let Some(&(_, family)) = MODEL_TYPES.iter().find(|(t, _)| *t == model_type) else {
        return Err(unsupported(
            format!("model_type {model_type:?}"),
            SERVED_MODEL_TYPES,
        ));
    };
    let mut kind = Kind::Encoder;
    for name in bert.architectures.iter().flatten() {
        let served = ARCHITECTURES
            .iter()
            .find(|(t, a, _)| *t == model_type && a == name);
        match served {
            Some(&(_, _, k @ (Kind::Classifier | Kind::Sparse))) => kind = k,
            Some(_) => {}
            None => {
                return Err(unsupported(
                    format!("architecture {name:?} of model_type {model_type:?}"),
                    "each with its own model_type, the architectures served are: for \
                     embeddings BertModel, DistilBertModel, ModernBertModel, MPNetModel, \
                     NewModel (GTE), NomicBertModel, RobertaModel and XLMRobertaModel; for \
                     classifiers and rerankers the same but NomicBERT's with \
                     ForSequenceClassification for Model; for sparse embeddings (SPLADE) \
                     BertForMaskedLM",
                ));
            }
        }
    }
    if family == Family::Mpnet
        && let Some(n) = bert.relative_attention_num_buckets
        && n != RELATIVE_BUCKETS
    {
        return Err(unsupported(
            format!("relative_attention_num_buckets {n}"),
            "MPNet's relative attention is served with 32 buckets, as transformers runs it",
        ));
    }
    // GTE's activation and positions are its own keys, read with its layers.
    if family != Family::Gte {
        check_layers(path, bert)?;
    }
    check_dimensions(path, bert, family)?;
    Ok((family, kind))
}

fn check_layers(path: &Path, bert: &BertJson) -> Result<(), LoadError> {
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    if bert.hidden_act != "gelu" {
        return Err(unsupported(
            format!("hidden_act {:?}", bert.hidden_act),
            "only \"gelu\" (with the exact error function) is served",
        ));
    }
    if bert.position_embedding_type != "absolute" {
        return Err(unsupported(
            format!("position_embedding_type {:?}", bert.position_embedding_type),
            "only \"absolute\" position embeddings are served",
        ));
    }
    Ok(())
}

fn check_dimensions(path: &Path, bert: &BertJson, family: Family) -> Result<(), LoadError> {
    let invalid = |reason: String| LoadError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let sizes = [
        ("vocab_size", bert.vocab_size),
        ("hidden_size", bert.hidden_size),
        ("num_hidden_layers", bert.num_hidden_layers),
        ("num_attention_heads", bert.num_attention_heads),
        ("intermediate_size", bert.intermediate_size),
        ("max_position_embeddings", bert.max_position_embeddings),
        ("type_vocab_size", bert.type_vocab_size),
    ];
    // A GTE without token types reads no type ids.
    let may_be_zero = |name: &str| family == Family::Gte && name == "type_vocab_size";
    if let Some((name, _)) = sizes.iter().find(|(n, v)| *v == 0 && !may_be_zero(n)) {
        return Err(invalid(format!("{name} is 0, expected at least 1")));
    }
    if !bert.hidden_size.is_multiple_of(bert.num_attention_heads) {
        return Err(invalid(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            bert.hidden_size, bert.num_attention_heads
        )));
    }
    if !(bert.layer_norm_eps.is_finite() && bert.layer_norm_eps > 0.0) {
        return Err(invalid(format!(
            "layer_norm_eps is {}, expected a positive number",
            bert.layer_norm_eps
        )));
    }
    Ok(())
}

/// A classifier's labels in output order: `id2label` when it is given (its keys must be
/// 0 to n - 1), else `num_labels` as `LABEL_i`, else transformers' default of two. None
/// for an encoder of embeddings.
fn read_labels(path: &Path, bert: &BertJson, kind: Kind) -> Result<Vec<String>, LoadError> {
    if kind != Kind::Classifier {
        return Ok(Vec::new());
    }
    let invalid = |reason: String| LoadError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let labels = match &bert.id2label {
        Some(names) => {
            let mut labels = vec![None; names.len()];
            for (key, name) in names {
                let slot = key.parse::<usize>().ok().and_then(|i| labels.get_mut(i));
                match slot {
                    Some(slot) => *slot = Some(name.clone()),
                    None => {
                        return Err(invalid(format!(
                            "id2label key {key:?} is not an index from 0 to {}",
                            names.len() - 1
                        )));
                    }
                }
            }
            labels
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| invalid("id2label names an index twice".into()))?
        }
        None => (0..bert.num_labels.unwrap_or(2))
            .map(|i| format!("LABEL_{i}"))
            .collect(),
    };
    if labels.is_empty() {
        return Err(invalid("a classifier with no labels".into()));
    }
    if let Some(n) = bert.num_labels.filter(|n| *n != labels.len()) {
        return Err(invalid(format!(
            "num_labels is {n} but id2label names {}",
            labels.len()
        )));
    }
    Ok(labels)
}
