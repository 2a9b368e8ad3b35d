//! What a sentence-transformers folder says about its encoder: `config.json` (the BERT
//! architecture), `sentence_bert_config.json` (the sequence limit), `modules.json` (which
//! modules follow the transformer) and the pooling module's `config.json`.
//!
//! Anything tandem would run differently from the folder's own library is refused here with
//! the file and the value found: another architecture, activation, position embedding,
//! pooling mode or module. Reading never touches the weights.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::LoadError;

/// How token states become one vector per sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token of the sequence, special tokens included.
    Mean,
    /// The state of the first token (`[CLS]`).
    Cls,
}

/// A validated encoder configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f32,
    /// The longest sequence served, in tokens (special ones included).
    pub max_seq_len: usize,
    pub pooling: Pooling,
    /// Whether the folder's modules end with `Normalize`.
    pub normalize: bool,
    /// A sequence classifier's labels in output order (`id2label`); empty for an encoder
    /// of embeddings. A classifier's head reads the `[CLS]` state, so its pooling is `Cls`.
    pub labels: Vec<String>,
    /// A classifier whose labels are independent (`problem_type`
    /// `"multi_label_classification"`): each is scored by its own sigmoid, not a softmax.
    pub multi_label: bool,
}

/// `config.json` as transformers writes it for BERT; fields tandem does not need are
/// ignored, those it needs have no defaults.
#[derive(Deserialize)]
struct BertJson {
    model_type: Option<String>,
    architectures: Option<Vec<String>>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "two")]
    type_vocab_size: usize,
    #[serde(default = "bert_eps")]
    layer_norm_eps: f64,
    #[serde(default = "gelu")]
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
}

/// `architectures` for an encoder of embeddings and for a sequence classifier (a
/// cross-encoder, for reranking, is one with a single label).
const ENCODER: &str = "BertModel";
const CLASSIFIER: &str = "BertForSequenceClassification";

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

#[derive(Deserialize)]
struct SentenceJson {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct ModuleJson {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

/// The pooling module's flags, old and new spellings; absent flags are off.
#[derive(Deserialize, Default)]
#[serde(default)]
struct PoolingJson {
    pooling_mode: Option<String>,
    pooling_mode_cls_token: bool,
    pooling_mode_mean_tokens: bool,
    pooling_mode_max_tokens: bool,
    pooling_mode_mean_sqrt_len_tokens: bool,
    pooling_mode_weightedmean_tokens: bool,
    pooling_mode_lasttoken: bool,
}

/// Where the pooling module's configuration is when `modules.json` does not say.
const DEFAULT_POOLING_DIR: &str = "1_Pooling";
/// BERT's own limit when `sentence_bert_config.json` gives none.
const DEFAULT_MAX_SEQ_LEN: usize = 512;

const MODULE_PREFIX: &str = "sentence_transformers.models.";

impl EncoderConfig {
    /// Reads and validates the configuration files of the folder `dir`.
    pub fn read(dir: &Path) -> Result<EncoderConfig, LoadError> {
        let path = required(dir, "config.json")?;
        let bert: BertJson = read_json(&path)?;
        check_architecture(&path, &bert)?;
        let labels = read_labels(&path, &bert)?;
        let (pooling, normalize) = if labels.is_empty() {
            read_head_modules(dir)?
        } else {
            (Pooling::Cls, false)
        };
        let max_seq_len = read_max_seq_len(dir)?.min(bert.max_position_embeddings);
        Ok(EncoderConfig {
            vocab_size: bert.vocab_size,
            hidden: bert.hidden_size,
            layers: bert.num_hidden_layers,
            heads: bert.num_attention_heads,
            intermediate: bert.intermediate_size,
            max_position_embeddings: bert.max_position_embeddings,
            type_vocab_size: bert.type_vocab_size,
            layer_norm_eps: bert.layer_norm_eps as f32,
            max_seq_len,
            pooling,
            normalize,
            labels,
            multi_label: bert.problem_type.as_deref() == Some("multi_label_classification"),
        })
    }

    /// Whether it is a sequence classifier rather than an encoder of embeddings.
    pub fn is_classifier(&self) -> bool {
        !self.labels.is_empty()
    }

    /// Values per head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// `dir/file`, or an error naming it when it is absent.
pub(crate) fn required(dir: &Path, file: &str) -> Result<PathBuf, LoadError> {
    let path = dir.join(file);
    if path.is_file() {
        Ok(path)
    } else {
        Err(LoadError::MissingFile { path })
    }
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| LoadError::Config {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn check_architecture(path: &Path, bert: &BertJson) -> Result<(), LoadError> {
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: path.to_path_buf(),
        what,
        supported,
    };
    match bert.model_type.as_deref() {
        Some("bert") => {}
        Some(other) => {
            return Err(unsupported(
                format!("model_type {other:?}"),
                "only BERT encoders are served: model_type \"bert\"",
            ));
        }
        None => {
            return Err(unsupported(
                "a config.json without model_type".into(),
                "only BERT encoders are served: model_type \"bert\"",
            ));
        }
    }
    if let Some(other) = bert
        .architectures
        .iter()
        .flatten()
        .find(|a| !matches!(a.as_str(), ENCODER | CLASSIFIER))
    {
        return Err(unsupported(
            format!("architecture {other:?}"),
            "the architectures served are \"BertModel\" (embeddings) and \
             \"BertForSequenceClassification\" (classifiers and rerankers)",
        ));
    }
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
    check_dimensions(path, bert)
}

fn check_dimensions(path: &Path, bert: &BertJson) -> Result<(), LoadError> {
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
    if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
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

/// How an encoder of embeddings pools and whether it normalises, from its modules.
fn read_head_modules(dir: &Path) -> Result<(Pooling, bool), LoadError> {
    let modules = read_modules(dir)?;
    let pooling_dir = modules
        .iter()
        .find(|m| m.kind == "Pooling")
        .map_or(DEFAULT_POOLING_DIR, |m| m.path.as_str());
    let pooling = read_pooling(&dir.join(pooling_dir).join("config.json"))?;
    Ok((pooling, modules.iter().any(|m| m.kind == "Normalize")))
}

/// A classifier's labels in output order: `id2label` when it is given (its keys must be
/// 0 to n - 1), else `num_labels` as `LABEL_i`, else transformers' default of two. None
/// for an encoder of embeddings.
fn read_labels(path: &Path, bert: &BertJson) -> Result<Vec<String>, LoadError> {
    let classifier = bert.architectures.iter().flatten().any(|a| a == CLASSIFIER);
    if !classifier {
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

/// The modules after the transformer, from `modules.json`; none when the file is absent
/// (a plain transformers folder: mean pooling, no normalisation).
fn read_modules(dir: &Path) -> Result<Vec<ModuleJson>, LoadError> {
    let path = dir.join("modules.json");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let modules: Vec<ModuleJson> = read_json(&path)?;
    let mut kinds = Vec::with_capacity(modules.len());
    for m in modules {
        let short = m.kind.strip_prefix(MODULE_PREFIX).unwrap_or(&m.kind);
        if !matches!(short, "Transformer" | "Pooling" | "Normalize") {
            return Err(LoadError::Unsupported {
                path,
                what: format!("module {:?}", m.kind),
                supported: "the modules served are Transformer, Pooling and Normalize",
            });
        }
        kinds.push(ModuleJson {
            kind: short.to_string(),
            path: m.path,
        });
    }
    Ok(kinds)
}

/// The pooling mode; mean when the folder has no pooling configuration.
fn read_pooling(path: &Path) -> Result<Pooling, LoadError> {
    if !path.is_file() {
        return Ok(Pooling::Mean);
    }
    let p: PoolingJson = read_json(path)?;
    let mut modes: Vec<&str> = [
        (p.pooling_mode_cls_token, "cls"),
        (p.pooling_mode_mean_tokens, "mean"),
        (p.pooling_mode_max_tokens, "max"),
        (p.pooling_mode_mean_sqrt_len_tokens, "mean_sqrt_len_tokens"),
        (p.pooling_mode_weightedmean_tokens, "weightedmean"),
        (p.pooling_mode_lasttoken, "lasttoken"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if let Some(mode) = p.pooling_mode.as_deref()
        && !modes.contains(&mode)
    {
        modes.push(mode);
    }
    match modes.as_slice() {
        ["mean"] => Ok(Pooling::Mean),
        ["cls"] => Ok(Pooling::Cls),
        _ => Err(LoadError::Unsupported {
            path: path.to_path_buf(),
            what: format!("pooling {}", describe_modes(&modes)),
            supported: "exactly one of mean and cls pooling is served",
        }),
    }
}

fn describe_modes(modes: &[&str]) -> String {
    if modes.is_empty() {
        "with no mode set".into()
    } else {
        modes.join(" + ")
    }
}

fn read_max_seq_len(dir: &Path) -> Result<usize, LoadError> {
    let path = dir.join("sentence_bert_config.json");
    if !path.is_file() {
        return Ok(DEFAULT_MAX_SEQ_LEN);
    }
    let s: SentenceJson = read_json(&path)?;
    match s.max_seq_length {
        Some(0) => Err(LoadError::Config {
            path,
            reason: "max_seq_length is 0, expected at least 1".into(),
        }),
        Some(n) => Ok(n),
        None => Ok(DEFAULT_MAX_SEQ_LEN),
    }
}
