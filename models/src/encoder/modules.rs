//! What follows the transformer of an encoder of embeddings, from `modules.json`: the
//! pooling (its `config.json`), any sentence-transformers Dense modules, and whether the
//! embeddings are normalised. Modules tandem would run differently, or in another order,
//! are refused with the file and the value.

use std::path::{Component, Path};

use serde::Deserialize;

use super::dense_module::DenseModule;
use crate::LoadError;
use crate::folder::read_json;
use crate::text::pooling::{Pooling, SparsePooling};

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
    /// sentence-transformers 6's: false leaves a prompt's tokens out of the pooling.
    include_prompt: Option<bool>,
}

/// Where the pooling module's configuration is when `modules.json` does not say.
const DEFAULT_POOLING_DIR: &str = "1_Pooling";
/// The package every sentence-transformers module's type is in.
const PACKAGE: &str = "sentence_transformers.";

/// A module's class: the last part of a sentence-transformers type, whichever module path
/// holds it (5's `sentence_transformers.models.Pooling`, 6's
/// `sentence_transformers.sentence_transformer.modules.pooling.Pooling`); another package's
/// type whole, to be refused.
fn class_name(kind: &str) -> &str {
    match kind.strip_prefix(PACKAGE) {
        Some(path) => path.rsplit('.').next().unwrap_or(path),
        None => kind,
    }
}

/// What follows the transformer of an encoder of embeddings.
pub(crate) struct HeadModules {
    pub(crate) pooling: Pooling,
    pub(crate) dense: Vec<DenseModule>,
    pub(crate) normalize: bool,
}

/// How an encoder of embeddings pools, projects and normalises, from its modules: the
/// pooling first, then any Dense modules (each taking the previous width), then Normalize,
/// the order sentence-transformers runs them in for every model tandem serves.
pub(crate) fn read_head_modules(dir: &Path, hidden: usize) -> Result<HeadModules, LoadError> {
    let modules = read_modules(dir)?;
    let order = |what: &str| LoadError::Unsupported {
        path: dir.join("modules.json"),
        what: format!("a {what}"),
        supported: "modules in the order Transformer, Pooling, Dense (any number), Normalize",
    };
    let kinds: Vec<&str> = modules.iter().map(|m| m.kind.as_str()).collect();
    let pooling_at = kinds.iter().position(|k| *k == "Pooling");
    let normalize_at = kinds.iter().position(|k| *k == "Normalize");
    for (i, kind) in kinds.iter().enumerate() {
        // sentence-transformers' Dense reads the pooled embedding, so a Pooling must come first.
        let after_pooling = pooling_at.is_some_and(|p| i > p);
        let before_normalize = normalize_at.is_none_or(|n| i < n);
        if *kind == "Dense" && !(after_pooling && before_normalize) {
            return Err(order(
                "Dense module without a Pooling before it, or after Normalize",
            ));
        }
        if *kind == "Normalize" && pooling_at.is_some_and(|p| i < p) {
            return Err(order("Normalize module before Pooling"));
        }
    }
    let pooling_dir = modules
        .iter()
        .find(|m| m.kind == "Pooling")
        .map_or(DEFAULT_POOLING_DIR, |m| m.path.as_str());
    let pooling_path = dir.join(pooling_dir).join("config.json");
    let (pooling, include_prompt) = read_pooling(&pooling_path)?;
    if !include_prompt && has_prompts(dir)? {
        return Err(LoadError::Unsupported {
            path: pooling_path,
            what: "include_prompt false with prompts".into(),
            supported: "pooling is served over every token, a prompt's included",
        });
    }
    let mut dense = Vec::new();
    let mut width = hidden;
    for m in modules.iter().filter(|m| m.kind == "Dense") {
        let module = DenseModule::read(dir, &m.path)?;
        if module.in_features != width {
            return Err(LoadError::Config {
                path: dir.join(&m.path).join("config.json"),
                reason: format!(
                    "in_features is {}, but the embedding has {width} values here",
                    module.in_features
                ),
            });
        }
        width = module.out_features;
        dense.push(module);
    }
    Ok(HeadModules {
        pooling,
        dense,
        normalize: normalize_at.is_some(),
    })
}

/// `SpladePooling`'s configuration; absent keys take sentence-transformers' defaults.
#[derive(Deserialize)]
struct SpladePoolingJson {
    #[serde(default = "max")]
    pooling_strategy: String,
    #[serde(default = "relu")]
    activation_function: String,
}

fn max() -> String {
    "max".into()
}
fn relu() -> String {
    "relu".into()
}

/// How a sparse encoder (a masked-language model read as SPLADE) pools, from
/// `modules.json`'s `MLMTransformer` and `SpladePooling` and the latter's configuration;
/// SPLADE's own (max of `log(1 + relu)`) for a folder without them, as TEI reads one.
pub(super) fn read_sparse_modules(dir: &Path) -> Result<SparsePooling, LoadError> {
    let path = dir.join("modules.json");
    let modules: Vec<ModuleJson> = match path.is_file() {
        true => read_json(&path)?,
        false => Vec::new(),
    };
    let mut pooling_dir = None;
    for m in &modules {
        let class = m.kind.strip_prefix(PACKAGE).map(|_| class_name(&m.kind));
        match class {
            Some("MLMTransformer" | "Transformer") => {}
            Some("SpladePooling") if inside(&m.path) => pooling_dir = Some(m.path.as_str()),
            _ => {
                return Err(LoadError::Unsupported {
                    path,
                    what: format!("module {:?} in a sparse encoder", m.kind),
                    supported: "a sparse encoder's modules served are MLMTransformer (or \
                                Transformer) and SpladePooling",
                });
            }
        }
    }
    let Some(folder) = pooling_dir else {
        return Ok(SparsePooling::Max);
    };
    let config = dir.join(folder).join("config.json");
    let p: SpladePoolingJson = match config.is_file() {
        true => read_json(&config)?,
        false => return Ok(SparsePooling::Max),
    };
    let unsupported = |what: String, supported| LoadError::Unsupported {
        path: config.clone(),
        what,
        supported,
    };
    if p.activation_function != "relu" {
        return Err(unsupported(
            format!("activation_function {:?}", p.activation_function),
            "SpladePooling is served with relu (log(1 + relu) of each logit)",
        ));
    }
    match p.pooling_strategy.as_str() {
        "max" => Ok(SparsePooling::Max),
        "sum" => Ok(SparsePooling::Sum),
        other => Err(unsupported(
            format!("pooling_strategy {other:?}"),
            "SpladePooling's max and sum are served",
        )),
    }
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
        let short = class_name(&m.kind);
        if !matches!(short, "Transformer" | "Pooling" | "Dense" | "Normalize") {
            return Err(LoadError::Unsupported {
                path,
                what: format!("module {:?}", m.kind),
                supported: "the modules served are Transformer, Pooling, Dense and Normalize",
            });
        }
        if !inside(&m.path) {
            return Err(LoadError::Config {
                path,
                reason: format!(
                    "module path {:?} is not a folder inside the model's",
                    m.path
                ),
            });
        }
        kinds.push(ModuleJson {
            kind: short.to_string(),
            path: m.path,
        });
    }
    Ok(kinds)
}

/// Whether a module's `path` names a folder inside the model's.
fn inside(path: &str) -> bool {
    Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The pooling mode, and whether a prompt's tokens are pooled; mean, with them, when the
/// folder has no pooling configuration.
fn read_pooling(path: &Path) -> Result<(Pooling, bool), LoadError> {
    if !path.is_file() {
        return Ok((Pooling::Mean, true));
    }
    let p: PoolingJson = read_json(path)?;
    let include_prompt = p.include_prompt.unwrap_or(true);
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
        ["mean"] => Ok((Pooling::Mean, include_prompt)),
        ["cls"] => Ok((Pooling::Cls, include_prompt)),
        ["lasttoken"] => Ok((Pooling::LastToken, include_prompt)),
        _ => Err(LoadError::Unsupported {
            path: path.to_path_buf(),
            what: format!("pooling {}", describe_modes(&modes)),
            supported: "exactly one of mean, cls and lasttoken pooling is served",
        }),
    }
}

/// Whether the folder has a prompt that is not empty.
fn has_prompts(dir: &Path) -> Result<bool, LoadError> {
    let prompts = crate::text::prompts::Prompts::read(dir)?;
    Ok(prompts.names().any(|name| {
        prompts
            .text(Some(name))
            .ok()
            .flatten()
            .is_some_and(|t| !t.is_empty())
    }))
}

fn describe_modes(modes: &[&str]) -> String {
    if modes.is_empty() {
        "with no mode set".into()
    } else {
        modes.join(" + ")
    }
}
