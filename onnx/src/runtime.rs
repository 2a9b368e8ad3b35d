//! Finding and loading ONNX Runtime's shared library, once a process. `ort` would panic on
//! its first call if the library were missing; everything here runs before any such call,
//! so a missing or wrong library is an error that names where it looked.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::OnnxError;

/// `ort`'s own variable for the library's path.
pub const LIBRARY_VARIABLE: &str = "ORT_DYLIB_PATH";

/// The library's path and the process's one environment, which every session is made in.
struct Loaded {
    path: PathBuf,
    environment: ort::environment::Environment,
}

static LOADED: OnceLock<Result<Loaded, String>> = OnceLock::new();

/// Loads the library at `path` (or, without one, at `ORT_DYLIB_PATH`) the first time it is
/// called; later calls return that first outcome, whatever path they give.
pub fn init(path: Option<&Path>) -> Result<(), OnnxError> {
    let outcome = LOADED.get_or_init(|| load(path));
    outcome
        .as_ref()
        .map(|_| ())
        .map_err(|e| OnnxError::Runtime(e.clone()))
}

/// The library in use, once loaded.
pub fn loaded() -> Option<&'static Path> {
    LOADED.get()?.as_ref().ok().map(|l| l.path.as_path())
}

pub(crate) fn environment() -> Result<&'static ort::environment::Environment, OnnxError> {
    match LOADED.get() {
        Some(Ok(l)) => Ok(&l.environment),
        Some(Err(e)) => Err(OnnxError::Runtime(e.clone())),
        None => Err(OnnxError::Runtime("not loaded yet".into())),
    }
}

fn load(path: Option<&Path>) -> Result<Loaded, String> {
    let from_env = std::env::var_os(LIBRARY_VARIABLE).filter(|p| !p.is_empty());
    let path = match (path, from_env) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => {
            return Err(format!(
                "no library given: set {LIBRARY_VARIABLE} or onnxruntime_lib (--onnxruntime-lib) \
                 to libonnxruntime.so, which scripts/setup-python.sh installs into .venv from \
                 the onnxruntime wheel"
            ));
        }
    };
    if !path.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    let environment = ort::init_from(&path).map_err(|e| e.to_string())?;
    let environment = environment
        .with_name("tandem")
        .build()
        .map_err(|e| format!("cannot start its environment: {e}"))?;
    tracing::info!(library = %path.display(), "ONNX Runtime loaded");
    Ok(Loaded { path, environment })
}
