//! A share of a GPU's multiprocessors for one user in this process: a green context (CUDA
//! 12.4 and later), whose kernels run only on the SMs it was given while memory stays
//! shared with the rest of the process. A co-located trainer inside the gateway runs in
//! one, so that however many blocks it launches, serving's kernels always find the other
//! SMs free.
//!
//! A green context may be current on only one thread at a time (the driver does not
//! synchronize it): a [`CudaDevice`] made here belongs to one thread.

use std::mem::MaybeUninit;
use std::sync::Arc;

use cudarc::driver::CudaContext;
use cudarc::driver::sys;

use super::CudaDevice;
use crate::KernelError;

/// The first driver API version (12.4) with green contexts; before it the entry points
/// are absent, and cudarc panics on a call to a missing one.
const GREEN_CONTEXTS_FROM: i32 = 12040;

/// A green context, destroyed with the device that runs in it.
pub(crate) struct GreenContext {
    raw: sys::CUgreenCtx,
    /// SMs it holds, of the device's.
    pub sms: u32,
    pub of: u32,
}

// SAFETY: the handle is only passed to the driver, from the one thread its device is used
// on, and destroyed once.
unsafe impl Send for GreenContext {}
// SAFETY: as above; `&GreenContext` exposes only plain counts.
unsafe impl Sync for GreenContext {}

impl Drop for GreenContext {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuGreenCtxCreate and is destroyed once, here, after
        // every executor of its device (which hold the device) is gone.
        if let Err(e) = unsafe { sys::cuGreenCtxDestroy(self.raw) }.result() {
            tracing::warn!(error = %e, "destroying a green context failed");
        }
    }
}

fn driver_version() -> Result<i32, KernelError> {
    let mut version = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(KernelError::driver("reading the driver version"))?;
    Ok(version)
}

/// The device's SMs as one resource.
fn all_sms(device: sys::CUdevice) -> Result<sys::CUdevResource, KernelError> {
    let mut all = MaybeUninit::<sys::CUdevResource>::zeroed();
    // SAFETY: writes one resource description of the device's SMs.
    unsafe {
        sys::cuDeviceGetDevResource(
            device,
            all.as_mut_ptr(),
            sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
        )
    }
    .result()
    .map_err(KernelError::driver("reading the device's SMs"))?;
    // SAFETY: the call succeeded and filled it in (it was zeroed before, a valid value of
    // this plain-data struct either way).
    Ok(unsafe { all.assume_init() })
}

/// `sm_count` SMs of `all` (rounded up to the driver's granularity) as a resource.
fn split(all: &sys::CUdevResource, sm_count: u32) -> Result<sys::CUdevResource, KernelError> {
    let mut part = MaybeUninit::<sys::CUdevResource>::zeroed();
    let mut rest = MaybeUninit::<sys::CUdevResource>::zeroed();
    let mut groups = 1u32;
    // SAFETY: one group is asked for and room for one is given; `all` is a valid SM
    // resource of this device.
    unsafe {
        sys::cuDevSmResourceSplitByCount(
            part.as_mut_ptr(),
            &mut groups,
            all,
            rest.as_mut_ptr(),
            0,
            sm_count,
        )
    }
    .result()
    .map_err(KernelError::driver("splitting the device's SMs"))?;
    if groups != 1 {
        return Err(KernelError::CudaUnavailable(format!(
            "the driver cannot give a partition of {sm_count} SMs"
        )));
    }
    // SAFETY: the call succeeded and wrote the one group.
    Ok(unsafe { part.assume_init() })
}

impl CudaDevice {
    /// The same GPU with kernels confined to `share` (0..1] of its SMs: a green context,
    /// rounded up to the driver's partition granularity. Memory is shared with this
    /// device. The result may be used on one thread only. An error where the driver has
    /// no green contexts (before CUDA 12.4).
    pub fn sm_partition(&self, share: f64) -> Result<Arc<CudaDevice>, KernelError> {
        let version = driver_version()?;
        if version < GREEN_CONTEXTS_FROM {
            return Err(KernelError::CudaUnavailable(format!(
                "SM partitions need green contexts (a CUDA 12.4 driver); this one is {}.{}",
                version / 1000,
                version % 1000 / 10
            )));
        }
        self.bind()?;
        let device = self.ctx.cu_device();
        let all = all_sms(device)?;
        // SAFETY: the resource is of SM type (asked for above), so `sm` is the union's
        // valid member.
        let total = unsafe { all.__bindgen_anon_1.sm.smCount };
        let want = ((share.clamp(0.0, 1.0) * total as f64).ceil() as u32).clamp(1, total);
        let mut part = split(&all, want)?;
        // SAFETY: `part` is an SM resource written by the split.
        let sms = unsafe { part.__bindgen_anon_1.sm.smCount };
        let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
        // SAFETY: one valid resource in, one descriptor out.
        unsafe { sys::cuDevResourceGenerateDesc(&mut desc, &mut part, 1) }
            .result()
            .map_err(KernelError::driver("describing an SM partition"))?;
        let mut raw: sys::CUgreenCtx = std::ptr::null_mut();
        let flags = sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32;
        // SAFETY: the descriptor was generated above for this device.
        unsafe { sys::cuGreenCtxCreate(&mut raw, desc, device, flags) }
            .result()
            .map_err(KernelError::driver("creating a green context"))?;
        let green = GreenContext {
            raw,
            sms,
            of: total,
        };
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `raw` is the live green context created above; the context handle it
        // gives is valid as long as the green context is.
        unsafe { sys::cuCtxFromGreenCtx(&mut ctx, green.raw) }
            .result()
            .map_err(KernelError::driver("entering a green context"))?;
        // SAFETY: `ctx` is valid (above) and for `device`. cudarc would destroy a context it
        // owns with cuCtxDestroy, which a green context's handle must not meet: one
        // reference is leaked below so that it never drops, and `green` destroys the green
        // context itself, after every user of the device is gone.
        let wrapped = unsafe { CudaContext::from_raw_context(self.ordinal, device, ctx) }
            .map_err(KernelError::driver("wrapping a green context"))?;
        std::mem::forget(wrapped.clone());
        CudaDevice::from_context(wrapped, self.ordinal, Some(green))
    }

    /// `(SMs it may use, SMs of the GPU)` for a partition; `None` for the whole device.
    pub fn sm_share(&self) -> Option<(u32, u32)> {
        self.green.as_ref().map(|g| (g.sms, g.of))
    }
}
