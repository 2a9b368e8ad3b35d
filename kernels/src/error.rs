//! The one error type of the compute layer. cudarc's errors are wrapped here, once,
//! so callers see what failed and why without depending on cudarc themselves.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum KernelError {
    /// `cpu`, `cuda`, `cuda:N`, `auto` are the only spellings.
    #[error("invalid device {given:?}: expected auto, cpu, cuda or cuda:N")]
    InvalidDeviceSpec { given: String },

    /// A CUDA library could not be loaded or no device answers: the reason says which.
    #[error("CUDA is not available: {0}")]
    CudaUnavailable(String),

    #[error("CUDA driver call failed while {context}: {source}")]
    Driver {
        context: &'static str,
        #[source]
        source: cudarc::driver::DriverError,
    },

    #[error("cuBLAS call failed while {context}: {source}")]
    Cublas {
        context: &'static str,
        #[source]
        source: cudarc::cublas::result::CublasError,
    },

    /// NVRTC rejected one of our `.cu` sources; the log is the compiler's own message.
    #[error("NVRTC could not compile {module}.cu for {arch}: {log}")]
    Compile {
        module: &'static str,
        arch: String,
        log: String,
    },

    /// A caller passed buffers whose sizes do not match the shapes it stated.
    #[error("shape mismatch in {op}: {detail}")]
    Shape { op: &'static str, detail: String },

    /// An operation this device does not have, such as an activation its kernels lack.
    #[error("{op} is not available here: {detail}")]
    Unsupported { op: &'static str, detail: String },
}

impl KernelError {
    /// Wraps a driver error with what tandem was doing, for `map_err`.
    pub fn driver(context: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Self + Copy {
        move |source| KernelError::Driver { context, source }
    }

    /// Wraps a cuBLAS error with what tandem was doing, for `map_err`.
    pub fn cublas(
        context: &'static str,
    ) -> impl Fn(cudarc::cublas::result::CublasError) -> Self + Copy {
        move |source| KernelError::Cublas { context, source }
    }
}
