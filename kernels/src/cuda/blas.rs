//! cuBLAS handles, kept per device and reused.
//!
//! Creating a handle allocates its workspace and destroying one synchronizes the whole
//! device, so a hot swap that made and dropped a handle per model version would stall every
//! stream serving at that moment. A device keeps the handles its executors gave back and
//! lends them again; a handle is destroyed only with its device. One handle serves one
//! executor (one stream) at a time: a handle's stream and workspace are its state, and two
//! threads sharing one would race on both.

use std::sync::{Arc, Mutex};

use cudarc::cublas::result as blas;
use cudarc::cublas::sys::cublasHandle_t;
use cudarc::driver::CudaStream;

use crate::KernelError;

/// One cuBLAS handle. Destroyed (and any failure logged, never unwrapped) when dropped.
pub(crate) struct BlasHandle {
    raw: cublasHandle_t,
}

// SAFETY: a cuBLAS handle may be used from any thread, one at a time; the pool and the
// executor that holds it never share it between threads at once.
unsafe impl Send for BlasHandle {}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from cublasCreate and is destroyed once, here.
        if let Err(e) = unsafe { blas::destroy_handle(self.raw) } {
            tracing::warn!(error = %e, "destroying a cuBLAS handle failed");
        }
    }
}

/// The handles a device's executors gave back, ready to be lent again.
#[derive(Default)]
pub(crate) struct BlasPool {
    idle: Mutex<Vec<BlasHandle>>,
}

impl BlasPool {
    /// A handle bound to `stream`: one given back earlier, or a new one. The stream's
    /// context must be current on this thread (cuBLAS creates a handle in it).
    pub(crate) fn lend(
        self: &Arc<Self>,
        stream: &Arc<CudaStream>,
    ) -> Result<PooledBlas, KernelError> {
        let reused = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let handle = match reused {
            Some(h) => h,
            None => BlasHandle {
                raw: blas::create_handle().map_err(KernelError::cublas("creating a handle"))?,
            },
        };
        // SAFETY: the handle is valid, and the stream is alive for as long as the
        // executor that holds the handle (it owns the stream too).
        unsafe { blas::set_stream(handle.raw, stream.cu_stream() as _) }
            .map_err(KernelError::cublas("binding a handle to a stream"))?;
        Ok(PooledBlas {
            handle: Some(handle),
            pool: self.clone(),
        })
    }

    /// Handles created so far and not lent now.
    pub(crate) fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A handle lent to one executor; it goes back to the pool when dropped. The executor
/// synchronizes its stream first, so the next borrower's work cannot overlap this one's
/// in the handle's workspace.
pub(crate) struct PooledBlas {
    handle: Option<BlasHandle>,
    pool: Arc<BlasPool>,
}

impl PooledBlas {
    pub(crate) fn raw(&self) -> cublasHandle_t {
        self.handle.as_ref().expect("held until dropped").raw
    }
}

impl Drop for PooledBlas {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(h);
        }
    }
}

/// The workspace cuBLAS recommends per handle (its `cublasSetWorkspace` documentation):
/// 32 MiB on Hopper and later, 4 MiB before. Counted in what a trainer says it holds.
pub fn workspace_bytes(compute_major: u32) -> u64 {
    if compute_major >= 9 {
        32 << 20
    } else {
        4 << 20
    }
}
