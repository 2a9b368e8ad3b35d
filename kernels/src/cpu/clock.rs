//! CPU-time clocks, for measurements on a shared machine: the time a thread or this
//! process ran, which other processes' load does not inflate.

use std::time::Duration;

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which ts is; both clocks exist on Linux.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// CPU time of the calling thread.
pub fn thread_cpu_time() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process, all threads.
pub fn process_cpu_time() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}
