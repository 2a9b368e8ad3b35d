//! Errors of loading and running models. Each names the tensor and the shapes involved, so
//! an operator can fix a checkpoint from the message alone.

use std::path::PathBuf;

use kernels::KernelError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Truncated, not safetensors at all, or a header that lies about its offsets.
    #[error("{path} is not a valid safetensors file: {reason}")]
    Format { path: PathBuf, reason: String },

    #[error("checkpoint has no tensors named layers.{{i}}.weight / layers.{{i}}.bias")]
    NoLayers,

    #[error(
        "tensor {name} is missing (layers must be numbered 0, 1, 2, ... with a weight and a bias each)"
    )]
    MissingTensor { name: String },

    #[error(
        "unexpected tensor {name}: an MLP checkpoint holds only layers.{{i}}.weight and layers.{{i}}.bias"
    )]
    UnexpectedTensor { name: String },

    #[error("tensor {name} has shape {given:?}, expected {expected}")]
    Shape {
        name: String,
        expected: String,
        given: Vec<usize>,
    },

    #[error("tensor {name} has dtype {dtype}, expected F32, F16 or BF16")]
    UnsupportedDtype { name: String, dtype: String },

    #[error("tensor {name} holds a non-finite value ({value}) at flat index {index}")]
    NonFinite {
        name: String,
        index: usize,
        value: f32,
    },

    #[error("cannot place the model on the device: {0}")]
    Device(#[from] KernelError),

    /// A file a text encoder's folder must hold is absent.
    #[error(
        "{path} is missing: a text encoder folder needs config.json, model.safetensors and tokenizer.json"
    )]
    MissingFile { path: PathBuf },

    /// A configuration file that is not valid JSON or lacks a field the encoder needs.
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },
    /// Weights that are not those their configuration describes (built by hand: an
    /// encoder's configuration and weights are public).
    #[error("the weights do not match their configuration: {0}")]
    Inconsistent(String),

    /// A model whose layers or head run only on the host, placed on a GPU.
    #[error("{what} is served on the CPU only: serve this model with --device cpu")]
    CpuOnly { what: &'static str },

    /// A configuration that is well formed but asks for something tandem does not serve:
    /// another architecture, activation, position embedding, pooling or module.
    #[error("{path}: {what} is not supported ({supported})")]
    Unsupported {
        path: PathBuf,
        what: String,
        supported: &'static str,
    },

    #[error("tensor {name} is missing from {path} ({expected})")]
    MissingEncoderTensor {
        path: PathBuf,
        name: String,
        expected: String,
    },

    #[error("unexpected tensor {name} in {path}: not part of the encoder config.json describes")]
    UnexpectedEncoderTensor { path: PathBuf, name: String },

    #[error("{path} is not a tokenizer tandem can use: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
}

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("input has {given} values, expected {rows} rows x {width} = {expected}")]
    InputSize {
        rows: usize,
        width: usize,
        expected: usize,
        given: usize,
    },

    #[error("output buffer has {given} values, expected {expected}")]
    OutputSize { expected: usize, given: usize },

    #[error("compute failed: {0}")]
    Kernel(#[from] KernelError),

    /// Token sequences a text encoder cannot run: empty, too long, or ids outside its
    /// vocabulary. The message names the sequence and the limit.
    #[error("invalid tokens: {0}")]
    InvalidTokens(String),

    /// A batch of a kind the model does not take (tokens for an MLP, rows for an encoder).
    #[error("{0}")]
    WrongInput(String),

    /// A backend's own failure inside a forward pass (ONNX Runtime's message).
    #[error("{0}")]
    Backend(String),
}
