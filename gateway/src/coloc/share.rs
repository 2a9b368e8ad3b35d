//! What share of the device serving uses, read from the process (CPU) or the workers' busy
//! time (GPU), so that training is lent only what serving leaves; and, on a GPU, how much
//! of its memory is free.

use std::sync::Arc;

use models::device::{CudaDevice, MemoryInfo};
use tokio::time::Instant;

/// How much of the device serving is using right now, so that training is lent only what
/// is left: on a CPU the gateway process's share of every core (HTTP included), on a GPU the
/// share of time the workers keep it busy. Smoothed over about a second.
pub struct ServingShare {
    cpu: bool,
    /// The GPU, for its free memory; `None` on a CPU.
    gpu: Option<Arc<CudaDevice>>,
    busy: Arc<crate::batching::BusyMeter>,
    cores: f64,
    last: Option<(Instant, f64)>,
    share: f64,
}

impl ServingShare {
    pub fn new(device: &models::Device, busy: Arc<crate::batching::BusyMeter>) -> ServingShare {
        ServingShare {
            cpu: !device.is_cuda(),
            gpu: match device {
                models::Device::Cuda(d) => Some(d.clone()),
                models::Device::Cpu => None,
            },
            busy,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
            last: None,
            share: 0.0,
        }
    }

    fn used_seconds(&self) -> f64 {
        if self.cpu {
            crate::usage::process_usage().map_or(0.0, |u| u.cpu.as_secs_f64()) / self.cores
        } else {
            self.busy.total().as_secs_f64()
        }
    }

    /// The smoothed share (0..1) as of `now`.
    pub fn sample(&mut self, now: Instant) -> f64 {
        let used = self.used_seconds();
        if let Some((t, u)) = self.last {
            let dt = now.saturating_duration_since(t).as_secs_f64();
            if dt > 0.0 {
                let instant = ((used - u) / dt).clamp(0.0, 1.0);
                let alpha = (dt / 1.0).min(1.0);
                self.share += alpha * (instant - self.share);
            }
        }
        self.last = Some((now, used));
        self.share
    }

    /// The GPU's free and total memory, every process's use counted; `None` on a CPU or
    /// when the driver does not answer (logged once a minute at most by the caller).
    pub fn memory(&self) -> Option<Result<MemoryInfo, models::KernelError>> {
        self.gpu.as_ref().map(|d| d.memory_info())
    }
}
