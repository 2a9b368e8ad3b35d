//! tandem's compute backends behind one small API.
//!
//! - [`device`] turns `auto | cpu | cuda[:N]` into a [`Device`], saying which it chose and why.
//! - [`cpu`] runs dense layers on the CPU: our own AVX2 kernel for small batches, the `gemm`
//!   crate for large ones, weights packed once at load, both cores used.
//! - [`cuda`] runs them on an NVIDIA GPU through cudarc: cuBLAS for the matrix products,
//!   our own `.cu` kernels (compiled by NVRTC once per device) for the rest, streams
//!   created with a priority.
//!
//! CUDA is compiled into every build and loaded at run time; a missing driver or library is
//! an `Err`, never a panic. This crate knows nothing of models, HTTP or training policy.

pub mod cpu;
pub mod cuda;
pub mod device;
mod dtype;
mod error;

pub use device::{Device, DeviceSpec, Selection};
pub use dtype::DType;
pub use error::KernelError;

/// What follows the affine part of a dense layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Identity,
    Relu,
}
