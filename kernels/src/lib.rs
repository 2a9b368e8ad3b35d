//! tandem's compute backends behind one small API.
//!
//! - [`device`] turns `auto | cpu | cuda[:N]` into a [`Device`], saying which it chose and why.
//! - [`cpu`] runs dense layers on the CPU: for serving, our own AVX-512 or AVX2 kernel on weights
//!   packed once at load into panels (16-bit weights kept 16-bit); for training, a
//!   small-batch kernel and the `gemm` crate; both cores used.
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

/// Weights as they come out of a checkpoint, in their stored precision.
#[derive(Clone, Copy, Debug)]
pub enum HostWeights<'a> {
    F32(&'a [f32]),
    F16(&'a [half::f16]),
    BF16(&'a [half::bf16]),
}

impl HostWeights<'_> {
    pub fn len(&self) -> usize {
        match self {
            HostWeights::F32(w) => w.len(),
            HostWeights::F16(w) => w.len(),
            HostWeights::BF16(w) => w.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What follows the affine part of a dense layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Identity,
    Relu,
    /// GELU with the exact error function (BERT's), as `cpu::gelu_in_place` computes it:
    /// on the CPU only, where the dense kernels apply it to each tile as they store it.
    Gelu,
}
