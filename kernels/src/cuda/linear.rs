//! Dense layers on a GPU: weights resident on the device, products on cuBLAS, the bias,
//! activation and dtype conversions in our own kernels.
//!
//! Row-major `y[rows, out] = x[rows, in] · Wᵀ` is, to column-major cuBLAS, `yᵀ = W · xᵀ`:
//! the `[out, in]` weight matrix is read transposed (`transa = T`, `lda = in`), `x` as is.
//! 16-bit weights meet 16-bit activations (converted by our kernels) and accumulate in f32
//! (`cublasGemmEx` with `CUBLAS_COMPUTE_32F`).

use std::sync::Arc;

use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t,
};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use half::slice::HalfFloatSliceExt;

use super::{CudaDevice, StreamPriority, sources};
pub use crate::HostWeights;
use crate::{Activation, DType, KernelError};

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
    pub fn upload(
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

    pub fn bias(&self) -> &CudaSlice<f32> {
        &self.bias
    }
}

/// An activation matrix on the device, in the format the next layer reads.
pub enum Activations<'a> {
    F32(&'a CudaSlice<f32>),
    Half(&'a CudaSlice<u16>),
}

/// Runs layers on one stream: the cuBLAS handle bound to it and our kernels for this device.
/// One executor per worker thread; it is not shared.
pub struct Executor {
    device: Arc<CudaDevice>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    f32_to_f16: CudaFunction,
    f32_to_bf16: CudaFunction,
    bias_act_f32: CudaFunction,
    bias_act_to_f16: CudaFunction,
    bias_act_to_bf16: CudaFunction,
}

/// Threads per block of our elementwise kernels; they loop over the grid, so the grid is
/// capped rather than sized to every element.
const BLOCK: u32 = 256;
const MAX_BLOCKS: u32 = 4096;

/// The launch shape of our grid-stride elementwise kernels over `n` elements.
pub fn elementwise(n: usize) -> LaunchConfig {
    let blocks = (n as u32).div_ceil(BLOCK).clamp(1, MAX_BLOCKS);
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Executor {
    pub fn new(device: Arc<CudaDevice>, priority: StreamPriority) -> Result<Executor, KernelError> {
        let stream = device.new_stream(priority)?;
        let blas =
            CudaBlas::new(stream.clone()).map_err(KernelError::cublas("creating a handle"))?;
        let convert = &sources::CONVERT;
        let bias = &sources::BIAS_ACT;
        Ok(Executor {
            f32_to_f16: device.function(convert, "f32_to_f16")?,
            f32_to_bf16: device.function(convert, "f32_to_bf16")?,
            bias_act_f32: device.function(bias, "bias_act_f32")?,
            bias_act_to_f16: device.function(bias, "bias_act_to_f16")?,
            bias_act_to_bf16: device.function(bias, "bias_act_to_bf16")?,
            device,
            stream,
            blas,
        })
    }

    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.device
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn blas(&self) -> &CudaBlas {
        &self.blas
    }

    /// Blocks until everything queued on this executor's stream has run.
    pub fn synchronize(&self) -> Result<(), KernelError> {
        self.stream
            .synchronize()
            .map_err(KernelError::driver("synchronizing the stream"))
    }

    /// Writes the first `n` values of `x` into `out` as 16-bit `dtype`.
    pub fn convert(
        &self,
        x: &CudaSlice<f32>,
        n: usize,
        out: &mut CudaSlice<u16>,
        dtype: DType,
    ) -> Result<(), KernelError> {
        check_len("convert", x.len(), n)?;
        check_len("convert", out.len(), n)?;
        let func = match dtype {
            DType::F16 => &self.f32_to_f16,
            DType::BF16 => &self.f32_to_bf16,
            DType::F32 => {
                return Err(KernelError::Shape {
                    op: "convert",
                    detail: "target must be a 16-bit format".into(),
                });
            }
        };
        let n32 = n as u32;
        let mut launch = self.stream.launch_builder(func);
        launch.arg(x).arg(out).arg(&n32);
        // SAFETY: the kernel reads n values of x and writes n of out; both hold at least n
        // (checked above). Arguments match the kernel's (const float*, ushort*, uint).
        unsafe { launch.launch(elementwise(n)) }
            .map(drop)
            .map_err(KernelError::driver("launching f32 conversion"))
    }

    /// `y[rows, out] = x[rows, in] · Wᵀ` (no bias; see [`Executor::bias_act`]).
    pub fn matmul(
        &self,
        layer: &Linear,
        x: Activations<'_>,
        rows: usize,
        y: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        let (k, n) = (layer.inputs, layer.outputs);
        check_len("matmul output", y.len(), rows * n)?;
        let (m_, n_, k_) = (n as i32, rows as i32, k as i32);
        match (&layer.weight, x) {
            (DeviceWeights::F32(w), Activations::F32(x)) => {
                check_len("matmul input", x.len(), rows * k)?;
                let cfg = GemmConfig {
                    transa: cublasOperation_t::CUBLAS_OP_T,
                    transb: cublasOperation_t::CUBLAS_OP_N,
                    m: m_,
                    n: n_,
                    k: k_,
                    alpha: 1.0f32,
                    lda: k_,
                    ldb: k_,
                    beta: 0.0f32,
                    ldc: m_,
                };
                // SAFETY: w is [n, k], x holds rows * k and y rows * n values (checked), which
                // is what the leading dimensions above describe.
                unsafe { self.blas.gemm(cfg, w, x, y) }
                    .map_err(KernelError::cublas("multiplying f32 matrices"))
            }
            (DeviceWeights::Half { dtype, bits }, Activations::Half(x)) => {
                check_len("matmul input", x.len(), rows * k)?;
                let ty = match dtype {
                    DType::BF16 => cudaDataType_t::CUDA_R_16BF,
                    _ => cudaDataType_t::CUDA_R_16F,
                };
                let (alpha, beta) = (1.0f32, 0.0f32);
                let (a, _ra) = bits.device_ptr(&self.stream);
                let (b, _rb) = x.device_ptr(&self.stream);
                let (c, _rc) = y.device_ptr_mut(&self.stream);
                // SAFETY: as for f32; A and B are 16-bit of the stated type, C is f32, alpha and
                // beta are f32 as CUBLAS_COMPUTE_32F requires, and the pointers outlive the
                // call's scheduling (the records are dropped after it).
                unsafe {
                    cudarc::cublas::result::gemm_ex(
                        *self.blas.handle(),
                        cublasOperation_t::CUBLAS_OP_T,
                        cublasOperation_t::CUBLAS_OP_N,
                        m_,
                        n_,
                        k_,
                        (&alpha) as *const f32 as *const _,
                        a as *const _,
                        ty,
                        k_,
                        b as *const _,
                        ty,
                        k_,
                        (&beta) as *const f32 as *const _,
                        c as *mut _,
                        cudaDataType_t::CUDA_R_32F,
                        m_,
                        cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
                .map_err(KernelError::cublas("multiplying 16-bit matrices"))
            }
            _ => Err(KernelError::Shape {
                op: "matmul",
                detail: format!(
                    "activations are not in the layer's input format ({})",
                    layer.input_dtype()
                ),
            }),
        }
    }

    /// `y = act(y + bias)` in place over the first `rows` rows.
    pub fn bias_act(
        &self,
        layer: &Linear,
        y: &mut CudaSlice<f32>,
        rows: usize,
        act: Activation,
    ) -> Result<(), KernelError> {
        let cols = layer.outputs;
        check_len("bias_act", y.len(), rows * cols)?;
        let (r, c, relu) = (rows as u32, cols as u32, (act == Activation::Relu) as i32);
        let mut launch = self.stream.launch_builder(&self.bias_act_f32);
        launch.arg(y).arg(&layer.bias).arg(&r).arg(&c).arg(&relu);
        // SAFETY: y holds rows * cols values (checked), bias holds cols (it was uploaded with
        // the layer); arguments match (float*, const float*, uint, uint, int).
        unsafe { launch.launch(elementwise(rows * cols)) }
            .map(drop)
            .map_err(KernelError::driver("launching bias_act"))
    }

    /// `out = to_dtype(act(y + bias))`: the epilogue of a layer followed by a 16-bit one.
    pub fn bias_act_to_half(
        &self,
        layer: &Linear,
        y: &CudaSlice<f32>,
        rows: usize,
        act: Activation,
        out: &mut CudaSlice<u16>,
        dtype: DType,
    ) -> Result<(), KernelError> {
        let cols = layer.outputs;
        check_len("bias_act_to_half", y.len(), rows * cols)?;
        check_len("bias_act_to_half", out.len(), rows * cols)?;
        let func = match dtype {
            DType::BF16 => &self.bias_act_to_bf16,
            _ => &self.bias_act_to_f16,
        };
        let (r, c, relu) = (rows as u32, cols as u32, (act == Activation::Relu) as i32);
        let mut launch = self.stream.launch_builder(func);
        launch
            .arg(y)
            .arg(&layer.bias)
            .arg(out)
            .arg(&r)
            .arg(&c)
            .arg(&relu);
        // SAFETY: y and out hold rows * cols values (checked), bias holds cols; arguments
        // match (const float*, const float*, ushort*, uint, uint, int).
        unsafe { launch.launch(elementwise(rows * cols)) }
            .map(drop)
            .map_err(KernelError::driver("launching bias_act_to_half"))
    }
}

fn check_len(op: &'static str, have: usize, need: usize) -> Result<(), KernelError> {
    if have < need {
        return Err(KernelError::Shape {
            op,
            detail: format!("buffer holds {have} values, {need} needed"),
        });
    }
    Ok(())
}
