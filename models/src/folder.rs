//! A model folder's files: the path of one that must be there, and a JSON file read and
//! parsed, with errors that name the file.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::LoadError;

/// `dir/file`, or an error naming it when it is absent.
pub fn required(dir: &Path, file: &str) -> Result<PathBuf, LoadError> {
    let path = dir.join(file);
    if path.is_file() {
        Ok(path)
    } else {
        Err(LoadError::MissingFile { path })
    }
}

/// `path` read and parsed as `T`.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| LoadError::Config {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}
