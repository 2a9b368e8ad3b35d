//! What the kernel counts for this whole process, every thread together: CPU time and
//! context switches. The adaptive policy reads the CPU time as load; the context switches
//! go to /metrics, where they show what a request costs in wake-ups (each one, on a
//! virtual machine whose other core is busy, an inter-processor interrupt).

use std::time::Duration;

#[derive(Clone, Copy, Debug)]
pub struct ProcessUsage {
    /// User plus system time.
    pub cpu: Duration,
    /// Voluntary (waiting) plus involuntary (preempted) switches.
    pub context_switches: u64,
}

pub fn process_usage() -> Option<ProcessUsage> {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return None;
        }
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Some(ProcessUsage {
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        context_switches: (usage.ru_nvcsw + usage.ru_nivcsw) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::process_usage;

    #[test]
    fn a_thread_that_waits_counts_its_switches() {
        let before = process_usage().expect("getrusage").context_switches;
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let after = process_usage().expect("getrusage").context_switches;
        // Each sleep blocks the thread once; other test threads only add to the count.
        assert!(after >= before + 20, "{before} -> {after}");
    }
}
