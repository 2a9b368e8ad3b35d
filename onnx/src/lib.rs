//! ONNX models through ONNX Runtime, the only code in the workspace that links `ort` (as
//! only `kernels` touches CUDA). The runtime is a shared library found at run time
//! ([`runtime`]): a build needs none, and a process without it serves every other model.
//! An [`OnnxModel`] is one session: its [`seam::Signature`] read from the graph, and a
//! synchronous `run` from named tensors to named tensors, owned by one worker thread.

mod convert;
mod error;
mod model;
pub mod runtime;

pub use error::OnnxError;
pub use model::{OnnxModel, SessionSettings};
