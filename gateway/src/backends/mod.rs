//! Which backend loads a version: an ONNX graph (`*.onnx`) through ONNX Runtime, anything
//! else through `models` (an MLP's safetensors, a sentence-transformers folder). Each gives
//! back a [`models::Model`] a worker thread owns.

pub mod onnx;
mod warmup;

use std::path::{Path, PathBuf};

use models::Device;

use crate::triton::ModelConfig;

/// What an ONNX model loads with beyond its file.
#[derive(Clone, Debug, Default)]
pub struct OnnxOptions {
    /// Its config.pbtxt, if the repository has one; without it the graph's own tensors serve.
    pub config: Option<ModelConfig>,
    /// ONNX Runtime's library (`onnxruntime_lib`), else `ORT_DYLIB_PATH`.
    pub runtime_lib: Option<PathBuf>,
    /// Threads one forward pass may use (0: every core).
    pub cpu_threads: usize,
    /// The batch size a batching model without a config.pbtxt takes at most.
    pub max_batch_size: usize,
}

pub fn is_onnx(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "onnx")
}

/// Loads the version at `path` on `device`.
pub fn load(
    path: &Path,
    device: &Device,
    options: models::LoadOptions,
    onnx_options: &OnnxOptions,
) -> Result<Box<dyn models::Model>, String> {
    if is_onnx(path) {
        return onnx::OnnxBackend::load(path, device, onnx_options)
            .map(|m| Box::new(m) as Box<dyn models::Model>);
    }
    models::load_with(path, device, options).map_err(|e| e.to_string())
}
