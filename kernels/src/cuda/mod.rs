//! The CUDA backend: a device handle (context, compiled kernels, memory info), streams with
//! a priority, and dense layers on cuBLAS ([`linear`]).
//!
//! Every entry point checks that the CUDA libraries load before touching cudarc, because
//! cudarc panics when a library it calls into is absent.

pub mod encoder;
pub mod linear;
pub mod sources;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::KernelError;
pub use sources::KernelSource;

/// Which side of the co-location a stream serves. Serving work is queued ahead of training
/// work inside this process's context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamPriority {
    Serving,
    Training,
}

/// Free and total memory of a device, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free_bytes: usize,
    pub total_bytes: usize,
}

/// One GPU: its context and the kernels compiled for it so far.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    ordinal: usize,
    name: String,
    /// `sm_XY`, from the device's compute capability; NVRTC compiles for exactly this.
    arch: String,
    /// Modules compiled on first use, keyed by source name, so each `.cu` compiles once.
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Checks that every CUDA library tandem calls into can be loaded.
pub fn check_libraries() -> Result<(), KernelError> {
    // SAFETY: each check only tries to dlopen the library under its known names.
    let (driver, blas) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
        )
    };
    if !driver {
        return Err(KernelError::CudaUnavailable(
            "the NVIDIA driver library (libcuda.so) was not found".into(),
        ));
    }
    if !blas {
        return Err(KernelError::CudaUnavailable(
            "cuBLAS (libcublas.so.13) was not found; add the CUDA 13 libraries to LD_LIBRARY_PATH"
                .into(),
        ));
    }
    if !sources::nvrtc_available() {
        return Err(KernelError::CudaUnavailable(
            "NVRTC (libnvrtc.so.13) was not found; add the CUDA 13 libraries to LD_LIBRARY_PATH"
                .into(),
        ));
    }
    Ok(())
}

impl CudaDevice {
    /// Opens device `ordinal`, or says why it cannot.
    pub fn open(ordinal: usize) -> Result<Arc<CudaDevice>, KernelError> {
        check_libraries()?;
        let count = CudaContext::device_count().map_err(|e| {
            KernelError::CudaUnavailable(format!("the driver found no usable device ({e})"))
        })?;
        if ordinal >= count.max(0) as usize {
            return Err(KernelError::CudaUnavailable(format!(
                "cuda:{ordinal} was requested but the driver reports {count} device(s)"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(KernelError::driver("creating a context"))?;
        let name = ctx
            .name()
            .map_err(KernelError::driver("reading the device name"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(KernelError::driver("reading the compute capability"))?;
        Ok(Arc::new(CudaDevice {
            ctx,
            ordinal,
            name,
            arch: format!("sm_{major}{minor}"),
            modules: Mutex::new(HashMap::new()),
        }))
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn arch(&self) -> &str {
        &self.arch
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// `cuda:0 (NVIDIA H200, sm_90)`, for logs.
    pub fn describe(&self) -> String {
        format!("cuda:{} ({}, {})", self.ordinal, self.name, self.arch)
    }

    /// A new non-blocking stream at the highest priority (serving) or the lowest (training)
    /// the device offers.
    pub fn new_stream(&self, priority: StreamPriority) -> Result<Arc<CudaStream>, KernelError> {
        self.ctx
            .bind_to_thread()
            .map_err(KernelError::driver("binding the context"))?;
        // CUDA numbers priorities downwards: `greatest` is the most urgent.
        let (least, greatest) = cudarc::driver::result::stream::get_priority_range()
            .map_err(KernelError::driver("reading stream priorities"))?;
        let value = match priority {
            StreamPriority::Serving => greatest,
            StreamPriority::Training => least,
        };
        self.ctx
            .new_stream_with_priority(value)
            .map_err(KernelError::driver("creating a stream"))
    }

    pub fn memory_info(&self) -> Result<MemoryInfo, KernelError> {
        let (free_bytes, total_bytes) = self
            .ctx
            .mem_get_info()
            .map_err(KernelError::driver("reading memory info"))?;
        Ok(MemoryInfo {
            free_bytes,
            total_bytes,
        })
    }

    /// A kernel from one of our sources, compiling the source on first use.
    pub fn function(
        &self,
        source: &'static KernelSource,
        name: &str,
    ) -> Result<CudaFunction, KernelError> {
        let module = {
            // A poisoned lock only means another thread panicked mid-insert; the map is
            // still a valid cache.
            let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
            match modules.get(source.name) {
                Some(m) => m.clone(),
                None => {
                    let ptx = sources::compile(source, &self.arch)?;
                    let m = self
                        .ctx
                        .load_module(ptx)
                        .map_err(KernelError::driver("loading a compiled module"))?;
                    modules.insert(source.name, m.clone());
                    m
                }
            }
        };
        module
            .load_function(name)
            .map_err(KernelError::driver("looking up a kernel"))
    }
}

/// For tests: the device to run the CUDA variant of `test` on, or `None` after saying on
/// stderr why it is skipped. The line is written past the test harness's output capture, so
/// `cargo test` shows it even for a passing run.
pub fn device_for_test(test: &str) -> Option<Arc<CudaDevice>> {
    match CudaDevice::open(0) {
        Ok(d) => Some(d),
        Err(reason) => {
            report_skip(test, &reason.to_string());
            None
        }
    }
}

/// Writes `SKIPPED <test>: <reason>` straight to stderr, bypassing the harness's capture.
pub fn report_skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}
