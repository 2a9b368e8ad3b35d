//! The model seam: what a backend and the gateway agree on about tensors, and nothing of
//! either. A [`DataType`] names an element type as the Open Inference Protocol does; a
//! [`TensorSpec`] is a named input or output of a model's [`Signature`]; a [`Tensor`] is a
//! named, typed, row-major value with its bytes. Backends (the hand-written models, ONNX
//! Runtime) depend on this crate and never on the gateway.

mod dtype;
mod signature;
mod tensor;

pub use dtype::DataType;
pub use signature::{Signature, TensorSpec};
pub use tensor::{Buffer, Tensor, TensorData};
