//! The executor: one stream, a cuBLAS handle bound to it, and our bias, activation and
//! conversion kernels, running the layers of [`super::Linear`] and the products of
//! [`super::Product`].

use std::sync::Arc;

use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t,
};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};

use super::super::blas::PooledBlas;
use super::super::buffer::{DeviceBuffer, DeviceVec, HalfVec};
use super::super::{CudaDevice, StreamPriority, sources};
use super::{Activations, DeviceWeights, Linear, Product, SliceActivations, check_len};
use crate::{Activation, DType, HostWeights, KernelError};

/// Runs layers on one stream: a cuBLAS handle bound to it and our kernels for this device.
/// One executor per worker thread; it is not shared.
pub struct Executor {
    /// Given back to the device when the executor goes, after its stream has drained.
    blas: PooledBlas,
    device: Arc<CudaDevice>,
    stream: Arc<CudaStream>,
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
pub(crate) fn elementwise(n: usize) -> LaunchConfig {
    let blocks = (n as u32).div_ceil(BLOCK).clamp(1, MAX_BLOCKS);
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `n` as the `int` cuBLAS takes.
fn i32_of(op: &'static str, n: usize) -> Result<i32, KernelError> {
    i32::try_from(n).map_err(|_| KernelError::Shape {
        op,
        detail: format!("{n} does not fit cuBLAS's 32-bit sizes"),
    })
}

/// The `relu` flag of the bias-and-activation kernels; they have no GELU (the CUDA encoder
/// runs its own kernel for it).
fn relu_flag(op: &'static str, act: Activation) -> Result<i32, KernelError> {
    match act {
        Activation::Identity => Ok(0),
        Activation::Relu => Ok(1),
        Activation::Gelu => Err(KernelError::Unsupported {
            op,
            detail: "GELU is fused into the CPU's dense kernels only".into(),
        }),
    }
}

fn op(transpose: bool) -> cublasOperation_t {
    if transpose {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

impl Executor {
    pub fn new(device: Arc<CudaDevice>, priority: StreamPriority) -> Result<Executor, KernelError> {
        let stream = device.new_stream(priority)?;
        let blas = device.lend_blas(&stream)?;
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

    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Blocks until everything queued on this executor's stream has run.
    pub fn synchronize(&self) -> Result<(), KernelError> {
        self.stream
            .synchronize()
            .map_err(KernelError::driver("synchronizing the stream"))
    }

    /// Copies a `[outputs, inputs]` weight matrix (in its stored precision) and its biases
    /// to the device.
    pub fn upload_linear(
        &self,
        weight: HostWeights<'_>,
        bias: &[f32],
        inputs: usize,
        outputs: usize,
    ) -> Result<Linear, KernelError> {
        Linear::upload(&self.stream, weight, bias, inputs, outputs)
    }

    /// Copies host values to a new device buffer of exactly their length.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<DeviceBuffer<T>, KernelError> {
        let data = self
            .stream
            .clone_htod(host)
            .map_err(KernelError::driver("uploading values"))?;
        Ok(DeviceBuffer::from_slice(data))
    }

    /// Makes `buf` hold at least `len` values (doubling, so a growing batch reallocates
    /// rarely). What it held is lost when it grows.
    pub fn reserve<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        buf: &mut DeviceBuffer<T>,
        len: usize,
    ) -> Result<(), KernelError> {
        if buf.capacity() < len {
            self.resize(buf, len.next_power_of_two())?;
        }
        Ok(())
    }

    /// Makes `buf` hold exactly `len` values, freeing a larger allocation: memory a caller
    /// was told to give back. What it held is lost when its size changes.
    pub fn resize<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        buf: &mut DeviceBuffer<T>,
        len: usize,
    ) -> Result<(), KernelError> {
        if buf.capacity() != len {
            // The old allocation goes first, so the peak is the larger of the two.
            buf.release();
            let data = self
                .stream
                .alloc_zeros(len)
                .map_err(KernelError::driver("allocating device memory"))?;
            buf.set(data);
        }
        Ok(())
    }

    /// Copies `host` into the first `host.len()` values of `buf`.
    pub fn write<T: DeviceRepr>(
        &self,
        host: &[T],
        buf: &mut DeviceBuffer<T>,
    ) -> Result<(), KernelError> {
        let dst = buf.get_mut("cuda::write", host.len())?;
        self.stream
            .memcpy_htod(host, &mut dst.slice_mut(0..host.len()))
            .map_err(KernelError::driver("copying to the device"))
    }

    /// Copies the first `host.len()` values of `buf` to the host, once everything queued
    /// before has run. Waits for the stream after the copy: a copy into pageable memory
    /// may return before the values have all landed.
    pub fn read<T: DeviceRepr>(
        &self,
        buf: &DeviceBuffer<T>,
        host: &mut [T],
    ) -> Result<(), KernelError> {
        let src = buf.get("cuda::read", host.len())?;
        self.stream
            .memcpy_dtoh(&src.slice(0..host.len()), host)
            .map_err(KernelError::driver("copying to the host"))?;
        self.synchronize()
    }

    /// Sets every value of `buf` to zero.
    pub fn zero<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        buf: &mut DeviceBuffer<T>,
    ) -> Result<(), KernelError> {
        let capacity = buf.capacity();
        let data = buf.get_mut("cuda::zero", capacity)?;
        self.stream
            .memset_zeros(data)
            .map_err(KernelError::driver("clearing device memory"))
    }

    /// Writes the first `n` values of `x` into `out` as 16-bit `dtype`.
    pub fn convert(
        &self,
        x: &DeviceVec,
        n: usize,
        out: &mut HalfVec,
        dtype: DType,
    ) -> Result<(), KernelError> {
        let x = x.get("convert", n)?;
        self.convert_slice(x, n, out.get_mut("convert", n)?, dtype)
    }

    pub(crate) fn convert_slice(
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
        y: &mut DeviceVec,
    ) -> Result<(), KernelError> {
        let y = y.get_mut("matmul output", rows * layer.outputs)?;
        match x {
            Activations::F32(x) => {
                self.matmul_slice(layer, SliceActivations::F32(x.get("matmul", 0)?), rows, y)
            }
            Activations::Half(x) => {
                self.matmul_slice(layer, SliceActivations::Half(x.get("matmul", 0)?), rows, y)
            }
        }
    }

    pub(crate) fn matmul_slice(
        &self,
        layer: &Linear,
        x: SliceActivations<'_>,
        rows: usize,
        y: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        let (k, n) = (layer.inputs, layer.outputs);
        check_len("matmul output", y.len(), rows * n)?;
        match (&layer.weight, x) {
            (DeviceWeights::F32(w), SliceActivations::F32(x)) => {
                check_len("matmul input", x.len(), rows * k)?;
                let product = Product {
                    transa: true,
                    transb: false,
                    m: n,
                    n: rows,
                    k,
                    lda: k,
                    ldb: k,
                    ldc: n,
                    beta: 0.0,
                };
                self.gemm(product, w, x, y)
            }
            (DeviceWeights::Half { dtype, bits }, SliceActivations::Half(x)) => {
                check_len("matmul input", x.len(), rows * k)?;
                self.gemm_half(*dtype, bits, x, y, (n, rows, k))
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

    /// `C = op(A)·op(B) + β·C` on f32 matrices (see [`Product`]).
    pub(crate) fn gemm(
        &self,
        p: Product,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        let (need_a, need_b, need_c) = p.extents();
        check_len("gemm A", a.len(), need_a)?;
        check_len("gemm B", b.len(), need_b)?;
        check_len("gemm C", c.len(), need_c)?;
        let int = |d| i32_of("gemm", d);
        let (m, n, k) = (int(p.m)?, int(p.n)?, int(p.k)?);
        let (lda, ldb, ldc) = (int(p.lda)?, int(p.ldb)?, int(p.ldc)?);
        let (alpha, beta) = (1.0f32, p.beta);
        self.device.bind()?;
        let (a, _ra) = a.device_ptr(&self.stream);
        let (b, _rb) = b.device_ptr(&self.stream);
        let (c, _rc) = c.device_ptr_mut(&self.stream);
        // SAFETY: A, B and C hold at least the values their leading dimensions and sizes
        // address (checked above); the handle is bound to this executor's stream, whose
        // context is current (bound above); alpha and beta are host f32 values that outlive
        // the call, as cuBLAS's default host pointer mode reads them before returning.
        unsafe {
            cudarc::cublas::result::sgemm(
                self.blas.raw(),
                op(p.transa),
                op(p.transb),
                m,
                n,
                k,
                &alpha,
                a as *const f32,
                lda,
                b as *const f32,
                ldb,
                &beta,
                c as *mut f32,
                ldc,
            )
        }
        .map_err(KernelError::cublas("multiplying f32 matrices"))
    }

    /// `y[rows, n] = x[rows, k] · Wᵀ` with 16-bit W and x, accumulating in f32.
    fn gemm_half(
        &self,
        dtype: DType,
        w: &CudaSlice<u16>,
        x: &CudaSlice<u16>,
        y: &mut CudaSlice<f32>,
        (n, rows, k): (usize, usize, usize),
    ) -> Result<(), KernelError> {
        let ty = match dtype {
            DType::BF16 => cudaDataType_t::CUDA_R_16BF,
            _ => cudaDataType_t::CUDA_R_16F,
        };
        let (m_, n_, k_) = (
            i32_of("matmul", n)?,
            i32_of("matmul", rows)?,
            i32_of("matmul", k)?,
        );
        let (alpha, beta) = (1.0f32, 0.0f32);
        self.device.bind()?;
        let (a, _ra) = w.device_ptr(&self.stream);
        let (b, _rb) = x.device_ptr(&self.stream);
        let (c, _rc) = y.device_ptr_mut(&self.stream);
        // SAFETY: W is [n, k], x holds rows · k and y rows · n values (checked by the
        // caller), which is what the leading dimensions describe; A and B are 16-bit of the
        // stated type, C is f32, alpha and beta are f32 as CUBLAS_COMPUTE_32F requires, and
        // the handle is bound to this stream in the current context (bound above).
        unsafe {
            cudarc::cublas::result::gemm_ex(
                self.blas.raw(),
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

    /// `y = act(y + bias)` in place over the first `rows` rows.
    pub fn bias_act(
        &self,
        layer: &Linear,
        y: &mut DeviceVec,
        rows: usize,
        act: Activation,
    ) -> Result<(), KernelError> {
        let y = y.get_mut("bias_act", rows * layer.outputs)?;
        self.bias_act_slice(&layer.bias, y, rows, act)
    }

    /// `y = act(y + bias)` in place over `rows` rows of `bias.len()` columns.
    pub(crate) fn bias_act_slice(
        &self,
        bias: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
        rows: usize,
        act: Activation,
    ) -> Result<(), KernelError> {
        let cols = bias.len();
        check_len("bias_act", y.len(), rows * cols)?;
        let (r, c, relu) = (rows as u32, cols as u32, relu_flag("bias_act", act)?);
        let mut launch = self.stream.launch_builder(&self.bias_act_f32);
        launch.arg(y).arg(bias).arg(&r).arg(&c).arg(&relu);
        // SAFETY: y holds rows * cols values (checked), bias holds cols (its length);
        // arguments match (float*, const float*, uint, uint, int).
        unsafe { launch.launch(elementwise(rows * cols)) }
            .map(drop)
            .map_err(KernelError::driver("launching bias_act"))
    }

    /// `out = to_dtype(act(y + bias))`: the epilogue of a layer followed by a 16-bit one.
    pub fn bias_act_to_half(
        &self,
        layer: &Linear,
        y: &DeviceVec,
        rows: usize,
        act: Activation,
        out: &mut HalfVec,
        dtype: DType,
    ) -> Result<(), KernelError> {
        let cols = layer.outputs;
        let y = y.get("bias_act_to_half", rows * cols)?;
        let out = out.get_mut("bias_act_to_half", rows * cols)?;
        let func = match dtype {
            DType::BF16 => &self.bias_act_to_bf16,
            _ => &self.bias_act_to_f16,
        };
        let (r, c, relu) = (
            rows as u32,
            cols as u32,
            relu_flag("bias_act_to_half", act)?,
        );
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

impl Drop for Executor {
    fn drop(&mut self) {
        // The cuBLAS handle goes back to the device for another executor, whose work must
        // not overlap this one's in the handle's workspace.
        if let Err(e) = self.synchronize() {
            tracing::warn!(error = %e, "a stream failed while its executor was dropped");
        }
    }
}
