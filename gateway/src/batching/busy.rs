//! The device's busy time, which the workers write and the batcher and the trainer
//! coordinator read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Device time spent computing, shared by every worker on a device: each adds the time its
/// batches computed; the batcher samples it into `tandem_device_busy_ratio`, and the trainer
/// coordinator reads what serving leaves idle.
#[derive(Debug, Default)]
pub struct BusyMeter {
    busy_ns: AtomicU64,
}

impl BusyMeter {
    pub fn add(&self, d: Duration) {
        self.busy_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed))
    }
}
