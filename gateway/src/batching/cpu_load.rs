//! How busy this process keeps the cores it may run on. On a CPU device the model and the
//! HTTP front end share those cores, so the device's own capacity overstates what is left:
//! on two cores the server saturates near 10,000 single-row requests a second, a quarter
//! of what the model alone computes in full batches. The adaptive policy reads this share
//! as load too.

use std::time::{Duration, Instant};

/// Samples the process's CPU time (every thread: HTTP, batcher, model workers) against the
/// wall time (the real clock, not the runtime's, which tests pause) and the cores it is
/// allowed.
#[derive(Debug)]
pub struct CpuLoad {
    cores: f64,
    last: Option<(Instant, Duration)>,
}

/// Shorter intervals are mostly scheduler-tick noise.
const MIN_INTERVAL: Duration = Duration::from_millis(50);

impl CpuLoad {
    pub fn new() -> CpuLoad {
        CpuLoad {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
            last: None,
        }
    }

    /// The share of the allowed cores the process used since the previous sample, in
    /// [0, 1]; `None` on the first call, or when too little time has passed.
    pub fn sample(&mut self) -> Option<f64> {
        let now = Instant::now();
        let cpu = crate::usage::process_usage()?.cpu;
        match self.last {
            Some((at, _)) if now.saturating_duration_since(at) < MIN_INTERVAL => None,
            Some((at, before)) => {
                self.last = Some((now, cpu));
                let wall = now.saturating_duration_since(at).as_secs_f64() * self.cores;
                Some((cpu.saturating_sub(before).as_secs_f64() / wall).clamp(0.0, 1.0))
            }
            None => {
                self.last = Some((now, cpu));
                None
            }
        }
    }
}

impl Default for CpuLoad {
    fn default() -> CpuLoad {
        CpuLoad::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_thread_shows_as_load() {
        let mut load = CpuLoad::new();
        let wall = Instant::now();
        let cpu = || crate::usage::process_usage().expect("getrusage").cpu;
        let before = cpu();
        assert_eq!(load.sample(), None);
        // Spin until this process has used 200 ms of CPU (bounded in wall time): on a host
        // whose other cores are busy the thread gets less than a whole core, and the share
        // it did get is what the sample must report.
        let mut x = 0u64;
        while cpu().saturating_sub(before) < Duration::from_millis(200)
            && wall.elapsed() < Duration::from_secs(10)
        {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        let used = cpu().saturating_sub(before).as_secs_f64();
        let busy = load.sample().expect("a sample");
        let expected = used / (wall.elapsed().as_secs_f64() * load.cores);
        assert!(used > 0.1, "the spinner got {used} s of CPU");
        // Other test threads of this process only add to it.
        assert!(busy >= 0.8 * expected, "busy {busy}, expected {expected}");
        assert!(busy <= 1.0);
        assert!(load.sample().is_none(), "too soon");
    }
}
