//! An encoder's weights read from its folder: `model.safetensors` by the family's form
//! (BERT's layers here; ModernBERT's, NomicBERT's and GTE's in their own modules), then the
//! Dense modules' from their folders beside it.

use std::path::Path;

use super::dense_module::DenseModule;
use super::family::{Family, RELATIVE_BUCKETS};
use super::spec::EncoderConfig;
use super::weights::{Dense, Embeddings, EncoderWeights, Found, parse, read_file};
use super::{gte, modern, nomic};
use crate::{LoadError, WeightData};

impl EncoderWeights {
    /// Reads and validates `path` against `config`, and the Dense modules `config` names
    /// from their folders beside it.
    pub fn read(path: &Path, config: &EncoderConfig) -> Result<EncoderWeights, LoadError> {
        let bytes = read_file(path)?;
        let tensors = parse(path, &bytes)?;
        let mut found = Found::index(path, &tensors, config)?;
        let decoder = match config.decoder {
            Some(_) => Some(crate::decoder::weights::read(&mut found, config)?),
            None => None,
        };
        let (embeddings, layers, modern, classifier) = match (config.family, &config.modern) {
            // A decoder's embeddings and layers are its own.
            _ if decoder.is_some() => (Embeddings::none(), Vec::new(), None, None),
            (Family::ModernBert, Some(params)) => {
                let (embeddings, modern, classifier) =
                    modern::read_weights(&mut found, config, params)?;
                (embeddings, Vec::new(), Some(modern), classifier)
            }
            (Family::NomicBert, Some(params)) => {
                let (embeddings, layers) = nomic::read_weights(&mut found, config, params)?;
                (embeddings, Vec::new(), Some(layers), None)
            }
            (Family::Gte, Some(_)) => {
                let (embeddings, layers) = gte::read_weights(&mut found, config)?;
                let classifier = match config.is_classifier() {
                    true => Some(found.classifier(config)?),
                    false => None,
                };
                (embeddings, Vec::new(), Some(layers), classifier)
            }
            (Family::ModernBert | Family::NomicBert | Family::Gte, None) => {
                return Err(LoadError::Inconsistent(
                    "a ModernBERT, NomicBERT or GTE configuration without its parameters".into(),
                ));
            }
            _ => {
                let layers = (0..config.layers)
                    .map(|i| found.layer(i, config))
                    .collect::<Result<Vec<_>, _>>()?;
                let classifier = match config.is_classifier() {
                    true => Some(found.classifier(config)?),
                    false => None,
                };
                (found.embeddings(config)?, layers, None, classifier)
            }
        };
        let masked_lm = match config.sparse {
            Some(_) => Some(found.masked_lm(config, &embeddings)?),
            None => None,
        };
        let relative_bias = match config.family {
            Family::Mpnet => Some(found.f32(
                "encoder.relative_attention_bias.weight",
                &[RELATIVE_BUCKETS, config.heads],
            )?),
            _ => None,
        };
        found.refuse_leftovers()?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let dense = (config.dense.iter())
            .map(|m| read_dense_module(dir, m))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EncoderWeights {
            embeddings,
            layers,
            classifier,
            masked_lm,
            relative_bias,
            modern,
            dense,
            decoder,
        })
    }
}

/// A Dense module's `linear.weight` `[out, in]` and, if it has one, `linear.bias`, from
/// `model.safetensors` in its folder; nothing else may be there.
fn read_dense_module(dir: &Path, m: &DenseModule) -> Result<Dense, LoadError> {
    let folder = dir.join(&m.path);
    let path = folder.join("model.safetensors");
    if !path.is_file() && folder.join("pytorch_model.bin").is_file() {
        return Err(LoadError::Unsupported {
            path: folder.join("pytorch_model.bin"),
            what: "a PyTorch pickle".into(),
            supported: "a Dense module's weights are read from model.safetensors only",
        });
    }
    let bytes = read_file(&path)?;
    let tensors = parse(&path, &bytes)?;
    let mut found = Found {
        path: path.clone(),
        tensors: tensors.iter().map(|(n, v)| (n.to_string(), v)).collect(),
    };
    let mut dense = found.linear("linear", m.in_features, m.out_features, m.bias)?;
    found.refuse_leftovers()?;
    dense.weight = WeightData::F32(dense.weight.to_f32());
    Ok(dense)
}
