//! The model repository, Triton-style: `DIR/<model>/<version>/model.safetensors` (or
//! `model.onnx`, with an optional `DIR/<model>/config.pbtxt` of Triton's settings), with an
//! optional `DIR/<model>/config.toml` of tandem's. A watcher rescans it on an interval:
//! new versions are loaded and warmed up before they take traffic, versions beyond the
//! newest `keep_versions` (or gone from disk, or outside a config.pbtxt's version_policy)
//! are unloaded, and a version that fails to load is logged and not retried until its file
//! or its config.pbtxt changes — the previous version keeps serving.
//! A model the operator unloads through the repository API ([`crate::lifecycle::repository_control`])
//! is held out, new versions included, until it is loaded again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::batching::BusyMeter;
use crate::config::{Config, ModelOverrides};
use crate::lifecycle::loader::{self, LoadSpec};
use crate::lifecycle::registry::Registry;
use crate::lifecycle::repository_control::{IndexEntry, RepositoryControl, VersionState};

pub const MODEL_FILE: &str = "model.safetensors";

/// What one scan found for a model.
#[derive(Debug, Default, PartialEq)]
pub struct RepoModel {
    pub versions: BTreeMap<u64, PathBuf>,
    pub overrides: Option<ModelOverrides>,
    /// A `config.toml` is there but cannot be read as settings (perhaps half written):
    /// loaded versions keep the settings they have.
    pub config_invalid: bool,
    /// Its config.pbtxt (Triton's layout), read and mapped onto `overrides` beneath any
    /// `config.toml`.
    pub triton: Option<std::sync::Arc<crate::triton::TritonConfig>>,
    /// Why its config.pbtxt cannot be used: its versions fail to load with this reason.
    pub triton_error: Option<String>,
}

/// Lists models and versions. Unreadable entries are skipped; a bad `config.toml` is logged
/// and ignored.
pub fn scan(root: &Path) -> std::io::Result<BTreeMap<String, RepoModel>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root)?.flatten() {
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if name.starts_with('.') || !path.is_dir() {
            continue;
        }
        let mut model = RepoModel::default();
        read_triton_config(&path, &mut model);
        let model_file = model
            .triton
            .as_ref()
            .map_or("model.onnx", |t| t.model_file())
            .to_string();
        let Ok(versions) = std::fs::read_dir(&path) else {
            continue;
        };
        for v in versions.flatten() {
            let vpath = v.path();
            let Some(number) = vpath
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(version_number)
            else {
                continue;
            };
            let file = [vpath.join(MODEL_FILE), vpath.join(&model_file)]
                .into_iter()
                .find(|f| f.is_file());
            if let Some(file) = file.filter(|_| number > 0) {
                model.versions.insert(number, file);
            }
        }
        if let Some(t) = &model.triton {
            apply_version_policy(&t.config, &mut model.versions);
        }
        let config = path.join("config.toml");
        if config.is_file() {
            match std::fs::read_to_string(&config)
                .map_err(|e| e.to_string())
                .and_then(|t| toml::from_str::<ModelOverrides>(&t).map_err(|e| e.to_string()))
            {
                Ok(o) => {
                    let under = model.overrides.take().unwrap_or_default();
                    model.overrides = Some(o.layered_on(&under));
                }
                Err(e) => {
                    model.config_invalid = true;
                    tracing::warn!(path = %config.display(), error = %e, "ignoring invalid model config")
                }
            }
        }
        out.insert(name, model);
    }
    Ok(out)
}

/// Reads `DIR/<model>/config.pbtxt` into `model`: its settings as the overrides a
/// `config.toml` then layers on, or the reason it cannot be used.
fn read_triton_config(dir: &Path, model: &mut RepoModel) {
    let path = dir.join(crate::triton::CONFIG_FILE);
    if !path.is_file() {
        return;
    }
    let named = |t: &crate::triton::TritonConfig| {
        let folder = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match t.config.name.as_str() {
            "" => Ok(()),
            name if name == folder => Ok(()),
            name => Err(format!(
                "config.pbtxt: name {name:?} is not the model's folder {folder:?}"
            )),
        }
    };
    match crate::triton::TritonConfig::read(&path).and_then(|t| named(&t).map(|()| t)) {
        Ok(t) => {
            model.overrides = Some(crate::triton::mapping::overrides(&t.config));
            model.triton = Some(std::sync::Arc::new(t));
        }
        Err(e) => model.triton_error = Some(e),
    }
}

/// Triton's `version_policy`: the newest version by default, the newest N, all, or the ones
/// listed.
fn apply_version_policy(
    config: &crate::triton::ModelConfig,
    versions: &mut BTreeMap<u64, PathBuf>,
) {
    use crate::triton::config::VersionPolicy;
    let newest = |n: usize, versions: &mut BTreeMap<u64, PathBuf>| {
        while versions.len() > n.max(1) {
            versions.pop_first();
        }
    };
    match &config.version_policy {
        None => newest(1, versions),
        Some(VersionPolicy::Latest { num_versions }) => newest(*num_versions as usize, versions),
        Some(VersionPolicy::All {}) => {}
        Some(VersionPolicy::Specific { versions: listed }) => {
            versions.retain(|v, _| listed.contains(&(*v as i64)))
        }
    }
}

/// A version folder's number: plain decimal digits without a leading zero (`7`, not `+7`
/// or `007`, which `str::parse` would also read as 7 and so collide with it).
fn version_number(name: &str) -> Option<u64> {
    let plain =
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) && !name.starts_with('0');
    plain.then(|| name.parse().ok()).flatten()
}

/// When a version last changed: its weights file, or its folder (a file added or removed,
/// such as the `tokenizer.json` a text model's snapshot is still being copied with). A
/// version that failed to load is tried again only once this changes.
fn version_mtime(file: &Path) -> Option<SystemTime> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let folder = file.parent().and_then(modified);
    // A model's config.pbtxt decides whether its versions load: a fixed one is tried again.
    let triton = file
        .parent()
        .and_then(Path::parent)
        .and_then(|model| modified(&model.join(crate::triton::CONFIG_FILE)));
    modified(file).into_iter().chain(folder).chain(triton).max()
}

/// Keeps the registry in step with the repository, `config.toml` included: a changed one
/// is applied to the versions already serving, as the admin API's changes are.
pub struct Watcher {
    pub root: PathBuf,
    pub config: Arc<Config>,
    pub registry: Arc<Registry>,
    pub device: models::Device,
    pub busy: Arc<BusyMeter>,
    /// The operator's holds, and where each pass publishes the index.
    pub control: Arc<RepositoryControl>,
    /// Versions that failed, with the file's modification time then and the error: retried
    /// only when the file changes.
    failed: HashMap<(String, u64), (Option<SystemTime>, String)>,
}

impl Watcher {
    pub fn new(
        root: PathBuf,
        config: Arc<Config>,
        registry: Arc<Registry>,
        device: models::Device,
        busy: Arc<BusyMeter>,
        control: Arc<RepositoryControl>,
    ) -> Watcher {
        Watcher {
            root,
            config,
            registry,
            device,
            busy,
            control,
            failed: HashMap::new(),
        }
    }

    /// Applies a model's `config.toml`, changed since each loaded version last took it.
    fn apply_changed_config(&self, name: &str, overrides: Option<&ModelOverrides>) {
        for number in self.registry.versions(name) {
            let Ok(v) = self.registry.resolve(name, Some(&number.to_string())) else {
                continue;
            };
            if v.repo_overrides().as_ref() == overrides {
                continue;
            }
            let settings = self.config.settings_for(
                name,
                overrides,
                self.registry.runtime_overrides(name).as_ref(),
            );
            if let Err(e) = settings.validate(name) {
                // Said once per change: the file is not read as new until it changes again.
                tracing::error!(model = %name, version = number, error = %e, "changed config.toml not applied; the current settings stay");
            } else if let Err(e) = v.apply(settings) {
                // Busy with an earlier change: tried again at the next scan.
                tracing::warn!(model = %name, version = number, error = %e, "changed config.toml not applied yet");
                continue;
            } else {
                tracing::info!(model = %name, version = number, "changed config.toml applied");
            }
            *v.repo_overrides.lock().unwrap_or_else(|p| p.into_inner()) = overrides.cloned();
        }
    }

    /// One pass: load what is new, unload what is stale and what the operator holds, and
    /// publish the index. Returns the models that have at least one version serving
    /// afterwards, and those that have none (held models are in neither).
    pub async fn sync(&mut self) -> (Vec<String>, Vec<String>) {
        let found = match scan(&self.root) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(root = %self.root.display(), error = %e, "cannot scan the model repository");
                return (self.registry.model_names(), Vec::new());
            }
        };
        let (mut serving, mut missing) = (Vec::new(), Vec::new());
        for (name, model) in &found {
            if self.control.is_held(name) {
                for v in self.registry.versions(name) {
                    self.registry.remove(name, v);
                    tracing::info!(model = %name, version = v, "model version unloaded by the operator");
                }
                continue;
            }
            self.sync_model(name, model).await;
            if self.registry.versions(name).is_empty() {
                missing.push(name.clone());
            } else {
                serving.push(name.clone());
            }
        }
        self.forget_gone(&found);
        self.control.set_index(self.index(&found));
        (serving, missing)
    }

    /// Loads the newest versions of one model until `keep_versions` of them serve (a version
    /// that failed, and has not changed since, is skipped, so an older good one stays),
    /// applies a changed `config.toml`, then unloads the rest — only once something else
    /// serves.
    async fn sync_model(&mut self, name: &str, model: &RepoModel) {
        let keep = self.config.keep_versions.max(1);
        let mut serving_versions = Vec::new();
        let loaded = self.registry.versions(name);
        for (version, path) in model.versions.iter().rev() {
            if serving_versions.len() == keep {
                break;
            }
            if loaded.contains(version) || self.load_version(name, model, *version, path).await {
                serving_versions.push(*version);
            }
        }
        if !model.config_invalid {
            self.apply_changed_config(name, model.overrides.as_ref());
        }
        if !serving_versions.is_empty() {
            for v in self.registry.versions(name) {
                if !serving_versions.contains(&v) {
                    self.registry.remove(name, v);
                    tracing::info!(model = %name, version = v, "model version unloaded");
                }
            }
        }
    }

    /// Loads one version unless it failed before and has not changed since; whether it
    /// serves now.
    async fn load_version(
        &mut self,
        name: &str,
        model: &RepoModel,
        version: u64,
        path: &Path,
    ) -> bool {
        let mtime = version_mtime(path);
        let key = (name.to_string(), version);
        if self.failed.get(&key).is_some_and(|(t, _)| *t == mtime) {
            return false;
        }
        if let Some(e) = &model.triton_error {
            tracing::error!(model = %name, version, error = %e, "model version not loaded: its config.pbtxt is invalid");
            self.failed.insert(key, (mtime, e.clone()));
            return false;
        }
        let spec = LoadSpec {
            name: name.to_string(),
            version,
            path: path.to_path_buf(),
            settings: self.config.settings_for(
                name,
                model.overrides.as_ref(),
                self.registry.runtime_overrides(name).as_ref(),
            ),
            repo_overrides: model.overrides.clone(),
            device: self.device.clone(),
            cpu_threads: self.config.cpu_threads,
            busy: self.busy.clone(),
            triton: model.triton.clone(),
            onnxruntime_lib: self.config.onnxruntime_lib.clone(),
            cache: self.registry.cache(),
        };
        if let Some(t) = &model.triton {
            for field in crate::triton::mapping::ignored_fields(&t.json) {
                tracing::warn!(model = %name, version, field = %field, "config.pbtxt sets a field tandem does not act on");
            }
        }
        match loader::load(spec).await {
            Ok(v) => {
                self.failed.remove(&key);
                self.registry.insert(v);
                true
            }
            Err(e) => {
                tracing::error!(model = %name, version, path = %path.display(), error = %e, "model version failed to load; older versions keep serving");
                self.failed.insert(key, (mtime, e.to_string()));
                false
            }
        }
    }

    /// Unloads models whose folder disappeared, and forgets the failures of versions whose
    /// folders are gone: a trainer that checkpoints every few seconds must not grow that
    /// record without bound.
    fn forget_gone(&mut self, found: &BTreeMap<String, RepoModel>) {
        for name in self.registry.model_names() {
            if !found.contains_key(&name) && !self.config.models.contains_key(&name) {
                for v in self.registry.versions(&name) {
                    self.registry.remove(&name, v);
                }
                tracing::info!(model = %name, "model removed from the repository; unloaded");
            }
        }
        self.failed.retain(|(name, version), _| {
            found
                .get(name)
                .is_some_and(|m| m.versions.contains_key(version))
        });
    }

    /// Every version the repository holds, and any still serving whose folder is gone, with
    /// its state and, when it is not serving, why.
    fn index(&self, found: &BTreeMap<String, RepoModel>) -> Vec<IndexEntry> {
        let keep = self.config.keep_versions.max(1);
        let mut entries = Vec::new();
        for (name, model) in found {
            let loaded = self.registry.versions(name);
            let mut numbers: Vec<u64> = model.versions.keys().copied().collect();
            numbers.extend(loaded.iter().filter(|v| !model.versions.contains_key(v)));
            numbers.sort_unstable();
            for version in numbers {
                let reason = if loaded.contains(&version) {
                    String::new()
                } else if self.control.is_held(name) {
                    "unloaded".to_string()
                } else if let Some((_, error)) = self.failed.get(&(name.clone(), version)) {
                    format!("failed to load: {error}")
                } else {
                    format!("not loaded: the newest {keep} loadable versions serve (keep_versions)")
                };
                entries.push(IndexEntry {
                    name: name.clone(),
                    version,
                    state: if reason.is_empty() {
                        VersionState::Ready
                    } else {
                        VersionState::Unavailable
                    },
                    reason,
                });
            }
        }
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_numbered_versions_with_a_model_file() {
        let dir = std::env::temp_dir().join(format!("tandem-scan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for v in ["1", "2", "x", "0", "+4", "005", "-6", " 7"] {
            std::fs::create_dir_all(dir.join("m").join(v)).unwrap();
            std::fs::write(dir.join("m").join(v).join(MODEL_FILE), b"").unwrap();
        }
        std::fs::create_dir_all(dir.join("m/3")).unwrap(); // no file yet
        std::fs::write(dir.join("m/config.toml"), "max_batch_size = 7").unwrap();
        std::fs::create_dir_all(dir.join(".hidden/1")).unwrap();
        let found = scan(&dir).unwrap();
        assert_eq!(found.keys().collect::<Vec<_>>(), vec!["m"]);
        assert_eq!(
            found["m"].versions.keys().copied().collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(
            found["m"].overrides.as_ref().unwrap().max_batch_size,
            Some(7)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
