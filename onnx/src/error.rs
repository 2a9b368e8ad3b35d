use thiserror::Error;

#[derive(Debug, Error)]
pub enum OnnxError {
    /// The runtime's shared library is not there, or not one this build can use.
    #[error("ONNX Runtime is not available: {0}")]
    Runtime(String),
    /// The model file cannot be read or ONNX Runtime refuses it (corrupt, an unknown
    /// operator, too large).
    #[error("cannot load {path}: {message}")]
    Load { path: String, message: String },
    /// A tensor of a type ONNX Runtime has and tandem does not serve (sequences, maps,
    /// complex numbers, 8-bit floats).
    #[error("{0}")]
    Unsupported(String),
    /// A forward pass failed: ONNX Runtime's own message.
    #[error("ONNX Runtime: {0}")]
    Run(String),
}
