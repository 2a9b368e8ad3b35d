//! The model versions being served right now. Handlers look a version up under a brief read
//! lock and keep its `Arc`; a version removed from here finishes the requests already
//! queued for it and then shuts down, so swapping versions fails no request.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use thiserror::Error;
use tokio::sync::mpsc;

use crate::batching::task::PolicyUpdate;
use crate::config::{ModelOverrides, ModelSettings};
use crate::infer::Core;
use crate::worker::ReplicaInfo;

/// A name or version that matches nothing loaded.
#[derive(Debug, Error)]
pub enum LookupError {
    #[error("unknown model {model:?}")]
    UnknownModel { model: String },
    #[error("model {model:?} has no loaded version {version:?} (loaded: {loaded})")]
    UnknownVersion {
        model: String,
        version: String,
        loaded: String,
    },
    /// TEI's routes serve the one text model loaded, and there is none.
    #[error("no text model is loaded")]
    NoTextModel,
}

/// A version's settings could not be switched now.
#[derive(Debug, Error)]
#[error("model {model:?} version {version} is busy applying earlier changes; retry")]
pub struct Busy {
    pub model: String,
    pub version: u64,
}

/// What a text model's requests need before they are queued: its tokenizer (shared by
/// every handler; tokenizing happens where requests are validated) and its limits.
pub struct TextModel {
    pub tokenizer: Arc<models::TextTokenizer>,
    pub input: models::TextInput,
    /// Texts put before a request's texts by name (`prompt_name`).
    pub prompts: models::encoder::Prompts,
}

/// One loaded, warmed-up model version and the way into its queue.
pub struct ModelVersion {
    pub name: String,
    pub version: u64,
    pub info: ReplicaInfo,
    /// Set for a text model.
    pub text: Option<TextModel>,
    /// The repository's `config.toml` for this model, as last applied to this version.
    pub repo_overrides: std::sync::Mutex<Option<ModelOverrides>>,
    pub settings: std::sync::Mutex<ModelSettings>,
    /// Admission, submission and the wait for answers.
    pub core: Core,
    /// Live settings changes, to the batcher.
    pub updates: mpsc::Sender<PolicyUpdate>,
    /// Triton's statistics extension: counts and times since this version loaded.
    pub stats: Arc<crate::stats::VersionStats>,
    /// When it was ready to serve: OpenAI's `created` for the model.
    pub loaded_at: std::time::SystemTime,
    /// The config.pbtxt it was loaded with (an ONNX model's, in Triton's layout).
    pub triton: Option<Arc<crate::triton::TritonConfig>>,
    /// Its share of the response cache, where the server has one.
    pub cache: Option<crate::cache::VersionCache>,
}

impl ModelVersion {
    /// Switches this version to `settings`: a new policy goes to its batcher, which takes
    /// it before its next batch.
    pub fn apply(&self, settings: ModelSettings) -> Result<(), Busy> {
        let (max_rows, max_outputs) = settings.batch_limits(&self.info.input);
        let policy = crate::batching::choice::for_settings(
            &settings,
            max_rows,
            &self.info.warmup,
            &self.info.input,
        );
        let update = PolicyUpdate {
            policy,
            queue_capacity: settings.queue_capacity,
            max_outputs,
            budget: settings.budget(),
        };
        self.updates.try_send(update).map_err(|_| Busy {
            model: self.name.clone(),
            version: self.version,
        })?;
        let caching = settings.cache;
        let was = std::mem::replace(
            &mut *self.settings.lock().unwrap_or_else(|p| p.into_inner()),
            settings,
        );
        // Answers kept while the cache was on would be found again, however stale, once it
        // is turned back on: they go now.
        if let Some(cache) = self.cache.as_ref().filter(|_| was.cache && !caching) {
            cache.clear();
        }
        Ok(())
    }

    pub fn repo_overrides(&self) -> Option<ModelOverrides> {
        self.repo_overrides
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Its share of the response cache, where the server has one, the model's settings
    /// turn it on and `policy` lets the request use it.
    pub fn cache_for(&self, policy: crate::cache::Policy) -> Option<&crate::cache::VersionCache> {
        let cache = self.cache.as_ref()?;
        let on = || {
            self.settings
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .cache
        };
        ((policy.lookup || policy.store) && on()).then_some(cache)
    }

    /// What validation reads of the model: its input, its first input's and output's names.
    pub fn signature(&self) -> crate::validate::Signature<'_> {
        let meta = &self.info.metadata;
        crate::validate::Signature {
            input: &self.info.input,
            input_name: meta.inputs.first().map_or("", |t| t.name.as_str()),
            output_name: meta.outputs.first().map_or("", |t| t.name.as_str()),
        }
    }

    pub fn settings(&self) -> ModelSettings {
        self.settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[derive(Default)]
pub struct Registry {
    models: RwLock<BTreeMap<String, BTreeMap<u64, Arc<ModelVersion>>>>,
    /// Settings changed through the admin API, per model: they outlive versions and config
    /// reloads until changed again.
    runtime: std::sync::Mutex<BTreeMap<String, ModelOverrides>>,
    /// The response cache every version loaded from now on gets a share of.
    cache: Option<Arc<crate::cache::ResponseCache>>,
}

impl Registry {
    pub fn with_cache(cache: Option<Arc<crate::cache::ResponseCache>>) -> Registry {
        Registry {
            cache,
            ..Registry::default()
        }
    }

    pub fn cache(&self) -> Option<Arc<crate::cache::ResponseCache>> {
        self.cache.clone()
    }

    fn read(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, BTreeMap<u64, Arc<ModelVersion>>>> {
        // A poisoned lock means a writer panicked between two map operations; the map
        // itself is still consistent.
        self.models.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, BTreeMap<u64, Arc<ModelVersion>>>> {
        self.models.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The named version, or the newest when `version` is `None`.
    pub fn resolve(
        &self,
        model: &str,
        version: Option<&str>,
    ) -> Result<Arc<ModelVersion>, LookupError> {
        let models = self.read();
        let unknown = || LookupError::UnknownModel {
            model: model.to_string(),
        };
        let versions = models.get(model).ok_or_else(unknown)?;
        match version {
            None => versions.values().next_back().cloned().ok_or_else(unknown),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .and_then(|n| versions.get(&n))
                .cloned()
                .ok_or_else(|| LookupError::UnknownVersion {
                    model: model.to_string(),
                    version: v.to_string(),
                    loaded: versions
                        .keys()
                        .map(|k| k.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                }),
        }
    }

    pub fn insert(&self, v: Arc<ModelVersion>) {
        self.write()
            .entry(v.name.clone())
            .or_default()
            .insert(v.version, v);
    }

    pub fn remove(&self, model: &str, version: u64) -> Option<Arc<ModelVersion>> {
        let mut models = self.write();
        let versions = models.get_mut(model)?;
        let removed = versions.remove(&version);
        if versions.is_empty() {
            models.remove(model);
        }
        removed
    }

    pub fn runtime_overrides(&self, model: &str) -> Option<ModelOverrides> {
        self.runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(model)
            .cloned()
    }

    /// Layers `change` over the model's earlier admin changes.
    pub fn set_runtime_overrides(&self, model: &str, change: &ModelOverrides) {
        let mut all = self.runtime.lock().unwrap_or_else(|p| p.into_inner());
        let entry = all.entry(model.to_string()).or_default();
        *entry = change.layered_on(entry);
    }

    pub fn model_names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    pub fn versions(&self, model: &str) -> Vec<u64> {
        self.read()
            .get(model)
            .map(|v| v.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Every loaded version, for listings and shutdown.
    pub fn all(&self) -> Vec<Arc<ModelVersion>> {
        self.read()
            .values()
            .flat_map(|v| v.values().cloned())
            .collect()
    }
}
