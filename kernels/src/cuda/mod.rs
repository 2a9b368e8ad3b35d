//! The CUDA backend: a device handle (context, compiled kernels, cuBLAS handles, memory
//! info), streams with a priority, dense layers on cuBLAS ([`linear`]), and the ops of the
//! text encoder ([`encoder`]) and of training ([`train`]) as safe calls on device buffers
//! ([`buffer`]).
//!
//! Every entry point checks that the CUDA libraries load before touching cudarc, because
//! cudarc panics when a library it calls into is absent.

mod blas;
pub mod buffer;
pub mod encoder;
mod green;
pub mod linear;
pub mod sources;
#[cfg(test)]
mod tests;
pub mod train;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::KernelError;
pub use blas::workspace_bytes as blas_workspace_bytes;
pub use buffer::{DeviceBuffer, DeviceIndices, DeviceVec, HalfVec};
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

/// One GPU: its context, the kernels compiled for it so far and the cuBLAS handles its
/// executors gave back.
pub struct CudaDevice {
    /// Dropped before the context they were created in.
    blas: Arc<blas::BlasPool>,
    ctx: Arc<CudaContext>,
    ordinal: usize,
    name: String,
    /// `sm_XY`, from the device's compute capability; NVRTC compiles for exactly this.
    arch: String,
    compute_major: u32,
    /// Modules compiled on first use, keyed by source name, so each `.cu` compiles once.
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    /// For an SM partition ([`CudaDevice::sm_partition`]): its green context, destroyed
    /// last, after the handles and modules made in it.
    green: Option<green::GreenContext>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // The cuBLAS handles are destroyed next (a field), in the context current on this
        // thread, which must be theirs.
        if let Err(e) = self.bind() {
            tracing::warn!(error = %e, "cannot bind a device's context to release it");
        }
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
        CudaDevice::from_context(ctx, ordinal, None)
    }

    /// Wraps a fresh context. Nothing may have been allocated in it yet.
    fn from_context(
        ctx: Arc<CudaContext>,
        ordinal: usize,
        green: Option<green::GreenContext>,
    ) -> Result<Arc<CudaDevice>, KernelError> {
        // Every executor queues all its work on one stream, and a buffer is used only on
        // the stream that allocated it (and freed there, stream-ordered). cudarc's
        // multi-stream event tracking, switched on by the first extra stream, would record
        // and wait on events around every copy, product and launch for nothing.
        // SAFETY: set before the first allocation in this context; from then on no buffer
        // is used on, freed on or written by a stream other than its own (the ops take
        // their executor's stream, and buffers are never handed between executors).
        unsafe { ctx.disable_event_tracking() };
        let name = ctx
            .name()
            .map_err(KernelError::driver("reading the device name"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(KernelError::driver("reading the compute capability"))?;
        Ok(Arc::new(CudaDevice {
            blas: Arc::default(),
            ctx,
            ordinal,
            name,
            arch: format!("sm_{major}{minor}"),
            compute_major: major.max(0) as u32,
            modules: Mutex::new(HashMap::new()),
            green,
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

    /// Makes this device's context current on the calling thread. Raw driver and cuBLAS
    /// calls act on the current context, which a fresh thread does not have (and a thread
    /// that last worked on another device has wrong).
    pub(crate) fn bind(&self) -> Result<(), KernelError> {
        self.ctx
            .bind_to_thread()
            .map_err(KernelError::driver("binding the context to this thread"))
    }

    /// A cuBLAS handle for `stream`, from those executors gave back or new.
    pub(crate) fn lend_blas(
        &self,
        stream: &Arc<CudaStream>,
    ) -> Result<blas::PooledBlas, KernelError> {
        self.bind()?;
        self.blas.lend(stream)
    }

    /// cuBLAS handles created and not lent now: at most as many as executors ran at once.
    pub fn idle_blas_handles(&self) -> usize {
        self.blas.idle()
    }

    /// The workspace each cuBLAS handle on this device holds (see [`blas_workspace_bytes`]).
    pub fn blas_workspace_bytes(&self) -> u64 {
        blas::workspace_bytes(self.compute_major)
    }

    /// `cuda:0 (NVIDIA H200, sm_90)`, for logs; a partition adds `, 66 of 132 SMs`.
    pub fn describe(&self) -> String {
        let share = self
            .sm_share()
            .map(|(sms, of)| format!(", {sms} of {of} SMs"))
            .unwrap_or_default();
        format!(
            "cuda:{} ({}, {}{share})",
            self.ordinal, self.name, self.arch
        )
    }

    /// A new non-blocking stream at the highest priority (serving) or the lowest (training)
    /// the device offers.
    pub(crate) fn new_stream(
        &self,
        priority: StreamPriority,
    ) -> Result<Arc<CudaStream>, KernelError> {
        self.bind()?;
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

    /// Free and total memory of the whole device, as the driver reports it: what every
    /// process on it has left.
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

    /// Hands the memory this process freed back to the device. Buffers are freed
    /// stream-ordered into the driver's memory pool, which keeps what it holds until a
    /// synchronization trims it; this trims it now, so that another process (a trainer
    /// giving memory back, or the gateway loading a model) can have it at once.
    pub fn release_free_memory(&self) -> Result<(), KernelError> {
        use cudarc::driver::sys;
        if !self.ctx.has_async_alloc() {
            // Without memory pools every free went straight back to the device.
            return Ok(());
        }
        self.bind()?;
        let mut pool = std::mem::MaybeUninit::<sys::CUmemoryPool>::uninit();
        // SAFETY: writes the device's current memory pool (the one stream-ordered
        // allocations come from) into `pool`; the device handle is this context's.
        unsafe { sys::cuDeviceGetMemPool(pool.as_mut_ptr(), self.ctx.cu_device()) }
            .result()
            .map_err(KernelError::driver("finding the memory pool"))?;
        // SAFETY: the call above succeeded, so `pool` holds a valid pool handle; trimming
        // releases only memory no allocation holds.
        unsafe { sys::cuMemPoolTrimTo(pool.assume_init(), 0) }
            .result()
            .map_err(KernelError::driver("releasing freed memory"))
    }

    /// A kernel from one of our sources, compiling the source on first use.
    pub(crate) fn function(
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
