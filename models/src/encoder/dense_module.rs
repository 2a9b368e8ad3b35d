//! A sentence-transformers `Dense` module as its folder's `config.json` describes it: its
//! sizes, whether it has a bias, and its activation; what would move it off the sentence
//! embedding is refused. [`super::projection`] runs the modules.

use std::path::Path;

use serde::Deserialize;

use crate::LoadError;
use crate::folder::{read_json, required};

/// What follows a Dense module's product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseActivation {
    Identity,
    Tanh,
    Relu,
}

/// One Dense module, as its `config.json` describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseModule {
    /// Its folder, relative to the model's (`modules.json`'s `path`).
    pub path: String,
    pub in_features: usize,
    pub out_features: usize,
    /// Whether `model.safetensors` holds `linear.bias`.
    pub bias: bool,
    pub activation: DenseActivation,
}

/// `config.json` of a Dense module. Keys sentence-transformers would drop are ignored; the
/// ones that would move the module off the sentence embedding are read to refuse them.
#[derive(Deserialize)]
struct DenseJson {
    in_features: usize,
    out_features: usize,
    #[serde(default = "bias_default")]
    bias: bool,
    /// Absent: sentence-transformers' default, tanh; `null` is refused (sentence-transformers
    /// fails on it).
    #[serde(default, deserialize_with = "present")]
    activation_function: Option<Option<String>>,
    module_input_name: Option<String>,
    module_output_name: Option<String>,
    #[serde(default)]
    use_residual: bool,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

fn bias_default() -> bool {
    true
}

const SENTENCE_EMBEDDING: &str = "sentence_embedding";

impl DenseModule {
    /// Reads and checks the Dense module in `dir/path`.
    pub(super) fn read(dir: &Path, path: &str) -> Result<DenseModule, LoadError> {
        let file = required(&dir.join(path), "config.json")?;
        let json: DenseJson = read_json(&file)?;
        let unsupported = |what: String, supported| LoadError::Unsupported {
            path: file.clone(),
            what,
            supported,
        };
        let on_the_embedding =
            |name: &Option<String>| name.as_deref().is_none_or(|n| n == SENTENCE_EMBEDDING);
        if !on_the_embedding(&json.module_input_name) || !on_the_embedding(&json.module_output_name)
        {
            return Err(unsupported(
                format!(
                    "a Dense module from {:?} to {:?}",
                    json.module_input_name, json.module_output_name
                ),
                "Dense modules are served on the sentence embedding only",
            ));
        }
        if json.use_residual {
            return Err(unsupported(
                "use_residual: true".into(),
                "Dense modules are served without a residual connection",
            ));
        }
        if json.in_features == 0 || json.out_features == 0 {
            return Err(LoadError::Config {
                path: file,
                reason: "in_features and out_features must be at least 1".into(),
            });
        }
        let activation = match &json.activation_function {
            None => DenseActivation::Tanh,
            Some(name) => match name.as_deref() {
                Some("torch.nn.modules.activation.Tanh") => DenseActivation::Tanh,
                Some("torch.nn.modules.linear.Identity") => DenseActivation::Identity,
                Some("torch.nn.modules.activation.ReLU") => DenseActivation::Relu,
                other => {
                    let shown = other.map_or("null".into(), |n| format!("{n:?}"));
                    return Err(unsupported(
                        format!("activation_function {shown}"),
                        "a Dense module's activation is torch's Tanh, Identity or ReLU",
                    ));
                }
            },
        };
        Ok(DenseModule {
            path: path.to_string(),
            in_features: json.in_features,
            out_features: json.out_features,
            bias: json.bias,
            activation,
        })
    }
}
