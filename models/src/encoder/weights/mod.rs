//! The weights of a BERT, DistilBERT, MPNet or RoBERTa encoder from `model.safetensors`,
//! validated against its config.
//!
//! Names may carry the family's prefix, `bert.`, `distilbert.`, `mpnet.` or `roberta.` (a
//! checkpoint saved from a task model), or not (a bare `BertModel`); LayerNorm parameters may be
//! spelled `gamma`/`beta` as in old checkpoints. Every tensor the config implies must be
//! present with exactly its shape; anything else is refused by name, except the position
//! ids buffer, and a pooler the model does not use (an encoder of embeddings', or any
//! RoBERTa's). A sequence classifier's head (BERT's `pooler.dense` then `classifier`,
//! RoBERTa's `classifier.dense` then `classifier.out_proj`, DistilBERT's `pre_classifier`
//! then `classifier`: the same two layers) is read whole and widened to f32: it runs on
//! the host. DistilBERT and MPNet have no token types: their table is zeros. MPNet's
//! relative attention bias (`encoder.relative_attention_bias.weight`, a row per bucket and
//! a column per head) is read as f32. Matrices keep their stored precision
//! (f32, f16 or bf16) for the device to lay out; embeddings, biases and norms are widened
//! to f32. A sentence-transformers Dense module's weights are read from its own folder and
//! widened to f32.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

use super::family::Family;
use super::spec::EncoderConfig;
use crate::checkpoint::{check_finite, decode_weight};
pub use crate::dense::Dense;
pub(crate) use crate::dense::{packed, packed_for, stack};
use crate::{LoadError, WeightData};
use names::{canonical_name, is_ignored};

mod names;

/// A layer norm's scale and shift.
#[derive(Clone, Debug, PartialEq)]
pub struct Norm {
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
}

/// One transformer layer. Query, key and value are one matrix `[3 * hidden, hidden]`
/// (queries, then keys, then values), so a single product makes all three.
#[derive(Clone, Debug, PartialEq)]
pub struct BertLayer {
    pub qkv: Dense,
    pub attention_out: Dense,
    pub attention_norm: Norm,
    pub ffn_up: Dense,
    pub ffn_down: Dense,
    pub ffn_norm: Norm,
}

/// The embedding tables (`[rows, hidden]`, f32) and their layer norm.
#[derive(Clone, Debug, PartialEq)]
pub struct Embeddings {
    pub word: Vec<f32>,
    pub position: Vec<f32>,
    pub token_type: Vec<f32>,
    pub norm: Norm,
}

impl Embeddings {
    /// The tables of a model that keeps its own (a decoder's).
    pub fn none() -> Embeddings {
        Embeddings {
            word: Vec::new(),
            position: Vec::new(),
            token_type: Vec::new(),
            norm: Norm {
                gamma: Vec::new(),
                beta: Vec::new(),
            },
        }
    }
}

/// A sequence classifier's head: `activation(pooler · cls + b)`, then `classifier` to
/// logits. RoBERTa's `classifier.dense` and `classifier.out_proj`, and DistilBERT's
/// `pre_classifier` and `classifier`, are these two layers.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassifierWeights {
    pub pooler: Dense,
    pub activation: HeadActivation,
    /// ModernBERT's layer norm after the activation (no bias).
    pub norm: Option<Norm>,
    pub classifier: Dense,
}

/// BERT's masked-language head (`cls.predictions`), which a sparse encoder reads: `transform`
/// (hidden to hidden, GELU), its layer norm, then `decoder` (hidden to a logit a vocabulary
/// entry; its weight is the word embeddings' where the checkpoint ties them), widened to
/// f32: it runs on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskedLmWeights {
    pub transform: Dense,
    pub norm: Norm,
    pub decoder: Dense,
}

/// The activation between a classifier head's two layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadActivation {
    /// BERT's and RoBERTa's.
    Tanh,
    /// DistilBERT's.
    Relu,
    /// ModernBERT's (with the exact error function).
    Gelu,
}

/// Where a family keeps a layer's tensors: under `{prefix}.{i}.`, then each name.
struct LayerNames {
    prefix: &'static str,
    query: &'static str,
    key: &'static str,
    value: &'static str,
    attention_out: &'static str,
    attention_norm: &'static str,
    ffn_up: &'static str,
    ffn_down: &'static str,
    ffn_norm: &'static str,
}

const BERT_LAYER: LayerNames = LayerNames {
    prefix: "encoder.layer",
    query: "attention.self.query",
    key: "attention.self.key",
    value: "attention.self.value",
    attention_out: "attention.output.dense",
    attention_norm: "attention.output.LayerNorm",
    ffn_up: "intermediate.dense",
    ffn_down: "output.dense",
    ffn_norm: "output.LayerNorm",
};

const MPNET_LAYER: LayerNames = LayerNames {
    prefix: "encoder.layer",
    query: "attention.attn.q",
    key: "attention.attn.k",
    value: "attention.attn.v",
    attention_out: "attention.attn.o",
    attention_norm: "attention.LayerNorm",
    ffn_up: "intermediate.dense",
    ffn_down: "output.dense",
    ffn_norm: "output.LayerNorm",
};

const DISTILBERT_LAYER: LayerNames = LayerNames {
    prefix: "transformer.layer",
    query: "attention.q_lin",
    key: "attention.k_lin",
    value: "attention.v_lin",
    attention_out: "attention.out_lin",
    attention_norm: "sa_layer_norm",
    ffn_up: "ffn.lin1",
    ffn_down: "ffn.lin2",
    ffn_norm: "output_layer_norm",
};

fn layer_names(family: Family) -> &'static LayerNames {
    match family {
        Family::Bert | Family::Roberta => &BERT_LAYER,
        Family::DistilBert => &DISTILBERT_LAYER,
        Family::Mpnet => &MPNET_LAYER,
        // `EncoderWeights::read` reads these layers with `modern`, `nomic`, `gte` and
        // `crate::decoder`.
        Family::ModernBert
        | Family::NomicBert
        | Family::Gte
        | Family::Qwen2
        | Family::Qwen3
        | Family::Gemma3 => {
            unreachable!("these layers are not BERT's")
        }
    }
}

/// A ModernBERT layer's weights: `x += Wo·attention(rotary(Wqkv·norm(x)))`, then
/// `x += Wo·(gelu(a) ⊙ g)` with `[a, g] = Wi·norm(x)`. No biases: they are zeros. A
/// NomicBERT layer's are the same matrices (with biases where its config says), its norms
/// applied after each sum instead ([`NormPlacement::After`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ModernLayer {
    /// Before attention: None in ModernBERT's first layer, whose attention reads the
    /// normalised embeddings as they are. After it: NomicBERT's `norm1`.
    pub attention_norm: Option<Norm>,
    /// `[3 · hidden, hidden]`: queries, keys, values.
    pub qkv: Dense,
    pub attention_out: Dense,
    pub mlp_norm: Norm,
    /// `[2 · intermediate, hidden]`: the half through the gate's activation, then the half
    /// it multiplies.
    pub mlp_in: Dense,
    pub mlp_out: Dense,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModernWeights {
    pub layers: Vec<ModernLayer>,
    /// ModernBERT's; NomicBERT has none.
    pub final_norm: Option<Norm>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EncoderWeights {
    pub embeddings: Embeddings,
    pub layers: Vec<BertLayer>,
    /// Set for a classifier.
    pub classifier: Option<ClassifierWeights>,
    /// Set for a sparse encoder.
    pub masked_lm: Option<MaskedLmWeights>,
    /// MPNet's attention bias by relative position: `[buckets, heads]`.
    pub relative_bias: Option<Vec<f32>>,
    /// ModernBERT's, NomicBERT's or GTE's layers and final norm (its `layers` above are
    /// empty, and its embeddings have no position table; ModernBERT's no token type table
    /// either).
    pub modern: Option<ModernWeights>,
    /// The Dense modules after pooling (`config.dense`), widened to f32: they run on the
    /// host.
    pub dense: Vec<Dense>,
    /// A decoder's layers (its `embeddings` and `layers` above are empty).
    pub decoder: Option<crate::decoder::DecoderWeights>,
}

pub(super) fn read_file(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => LoadError::MissingFile {
            path: path.to_path_buf(),
        },
        _ => LoadError::Io {
            path: path.to_path_buf(),
            source,
        },
    })
}

pub(super) fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<SafeTensors<'a>, LoadError> {
    SafeTensors::deserialize(bytes).map_err(|e| LoadError::Format {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The file's tensors by canonical name, taken out as the encoder asks for them.
pub(crate) struct Found<'a> {
    pub(super) path: PathBuf,
    pub(super) tensors: HashMap<String, TensorView<'a>>,
}

impl<'a> Found<'a> {
    pub(super) fn index(
        path: &Path,
        file: &'a SafeTensors<'a>,
        config: &EncoderConfig,
    ) -> Result<Found<'a>, LoadError> {
        let prefix = config.family.prefix();
        let mut tensors = HashMap::new();
        for (name, view) in file.iter() {
            let canonical = canonical_name(name, prefix);
            if is_ignored(&canonical, config) {
                continue;
            }
            if tensors.insert(canonical.clone(), view).is_some() {
                return Err(LoadError::Format {
                    path: path.to_path_buf(),
                    reason: format!("tensor {canonical} appears twice (with and without {prefix})"),
                });
            }
        }
        Ok(Found {
            path: path.to_path_buf(),
            tensors,
        })
    }

    /// The tensor `name`, checked to have `shape`.
    pub(crate) fn take(
        &mut self,
        name: &str,
        shape: &[usize],
    ) -> Result<TensorView<'a>, LoadError> {
        let view = self
            .tensors
            .remove(name)
            .ok_or_else(|| LoadError::MissingEncoderTensor {
                path: self.path.clone(),
                name: name.to_string(),
                expected: format!("expected shape {shape:?} from config.json"),
            })?;
        if view.shape() != shape {
            return Err(LoadError::Shape {
                name: name.to_string(),
                expected: format!("{shape:?} from config.json"),
                given: view.shape().to_vec(),
            });
        }
        Ok(view)
    }

    /// A tensor widened to f32.
    pub(crate) fn f32(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        let view = self.take(name, shape)?;
        let values = decode_weight(name, &view)?.to_f32();
        check_finite(name, &values)?;
        Ok(values)
    }

    pub(super) fn norm(&mut self, prefix: &str, hidden: usize) -> Result<Norm, LoadError> {
        Ok(Norm {
            gamma: self.f32(&format!("{prefix}.weight"), &[hidden])?,
            beta: self.f32(&format!("{prefix}.bias"), &[hidden])?,
        })
    }

    pub(super) fn dense(
        &mut self,
        prefix: &str,
        inputs: usize,
        outputs: usize,
    ) -> Result<Dense, LoadError> {
        self.linear(prefix, inputs, outputs, true)
    }

    /// `{prefix}.weight` `[outputs, inputs]`, and `{prefix}.bias` if `bias` (else zeros).
    pub(crate) fn linear(
        &mut self,
        prefix: &str,
        inputs: usize,
        outputs: usize,
        bias: bool,
    ) -> Result<Dense, LoadError> {
        let name = format!("{prefix}.weight");
        let view = self.take(&name, &[outputs, inputs])?;
        let weight = decode_weight(&name, &view)?;
        check_finite(&name, &weight.to_f32())?;
        Ok(Dense {
            inputs,
            outputs,
            weight,
            bias: match bias {
                true => self.f32(&format!("{prefix}.bias"), &[outputs])?,
                false => vec![0.0; outputs],
            },
        })
    }

    pub(super) fn embeddings(&mut self, c: &EncoderConfig) -> Result<Embeddings, LoadError> {
        let h = c.hidden;
        Ok(Embeddings {
            word: self.f32("embeddings.word_embeddings.weight", &[c.vocab_size, h])?,
            position: self.f32(
                "embeddings.position_embeddings.weight",
                &[c.max_position_embeddings, h],
            )?,
            token_type: match c.family.has_token_types() {
                true => self.f32(
                    "embeddings.token_type_embeddings.weight",
                    &[c.type_vocab_size, h],
                )?,
                false => vec![0.0; c.type_vocab_size * h],
            },
            norm: self.norm("embeddings.LayerNorm", h)?,
        })
    }

    pub(super) fn layer(&mut self, i: usize, c: &EncoderConfig) -> Result<BertLayer, LoadError> {
        let (h, inter) = (c.hidden, c.intermediate);
        let n = layer_names(c.family);
        let name = |part: &str| format!("{}.{i}.{part}", n.prefix);
        let q = self.dense(&name(n.query), h, h)?;
        let k = self.dense(&name(n.key), h, h)?;
        let v = self.dense(&name(n.value), h, h)?;
        Ok(BertLayer {
            qkv: stack(&[q, k, v]),
            attention_out: self.dense(&name(n.attention_out), h, h)?,
            attention_norm: self.norm(&name(n.attention_norm), h)?,
            ffn_up: self.dense(&name(n.ffn_up), h, inter)?,
            ffn_down: self.dense(&name(n.ffn_down), inter, h)?,
            ffn_norm: self.norm(&name(n.ffn_norm), h)?,
        })
    }

    pub(super) fn classifier(&mut self, c: &EncoderConfig) -> Result<ClassifierWeights, LoadError> {
        let h = c.hidden;
        let widened = |mut d: Dense| {
            d.weight = WeightData::F32(d.weight.to_f32());
            d
        };
        let (pooler, activation, classifier) = match c.family {
            // GTE's `NewForSequenceClassification` is BERT's head under `new.`.
            Family::Bert | Family::Gte => ("pooler.dense", HeadActivation::Tanh, "classifier"),
            Family::Roberta | Family::Mpnet => (
                "classifier.dense",
                HeadActivation::Tanh,
                "classifier.out_proj",
            ),
            Family::DistilBert => ("pre_classifier", HeadActivation::Relu, "classifier"),
            // `EncoderWeights::read` reads ModernBERT's head with `modern::read_weights`;
            // NomicBERT and the decoders are served as encoders of embeddings only.
            Family::ModernBert
            | Family::NomicBert
            | Family::Qwen2
            | Family::Qwen3
            | Family::Gemma3 => {
                unreachable!("this head is not BERT's")
            }
        };
        Ok(ClassifierWeights {
            pooler: widened(self.dense(pooler, h, h)?),
            activation,
            norm: None,
            classifier: widened(self.dense(classifier, h, c.labels.len())?),
        })
    }

    /// BERT's masked-language head. Its decoder's weight is the word embeddings' unless the
    /// checkpoint stores its own; its bias is `cls.predictions.bias`, which transformers
    /// ties to `cls.predictions.decoder.bias` (a checkpoint may store both, equal).
    pub(super) fn masked_lm(
        &mut self,
        c: &EncoderConfig,
        embeddings: &Embeddings,
    ) -> Result<MaskedLmWeights, LoadError> {
        let (h, vocab) = (c.hidden, c.vocab_size);
        let widened = |mut d: Dense| {
            d.weight = WeightData::F32(d.weight.to_f32());
            d
        };
        let transform = widened(self.dense("cls.predictions.transform.dense", h, h)?);
        let norm = self.norm("cls.predictions.transform.LayerNorm", h)?;
        let bias = self.f32("cls.predictions.bias", &[vocab])?;
        let weight = match self.tensors.contains_key("cls.predictions.decoder.weight") {
            true => self.f32("cls.predictions.decoder.weight", &[vocab, h])?,
            false => embeddings.word.clone(),
        };
        if self.tensors.contains_key("cls.predictions.decoder.bias") {
            let tied = self.f32("cls.predictions.decoder.bias", &[vocab])?;
            if tied != bias {
                return Err(LoadError::Format {
                    path: self.path.clone(),
                    reason: "cls.predictions.decoder.bias differs from cls.predictions.bias, \
                             which transformers ties it to"
                        .into(),
                });
            }
        }
        Ok(MaskedLmWeights {
            transform,
            norm,
            decoder: Dense {
                inputs: h,
                outputs: vocab,
                weight: WeightData::F32(weight),
                bias,
            },
        })
    }

    /// Refuses the first tensor (in name order) that nothing asked for.
    pub(super) fn refuse_leftovers(self) -> Result<(), LoadError> {
        match self.tensors.into_keys().min() {
            Some(name) => Err(LoadError::UnexpectedEncoderTensor {
                path: self.path,
                name,
            }),
            None => Ok(()),
        }
    }
}
