//! Dense layers on a GPU: weights resident on the device, products on cuBLAS, the bias,
//! activation and dtype conversions in our own kernels.
//!
//! Row-major `y[rows, out] = x[rows, in] · Wᵀ` is, to column-major cuBLAS, `yᵀ = W · xᵀ`:
//! the `[out, in]` weight matrix is read transposed (`transa = T`, `lda = in`), `x` as is.
//! 16-bit weights meet 16-bit activations (converted by our kernels) and accumulate in f32
//! (`cublasGemmEx` with `CUBLAS_COMPUTE_32F`).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use half::slice::HalfFloatSliceExt;

use super::buffer::{DeviceVec, HalfVec};
pub use crate::HostWeights;
use crate::{DType, KernelError};

mod executor;

pub use executor::Executor;
pub(crate) use executor::elementwise;

/// A weight matrix on the device. 16-bit formats are kept as their raw bits: only cuBLAS
/// and our kernels read them, and both are told the format.
enum DeviceWeights {
    F32(CudaSlice<f32>),
    Half { dtype: DType, bits: CudaSlice<u16> },
}

/// A dense layer `y = act(x · Wᵀ + b)` whose weights live on one GPU.
pub struct Linear {
    inputs: usize,
    outputs: usize,
    weight: DeviceWeights,
    bias: CudaSlice<f32>,
}

impl Linear {
    /// Copies a `[outputs, inputs]` weight matrix and its biases to the device.
    pub(crate) fn upload(
        stream: &Arc<CudaStream>,
        weight: HostWeights<'_>,
        bias: &[f32],
        inputs: usize,
        outputs: usize,
    ) -> Result<Linear, KernelError> {
        if weight.len() != inputs * outputs || bias.len() != outputs {
            return Err(KernelError::Shape {
                op: "cuda::Linear::upload",
                detail: format!(
                    "weight has {} values and bias {}, expected {outputs}x{inputs} and {outputs}",
                    weight.len(),
                    bias.len()
                ),
            });
        }
        let upload = KernelError::driver("uploading weights");
        let weight = match weight {
            HostWeights::F32(w) => DeviceWeights::F32(stream.clone_htod(w).map_err(upload)?),
            HostWeights::F16(w) => DeviceWeights::Half {
                dtype: DType::F16,
                bits: stream.clone_htod(w.reinterpret_cast()).map_err(upload)?,
            },
            HostWeights::BF16(w) => DeviceWeights::Half {
                dtype: DType::BF16,
                bits: stream.clone_htod(w.reinterpret_cast()).map_err(upload)?,
            },
        };
        let bias = stream
            .clone_htod(bias)
            .map_err(KernelError::driver("uploading biases"))?;
        Ok(Linear {
            inputs,
            outputs,
            weight,
            bias,
        })
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// The format this layer's input must be in: f32, or the 16-bit format of its weights.
    pub fn input_dtype(&self) -> DType {
        match &self.weight {
            DeviceWeights::F32(_) => DType::F32,
            DeviceWeights::Half { dtype, .. } => *dtype,
        }
    }

    pub(crate) fn bias(&self) -> &CudaSlice<f32> {
        &self.bias
    }

    /// Device memory the layer holds, in bytes.
    pub fn bytes(&self) -> usize {
        let weight = match &self.weight {
            DeviceWeights::F32(w) => w.num_bytes(),
            DeviceWeights::Half { bits, .. } => bits.num_bytes(),
        };
        weight + self.bias.num_bytes()
    }
}

/// An activation matrix on the device, in the format the next layer reads.
pub enum Activations<'a> {
    F32(&'a DeviceVec),
    Half(&'a HalfVec),
}

/// A column-major cuBLAS product `C = α·op(A)·op(B) + β·C` on f32 matrices, as cuBLAS
/// names its dimensions: `op(A)` is `m × k`, `op(B)` is `k × n`, `C` is `m × n`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Product {
    pub transa: bool,
    pub transb: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    /// 0 overwrites C, 1 accumulates into it.
    pub beta: f32,
}

impl Product {
    /// Values each operand must hold: the last column's offset plus its length.
    fn extents(&self) -> (usize, usize, usize) {
        let (a_cols, b_cols) = (
            if self.transa { self.m } else { self.k },
            if self.transb { self.k } else { self.n },
        );
        let (a_rows, b_rows) = (
            if self.transa { self.k } else { self.m },
            if self.transb { self.n } else { self.k },
        );
        let extent = |ld: usize, rows: usize, cols: usize| {
            if cols == 0 { 0 } else { ld * (cols - 1) + rows }
        };
        (
            extent(self.lda, a_rows, a_cols),
            extent(self.ldb, b_rows, b_cols),
            extent(self.ldc, self.m, self.n),
        )
    }
}

/// Activations as slices, for the ops of this crate.
#[derive(Clone, Copy)]
pub(crate) enum SliceActivations<'a> {
    F32(&'a CudaSlice<f32>),
    Half(&'a CudaSlice<u16>),
}

pub(crate) fn check_len(op: &'static str, have: usize, need: usize) -> Result<(), KernelError> {
    if have < need {
        return Err(KernelError::Shape {
            op,
            detail: format!("buffer holds {have} values, {need} needed"),
        });
    }
    Ok(())
}
